"""The Ray job operator and trigger against a real local Ray cluster and its Jobs API."""

from __future__ import annotations

import asyncio
import logging
import shlex
import sys
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from ctpipe.airflow.hooks.ray_jobs import JobAlreadyExists, RayJobsHook
from ctpipe.airflow.operators.ray_jobs import RayJobOperator, submission_id_for
from ctpipe.airflow.triggers.ray_jobs import RayJobTrigger
from ctpipe.jobspec import progress_line
from tests.conftest import free_port

pytestmark = pytest.mark.timeout(300)

PROGRESS = "; ".join(
    f"print({progress_line({'step': i, 'max_steps': 3, 'loss': 1.0 / i, 'reward': 0.1 * i})!r}, flush=True); time.sleep(0.5)"
    for i in (1, 2, 3)
)


def py(code: str) -> str:
    return f"{sys.executable} -c {shlex.quote('import time; ' + code)}"


def collect(trigger: RayJobTrigger) -> list[dict]:
    async def go():
        return [e.payload async for e in trigger.run()]

    return asyncio.run(go())


def wait_until_ended(hook: RayJobsHook, sid: str, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while hook.status(sid) not in {"STOPPED", "FAILED", "SUCCEEDED"} and time.monotonic() < deadline:
        time.sleep(0.5)
    return hook.status(sid)


def unique(name: str) -> str:
    return f"test-{name}-{time.time_ns()}"


def test_serialize_round_trip():
    t = RayJobTrigger(
        "http://127.0.0.1:1/", "job-1", poll_interval=2.5, log_offset=17, request_timeout=9, max_attempts=3, deadline=1e9
    )
    path, kwargs = t.serialize()
    assert path == "ctpipe.airflow.triggers.ray_jobs.RayJobTrigger"
    again = RayJobTrigger(**kwargs)
    assert again.serialize() == (path, kwargs) and kwargs["dashboard_url"] == "http://127.0.0.1:1"


def test_unreachable_dashboard_ends_with_an_error_event():
    (event,) = collect(RayJobTrigger(f"http://127.0.0.1:{free_port()}", "nope", max_attempts=2, request_timeout=2))
    assert event["status"] == "ERROR" and "nope" == event["submission_id"] and event["message"]


def test_progress_is_logged_and_success_reported(ray_url, caplog):
    hook = RayJobsHook(ray_url)
    sid = hook.submit(submission_id=unique("ok"), entrypoint=py(PROGRESS))
    trigger = RayJobTrigger(ray_url, sid, poll_interval=0.5)
    trigger._log = logging.getLogger("ray-trigger-test")  # Airflow's structlog logger bypasses caplog
    with caplog.at_level(logging.INFO, logger="ray-trigger-test"):
        (event,) = collect(trigger)
    assert event["status"] == "SUCCEEDED"
    steps = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    assert steps == ["step 1/3 loss 1 reward 0.1", "step 2/3 loss 0.5 reward 0.2", "step 3/3 loss 0.3333 reward 0.3"]


def test_failure_carries_the_log_tail(ray_url):
    hook = RayJobsHook(ray_url)
    sid = hook.submit(submission_id=unique("fail"), entrypoint=py("print('about to fail'); raise SystemExit(3)"))
    (event,) = collect(RayJobTrigger(ray_url, sid, poll_interval=0.5))
    assert event["status"] == "FAILED" and "about to fail" in event["log_tail"]
    op = RayJobOperator(task_id="t", entrypoint="unused", dashboard_url=ray_url)
    with pytest.raises(AirflowException, match=f"Ray job {sid} ended FAILED") as e:
        op.execute_complete({}, event)
    assert "about to fail" in str(e.value)


def test_trigger_on_kill_stops_the_job(ray_url):
    hook = RayJobsHook(ray_url)
    sid = hook.submit(submission_id=unique("kill"), entrypoint=py("time.sleep(120)"))
    asyncio.run(RayJobTrigger(ray_url, sid).on_kill())
    assert wait_until_ended(hook, sid) == "STOPPED"


def test_operator_defers_and_a_restarted_worker_reattaches(ray_url):
    run_id = f"manual__{time.time_ns()}"
    ti = SimpleNamespace(dag_id="train", task_id="train", run_id=run_id, try_number=1)
    op = RayJobOperator(task_id="train", entrypoint=py("time.sleep(1)"), dashboard_url=ray_url, poll_interval=0.5)
    with pytest.raises(TaskDeferred) as first:
        op.execute({"ti": ti})
    sid = submission_id_for("train", "train", run_id, 1)
    assert first.value.trigger.submission_id == sid
    # A second execute of the same try (worker restarted) attaches instead of submitting again.
    with pytest.raises(JobAlreadyExists):
        RayJobsHook(ray_url).submit(submission_id=sid, entrypoint="true")
    with pytest.raises(TaskDeferred) as second:
        RayJobOperator(task_id="train", entrypoint="true", dashboard_url=ray_url).execute({"ti": ti})
    assert second.value.trigger.submission_id == sid
    (event,) = collect(second.value.trigger)
    assert op.execute_complete({}, event)["submission_id"] == sid


def run_operator(op: RayJobOperator) -> dict:
    """Execute, then play the triggerer's part: run each trigger and hand its event to the method Airflow calls."""
    context = {"ti": SimpleNamespace(dag_id="train", task_id="train", run_id=f"manual__{time.time_ns()}", try_number=1)}
    with pytest.raises(TaskDeferred) as first:
        op.execute(context)
    deferred = first.value
    while True:
        (event,) = collect(deferred.trigger)
        method = getattr(op, deferred.method_name)
        try:
            return method(context, event, **(deferred.kwargs or {}))
        except TaskDeferred as again:
            deferred = again


def test_a_preempted_job_is_resubmitted_and_a_real_error_is_not(ray_url, tmp_path):
    marker = tmp_path / "preempted-once"
    # Exits as if SIGTERM-preempted the first time, then succeeds (as a resumed job would).
    flaky = py(f"import os, sys; p={str(marker)!r}; sys.exit(0) if os.path.exists(p) else (open(p, 'w').close(), sys.exit(143))")
    op = RayJobOperator(
        task_id="train", entrypoint=flaky, dashboard_url=ray_url, poll_interval=0.5,
        max_preemptions=2, preemption_backoff=timedelta(seconds=0.1),
    )
    result = run_operator(op)
    assert result["preemptions"] == 1 and result["submission_id"].endswith("-resubmit1")

    broken = RayJobOperator(task_id="train", entrypoint=py("raise SystemExit(3)"), dashboard_url=ray_url, poll_interval=0.5)
    with pytest.raises(AirflowException, match="ended FAILED: "):
        run_operator(broken)


def test_preemptions_are_bounded(ray_url):
    always = RayJobOperator(
        task_id="train", entrypoint=py("raise SystemExit(143)"), dashboard_url=ray_url, poll_interval=0.5,
        max_preemptions=1, preemption_backoff=timedelta(seconds=0.1),
    )
    with pytest.raises(AirflowException, match="after 1 resubmissions"):
        run_operator(always)


def test_a_job_past_its_deadline_is_stopped_not_orphaned(ray_url):
    hook = RayJobsHook(ray_url)
    sid = hook.submit(submission_id=unique("deadline"), entrypoint=py("time.sleep(120)"))
    (event,) = collect(RayJobTrigger(ray_url, sid, poll_interval=0.5, deadline=time.time() + 2))
    assert event["status"] == "TIMEOUT"
    assert wait_until_ended(hook, sid) == "STOPPED"
    with pytest.raises(AirflowException, match="ended TIMEOUT"):
        RayJobOperator(task_id="t", entrypoint="unused", dashboard_url=ray_url).execute_complete({}, event)


def test_a_training_job_preempted_by_sigterm_is_resubmitted_and_resumes(
    ray_url, settings, base_model, training_dataset
):
    """The real TRL job under the operator: SIGTERM mid-run, exit 143, resubmission, resume, same final weights."""
    import json
    import subprocess
    import threading
    from pathlib import Path

    from tests.conftest import job_command, job_spec, run_job
    from tests.test_train_job import assert_same_weights

    uninterrupted, _ = run_job(settings, base_model, training_dataset, "dpo", "whole", steps=30, save_steps=3)
    spec = job_spec(settings, base_model, training_dataset, "dpo", "spot", steps=30, save_steps=3)
    cmd = job_command(spec)
    trainer_dir = Path(spec.run_dir) / "trainer"

    def reclaim_the_node():  # as the kubelet does on a spot notice: SIGTERM to the training process only
        deadline = time.monotonic() + 120
        while not (trainer_dir / "checkpoint-3").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        subprocess.run(["pkill", "-TERM", "-f", "^" + " ".join(cmd)], check=True)

    threading.Thread(target=reclaim_the_node, daemon=True).start()
    op = RayJobOperator(
        task_id="train", entrypoint=" ".join(cmd), dashboard_url=ray_url, poll_interval=0.5,
        max_preemptions=2, preemption_backoff=timedelta(seconds=0.1),
    )
    result = run_operator(op)
    assert result["preemptions"] == 1
    metrics = json.loads((Path(spec.run_dir) / "metrics.json").read_text())
    assert metrics["steps"] == 30 and int(metrics["resumed_from"].rsplit("-", 1)[1]) >= 3
    assert_same_weights(spec.checkpoint_dir, uninterrupted.checkpoint_dir)
