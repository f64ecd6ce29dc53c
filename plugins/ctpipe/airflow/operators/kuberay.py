"""Deferrable operator that runs a training job as a KubeRay RayJob and completes from the trigger's event."""

from __future__ import annotations

import re
import time
from datetime import timedelta
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from tenacity import retry

from ctpipe.airflow.triggers.kuberay import API_RETRY, RBAC_HINT, RayJobStatusTrigger
from ctpipe.k8s.diagnose import STARTUP_FAILURES
from ctpipe.k8s.rayjob import GROUP, PLURAL, VERSION, job_name, render
from ctpipe.k8s.schema import validate
from ctpipe.airflow.resubmit import defer_resubmission
from ctpipe.preemption import is_preemption

# What KubeRay and Ray write when the job's process or node went away rather than failing on its own.
_LOST = re.compile(r"JOB_SUPERVISOR_ACTOR_DIED|Evicted|[Pp]reempted|node .*(lost|not ready|died)|NodeNotReady")


def as_ray_event(trigger_event: dict[str, Any]) -> dict[str, Any]:
    """A RayJob's failure in the terms ``is_preemption`` reads (driver exit code, lost node).

    >>> is_preemption(as_ray_event({"status": "FAILED", "message": "Job entrypoint command failed with exit code 143"}))
    True
    >>> is_preemption(as_ray_event({"status": "FAILED", "message": "Job entrypoint command failed with exit code 2"}))
    False
    >>> is_preemption(as_ray_event({"status": "FAILED", "message": "Pod was Evicted: node had condition NodeNotReady"}))
    True
    >>> is_preemption(as_ray_event({"status": "FAILED", "reason": "Unschedulable", "message": "node .* lost"}))
    False
    """
    message = trigger_event.get("message") or ""
    # Pods that could not start (the trigger names why) would meet the same cause in a new job:
    # such a message says nothing about a driver or a node.
    driver = "" if trigger_event.get("reason") in STARTUP_FAILURES else message
    code = re.search(r"exit code (-?\d+)", driver)
    return {
        "status": trigger_event.get("status"),
        "message": message,
        "driver_exit_code": int(code.group(1)) if code else None,
        "error_type": "JOB_SUPERVISOR_ACTOR_DIED" if _LOST.search(driver) else None,
    }


class KubeRayJobOperator(BaseOperator):
    """
    Create the RayJob for the job spec at ``spec_path`` and defer until KubeRay reports it ended.

    The RayJob's name is derived from dag, task, run, try and resubmission, so a restarted
    worker finds its job (HTTP 409 on create means "already exists": attach to it). A job
    preempted (exit 143/137, evicted pods, lost nodes) is deleted and recreated under the next
    resubmission's name, up to ``max_preemptions`` times with doubling backoff; it resumes from
    the run directory's checkpoints. Any other failure fails the task with KubeRay's reason and message.

    :param spec_path: the job.json the prepare task wrote (templated).
    :param kubernetes_conn_id: Airflow connection (in-cluster or kubeconfig) for the Kubernetes API.
    """

    template_fields = ("spec_path",)
    ui_color = "#e0f2e9"

    def __init__(
        self,
        *,
        spec_path: str,
        kubernetes_conn_id: str = "kubernetes_default",
        poll_interval: float = 10.0,
        job_timeout: timedelta = timedelta(hours=6),
        max_preemptions: int = 3,
        preemption_backoff: timedelta = timedelta(seconds=30),
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.spec_path = spec_path
        self.kubernetes_conn_id = kubernetes_conn_id
        self.poll_interval = poll_interval
        self.job_timeout = job_timeout
        self.max_preemptions = max_preemptions
        self.preemption_backoff = preemption_backoff
        self._created: str | None = None

    @cached_property
    def hook(self):
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        return KubernetesHook(conn_id=self.kubernetes_conn_id)

    @cached_property
    def kubernetes(self):
        from ctpipe.config import settings

        return settings().kubernetes

    def execute(self, context) -> None:
        self._create_and_defer(context, preemptions=0)

    def _create_and_defer(self, context, preemptions: int) -> None:
        from kubernetes.client.exceptions import ApiException

        from ctpipe.jobspec import JobSpec

        ti = context["ti"]
        name = job_name(ti.dag_id, ti.task_id, ti.run_id, ti.try_number, preemptions)
        labels = {
            "ctpipe.io/dag-id": ti.dag_id, "ctpipe.io/task-id": ti.task_id,
            "ctpipe.io/run-id": ti.run_id, "ctpipe.io/try-number": str(ti.try_number),
        }
        body = render(JobSpec.read(self.spec_path), self.kubernetes, name=name, labels=labels)
        validate(body)
        namespace = body["metadata"]["namespace"]
        try:
            self._create(body)
            self.log.info("created RayJob %s/%s", namespace, name)
        except ApiException as e:
            if e.status == 409:
                self.log.info("RayJob %s/%s already exists; attaching to it", namespace, name)
            elif e.status in (401, 403):
                raise AirflowException(f"HTTP {e.status} creating RayJob {namespace}/{name}: {RBAC_HINT}") from None
            elif e.status == 404:
                raise AirflowException(f"namespace {namespace!r} does not exist (or KubeRay's CRDs are not installed)") from None
            else:
                raise AirflowException(f"the API server refused RayJob {namespace}/{name}: HTTP {e.status} {e.body}") from None
        except Exception as e:  # noqa: BLE001 - no connection, no kubeconfig, API unreachable after retries
            raise AirflowException(
                f"cannot reach the Kubernetes API through connection {self.kubernetes_conn_id!r} "
                f"({type(e).__name__}: {e}); define it (in-cluster or kube_config_path) or set "
                "CTPIPE_KUBERNETES__KUBERNETES_CONN_ID"
            ) from None
        self._created = name
        self.defer(
            trigger=RayJobStatusTrigger(
                name, namespace, self.kubernetes_conn_id, poll_interval=self.poll_interval,
                deadline=time.time() + self.job_timeout.total_seconds(),
                schedule_timeout=self.kubernetes.schedule_timeout_s,
            ),
            method_name="execute_complete",
            kwargs={"preemptions": preemptions},
            timeout=timedelta(seconds=self.job_timeout.total_seconds() + 10 * self.poll_interval + 60),
        )

    def execute_complete(self, context, event: dict[str, Any], preemptions: int = 0) -> dict[str, Any]:
        name, status = event["name"], event["status"]
        if status == "SUCCEEDED":
            return {"rayjob": name, "namespace": event["namespace"], "preemptions": preemptions}
        # The driver's log and the pods' events are already in this task's log; the job itself goes.
        self._delete(event["namespace"], name, best_effort=status == "ERROR")
        if status == "FAILED" and is_preemption(as_ray_event(event)) and preemptions < self.max_preemptions:
            defer_resubmission(self, preemptions, self.preemption_backoff, f"RayJob {name} was preempted ({event.get('message')})")
        why = f" after {preemptions} resubmissions" if preemptions else ""
        raise AirflowException(
            f"RayJob {event['namespace']}/{name} ended {status}{why}: "
            f"{event.get('reason') or ''} {event.get('message') or 'no message'}".rstrip()
        )

    def resubmit(self, context, event: Any = None, preemptions: int = 1) -> None:
        self._create_and_defer(context, preemptions)

    @retry(**API_RETRY)
    def _create(self, body: dict[str, Any]) -> None:
        self.hook.create_custom_object(GROUP, VERSION, PLURAL, body, body["metadata"]["namespace"])

    @retry(**API_RETRY)
    def _delete_now(self, namespace: str, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.hook.delete_custom_object(GROUP, VERSION, PLURAL, name, namespace, propagation_policy="Foreground")
        except ApiException as e:
            if e.status != 404:
                raise

    def _delete(self, namespace: str, name: str, best_effort: bool = False) -> None:
        try:
            self._delete_now(namespace, name)
        except Exception as e:  # noqa: BLE001
            if not best_effort:
                raise
            self.log.error("could not delete RayJob %s/%s (%s); delete it by hand", namespace, name, e)

    def on_kill(self) -> None:
        # Before deferral only; once deferred, the trigger's on_kill deletes the job.
        if self._created:
            self._delete(self.kubernetes.namespace, self._created)
