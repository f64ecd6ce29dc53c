"""The REST client of the local Airflow, against an HTTP server that answers as a busy one does."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from ctpipe.airflow_local import AirflowClient


@pytest.fixture
def slow_server(tmp_path):
    """A server whose first answer to each path comes after a second; (its URL, the requests it saw)."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            seen.append(f"{self.command} {self.path}")
            if self.path != "/auth/token" and seen.count(f"{self.command} {self.path}") == 1:
                threading.Event().wait(1.0)
            body = json.dumps({"access_token": "t"} if self.path == "/auth/token" else {"ok": self.path}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PATCH = _answer

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (tmp_path / "passwords.json").write_text(json.dumps({"admin": "pw"}))
    yield f"http://127.0.0.1:{server.server_port}", tmp_path / "passwords.json", seen
    server.shutdown()


def test_a_call_that_times_out_is_retried_unless_it_is_a_post(slow_server, monkeypatch):
    """An API server just started on two busy cores answered after the client's timeout, and the
    quick start's first cycle failed on it. A POST may have gone through: its caller decides."""
    url, passwords, seen = slow_server
    client = AirflowClient(url, passwords)
    monkeypatch.setattr(client, "timeout_s", 0.3)
    assert client.call("GET", "/dags/train") == {"ok": "/api/v2/dags/train"}
    assert client.call("PATCH", "/dags/train", json={"is_paused": False}) == {"ok": "/api/v2/dags/train"}
    assert seen.count("GET /api/v2/dags/train") == 2 and seen.count("PATCH /api/v2/dags/train") == 2
    with pytest.raises(requests.Timeout):
        client.call("POST", "/dags/train/dagRuns", json={})
    assert seen.count("POST /api/v2/dags/train/dagRuns") == 1
