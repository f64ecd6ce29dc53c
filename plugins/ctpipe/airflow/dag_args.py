"""Arguments every ctpipe DAG shares, kept in one place."""

from __future__ import annotations

from typing import Any

import pendulum

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def common(*tags: str, retries: int = 1, doc_md: str | None = None) -> dict[str, Any]:
    """``DAG(...)`` keyword arguments: one run at a time, no catch-up, retried tasks, ctpipe tags."""
    return {
        "start_date": START,
        "catchup": False,
        # Runs share the champion and the Ray cluster: one at a time keeps them from racing.
        "max_active_runs": 1,
        "tags": ["ctpipe", *tags],
        "default_args": {"retries": retries, "retry_delay": pendulum.duration(seconds=30)},
        "doc_md": doc_md,
    }
