"""Turning the pipeline's user-facing errors into Airflow failures that are not retried, and skips."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from airflow.sdk import get_current_context
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from ctpipe.errors import NothingToPublish, PipelineError

# The XCom of a task that failed on bad input or had nothing to do, saying why: a run that is in no
# cycle has its Continuous training tab show it, where otherwise only the task's log would.
WHY = "why"


@contextmanager
def fail_fast() -> Iterator[None]:
    """A bad param or missing input will not fix itself on retry: fail the task now, with the message
    (one that says a retry may mend it is retried). Nothing to publish is no failure: it passes."""
    try:
        yield
    except NothingToPublish:
        raise
    except PipelineError as e:
        _keep_why(str(e))
        if e.retried:
            raise
        raise AirflowFailException(str(e)) from None


def skip(reason: str) -> NoReturn:
    """End the task as skipped, saying why in its log and its run's tab."""
    _keep_why(reason)
    raise AirflowSkipException(reason) from None  # the NothingToPublish it stands for says no more


def _keep_why(text: str) -> None:
    try:
        ti = get_current_context()["ti"]
    except RuntimeError:  # not in a task (a test calling the task's code)
        return
    ti.xcom_push(WHY, text)
