"""The canonical trace: one record per model answer, whatever format it arrived in.

Our own files hold it as one JSON object per line, partitioned by the hour of ``start_time`` (UTC)::

    <traces_dir>/date=YYYY-MM-DD/hour=HH/part-<id>.jsonl

A run reads only the partitions of its interval (see ``DatasetConfig.partitioned_by`` for sources
partitioned by arrival time).

A record (fields not listed here are ignored; other formats are mapped onto it by
:mod:`ctpipe.formats`)::

    trace_id          str, non-empty; unique per answer
    start_time        RFC 3339 with timezone: when the request arrived
    end_time          RFC 3339 with timezone, >= start_time
    model             {"name": str, "version": str}: what served the answer (both non-empty)
    messages          [{"role": "system"|"developer"|"user"|"assistant"|"tool", "content": str}, ...]
                      the request's chat, with at least one user message; the last one is the prompt, not blank.
                      As OpenAI's messages, as every other format reads them: an assistant's ``refusal`` is
                      its text where its content is empty; one holding tool calls (``tool_calls`` or
                      ``function_call``, other than null or empty, or LangChain's: the same under
                      ``additional_kwargs``, or ``invalid_tool_calls``) is refused as ``tool_call_in_prompt``,
                      one holding ``audio`` as ``non_text_content``
    completion        str, not blank: the model's answer
    usage             {"prompt_tokens": int, "completion_tokens": int, "total_tokens": int}, 0 to 2**63 - 1
    feedback          {"thumb": "up"|"down"|null, "rating": number in [1, 5] or null}   (optional; null is none)
    latency_ms        finite number >= 0
    reference_answer  str or null: the expected answer, when the application knows it   (optional)
    scores            [{"name": str, "value": number or null, "label": str or null,
                        "source": str}]: judge and evaluation results carried along   (optional; null is none)

Validation is msgspec's typed decoding (strict types, JSON's own refusal of NaN and Infinity),
which decodes and checks a 2 KB record in about the time a plain JSON parse takes.
"""

from __future__ import annotations

import functools
import json
import math
import re
import reprlib
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import msgspec

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
Count = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]  # a table's int64 holds it


Role = Literal["system", "developer", "user", "assistant", "tool"]
ROLES = get_args(Role)


NO_CALLS = Annotated[list[Any], msgspec.Meta(max_length=0)] | None  # none, or an empty list (as LangChain writes)
_NO_CALL = Annotated[dict[str, Any], msgspec.Meta(max_length=0)] | None


class _LangChainKwargs(msgspec.Struct, frozen=True):  # where LangChain's messages keep OpenAI's calls
    tool_calls: NO_CALLS = None
    function_call: _NO_CALL = None


class Message(msgspec.Struct, frozen=True):
    role: Role
    content: str
    refusal: str | None = None  # what an assistant said in refusing, its content empty
    # Read only to be refused: the messages are text, and a chat read without its calls (an empty
    # assistant turn, then a tool's answer to nothing) or its audio is not the one the model was served.
    tool_calls: NO_CALLS = None
    function_call: _NO_CALL = None
    audio: None = None
    additional_kwargs: _LangChainKwargs | None = None
    invalid_tool_calls: NO_CALLS = None


class ModelRef(msgspec.Struct, frozen=True):
    name: NonEmpty
    version: NonEmpty


class Usage(msgspec.Struct, frozen=True):
    prompt_tokens: Count
    completion_tokens: Count
    total_tokens: Count


class Feedback(msgspec.Struct, frozen=True):
    thumb: Literal["up", "down"] | None = None
    rating: Annotated[float, msgspec.Meta(ge=1, le=5)] | None = None


class Score(msgspec.Struct, frozen=True):
    name: str
    value: float | None = None
    label: str | None = None
    source: str = ""


class TraceRecord(msgspec.Struct, frozen=True):
    trace_id: NonEmpty
    start_time: datetime
    end_time: datetime
    model: ModelRef
    messages: Annotated[list[Message], msgspec.Meta(min_length=1)]
    completion: str
    usage: Usage
    latency_ms: Annotated[float, msgspec.Meta(ge=0)]
    # Null is none, as missing is: a Parquet row cannot tell them apart, and a writer's None is meant so.
    feedback: Feedback | None = Feedback()
    reference_answer: str | None = None
    scores: list[Score] | None = []

    @property
    def prompt(self) -> str:
        return next(m.content for m in reversed(self.messages) if m.role == "user")


class InvalidTrace(ValueError):
    """A line that is not a valid trace; ``reason`` is short and machine-readable."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail

    def __reduce__(self):  # to and from worker processes (the default would call cls(message))
        return type(self), (self.reason, self.detail)


_DECODER = msgspec.json.Decoder(TraceRecord)


class _Times(msgspec.Struct):
    start_time: str
    end_time: str


# RFC 3339 allows any number of fractional digits, as Go's RFC3339Nano and Java write nine; times are
# kept to the microsecond, the rest cut, as other formats' times and Parquet's nanoseconds are: msgspec
# rounds, and 10:59:59.9999999 became 11:00:00, a trace of one hour's folder read as the next's.
_TIMES = msgspec.json.Decoder(_Times)
_LONG_FRACTION = re.compile(r"(\.\d{6})\d+")
_LONG_FRACTION_IN = (re.compile(rb"\.\d{7}"), re.compile(r"\.\d{7}"))  # in a line of bytes, of text


def _cut(text: str) -> str:
    """A time's text with its fraction cut to microseconds."""
    return _LONG_FRACTION.sub(r"\1", text, count=1)


def _to_the_microsecond(rec: TraceRecord, line: bytes | str) -> TraceRecord:
    """``rec`` decoded from ``line``, its times cut to the microsecond where the line wrote more digits."""
    if not _LONG_FRACTION_IN[isinstance(line, str)].search(line):
        return rec
    times = _TIMES.decode(line)
    return msgspec.structs.replace(rec, start_time=msgspec.convert(_cut(times.start_time), datetime),
                                   end_time=msgspec.convert(_cut(times.end_time), datetime))


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-finite number {name}")


def _finite_float(text: str) -> float:
    """A JSON number as a float, or ValueError for one past what a float holds (1e999 reads as infinite)."""
    if math.isinf(value := float(text)):
        raise ValueError(f"non-finite number {text} (past what a double holds)")
    return value


def loads(text: str | bytes) -> Any:
    """Strict JSON (NaN and Infinity refused, as JSON itself does), or :class:`InvalidTrace` saying why."""
    try:
        return msgspec.json.decode(text)
    except UnicodeDecodeError as e:
        raise InvalidTrace("invalid_utf8", str(e)) from None
    except RecursionError:  # valid JSON, but arrays or objects nested thousands deep: no trace looks so
        raise InvalidTrace("too_deeply_nested", "arrays or objects nested deeper than the JSON parser goes") from None
    except msgspec.DecodeError as e:
        try:  # the rare failing line: ask the standard library whether bad UTF-8 or a non-finite number was the cause
            doc = json.loads(text.decode("utf-8") if isinstance(text, bytes) else text, parse_constant=_reject_constant,
                             parse_float=_finite_float)
        except UnicodeDecodeError as why:
            raise InvalidTrace("invalid_utf8", str(why)) from None
        except ValueError as why:
            if "non-finite" in str(why):
                raise InvalidTrace("non_finite_number", str(why)) from None
        except RecursionError:
            pass
        else:  # it reads it: the text may hold what UTF-8 cannot, a surrogate escaped alone
            try:
                json.dumps(doc, ensure_ascii=False).encode()
            except UnicodeEncodeError as why:  # JavaScript's JSON.stringify writes one for an emoji cut in two
                raise InvalidTrace("invalid_utf8", _half_character(why)) from None
        raise InvalidTrace("invalid_json", str(e)) from None


def _half_character(e: UnicodeEncodeError, where: str = "") -> str:
    return (f"{where}\\u{ord(e.object[e.start]):04x} is half of a character, a UTF-16 surrogate escaped alone, "
            "which UTF-8 text cannot hold")


def _text_at(value: Any, path: str = "") -> tuple[str, UnicodeEncodeError] | None:
    """Where in ``value`` (builtins) a text first holds what UTF-8 cannot, and why; None if nowhere."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError as e:
            return path, e
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if found := _text_at(item, f"{path}.{key}" if isinstance(key, str) else f"{path}[{key}]"):
            return found
    return None


def _whole_characters(rec: TraceRecord) -> TraceRecord:
    """``rec``, or :class:`InvalidTrace` ``invalid_utf8`` where one of its texts holds half of a
    character: JSON text within a record (a message list kept as text, a stored body) escapes one as
    ``\\ud83d`` where a writer cut an emoji in two, and Python's parser takes it."""
    try:
        msgspec.json.encode(rec)  # the quickest whole look: 1.5 us for a 2 KB record
    except UnicodeEncodeError:
        where, e = _text_at(msgspec.to_builtins(rec))
        raise InvalidTrace("invalid_utf8", _half_character(e, f"`{where.lstrip('.')}`: ")) from None
    return rec


_NOT_TEXT = re.compile(r"`\$\.messages\[(\d+)\]\.((?:additional_kwargs\.)?(?:tool_calls|function_call)|invalid_tool_calls|audio)`")


_AT = re.compile(r" - at `\$([^`]*)`$")
_SHOWN = reprlib.Repr()  # Python 3.11's takes its limits as attributes
_SHOWN.maxstring = _SHOWN.maxother = 80
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _value_at(doc: Any, path: str) -> str | None:
    """The value at ``path`` (msgspec's ``.usage.prompt_tokens``, ``.messages[0].content``) of ``doc``,
    as the quarantine's detail quotes it; None where there is none."""
    for key, index in _STEP.findall(path):
        try:
            doc = doc[key] if key else doc[int(index)]
        except (KeyError, IndexError, TypeError):
            return None
    shown = _SHOWN.repr(doc)  # a value of megabytes is not copied whole to be cut
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _validation_error(e: msgspec.ValidationError, doc: Any) -> InvalidTrace:
    """InvalidTrace of msgspec's refusal of ``doc``, naming the field and, where it has one, its value."""
    text = str(e)
    if (at := _AT.search(text)) and not text.startswith("Object missing") and (value := _value_at(doc, at[1])):
        text = f"{text}: {value}"
    if found := _NOT_TEXT.search(text):
        return InvalidTrace("non_text_content" if found[2] == "audio" else "tool_call_in_prompt",
                            f"`messages[{found[1]}]` holds {found[2]}, which the dataset's messages (text only) cannot hold")
    if text.startswith("Number out of range"):  # 1e999: JSON's own number, which reads as infinite
        return InvalidTrace("non_finite_number", text.replace("`$.", "`").replace("`$[", "`[")
                            + " (past what a double holds)")
    reason = "missing_field" if text.startswith("Object missing required field") else "invalid_field"
    # msgspec says "... - at `$.usage.prompt_tokens`": name the field as a path without the root.
    return InvalidTrace(reason, text.replace("`$.", "`").replace("`$[", "`["))


def _consistent(rec: TraceRecord) -> TraceRecord:
    start, end = rec.start_time, rec.end_time
    if start.tzinfo is None or end.tzinfo is None:
        name, value = ("start_time", start) if start.tzinfo is None else ("end_time", end)
        raise InvalidTrace("invalid_field", f"`{name}`: {value.isoformat()} has no timezone")
    for name, value in (("start_time", start), ("end_time", end)):
        try:  # an offset can take a time of the year 9999 or 1 past what a datetime, or Parquet's reader, holds
            value.astimezone(timezone.utc)
        except OverflowError:
            raise InvalidTrace("invalid_field", f"`{name}`: {value.isoformat()} is outside the years 1 to 9999 in UTC") from None
    if end < start:
        raise InvalidTrace("invalid_field", "`end_time` is before `start_time`")
    if not rec.completion or rec.completion.isspace():
        raise InvalidTrace("invalid_field", "`completion` is empty")
    if rec.feedback is None or rec.scores is None:
        rec = msgspec.structs.replace(rec, feedback=rec.feedback or Feedback(),
                                      scores=rec.scores if rec.scores is not None else [])
    if any(m.refusal for m in rec.messages):
        rec = msgspec.structs.replace(rec, messages=[
            msgspec.structs.replace(m, content=m.refusal) if m.refusal and not m.content else m for m in rec.messages])
    for m in reversed(rec.messages):
        if m.role == "user":
            if not m.content or m.content.isspace():
                raise InvalidTrace("invalid_field", "`messages`: the last user message, the prompt, is empty")
            return rec
    raise InvalidTrace("invalid_field", "`messages` has no user message")


def decode(line: bytes | str) -> TraceRecord:
    """One JSON line in our schema, decoded and validated, or :class:`InvalidTrace` saying why."""
    try:
        return _consistent(_to_the_microsecond(_DECODER.decode(line), line))
    except msgspec.ValidationError as e:
        if line.lstrip()[:1] not in (b"{", "{"):
            raise InvalidTrace("not_an_object", "expected a JSON object") from None
        try:  # the line again, for the value refused (a line our decoder reads, read whole)
            doc = msgspec.json.decode(line)
        except (msgspec.DecodeError, RecursionError):
            doc = None
        raise _validation_error(e, doc) from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        loads(line)  # raises with the precise reason
        raise


def _finite(doc: dict) -> dict:
    """``doc``, or :class:`InvalidTrace` ``non_finite_number`` where one of its numbers is NaN or
    infinite: JSON cannot hold one (a line holding one is refused as it is parsed), a Parquet row can."""
    feedback, scores = doc.get("feedback"), doc.get("scores")
    numbers = [("latency_ms", doc.get("latency_ms"))]
    if isinstance(feedback, dict):
        numbers.append(("feedback.rating", feedback.get("rating")))
    if isinstance(scores, list):
        numbers += [(f"scores[{i}].value", s.get("value")) for i, s in enumerate(scores) if isinstance(s, dict)]
    for where, value in numbers:
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidTrace("non_finite_number", f"`{where}` is {value}")
    return doc


def convert(doc: dict) -> TraceRecord:
    """A canonical trace dict (from :mod:`ctpipe.formats`), validated."""
    if cut := {k: c for k in ("start_time", "end_time") if isinstance(v := doc.get(k), str) and (c := _cut(v)) != v}:
        doc = {**doc, **cut}
    try:
        return _whole_characters(_consistent(msgspec.convert(_finite(doc), TraceRecord)))
    except msgspec.ValidationError as e:
        raise _validation_error(e, doc) from None


def partition_dir(root: Path, ts: datetime) -> Path:
    ts = ts.astimezone(timezone.utc)
    return root / f"date={ts:%Y-%m-%d}" / f"hour={ts:%H}"


# Folders that say in which hour or day their files' traces started (or arrived, see
# DatasetConfig.partitioned_by): ours (date=YYYY-MM-DD/hour=HH), Hive's other spellings, the
# YYYY/MM/DD/HH of Kinesis Firehose and of log sinks, and a day's YYYY-MM-DD alone (LiteLLM's S3 and
# GCS loggers). A folder, not a file's name: a slash follows.
_PARTITION = re.compile(
    r"(?:^|/)(?:(?:date|dt)=(?P<date>\d{4}-\d\d-\d\d)(?:/(?:hour|hr)=(?P<hour>\d\d?))?"
    r"|year=(?P<y>\d{4})/month=(?P<m>\d\d?)/day=(?P<d>\d\d?)(?:/hour=(?P<h>\d\d?))?"
    r"|(?P<Y>\d{4})/(?P<M>\d\d)/(?P<D>\d\d)(?:/(?P<H>\d\d))?|(?P<day>\d{4}-\d\d-\d\d))(?=/)"
)


def partition_span(path: str | Path, root: str = "") -> tuple[datetime, timedelta] | None:
    """The UTC start and length of the span a file's folders name (the innermost, where several do):
    an hour, or a day where they name no hour; None outside those layouts. Only the folders below
    ``root`` count, the source's: a dated folder it is in (exports/2026-01-05/traces/) names no
    partition of its files.

    Folders below the hour are inside it: the OpenTelemetry Collector's S3 exporter writes
    ``year=/month=/day=/hour=/minute=`` (or ``%Y/%m/%d/%H/%M``) by default.

    >>> for p in ("s3://b/traces/date=2026-11-22/hour=07/part-0.jsonl", "traces/dt=2026-11-22/x.parquet",
    ...           "logs/year=2026/month=11/day=22/hour=7/x.jsonl", "firehose/2026/11/22/07/stream-1-2026-11-22-07-59",
    ...           "otel/year=2026/month=11/day=22/hour=07/minute=59/traces_1.json",
    ...           "otel/2026/11/22/07/59/traces_2.json",
    ...           "sink/2026/11/22/07.jsonl", "litellm/2026-11-22/time-07-59-01_id.json",
    ...           "a/2026/13/22/07/x.jsonl", "a/date=2026-11-22.jsonl"):
    ...     span = partition_span(p)
    ...     print(span and f"{span[0]:%Y-%m-%d %H:%M} +{span[1]}")
    2026-11-22 07:00 +1:00:00
    2026-11-22 00:00 +1 day, 0:00:00
    2026-11-22 07:00 +1:00:00
    2026-11-22 07:00 +1:00:00
    2026-11-22 07:00 +1:00:00
    2026-11-22 07:00 +1:00:00
    2026-11-22 00:00 +1 day, 0:00:00
    2026-11-22 00:00 +1 day, 0:00:00
    None
    None
    >>> print(partition_span("jobs/2026-01-05/traces/a.jsonl", "jobs/2026-01-05/traces/"))
    None
    """
    path = str(path)
    folder = path[:path.rfind("/") + 1]
    return _folder_span(folder[len(root):] if folder.startswith(root) else "")


@functools.lru_cache(maxsize=4096)
def _folder_span(folder: str) -> tuple[datetime, timedelta] | None:
    """:func:`partition_span` of the files in ``folder`` (ending in "/"): a span ends at a folder's
    end, so the file's own name never changes it, and a source's files share a few folders (its
    200,000 small files took 4% of a run to parse their paths one by one)."""
    found = list(_PARTITION.finditer(folder))
    if not found:
        return None
    g = found[-1].groupdict()
    dashed = g["date"] or g["day"]
    y, m, d = dashed.split("-") if dashed else (g["y"], g["m"], g["d"]) if g["y"] else (g["Y"], g["M"], g["D"])
    hour = g["hour"] or g["h"] or g["H"]
    try:
        start = datetime(int(y), int(m), int(d), int(hour or 0), tzinfo=timezone.utc)
    except ValueError:  # no such day or hour: not a partition
        return None
    return start, timedelta(hours=1) if hour is not None else timedelta(days=1)


def iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) for each non-blank line; undecodable bytes are kept as U+FFFD."""
    with path.open("r", encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                yield n, line.rstrip("\n")
