"""Async trigger following a KubeRay RayJob through the Kubernetes API until it ends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from ctpipe.k8s.rayjob import GROUP, PLURAL, VERSION

# KubeRay's jobDeploymentStatus values that end a RayJob. Retrying and Suspended(ing) are not
# terminal (KubeRay's backoffLimit, or Kueue holding the job); ValidationFailed is never retried.
SUCCEEDED = frozenset({"Complete"})
FAILED = frozenset({"Failed", "ValidationFailed"})
RBAC_HINT = (
    "the Kubernetes connection's identity may not read RayJobs in this namespace; "
    "apply k8s/base (Role ctpipe-airflow) and use its service account"
)


def transient(e: BaseException) -> bool:
    """Worth another try: rate limiting, a server error, a dropped or timed-out connection."""
    status = getattr(e, "status", None)
    if isinstance(status, int):
        return status == 429 or status >= 500
    return isinstance(e, (asyncio.TimeoutError, ConnectionError, OSError)) or type(e).__module__.startswith("aiohttp")


class RayJobStatusTrigger(BaseTrigger):
    """Poll ``rayjobs/<name>`` until its ``jobDeploymentStatus`` is terminal; logs each transition.

    :param deadline: epoch seconds after which the RayJob is deleted and TIMEOUT reported.
    """

    def __init__(
        self,
        name: str,
        namespace: str,
        kubernetes_conn_id: str,
        poll_interval: float = 10.0,
        deadline: float | None = None,
        request_timeout: float = 30.0,
    ):
        super().__init__()
        self.name = name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.poll_interval = poll_interval
        self.deadline = deadline
        self.request_timeout = request_timeout

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "name": self.name, "namespace": self.namespace, "kubernetes_conn_id": self.kubernetes_conn_id,
                "poll_interval": self.poll_interval, "deadline": self.deadline, "request_timeout": self.request_timeout,
            },
        )

    async def _call(self, method: str, **kwargs) -> dict:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
        from kubernetes_asyncio.client import CustomObjectsApi

        async for attempt in AsyncRetrying(
            retry=retry_if_exception(transient), stop=stop_after_attempt(5),
            wait=wait_exponential(multiplier=0.5, max=15), reraise=True,
        ):
            with attempt:
                async with AsyncKubernetesHook(conn_id=self.kubernetes_conn_id).get_conn() as api:
                    fn = getattr(CustomObjectsApi(api), method)
                    return await fn(GROUP, VERSION, self.namespace, PLURAL, self.name,
                                    _request_timeout=self.request_timeout, **kwargs)
        raise AssertionError("unreachable")

    def _event(self, status: str, **fields: Any) -> TriggerEvent:
        return TriggerEvent({"status": status, "name": self.name, "namespace": self.namespace} | fields)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        seen = None
        while True:
            try:
                job = await self._call("get_namespaced_custom_object")
            except Exception as e:  # noqa: BLE001 - every ending is reported as an event
                status = getattr(e, "status", None)
                if status == 404:
                    yield self._event("DELETED", message=f"RayJob {self.namespace}/{self.name} no longer exists")
                elif status in (401, 403):
                    yield self._event("ERROR", message=f"HTTP {status} reading RayJob {self.name}: {RBAC_HINT}")
                else:
                    yield self._event("ERROR", message=f"{type(e).__name__}: {e}")
                return
            st = job.get("status") or {}
            deployment = st.get("jobDeploymentStatus") or "New"
            fields = {k: st.get(k) for k in ("jobStatus", "reason", "message", "rayClusterName", "dashboardURL", "failed")}
            if deployment != seen:
                self.log.info("RayJob %s: %s (job %s) %s", self.name, deployment, fields["jobStatus"], fields["message"] or "")
                seen = deployment
            if deployment in SUCCEEDED:
                yield self._event("SUCCEEDED", deployment=deployment, **fields)
                return
            if deployment in FAILED:
                yield self._event("FAILED", deployment=deployment, **fields)
                return
            if self.deadline is not None and time.time() > self.deadline:
                await self._delete()
                yield self._event("TIMEOUT", deployment=deployment, **fields)
                return
            await asyncio.sleep(self.poll_interval)

    async def _delete(self) -> None:
        try:
            await self._call("delete_namespaced_custom_object", propagation_policy="Foreground")
        except Exception as e:  # noqa: BLE001
            if getattr(e, "status", None) != 404:
                raise

    async def on_kill(self) -> None:
        # Called when a user marks the task failed or clears it, not when the triggerer restarts.
        self.log.info("deleting RayJob %s/%s", self.namespace, self.name)
        await self._delete()
