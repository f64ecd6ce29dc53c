"""A local GCS JSON API server for the tests: gcp-storage-emulator, plus the objects.move method
(https://cloud.google.com/storage/docs/json_api/v1/objects/move), which GCS has and the emulator
lacks. gcsfs moves objects with it first; answered 501, it retries with backoff for half a minute
before it copies and deletes instead. And an upload's ifGenerationMatch=0 (write only where no
object is: gcsfs's "xb" mode), which the emulator ignores and GCS answers 412 to when one is.

    python -m tests.gcs_server PORT
"""

from __future__ import annotations

import sys
from http import HTTPStatus

from gcp_storage_emulator import server
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import objects


def move(request, response, storage, *args, **kwargs):
    """A rename within a bucket: the object under its new name, or 404 when there is none to move."""
    p = request.params
    try:
        moved = objects._copy(request.base_url, storage, p["bucket_name"], p["object_id"], p["bucket_name"],
                              p["dest_object_id"])
    except NotFound:
        response.status = HTTPStatus.NOT_FOUND
        return
    objects._delete(storage, p["bucket_name"], p["object_id"])
    response.json(moved)


def insert(request, response, storage, *args, **kwargs):
    """objects.insert, refused (412) when it asks for no object to be there and one is."""
    if request.query.get("ifGenerationMatch") == ["0"]:
        name = request.query["name"][0] if "name" in request.query else request.data["meta"].get("name")
        try:
            storage.get_file_obj(request.params["bucket_name"], name)
        except NotFound:
            pass
        else:
            response.status = HTTPStatus.PRECONDITION_FAILED
            return
    return objects.insert(request, response, storage, *args, **kwargs)


if __name__ == "__main__":
    route = (rf"^{server.settings.API_ENDPOINT}/b/(?P<bucket_name>[-.\w]+)/o/(?P<object_id>.*[^/]+)"
             rf"/moveTo/o/(?P<dest_object_id>.*[^/]+)$")
    server.HANDLERS = ((route, {server.POST: move}), *(
        (pattern, {method: insert if handler is objects.insert else handler for method, handler in methods.items()})
        for pattern, methods in server.HANDLERS))
    server.create_server("127.0.0.1", int(sys.argv[1]), in_memory=True).run()
