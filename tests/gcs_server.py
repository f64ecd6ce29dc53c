"""A local GCS JSON API server for the tests: gcp-storage-emulator, plus the objects.move method
(https://cloud.google.com/storage/docs/json_api/v1/objects/move), which GCS has and the emulator
lacks. gcsfs moves objects with it first; answered 501, it retries with backoff for half a minute
before it copies and deletes instead.

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


if __name__ == "__main__":
    route = (rf"^{server.settings.API_ENDPOINT}/b/(?P<bucket_name>[-.\w]+)/o/(?P<object_id>.*[^/]+)"
             rf"/moveTo/o/(?P<dest_object_id>.*[^/]+)$")
    server.HANDLERS = ((route, {server.POST: move}), *server.HANDLERS)
    server.create_server("127.0.0.1", int(sys.argv[1]), in_memory=True).run()
