"""Errors meant for users: the message names the field and the value; no traceback is needed."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class PipelineError(RuntimeError):
    """A failure caused by input or configuration, not by a bug or a flaky dependency: a retry will not
    mend it, unless ``retried`` says it may (a source that changed while it was read)."""

    retried = False


class NothingToPublish(PipelineError):
    """An interval with no trace: the message says what was read (the files, records of other times)."""


class EmptyStore(PipelineError):
    """A dataset store that holds nothing: no version was published there yet (or it is another store)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the work is, so that what it holds is cleaned up as for Ctrl-C."""


def interrupted(e: BaseException | None) -> bool:
    """Whether ``e`` is Ctrl-C's, or was raised by it: one in a class's creation comes wrapped (Python's
    RuntimeError "Error calling __set_name__", as pydantic's models are made)."""
    while e is not None:
        if isinstance(e, KeyboardInterrupt):
            return True
        e = e.__cause__ or e.__context__
    return False


def _terminate(signum, frame) -> None:
    # Its message is what a task's log ends with when the task is marked failed or its run stopped.
    raise Terminated("SIGTERM (the task marked failed or its run stopped, a timeout, a shutdown): stopped where it "
                     "was; what it staged is removed and nothing more is published")


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (what timeout, systemd and Kubernetes send, and Airflow's task supervisor when a task
    is marked failed or its run is stopped) interrupts the work meanwhile as Ctrl-C does: the
    materializer then removes what it staged and spilled and publishes nothing more. Airflow's own task
    runner only calls ``on_kill`` and lets the task go on, which published a version the UI showed
    as failed. Signals are handled in the main thread alone: elsewhere, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
