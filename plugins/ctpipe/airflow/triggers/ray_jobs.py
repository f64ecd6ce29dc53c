"""Trigger that follows a Ray job through the Jobs REST API until it ends.

Every request is async (aiohttp) with a timeout; transient failures are retried
with backoff. Progress lines the job prints (``CTPIPE_PROGRESS {...}``) are
logged as they appear, so the task log shows training as it happens.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from airflow.triggers.base import BaseTrigger, TriggerEvent
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from ctpipe.jobspec import parse_progress

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
_TRANSIENT = (aiohttp.ClientConnectionError, aiohttp.ServerDisconnectedError, asyncio.TimeoutError)


class RayJobTrigger(BaseTrigger):
    """
    Wait for a Ray job to reach a terminal state.

    :param dashboard_url: the Ray dashboard address.
    :param submission_id: the job to follow.
    :param poll_interval: seconds between status polls.
    :param log_offset: characters of the job log already reported (kept across triggerer restarts).
    :param request_timeout: seconds allowed for each HTTP request.
    :param max_attempts: tries per request before the trigger gives up on an unreachable dashboard.
    :param deadline: epoch seconds after which the job is stopped and the trigger reports ``TIMEOUT``
        (done here, not by Airflow's deferral timeout, so a timed-out task leaves no job running).
    """

    def __init__(
        self,
        dashboard_url: str,
        submission_id: str,
        poll_interval: float = 5.0,
        log_offset: int = 0,
        request_timeout: float = 30.0,
        max_attempts: int = 6,
        deadline: float | None = None,
    ):
        super().__init__()
        self.dashboard_url = dashboard_url.rstrip("/")
        self.submission_id = submission_id
        self.poll_interval = poll_interval
        self.log_offset = log_offset
        self.request_timeout = request_timeout
        self.max_attempts = max_attempts
        self.deadline = deadline

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "dashboard_url": self.dashboard_url,
                "submission_id": self.submission_id,
                "poll_interval": self.poll_interval,
                "log_offset": self.log_offset,
                "request_timeout": self.request_timeout,
                "max_attempts": self.max_attempts,
                "deadline": self.deadline,
            },
        )

    async def _request(self, session: aiohttp.ClientSession, method: str, path: str) -> dict:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(_TRANSIENT),
            wait=wait_exponential(multiplier=1, max=20),
            stop=stop_after_attempt(self.max_attempts),
            reraise=True,
        ):
            with attempt:
                async with session.request(method, f"{self.dashboard_url}{path}") as resp:
                    if resp.status >= 500:
                        raise aiohttp.ClientConnectionError(f"HTTP {resp.status} from {path}")
                    resp.raise_for_status()
                    return await resp.json(content_type=None)
        raise AssertionError("unreachable")

    def _event(self, status: str, **fields: Any) -> TriggerEvent:
        return TriggerEvent(
            {"status": status, "submission_id": self.submission_id, "dashboard_url": self.dashboard_url} | fields
        )

    def _report(self, text: str) -> None:
        for line in text.splitlines():
            rec = parse_progress(line)
            if rec is None:
                continue
            if rec.get("done"):
                self.log.info("Ray job %s finished training: %s", self.submission_id, rec)
                continue
            extras = " ".join(f"{k} {rec[k]:.4g}" for k in ("reward", "margin", "pair_accuracy") if k in rec)
            self.log.info("step %s/%s loss %.4g %s", rec.get("step"), rec.get("max_steps"), rec.get("loss") or 0.0, extras)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        job = f"/api/jobs/{self.submission_id}"
        timeout = aiohttp.ClientTimeout(total=self.request_timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                try:
                    info = await self._request(session, "GET", job)
                    logs = (await self._request(session, "GET", f"{job}/logs")).get("logs", "")
                except Exception as e:  # noqa: BLE001 - the task must end with the cause, not hang
                    yield self._event("ERROR", message=f"{type(e).__name__}: {e}")
                    return
                if len(logs) < self.log_offset:  # the log restarted (a resubmitted job)
                    self.log_offset = 0
                # Only whole lines: a half-written line is reported on the next poll.
                end = logs.rfind("\n", self.log_offset) + 1
                if end > self.log_offset:
                    self._report(logs[self.log_offset : end])
                    self.log_offset = end
                status = info.get("status")
                tail = "\n".join(logs.splitlines()[-30:])
                if status in TERMINAL:
                    yield self._event(
                        status,
                        message=info.get("message") or "",
                        error_type=info.get("error_type"),
                        driver_exit_code=info.get("driver_exit_code"),
                        log_tail=tail,
                    )
                    return
                if self.deadline is not None and time.time() > self.deadline:
                    await self.on_kill()
                    yield self._event("TIMEOUT", message="the job ran past its deadline and was stopped", log_tail=tail)
                    return
                await asyncio.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        """The user marked the deferred task failed, succeeded or cleared: stop the job."""
        timeout = aiohttp.ClientTimeout(total=self.request_timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            try:
                await self._request(session, "POST", f"/api/jobs/{self.submission_id}/stop")
                self.log.info("asked Ray to stop job %s", self.submission_id)
            except Exception as e:  # noqa: BLE001 - best effort; the job may have ended already
                self.log.warning("could not stop Ray job %s: %s", self.submission_id, e)
