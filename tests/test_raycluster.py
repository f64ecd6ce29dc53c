"""The local Ray head: started in a session of its own, stopped alone."""

from __future__ import annotations

import os
import shlex
import sys
import time

import psutil
import pytest

from ctpipe.config import Settings
from ctpipe.raycluster import ensure_local_head, is_up, stop_local_head
from tests.conftest import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def run_job(url: str, code: str) -> str:
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(url).submit_job(entrypoint=f"{sys.executable} -c {shlex.quote(code)}")


def wait_for(predicate, timeout_s: float = 120):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_local_head_is_stopped_alone_with_its_jobs(ray_url, tmp_path):
    from ray.job_submission import JobStatus, JobSubmissionClient

    s = Settings(home=tmp_path / "home", ray_port=free_port(), ray_dashboard_port=free_port(),
                 ray_agent_port=free_port())
    try:
        url = ensure_local_head(s)
        gcs = next(p for p in psutil.process_iter(["cmdline"])
                   if f"--gcs_server_port={s.ray_port}" in (p.info["cmdline"] or ()))
        assert os.getpgid(gcs.pid) != os.getpgrp()  # a Ctrl-C here, or this process's group ending, leaves it up

        pid_file = tmp_path / "driver.pid"
        run_job(url, f"import os, time; open({str(pid_file)!r}, {'w'!r}).write(str(os.getpid())); time.sleep(600)")
        wait_for(lambda: pid_file.exists() and pid_file.read_text())
        driver = int(pid_file.read_text())
    finally:
        stopped = stop_local_head(s)
    assert stopped >= 5  # GCS, raylet, dashboard, monitors, workers
    assert not is_up(url)
    assert gone(gcs.pid) and gone(driver)
    assert stop_local_head(s) == 0

    # The session's own head, on other ports, still runs jobs.
    assert is_up(ray_url)
    client = JobSubmissionClient(ray_url)
    job = run_job(ray_url, "print(6 * 7)")
    wait_for(lambda: client.get_job_status(job) in (JobStatus.SUCCEEDED, JobStatus.FAILED))
    assert client.get_job_status(job) == JobStatus.SUCCEEDED
    assert "42" in client.get_job_logs(job)
