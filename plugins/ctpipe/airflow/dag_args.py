"""Arguments every ctpipe DAG shares, kept in one place."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pendulum

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def common(*tags: str, retries: int = 1, doc_md: str | None = None, catch_up_from: datetime | None = None) -> dict[str, Any]:
    """``DAG(...)`` keyword arguments: one run at a time, retried tasks, ctpipe tags; no catch-up, unless
    ``catch_up_from`` says from when (a fixed start would start a year of hourly runs at a first install)."""
    return {
        "start_date": pendulum.instance(catch_up_from) if catch_up_from else START,
        "catchup": catch_up_from is not None,
        # Runs share the champion and the Ray cluster: one at a time keeps them from racing.
        "max_active_runs": 1,
        "tags": ["ctpipe", *tags],
        "default_args": {"retries": retries, "retry_delay": pendulum.duration(seconds=30)},
        "doc_md": doc_md,
    }
