"""Deferrable operator that runs a command as a Ray job and waits for it without a worker slot."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from ctpipe.airflow.hooks.ray_jobs import JobAlreadyExists, RayJobsHook
from ctpipe.airflow.triggers.ray_jobs import RayJobTrigger
from ctpipe.airflow.resubmit import defer_resubmission
from ctpipe.preemption import is_preemption


def submission_id_for(dag_id: str, task_id: str, run_id: str, try_number: int) -> str:
    """Stable per task try, so a restarted worker attaches to its job instead of starting another.

    >>> submission_id_for("train", "train", "manual__2026-01-01T00:00:00+00:00", 1)
    'train-train-manual__2026-01-01T00_00_00_00_00-try1'
    """
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{dag_id}-{task_id}-{run_id}-try{try_number}")


class RayJobOperator(BaseOperator):
    """
    Submit ``entrypoint`` to a Ray cluster's Jobs API and defer until it ends.

    :param entrypoint: shell command the job runs (templated).
    :param runtime_env: Ray runtime environment (env vars, working_dir, ...).
    :param dashboard_url: Ray dashboard address; None: the configured cluster, or a local head started on demand.
    :param entrypoint_num_cpus: CPUs reserved for the entrypoint process.
    :param poll_interval: seconds between status checks while deferred.
    :param job_timeout: the longest the job may run before the task fails.
    :param max_preemptions: resubmissions allowed when the job is preempted (SIGTERM/SIGKILL exit, lost
        node); the entrypoint is expected to resume from its own checkpoints. Other failures fail the task.
    :param preemption_backoff: wait before the first resubmission; doubles with each further one.
    """

    template_fields: Sequence[str] = ("entrypoint", "runtime_env")
    ui_color = "#e6f0ff"

    def __init__(
        self,
        *,
        entrypoint: str,
        runtime_env: dict[str, Any] | None = None,
        dashboard_url: str | None = None,
        entrypoint_num_cpus: float | None = None,
        poll_interval: float = 5.0,
        job_timeout: timedelta = timedelta(hours=6),
        max_preemptions: int = 3,
        preemption_backoff: timedelta = timedelta(seconds=30),
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.entrypoint = entrypoint
        self.runtime_env = runtime_env
        self.dashboard_url = dashboard_url
        self.entrypoint_num_cpus = entrypoint_num_cpus
        self.poll_interval = poll_interval
        self.job_timeout = job_timeout
        self.max_preemptions = max_preemptions
        self.preemption_backoff = preemption_backoff
        self._submitted: str | None = None

    @cached_property
    def hook(self) -> RayJobsHook:
        url = self.dashboard_url
        if url is None:
            from ctpipe.config import settings
            from ctpipe.raycluster import ensure_local_head

            url = ensure_local_head(settings())
        return RayJobsHook(url)

    def execute(self, context) -> None:
        self._submit_and_defer(context, preemptions=0)

    def _submit_and_defer(self, context, preemptions: int) -> None:
        ti = context["ti"]
        sid = submission_id_for(ti.dag_id, ti.task_id, ti.run_id, ti.try_number)
        if preemptions:
            sid = f"{sid}-resubmit{preemptions}"
        try:
            self.hook.submit(
                submission_id=sid,
                entrypoint=self.entrypoint,
                runtime_env=self.runtime_env,
                metadata={"airflow_dag_id": ti.dag_id, "airflow_run_id": ti.run_id, "airflow_task_id": ti.task_id},
                entrypoint_num_cpus=self.entrypoint_num_cpus,
            )
            self.log.info("submitted Ray job %s: %s", sid, self.entrypoint)
        except JobAlreadyExists:
            self.log.info("Ray job %s already exists; attaching to it", sid)
        self._submitted = sid
        self.log.info("Ray dashboard: %s", self.hook.job_url(sid))
        deadline = time.time() + self.job_timeout.total_seconds()
        self.defer(
            trigger=RayJobTrigger(self.hook.dashboard_url, sid, poll_interval=self.poll_interval, deadline=deadline),
            method_name="execute_complete",
            kwargs={"preemptions": preemptions},
            # A safety net only: the trigger stops the job at its deadline and reports TIMEOUT first.
            # (The supervisor serializes this: a plain timedelta, not a pendulum Duration.)
            timeout=timedelta(seconds=self.job_timeout.total_seconds() + 10 * self.poll_interval + 60),
        )

    def execute_complete(self, context, event: dict[str, Any], preemptions: int = 0) -> dict[str, Any]:
        sid, status = event["submission_id"], event["status"]
        if status == "SUCCEEDED":
            self.log.info("Ray job %s succeeded", sid)
            return {"submission_id": sid, "dashboard_url": event.get("dashboard_url"), "preemptions": preemptions}
        if is_preemption(event) and preemptions < self.max_preemptions:
            defer_resubmission(
                self, preemptions, self.preemption_backoff,
                f"Ray job {sid} was preempted ({event.get('error_type') or 'signal'}, "
                f"exit code {event.get('driver_exit_code')})",
            )
        tail = event.get("log_tail") or ""
        why = f" after {preemptions} resubmissions" if preemptions else ""
        raise AirflowException(
            f"Ray job {sid} ended {status}{why}: {event.get('message') or 'no message'}"
            + (f"\n--- last lines of the job log ---\n{tail}" if tail else "")
        )

    def resubmit(self, context, event: Any = None, preemptions: int = 1) -> None:
        self._submit_and_defer(context, preemptions)

    def on_kill(self) -> None:
        # Runs when the task is killed before it deferred; once deferred, the trigger's on_kill stops the job.
        if self._submitted:
            self.log.info("stopping Ray job %s", self._submitted)
            self.hook.stop(self._submitted)
