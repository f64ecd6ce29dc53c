"""The local traffic split: a real nginx process with weighted upstreams, reconfigured step by step.

Each change writes a complete configuration, has ``nginx -t`` check it, and only then signals
the running master to reload; a configuration nginx refuses leaves the previous one serving
(``ProxyError`` says why), so the champion never loses traffic to a bad reload. Every request is
logged as one JSON line naming the upstream that answered, its status and timings: the clients'
side of the canary's error rate and latency.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ctpipe.errors import PipelineError
from ctpipe.processes import running_pid

_LOG_FORMAT = (
    "log_format ctpipe escape=json '{\"time\":$msec,\"upstream\":\"$upstream_addr\",\"status\":$status,"
    "\"upstream_status\":\"$upstream_status\",\"request_s\":$request_time,\"upstream_s\":\"$upstream_response_time\"}';"
)


class ProxyError(PipelineError):
    pass


@dataclass(frozen=True)
class Backend:
    address: str  # host:port
    weight: int  # percent of traffic; 0 takes it out of rotation


@dataclass(frozen=True)
class Request:
    time: float
    upstream: str
    status: int
    request_s: float


def _children(pid: int) -> set[int]:
    try:
        return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:
        return set()


def nginx_binary() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if found is None:
        raise ProxyError("nginx is not installed (Debian package nginx-light); the local canary needs it")
    return found


class WeightedProxy:
    """``nginx`` listening on ``port``, splitting requests across backends by weight."""

    def __init__(self, workdir: Path, port: int):
        self.dir = Path(workdir)
        self.port = port
        self.conf = self.dir / "nginx.conf"
        self.access_log = self.dir / "access.jsonl"
        self.pid_file = self.dir / "nginx.pid"
        self.backends: tuple[Backend, ...] = ()

    def render(self, backends: tuple[Backend, ...]) -> str:
        live = [b for b in backends if b.weight > 0]
        if not live:
            raise ProxyError(f"no backend has a weight above 0: {backends}")
        servers = "\n".join(f"    server {b.address} weight={b.weight} max_fails=0;" for b in live)
        return f"""# Written by ctpipe; replaced whole on every traffic step.
worker_processes 1;
pid {self.pid_file};
error_log {self.dir / 'error.log'} warn;
events {{ worker_connections 1024; }}
http {{
  {_LOG_FORMAT}
  access_log {self.access_log} ctpipe;
  client_body_temp_path {self.dir / 'tmp'};
  proxy_temp_path {self.dir / 'tmp'};
  client_max_body_size 16m;
  upstream llm {{
{servers}
  }}
  server {{
    listen 127.0.0.1:{self.port};
    location / {{
      proxy_pass http://llm;
      proxy_http_version 1.1;
      proxy_read_timeout 300s;
      proxy_buffering off;
      # One try per request: a failing canary must show as the canary's error, not be retried away.
      proxy_next_upstream off;
      # Which server answered: clients attribute each answer's quality to the right version.
      add_header X-Ctpipe-Upstream $upstream_addr always;
    }}
  }}
}}
"""

    def _checked(self, backends: tuple[Backend, ...]) -> Path:
        """The configuration for ``backends``, written beside the live one once ``nginx -t`` accepts it."""
        (self.dir / "tmp").mkdir(parents=True, exist_ok=True)
        candidate = self.dir / "nginx.conf.next"
        candidate.write_text(self.render(backends))
        done = subprocess.run([nginx_binary(), "-t", "-q", "-p", str(self.dir), "-c", str(candidate)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            split = ", ".join(f"{b.address} {b.weight}%" for b in backends)
            raise ProxyError(f"nginx refused the configuration for {split}: {done.stderr.strip()}")
        return candidate

    def pid(self) -> int | None:
        return running_pid(self.pid_file)

    def start(self, backends: tuple[Backend, ...]) -> None:
        candidate = self._checked(backends)
        candidate.replace(self.conf)
        done = subprocess.run([nginx_binary(), "-p", str(self.dir), "-c", str(self.conf)], capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise ProxyError(f"nginx did not start on 127.0.0.1:{self.port}: {last}")
        self.backends = backends
        deadline = time.monotonic() + 10
        while self.pid() is None:
            if time.monotonic() > deadline:
                raise ProxyError(f"nginx did not start; see {self.dir / 'error.log'}")
            time.sleep(0.05)

    def set_weights(self, backends: tuple[Backend, ...], timeout_s: float = 60) -> None:
        """Apply a new split; on any failure the previous split keeps serving and ProxyError says why.

        Returns once the workers of the old split have exited, so every later request takes the new one.
        """
        pid = self.pid()
        if pid is None:
            raise ProxyError("nginx is not running")
        candidate = self._checked(backends)
        old = _children(pid)
        candidate.replace(self.conf)
        os.kill(pid, signal.SIGHUP)  # graceful: old workers finish the requests they hold, then exit
        deadline = time.monotonic() + timeout_s
        while old & _children(pid) or not _children(pid) - old:
            if time.monotonic() > deadline:
                raise ProxyError(f"nginx did not finish reloading in {timeout_s:.0f} s; see {self.dir / 'error.log'}")
            time.sleep(0.02)
        self.backends = backends

    def stop(self) -> None:
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGQUIT)
            for _ in range(100):
                if self.pid() is None:
                    break
                time.sleep(0.05)

    def requests(self, since: float = 0.0) -> list[Request]:
        """The logged requests that ended at or after ``since`` (epoch seconds).

        nginx writes a request's line only after its response has gone out, so a read made right
        after the last answer arrived may not hold that request yet.
        """
        out = []
        if not self.access_log.exists():
            return out
        for line in self.access_log.read_text().splitlines():
            r = json.loads(line)
            if r["time"] >= since:
                out.append(Request(r["time"], r["upstream"], int(r["status"]), float(r["request_s"])))
        return out
