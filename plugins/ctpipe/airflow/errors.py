"""Turning the pipeline's user-facing errors into Airflow failures that are not retried."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from airflow.sdk.exceptions import AirflowFailException

from ctpipe.errors import PipelineError


@contextmanager
def fail_fast() -> Iterator[None]:
    """A bad param or missing input will not fix itself on retry: fail the task now, with the message."""
    try:
        yield
    except PipelineError as e:
        raise AirflowFailException(str(e)) from None
