"""Telling a preempted training job (resubmit and resume) from one that failed for its own reasons."""

from __future__ import annotations

import math
import signal
from typing import Any

# What our jobs exit with after a SIGTERM, having saved a checkpoint (or handed it to NeMo-RL).
PREEMPTED_EXIT = 128 + signal.SIGTERM
# 143: our job's answer to SIGTERM; 137: SIGKILL with no notice.
PREEMPTED_EXIT_CODES = frozenset({PREEMPTED_EXIT, 128 + signal.SIGKILL, -signal.SIGTERM, -signal.SIGKILL})
# The process running the job vanished with its node.
NODE_LOST_ERRORS = frozenset({"JOB_SUPERVISOR_ACTOR_DIED"})
# Killed for memory by Ray's monitor: resubmitting would only run out of memory again.
_OOM_HINTS = ("low on memory", "OutOfMemory", "OOM")


def is_preemption(event: dict[str, Any]) -> bool:
    """Whether a finished job's event says it was taken away rather than broken.

    >>> is_preemption({"status": "FAILED", "driver_exit_code": 143})
    True
    >>> is_preemption({"status": "FAILED", "error_type": "JOB_SUPERVISOR_ACTOR_DIED"})
    True
    >>> is_preemption({"status": "FAILED", "driver_exit_code": 1})
    False
    >>> is_preemption({"status": "FAILED", "driver_exit_code": 137, "message": "node running low on memory"})
    False
    """
    if event.get("status") != "FAILED":
        return False
    if any(h in (event.get("message") or "") for h in _OOM_HINTS):
        return False
    return event.get("error_type") in NODE_LOST_ERRORS or event.get("driver_exit_code") in PREEMPTED_EXIT_CODES


def backoff_seconds(preemptions: int, base_s: float, cap_s: float = 600.0) -> float:
    """Exponential wait before the n-th resubmission (1-based), capped.

    >>> [backoff_seconds(n, 30) for n in (1, 2, 3, 10)]
    [30.0, 60.0, 120.0, 600.0]
    """
    return float(min(cap_s, base_s * 2 ** (preemptions - 1)))


def young_daly_interval(checkpoint_cost_s: float, mean_time_between_preemptions_s: float) -> float:
    """Goodput-optimal seconds between checkpoints: sqrt(2 * C * MTBF) (Young 1974, Daly 2006).

    >>> round(young_daly_interval(2.0, 3600.0), 1)
    120.0
    """
    if checkpoint_cost_s <= 0 or mean_time_between_preemptions_s <= 0:
        raise ValueError(
            f"checkpoint cost ({checkpoint_cost_s}) and time between preemptions "
            f"({mean_time_between_preemptions_s}) must be positive"
        )
    return math.sqrt(2 * checkpoint_cost_s * mean_time_between_preemptions_s)
