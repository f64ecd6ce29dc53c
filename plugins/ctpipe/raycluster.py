"""The local Ray head of the embedded default, started on demand.

When ``CTPIPE_RAY_ADDRESS`` names a cluster, nothing is started: jobs go there.
Otherwise one head per installation runs on this machine (ports from config),
shared by every Airflow task; a file lock keeps concurrent tasks from starting two.
It runs in a session of its own, so that no task's end (nor a Ctrl-C in the terminal that
started it) takes it down, and :func:`stop_local_head` stops it alone: ``ray stop`` would stop
every Ray process on the machine, other clusters and other installations' heads included.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import requests

from ctpipe.config import Settings

log = logging.getLogger(__name__)


def is_up(dashboard_url: str) -> bool:
    try:
        return requests.get(f"{dashboard_url}/api/version", timeout=3).ok
    except requests.RequestException:
        return False


def _ray_cli() -> str:
    return str(Path(sys.executable).with_name("ray"))


def ensure_local_head(settings: Settings, timeout_s: float = 180) -> str:
    """The dashboard URL of a running cluster, starting the local head if none is configured."""
    url = settings.ray_dashboard_url
    if settings.ray_address or is_up(url):
        return url
    settings.home.mkdir(parents=True, exist_ok=True)
    with open(settings.home / "ray.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_up(url):
            return url
        cmd = [
            _ray_cli(), "start", "--head",
            f"--port={settings.ray_port}",
            f"--dashboard-port={settings.ray_dashboard_port}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-agent-listen-port={settings.ray_agent_port}",
            "--include-dashboard=true",
            f"--num-cpus={os.cpu_count() or 2}",
            "--disable-usage-stats",
        ]
        log.info("starting a local Ray head: %s", " ".join(cmd))
        env = os.environ | {"RAY_USAGE_STATS_ENABLED": "0"}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, start_new_session=True)
        if done.returncode != 0:
            raise RuntimeError(f"`ray start --head` failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        deadline = time.monotonic() + timeout_s
        while not is_up(url):
            if time.monotonic() > deadline:
                raise TimeoutError(f"Ray dashboard at {url} did not answer within {timeout_s:.0f}s")
            time.sleep(1)
    return url


def stop_local_head(settings: Settings, timeout_s: float = 3) -> int:
    """Stop the local head whose GCS listens on ``settings.ray_port``, and only it: its daemons
    (each names that port in an argument) and their children (workers, agents, job drivers).
    SIGTERM first, SIGKILL for what is left after ``timeout_s``: stopped together, the GCS and the
    raylet wait on each other and were still up ten seconds later. Returns how many processes it stopped."""
    import psutil

    names_port = re.compile(rf"--(?:gcs_server_port=|gcs-address=\S*:|address=\S*:){settings.ray_port}")
    found: dict[int, psutil.Process] = {}
    for p in psutil.process_iter(["cmdline"]):
        if any(names_port.fullmatch(arg) for arg in p.info["cmdline"] or ()):
            with suppress(psutil.Error):  # ended meanwhile
                found.update((c.pid, c) for c in [p, *p.children(recursive=True)])
    found.pop(os.getpid(), None)
    alive = list(found.values())
    for stop in (psutil.Process.terminate, psutil.Process.kill):
        for p in alive:
            with suppress(psutil.Error):
                stop(p)
        _, alive = psutil.wait_procs(alive, timeout=timeout_s)
    return len(found)
