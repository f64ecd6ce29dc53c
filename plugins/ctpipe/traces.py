"""The trace schema: one JSON object per line, one record per model answer.

Traces live in a store partitioned by the hour of ``start_time`` (UTC)::

    <traces_dir>/date=YYYY-MM-DD/hour=HH/part-<id>.jsonl

A record (fields not listed here are ignored)::

    trace_id      str, non-empty; unique per answer
    start_time    ISO 8601 with timezone: when the request arrived
    end_time      ISO 8601 with timezone, >= start_time
    model         {"name": str, "version": str}: what served the answer
    messages      [{"role": "system"|"user"|"assistant", "content": str}, ...]
                  the request's chat; the last user message is the prompt
    completion    str, non-empty: the model's answer
    usage         {"prompt_tokens": int, "completion_tokens": int, "total_tokens": int}
    feedback      {"thumb": "up"|"down"|null, "rating": float in [1, 5] or null}
    latency_ms    finite float >= 0
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

_STRICT = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)


class Message(BaseModel):
    model_config = _STRICT
    role: Literal["system", "user", "assistant"]
    content: str


class ModelRef(BaseModel):
    model_config = _STRICT
    name: str = Field(min_length=1)
    version: str = Field(min_length=1)


class Usage(BaseModel):
    model_config = _STRICT
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    total_tokens: int = Field(ge=0)


class Feedback(BaseModel):
    model_config = _STRICT
    thumb: Literal["up", "down"] | None = None
    rating: float | None = Field(None, ge=1, le=5)


class TraceRecord(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)

    trace_id: str = Field(min_length=1)
    # Timestamps arrive as JSON strings, so they alone are parsed leniently.
    start_time: AwareDatetime = Field(strict=False)
    end_time: AwareDatetime = Field(strict=False)
    model: ModelRef
    messages: list[Message] = Field(min_length=1)
    completion: str
    usage: Usage
    feedback: Feedback = Feedback()
    latency_ms: float = Field(ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> TraceRecord:
        if self.end_time < self.start_time:
            raise ValueError("end_time is before start_time")
        if not self.completion.strip():
            raise ValueError("completion is empty")
        if not any(m.role == "user" for m in self.messages):
            raise ValueError("messages has no user message")
        return self

    @property
    def prompt(self) -> str:
        return next(m.content for m in reversed(self.messages) if m.role == "user")


class InvalidTrace(ValueError):
    """A line that is not a valid trace; ``reason`` is short and machine-readable."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-finite number {name}")


def loads(text: str):
    """Strict JSON (NaN and Infinity refused, as JSON itself does), or :class:`InvalidTrace` saying why."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError as e:  # JSONDecodeError and non-finite numbers
        reason = "non_finite_number" if "non-finite" in str(e) else "invalid_json"
        raise InvalidTrace(reason, str(e)) from None


def parse_line(line: str) -> TraceRecord:
    """Parse and validate one JSONL line, or raise :class:`InvalidTrace` saying why."""
    obj = loads(line)
    if not isinstance(obj, dict):
        raise InvalidTrace("not_an_object", f"expected a JSON object, got {type(obj).__name__}")
    try:
        return TraceRecord.model_validate(obj)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "record"
        kind = {"missing": "missing_field"}.get(err["type"], "invalid_field")
        raise InvalidTrace(kind, f"{where}: {err['msg']}") from None


def partition_dir(root: Path, ts: datetime) -> Path:
    ts = ts.astimezone(timezone.utc)
    return root / f"date={ts:%Y-%m-%d}" / f"hour={ts:%H}"


def partition_hour(path: Path) -> datetime:
    """The UTC hour a partition file belongs to, from its directory names."""
    date = path.parent.parent.name.removeprefix("date=")
    hour = path.parent.name.removeprefix("hour=")
    return datetime.strptime(f"{date} {hour}", "%Y-%m-%d %H").replace(tzinfo=timezone.utc)


def files_for_interval(root: Path, start: datetime, end: datetime) -> list[Path]:
    """Partition files that may hold records with ``start <= start_time < end``, in a stable order."""
    out: list[Path] = []
    hour = start.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)
    while hour < end:
        d = partition_dir(root, hour)
        if d.is_dir():
            out.extend(sorted(d.glob("*.jsonl")))
        hour += timedelta(hours=1)
    return out


def iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) for each non-blank line; undecodable bytes are kept as U+FFFD."""
    with path.open("r", encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                yield n, line.rstrip("\n")

