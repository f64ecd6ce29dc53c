"""Async trigger following a KubeRay RayJob through the Kubernetes API until it ends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from ctpipe.k8s.diagnose import StartupFailure, describe, log_key, owned_by, startup_failure
from ctpipe.k8s.rayjob import GROUP, PLURAL, VERSION

# KubeRay's jobDeploymentStatus values that end a RayJob. Retrying and Suspended(ing) are not
# terminal (KubeRay's backoffLimit, or Kueue holding the job); ValidationFailed is never retried.
SUCCEEDED = frozenset({"Complete"})
FAILED = frozenset({"Failed", "ValidationFailed"})
SUBMITTER = "ray-job-submitter"  # the container of the Kubernetes Job that submits and follows the driver
RBAC_HINT = (
    "the Kubernetes connection's identity may not read RayJobs in this namespace; "
    "apply k8s/base (Role ctpipe-airflow) and use its service account"
)


def transient(e: BaseException) -> bool:
    """Worth another try: rate limiting, a server error, a dropped or timed-out connection."""
    status = getattr(e, "status", None)
    if isinstance(status, int):
        return status == 429 or status >= 500
    return isinstance(e, (asyncio.TimeoutError, ConnectionError, OSError)) or type(e).__module__.startswith(("aiohttp", "urllib3"))


# One retry policy for every Kubernetes API call, the operator's (sync) and the trigger's (async).
API_RETRY = {
    "retry": retry_if_exception(transient), "stop": stop_after_attempt(5),
    "wait": wait_exponential(multiplier=0.5, max=15), "reraise": True,
}


class RayJobStatusTrigger(BaseTrigger):
    """Poll ``rayjobs/<name>`` until its ``jobDeploymentStatus`` is terminal, streaming its progress.

    Every poll also reads the job's pods and events (logged once each, and checked for causes
    that waiting will not fix: ``ctpipe.k8s.diagnose``) and the new lines of the submitter's log
    (``ray job logs --follow`` of the driver), so the task log shows the training as it runs.
    A job that cannot start is deleted and reported FAILED with the cause.

    :param deadline: epoch seconds after which the RayJob is deleted and TIMEOUT reported.
    :param schedule_timeout: seconds a pod may stay unschedulable before the job fails.
    """

    def __init__(
        self,
        name: str,
        namespace: str,
        kubernetes_conn_id: str,
        poll_interval: float = 10.0,
        deadline: float | None = None,
        request_timeout: float = 30.0,
        schedule_timeout: float = 1800.0,
    ):
        super().__init__()
        self.name = name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.poll_interval = poll_interval
        self.deadline = deadline
        self.request_timeout = request_timeout
        self.schedule_timeout = schedule_timeout

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "name": self.name, "namespace": self.namespace, "kubernetes_conn_id": self.kubernetes_conn_id,
                "poll_interval": self.poll_interval, "deadline": self.deadline,
                "request_timeout": self.request_timeout, "schedule_timeout": self.schedule_timeout,
            },
        )

    async def _retrying(self, fn, *args, **kwargs):
        async for attempt in AsyncRetrying(**API_RETRY):
            with attempt:
                return await fn(*args, _request_timeout=self.request_timeout, **kwargs)
        raise AssertionError("unreachable")

    def _event(self, status: str, **fields: Any) -> TriggerEvent:
        return TriggerEvent({"status": status, "name": self.name, "namespace": self.namespace} | fields)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
        from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi

        try:
            async with AsyncKubernetesHook(conn_id=self.kubernetes_conn_id).get_conn() as api:
                self._custom, self._core = CustomObjectsApi(api), CoreV1Api(api)
                self._json = api.sanitize_for_serialization
                yield await self._follow()
        except Exception as e:  # noqa: BLE001 - every ending is reported as an event
            yield self._event("ERROR", message=f"Kubernetes connection {self.kubernetes_conn_id!r}: {type(e).__name__}: {e}")

    async def _follow(self) -> TriggerEvent:
        seen, progress = None, _Progress(self)
        while True:
            try:
                job = await self._retrying(
                    self._custom.get_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL, self.name
                )
            except Exception as e:  # noqa: BLE001
                status = getattr(e, "status", None)
                if status == 404:
                    return self._event("DELETED", message=f"RayJob {self.namespace}/{self.name} no longer exists")
                if status in (401, 403):
                    return self._event("ERROR", message=f"HTTP {status} reading RayJob {self.name}: {RBAC_HINT}")
                return self._event("ERROR", message=f"{type(e).__name__}: {e}")
            st = job.get("status") or {}
            deployment = st.get("jobDeploymentStatus") or "New"
            fields = {k: st.get(k) for k in ("jobStatus", "reason", "message", "rayClusterName", "dashboardURL", "failed")}
            if deployment != seen:
                self.log.info("RayJob %s: %s (job %s) %s", self.name, deployment, fields["jobStatus"], fields["message"] or "")
                seen = deployment
            failure = await progress.poll(starting=deployment not in SUCCEEDED | FAILED | {"Running"})
            if deployment in SUCCEEDED:
                return self._event("SUCCEEDED", deployment=deployment, **fields)
            if deployment in FAILED:
                return self._event("FAILED", deployment=deployment, **fields)
            if failure:
                await self._delete()
                return self._event("FAILED", deployment=deployment, **fields | failure._asdict())
            if self.deadline is not None and time.time() > self.deadline:
                await self._delete()
                return self._event("TIMEOUT", deployment=deployment, **fields)
            await asyncio.sleep(self.poll_interval)

    async def _delete(self) -> None:
        try:
            await self._retrying(
                self._custom.delete_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL, self.name,
                propagation_policy="Foreground",
            )
        except Exception as e:  # noqa: BLE001
            if getattr(e, "status", None) != 404:
                raise

    async def on_kill(self) -> None:
        # Called when a user marks the task failed or clears it, not when the triggerer restarts.
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
        from kubernetes_asyncio.client import CustomObjectsApi

        self.log.info("deleting RayJob %s/%s", self.namespace, self.name)
        async with AsyncKubernetesHook(conn_id=self.kubernetes_conn_id).get_conn() as api:
            self._custom = CustomObjectsApi(api)
            await self._delete()


class _Progress:
    """What a poll learns besides the RayJob's status: new events, new driver log lines, startup failures.

    Best effort: a failed read (RBAC without events, a pod already gone) is logged once and skipped;
    only the RayJob's own status decides how the job ends, unless its pods cannot start.
    """

    def __init__(self, trigger: RayJobStatusTrigger):
        self.t = trigger
        self.events: set[tuple[str, int]] = set()
        self.log_after: dict[str, tuple[str, int]] = {}
        self.warned: set[str] = set()

    async def _read(self, what: str, fn, *args, **kwargs):
        try:
            return await self.t._retrying(fn, *args, **kwargs)
        except Exception as e:  # noqa: BLE001
            if what not in self.warned:
                self.warned.add(what)
                self.t.log.warning("cannot read %s of RayJob %s (%s: %s); going on without", what, self.t.name,
                                   type(e).__name__, getattr(e, "reason", None) or e)
            return None

    async def poll(self, starting: bool) -> StartupFailure | None:
        t = self.t
        events = await self._read("events", t._core.list_namespaced_event, t.namespace)
        pods = await self._read("pods", t._core.list_namespaced_pod, t.namespace)
        events = owned_by(t._json(events.items), t.name, ("involvedObject", "name")) if events else []
        pods = owned_by(t._json(pods.items), t.name, ("metadata", "name")) if pods else []
        for event in sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or ""):
            key = (event["metadata"].get("uid", event["metadata"]["name"]), event.get("count") or 1)
            if key not in self.events:
                self.events.add(key)
                (t.log.warning if event.get("type") == "Warning" else t.log.info)("%s", describe(event))
        for pod in pods:
            if any(c["name"] == SUBMITTER for c in pod["spec"]["containers"]):
                await self._stream(pod["metadata"]["name"])
        if not starting:
            return None
        return startup_failure(pods, events, now=time.time(), schedule_timeout_s=t.schedule_timeout)

    async def _stream(self, pod: str) -> None:
        after = self.log_after.get(pod)
        # The first read of a pod is bounded (a restarted triggerer does not replay a day of log);
        # later reads look back a little over one poll and drop what was already logged.
        window = {"tail_lines": 1000} if after is None else {"since_seconds": int(self.t.poll_interval * 2) + 5}
        text = await self._read(f"log of {pod}", self.t._core.read_namespaced_pod_log, pod, self.t.namespace,
                                container=SUBMITTER, timestamps=True, **window)
        for line in (text or "").splitlines():
            key = log_key(line)
            if after is None or key > after:
                self.t.log.info("[%s] %s", pod, line.split(" ", 1)[-1])
                self.log_after[pod] = after = key
