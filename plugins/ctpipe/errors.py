"""Errors meant for users: the message names the field and the value; no traceback is needed."""


class PipelineError(RuntimeError):
    """A failure caused by input or configuration, not by a bug or a flaky dependency."""


class NothingToPublish(PipelineError):
    """An interval with no trace: the message says what was read (the files, records of other times)."""
