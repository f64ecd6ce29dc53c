"""The local traffic split through a real nginx process in front of two real HTTP servers."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from ctpipe.canary.proxy import Backend, ProxyError, WeightedProxy
from tests.conftest import listen_port

HAVE_NGINX = shutil.which("nginx") is not None or os.path.exists("/usr/sbin/nginx")
# Skipped on a workstation without nginx; in CI (.ci/run installs it) a missing nginx fails.
pytestmark = pytest.mark.skipif(not HAVE_NGINX and not os.environ.get("CI"), reason="nginx is not installed (nginx-light)")


def server(name: str, status: int = 200):
    """An OpenAI-shaped endpoint that says which server answered."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length") or 0))
            body = json.dumps({"model": name, "choices": [{"message": {"role": "assistant", "content": name}}]}).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"127.0.0.1:{httpd.server_address[1]}"


@pytest.fixture
def proxy(tmp_path):
    p = WeightedProxy(tmp_path / "proxy", listen_port())
    yield p
    p.stop()


def ask(proxy, n: int) -> Counter:
    url = f"http://127.0.0.1:{proxy.port}/v1/chat/completions"
    return Counter(
        (r.status_code, r.json()["model"]) for r in (requests.post(url, json={"messages": []}, timeout=10) for _ in range(n))
    )


def logged(proxy, n: int) -> list:
    """The access log once it holds ``n`` requests: nginx writes a request's line after its response is sent."""
    deadline = time.monotonic() + 10
    while len(entries := proxy.requests()) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return entries


def test_traffic_follows_the_weights_step_by_step_and_the_log_names_each_upstream(proxy):
    (champion_srv, champion), (canary_srv, canary) = server("champion"), server("canary")
    proxy.start((Backend(champion, 90), Backend(canary, 10)))
    assert ask(proxy, 100) == {(200, "champion"): 90, (200, "canary"): 10}  # nginx's smooth weighted round robin
    proxy.set_weights((Backend(champion, 50), Backend(canary, 50)))
    assert ask(proxy, 100) == {(200, "champion"): 50, (200, "canary"): 50}
    proxy.set_weights((Backend(champion, 100), Backend(canary, 0)))  # rolled back: the canary gets nothing
    assert ask(proxy, 20) == {(200, "champion"): 20}
    upstreams = Counter(r.upstream for r in logged(proxy, 220))
    assert upstreams == {champion: 160, canary: 60}
    for s in (champion_srv, canary_srv):
        s.shutdown()


def test_a_refused_reload_leaves_the_previous_split_serving(proxy):
    (srv, champion) = server("champion")
    proxy.start((Backend(champion, 100),))
    with pytest.raises(ProxyError, match=r"nginx refused the configuration for .*no-such-host.invalid:8000 10%.*host not found"):
        proxy.set_weights((Backend(champion, 90), Backend("no-such-host.invalid:8000", 10)))
    assert ask(proxy, 10) == {(200, "champion"): 10} and proxy.backends == (Backend(champion, 100),)
    with pytest.raises(ProxyError, match="no backend has a weight above 0"):
        proxy.set_weights((Backend(champion, 0),))
    srv.shutdown()


def test_a_failing_canary_shows_as_its_own_errors(proxy):
    (a, champion), (b, canary) = server("champion"), server("canary", status=500)
    proxy.start((Backend(champion, 75), Backend(canary, 25)))
    answers = ask(proxy, 40)
    assert answers == {(200, "champion"): 30, (500, "canary"): 10}  # not retried on the champion
    statuses = Counter((r.upstream, r.status) for r in logged(proxy, 40))
    assert statuses == {(champion, 200): 30, (canary, 500): 10}
    a.shutdown()
    b.shutdown()
