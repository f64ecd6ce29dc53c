"""Hook for a Ray cluster's Jobs API (the same API KubeRay's submitter uses).

Synchronous calls only, for the worker side; the trigger has its own async reader.
"""

from __future__ import annotations

import logging
from functools import cached_property
from typing import Any

from tenacity import retry, retry_if_exception, stop_after_delay, wait_fixed

log = logging.getLogger(__name__)


class JobAlreadyExists(RuntimeError):
    pass


def _agent_not_ready(e: BaseException) -> bool:
    # A head that has just started answers 500 "No available agent" until its job agent registers.
    return isinstance(e, RuntimeError) and "No available agent" in str(e)


class RayJobsHook:
    """
    Submit, inspect and stop Ray jobs.

    :param dashboard_url: the Ray dashboard address, e.g. ``http://127.0.0.1:8265``.
    """

    def __init__(self, dashboard_url: str):
        self.dashboard_url = dashboard_url.rstrip("/")

    @cached_property
    def client(self):
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.dashboard_url)

    @retry(retry=retry_if_exception(_agent_not_ready), wait=wait_fixed(2), stop=stop_after_delay(120), reraise=True)
    def submit(
        self,
        *,
        submission_id: str,
        entrypoint: str,
        runtime_env: dict[str, Any] | None = None,
        metadata: dict[str, str] | None = None,
        entrypoint_num_cpus: float | None = None,
    ) -> str:
        """Submit a job; raise :class:`JobAlreadyExists` when ``submission_id`` is taken."""
        try:
            return self.client.submit_job(
                submission_id=submission_id,
                entrypoint=entrypoint,
                runtime_env=runtime_env,
                metadata=metadata,
                entrypoint_num_cpus=entrypoint_num_cpus,
            )
        except RuntimeError as e:
            if "already exists" in str(e):
                raise JobAlreadyExists(submission_id) from e
            raise

    def status(self, submission_id: str) -> str:
        return str(self.client.get_job_status(submission_id))

    def stop(self, submission_id: str) -> bool:
        """Ask Ray to stop the job; False when it had already ended."""
        return bool(self.client.stop_job(submission_id))

    def job_url(self, submission_id: str) -> str:
        return f"{self.dashboard_url}/#/jobs/{submission_id}"
