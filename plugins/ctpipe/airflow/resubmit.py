"""Waiting out a preemption: both launchers resubmit the same way, and only after a preemption."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow.providers.standard.triggers.temporal import DateTimeTrigger

from ctpipe.preemption import backoff_seconds


def defer_resubmission(op, preemptions: int, backoff: timedelta, what: str) -> None:
    """Defer ``op`` to its ``resubmit`` method after the backoff for the next preemption (never returns)."""
    wait = backoff_seconds(preemptions + 1, backoff.total_seconds())
    op.log.warning("%s; resubmitting in %.0fs to resume (%d of %d)", what, wait, preemptions + 1, op.max_preemptions)
    op.defer(
        trigger=DateTimeTrigger(moment=datetime.now(timezone.utc) + timedelta(seconds=wait)),
        method_name="resubmit",
        kwargs={"preemptions": preemptions + 1},
    )
