"""Why a RayJob's pods cannot start, read from the pods and events the Kubernetes API reports.

KubeRay keeps a RayJob in ``Initializing`` for as long as its cluster's pods wait, whatever
they wait for; these functions tell the causes that waiting will not fix (an image that cannot
be pulled, a GPU request no node pool can satisfy, a gang left unscheduled past its timeout)
from those it will (a node being provisioned, a queue ahead of it). Objects are the API's JSON
(camelCase keys), as ``ApiClient.sanitize_for_serialization`` gives them.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, NamedTuple

# kubelet's reasons and messages when it cannot pull an image, and the ones a retry will not fix.
_PULL = re.compile(r"Failed to pull image|ErrImagePull|ImagePullBackOff|InvalidImageName|ErrImageNeverPull"
                   r"|Failed to apply default image tag")
_PULL_FOREVER = re.compile(r"not found|manifest unknown|unauthorized|denied|InvalidImageName|invalid reference"
                           r"|ErrImageNeverPull|Failed to apply default image tag", re.IGNORECASE)
PULL_ATTEMPTS = 3  # a registry hiccup passes within kubelet's first retries; three failed pulls do not
# Karpenter, when none of a NodePool's instance types is big enough for the pod (not: none free now).
_NO_FIT = re.compile(r"no instance type[^,;]*(enough|required) resources")


# The reasons a StartupFailure gives; a new job would meet them again, so none is retried.
STARTUP_FAILURES = frozenset({"ImagePullFailed", "Unschedulable"})


class StartupFailure(NamedTuple):
    reason: str  # one of STARTUP_FAILURES
    message: str


def owned_by(items: list[dict[str, Any]], job: str, path: tuple[str, ...]) -> list[dict[str, Any]]:
    """Objects whose name (at ``path``) is the RayJob's or one KubeRay derives from it.

    The RayCluster is ``<job>-<5 chars>``, its pods ``<cluster>-head-…``/``<cluster>-<group>-…``,
    the submitter Job ``<job>`` with pods ``<job>-<5 chars>``, Volcano's PodGroup ``ray-<job>-pg``.

    >>> named = [{"metadata": {"name": n}} for n in ("j-abcde-head-x", "j2-x", "ray-j-pg")]
    >>> [o["metadata"]["name"] for o in owned_by(named, "j", ("metadata", "name"))]
    ['j-abcde-head-x', 'ray-j-pg']
    """
    def name(obj: dict[str, Any]) -> str:
        for key in path:
            obj = obj.get(key) or {}
        return obj if isinstance(obj, str) else ""

    return [o for o in items if name(o) in (job, f"ray-{job}-pg") or name(o).startswith(job + "-")]


def describe(event: dict[str, Any]) -> str:
    """One log line for an event: ``Warning FailedScheduling pod/x: 0/3 nodes are available … (x4)``."""
    obj = event.get("involvedObject") or {}
    count = event.get("count") or 1
    return (f"{event.get('type', 'Normal')} {event.get('reason', '')} {str(obj.get('kind', '')).lower()}/"
            f"{obj.get('name', '')}: {(event.get('message') or '').strip()}" + (f" (x{count})" if count > 1 else ""))


def _seconds(timestamp: str | None) -> float | None:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() if timestamp else None


def startup_failure(
    pods: list[dict[str, Any]], events: list[dict[str, Any]], *, now: float, schedule_timeout_s: float
) -> StartupFailure | None:
    """The cause that keeps the job's pods from starting for good, or None while waiting may still help.

    >>> startup_failure([], [{"reason": "Failed", "count": 1, "message": 'Failed to pull image "x:1": not found'}],
    ...                 now=0, schedule_timeout_s=60).reason
    'ImagePullFailed'
    """
    for event in events:
        message = event.get("message") or ""
        if event.get("type") == "Normal":
            continue
        if _PULL.search(message) or event.get("reason") in ("InspectFailed", "ErrImageNeverPull"):
            if _PULL_FOREVER.search(message) or (event.get("count") or 1) >= PULL_ATTEMPTS:
                return StartupFailure("ImagePullFailed", describe(event))
        if event.get("reason") == "FailedScheduling" and message.startswith("Failed to schedule pod"):
            clauses = message.split("incompatible with nodepool")[1:] or [message]
            if all(_NO_FIT.search(c) for c in clauses):
                return StartupFailure("Unschedulable", "no node pool has an instance type that fits the pod: "
                                      + describe(event))
    for pod in pods:
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if condition.get("type") != "PodScheduled" or condition.get("status") != "False":
                continue
            since = _seconds(condition.get("lastTransitionTime"))
            if since is not None and now - since > schedule_timeout_s:
                return StartupFailure(
                    "Unschedulable",
                    f"pod {pod['metadata']['name']} unschedulable for {now - since:.0f} s "
                    f"(schedule_timeout_s={schedule_timeout_s:.0f}): {condition.get('message') or condition.get('reason')}",
                )
    return None


def log_key(line: str) -> tuple[str, int]:
    """Sort key of a line from ``pods/log?timestamps=true``; RFC 3339 with 0-9 fraction digits.

    >>> log_key("2026-11-22T10:00:00.5Z a") > log_key("2026-11-22T10:00:00.123456789Z b")
    True
    """
    stamp = line.split(" ", 1)[0].rstrip("Z")
    whole, _, fraction = stamp.partition(".")
    return whole, int((fraction + "000000000")[:9])
