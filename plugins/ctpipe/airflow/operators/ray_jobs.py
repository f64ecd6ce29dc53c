"""Deferrable operator that runs a command as a Ray job and waits for it without a worker slot."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from ctpipe.airflow.hooks.ray_jobs import JobAlreadyExists, RayJobsHook
from ctpipe.airflow.triggers.ray_jobs import RayJobTrigger


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
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.entrypoint = entrypoint
        self.runtime_env = runtime_env
        self.dashboard_url = dashboard_url
        self.entrypoint_num_cpus = entrypoint_num_cpus
        self.poll_interval = poll_interval
        self.job_timeout = job_timeout
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
        ti = context["ti"]
        sid = submission_id_for(ti.dag_id, ti.task_id, ti.run_id, ti.try_number)
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
        self.defer(
            trigger=RayJobTrigger(self.hook.dashboard_url, sid, poll_interval=self.poll_interval),
            method_name="execute_complete",
            # The supervisor serializes the deferral: a plain timedelta, not a pendulum Duration.
            timeout=timedelta(seconds=self.job_timeout.total_seconds()),
        )

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        sid, status = event["submission_id"], event["status"]
        if status == "SUCCEEDED":
            self.log.info("Ray job %s succeeded", sid)
            return {"submission_id": sid, "dashboard_url": self.hook.dashboard_url}
        tail = event.get("log_tail") or ""
        raise AirflowException(
            f"Ray job {sid} ended {status}: {event.get('message') or 'no message'}"
            + (f"\n--- last lines of the job log ---\n{tail}" if tail else "")
        )

    def on_kill(self) -> None:
        # Runs when the task is killed before it deferred; once deferred, the trigger's on_kill stops the job.
        if self._submitted:
            self.log.info("stopping Ray job %s", self._submitted)
            self.hook.stop(self._submitted)
