"""Canonical traces as Arrow columns: from a block's JSON lines at native speed, or from records.

:data:`RAW_SCHEMA` is a trace of :mod:`ctpipe.traces` as a table row, plus where it was read.

:func:`parse_lines` is the fast path for lines of our own schema. msgspec checks that each line is
an object with a string ``trace_id`` (skipping the rest at memory speed); pyarrow's JSON reader
parses those lines into columns in one call; vectorized checks then accept exactly the rows that
:func:`ctpipe.traces.decode` accepts, with the same values. A row the checks are not sure of (a
failed rule, an explicit ``null`` where only a missing field is allowed, an unusual timestamp) is
left to the exact path, which decides and says why; a block pyarrow refuses as a whole (a type it
cannot convert, a duplicated key, bad UTF-8) goes to the exact path entirely. Either way a line
gives the same row or the same quarantine reason: the fast path only changes the speed.

:func:`parse_openai_lines` does the same for OpenAI chat-completion logs, making the rows that
:func:`ctpipe.formats.from_openai` and the same validation would make, :func:`parse_otel_lines`
for OTLP exports of GenAI spans, those of :func:`ctpipe.formats.from_otel`, and
:func:`parse_langfuse_lines` for the lines of Langfuse generations joined with their scores and
versions, those of :func:`ctpipe.formats.joined`, :func:`parse_bedrock_lines` for Bedrock's
invocation log records of Converse calls, those of :func:`ctpipe.formats.from_bedrock`, and
:func:`parse_vertex_lines` for Vertex AI's rows of Gemini's calls, those of
:func:`ctpipe.formats.from_vertex`.

:func:`from_records` turns records of the exact path (and of the other formats) into the same table.
"""

from __future__ import annotations

import calendar
import io
import re
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, Literal

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from ctpipe import formats, traces
from ctpipe.datasets import MESSAGES, SCORES

_TIME = pa.timestamp("us", tz="UTC")
_MODEL = pa.struct([("name", pa.string()), ("version", pa.string())])
_USAGE = pa.struct([("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64()), ("total_tokens", pa.int64())])
_FEEDBACK = pa.struct([("thumb", pa.string()), ("rating", pa.float64())])
_FIELDS = [("trace_id", pa.string()), ("start_time", _TIME), ("end_time", _TIME), ("model", _MODEL),
           ("messages", MESSAGES), ("completion", pa.string()), ("usage", _USAGE), ("latency_ms", pa.float64()),
           ("feedback", _FEEDBACK), ("reference_answer", pa.string()), ("scores", SCORES)]
RAW_SCHEMA = pa.schema(_FIELDS + [("source_file", pa.string()), ("source_line", pa.int64())])
# What pyarrow's reader is asked for: timestamps stay text until checked (it would take a naive one).
_JSON_SCHEMA = pa.schema([(name, pa.string() if t == _TIME else t) for name, t in _FIELDS])
_PARSE = pj.ParseOptions(explicit_schema=_JSON_SCHEMA, unexpected_field_behavior="ignore")
# RFC 3339 as msgspec reads it, with a zone and at most microseconds; anything else takes the exact path.
_RFC3339 = r"^\d{4}-\d\d-\d\dT([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$"
_NAIVE = _RFC3339[:_RFC3339.index("(Z|")] + "$"  # the same, without a zone
# A character that is not whitespace by Python's str.isspace (which the exact path's blank check uses).
_NOT_SPACE = "[^\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"


class _PlainKwargs(msgspec.Struct):
    tool_calls: traces.NO_CALLS = None
    function_call: None = None


class _PlainMessage(msgspec.Struct):
    """What the fast paths ask of a message: no tool calls (formats.tool_calls_in), no refusal, no
    audio, no semconv parts. Any value but null fails the decoding (but an empty list of calls, and
    LangChain's keyword arguments other than calls), leaving the line to the reader, which refuses a
    call in a prompt or as an answer, and reads the others. Alone, it skips a message's other fields
    unread."""

    tool_calls: traces.NO_CALLS = None
    function_call: None = None
    refusal: None = None
    audio: None = None
    parts: None = None
    additional_kwargs: _PlainKwargs | None = None
    invalid_tool_calls: traces.NO_CALLS = None


# Its fields that hold what a message's text does not: a batch of rows where one is there is the exact path's.
_NOT_PLAIN = tuple(_PlainMessage.__struct_fields__)


class _Shape(msgspec.Struct):
    """What the fast path of our schema asks of a line before pyarrow reads it."""

    trace_id: str
    messages: list[_PlainMessage]


_SHAPE = msgspec.json.Decoder(_Shape)


class _OpenAIRequest(msgspec.Struct):
    messages: list[_PlainMessage]
    metadata: msgspec.UnsetType = msgspec.UNSET  # a stored completion's feedback, where the log's has none: the reader's


class _OpenAIChoice(msgspec.Struct):
    message: _PlainMessage | None = None
    index: int | msgspec.UnsetType = msgspec.UNSET  # of several, in its trace's id: null or text the reader's


class _OpenAIResponse(msgspec.Struct):
    id: str
    choices: list[_OpenAIChoice] = []
    metadata: msgspec.UnsetType = msgspec.UNSET  # as the request's


class _OpenAIShape(msgspec.Struct):
    request: _OpenAIRequest
    response: _OpenAIResponse
    startTime: None = None  # a call's times, as LiteLLM logs them: the reader's
    endTime: None = None
    ai_org: msgspec.UnsetType = msgspec.UNSET  # Portkey's export (any value, null too), whose times, status and bodies the reader reads


_OPENAI_SHAPE = msgspec.json.Decoder(_OpenAIShape)
_OPENAI_PARSE = pj.ParseOptions(unexpected_field_behavior="ignore", explicit_schema=pa.schema([
    ("request", pa.struct([("messages", MESSAGES)])),
    ("response", pa.struct([("id", pa.string()), ("created", pa.int64()), ("model", pa.string()),
                            ("system_fingerprint", pa.string()),
                            ("choices", pa.list_(pa.struct([("message", MESSAGES.value_type), ("finish_reason", pa.string()),
                                                            ("index", pa.int64())]))),
                            ("usage", _USAGE)])),
    ("metadata", pa.struct([("model_version", pa.string()), ("thumb", pa.string()), ("rating", pa.float64())])),
    ("latency_ms", pa.float64()),
]))


def micros(ts: datetime) -> int:
    """Microseconds since the epoch, exactly (a float timestamp would round). Whole-number arithmetic
    on the UTC fields, so that datetime subclasses (Airflow's pendulum times) give the same answer."""
    try:
        return calendar.timegm(ts.utctimetuple()) * 1_000_000 + ts.microsecond
    except OverflowError:  # before year 1 or past 9999 in UTC, as an offset can take a time at either end
        naive = ts.replace(tzinfo=None) - datetime(1970, 1, 1)  # a difference of naive times stays in range
        return (naive - ts.utcoffset()) // timedelta(microseconds=1)


def parse_lines(lines: list[bytes]) -> tuple[pa.Table, np.ndarray] | None:
    """(the rows the fast path accepts, in :data:`RAW_SCHEMA` without the source columns; the index
    in ``lines`` of each). Lines without a row are undecided, not invalid: the exact path reads them.
    None when the fast path takes none of them.
    """
    shaped = _shaped(lines, _SHAPE)
    chosen = [lines[i] for i in shaped]
    table = _read_json(chosen, _PARSE)
    if table is None:
        return None
    valid = _valid(table, chosen)
    times = [_rfc3339(table[name].combine_chunks(), valid) for name in ("start_time", "end_time")]
    if None in times:
        return None
    valid &= _ok(pc.greater_equal(times[1], times[0]))
    for t in times:  # the exact path says why not
        valid &= _held_by_datetime(t)
    table = table.set_column(1, "start_time", times[0]).set_column(2, "end_time", times[1])
    # A missing or null feedback or scores (pyarrow reads both as null) is what the exact path makes of
    # it: no thumb and no rating, no scores.
    feedback, scores = table["feedback"].combine_chunks(), table["scores"].combine_chunks()
    table = table.set_column(8, "feedback", pa.StructArray.from_arrays(
        [pc.struct_field(feedback, "thumb"), pc.struct_field(feedback, "rating")], fields=list(_FEEDBACK)))
    table = table.set_column(10, "scores", pa.ListArray.from_arrays(scores.offsets, scores.values, type=SCORES))
    keep = np.flatnonzero(valid)
    return (table if len(keep) == len(table) else table.take(keep)), np.asarray(shaped)[keep]


# Columns that make a row another format's by formats.detect (or may): such a batch is left to the exact path.
_NOT_OURS = frozenset({"resourceSpans", "request", "response", "choices"})
# The times a datetime holds (years 1 to 9999), in microseconds: a Parquet timestamp beyond them is the exact path's.
_DATETIME_MICROS = tuple(micros(t.replace(tzinfo=timezone.utc)) for t in (datetime.min, datetime.max))


def _held_by_datetime(times: pa.Array) -> np.ndarray:
    """Which of ``times`` (timestamps with a zone) a Python datetime holds, in UTC."""
    us = pc.cast(times, pa.int64())
    return _ok(pc.and_(pc.greater_equal(us, _DATETIME_MICROS[0]), pc.less_equal(us, _DATETIME_MICROS[1])))


class _Unread(Exception):
    """A column of a type :func:`parse_batch` does not read: its batch is left to the exact path."""


def parse_batch(batch: pa.RecordBatch) -> tuple[pa.Table, np.ndarray] | None:
    """:func:`parse_lines` for a Parquet record batch of our schema: the rows that
    :func:`ctpipe.traces.convert` accepts of the batch's rows as Python values, with the same values;
    the index of each. None when it takes none.

    Columns are read by name, and only of types that the exact path reads the same way: any string
    type for a text, integers for a token count, integers or floats for a number, a time as RFC 3339
    text or as a timestamp with a zone (seconds to microseconds), structs and lists of those, a
    column of nulls for any. A batch with a column of another type is left to the exact path whole.
    A missing column is a field missing from every row, and a null value a field given as null,
    as the rows' dicts have them (a null feedback or scores is none, as a missing one is).
    """
    names = set(batch.schema.names)
    if not {"trace_id", "completion"} <= names or names & _NOT_OURS or len(names) < batch.num_columns:
        return None  # not ours by formats.detect; or a name twice, of which a row's dict keeps the last
    n = batch.num_rows

    def column(name: str) -> pa.Array | None:
        return batch.column(name) if name in names else None

    try:
        (start, start_ok), (end, end_ok) = (_times(column(name), n) for name in ("start_time", "end_time"))
        model, model_ok, _ = _record(column("model"), n, {"name": "text", "version": "text"})
        usage, usage_ok, _ = _record(column("usage"), n, dict.fromkeys(_USAGE.names, "int"))
        feedback, _, _ = _record(column("feedback"), n, {"thumb": "text", "rating": "float"})
        offsets, messages, messages_ok = _items(column("messages"), n)
        message, _, _ = _record(messages, int(offsets[-1]), {"role": "text", "content": "text"})
        unplain = _unplain(messages, offsets)
        score_offsets, scores, _ = _items(column("scores"), n)
        score, _, missing = _record(scores, int(score_offsets[-1]),
                                    {"name": "text", "value": "float", "label": "text", "source": "text"})
        trace_id, completion, reference, latency = (_typed(column(name), n, kind) for name, kind in (
            ("trace_id", "text"), ("completion", "text"), ("reference_answer", "text"), ("latency_ms", "float")))
    except _Unread:
        return None
    if "source" in missing:  # a score without a source has the default one
        score["source"] = pa.array([""] * int(score_offsets[-1]), pa.string())
    sure = start_ok & end_ok & ~unplain
    canonical = {
        "trace_id": trace_id,
        "start_time": start,
        "end_time": end,
        "model": pa.StructArray.from_arrays(list(model.values()), fields=list(_MODEL), mask=pa.array(~model_ok)),
        "messages": chats(offsets, message["role"], message["content"], mask=pa.array(~messages_ok)),
        "completion": completion,
        "usage": pa.StructArray.from_arrays(list(usage.values()), fields=list(_USAGE), mask=pa.array(~usage_ok)),
        "latency_ms": latency,
        "feedback": pa.StructArray.from_arrays(list(feedback.values()), fields=list(_FEEDBACK)),
        "reference_answer": reference,
        "scores": pa.ListArray.from_arrays(pa.array(score_offsets, pa.int32()), pa.StructArray.from_arrays(
            list(score.values()), fields=list(SCORES.value_type)), type=SCORES),
    }
    sure &= _canonical(canonical, n) & _ok(pc.greater_equal(end, start))
    return _taken(canonical, np.flatnonzero(sure), np.arange(n))


def _unplain(messages: pa.Array | None, offsets: np.ndarray) -> np.ndarray:
    """Which rows have a message with one of :data:`_NOT_PLAIN` there, not null (tool calls, audio, a
    refusal): the exact path's, which refuses or reads them (an empty one is none, and its to tell)."""
    n = len(offsets) - 1
    if messages is None or not pa.types.is_struct(messages.type):
        return np.zeros(n, bool)
    plain = np.ones(len(messages), bool)
    for name in _NOT_PLAIN:
        if messages.type.get_field_index(name) >= 0:
            plain &= ~_ok(pc.struct_field(messages, name).is_valid())
    return ~_all_per_row(plain, np.repeat(np.arange(n), np.diff(offsets)), n)


def _typed(a: pa.Array | None, n: int, kind: str) -> pa.Array:
    """Column ``a`` (None: missing, all null) as text, ``int`` (int64) or ``float`` (float64); _Unread
    when its type is one the exact path reads otherwise, or its values do not fit."""
    target = {"text": pa.string(), "int": pa.int64(), "float": pa.float64()}[kind]
    if a is None:
        return pa.nulls(n, target)
    t = a.type
    if pa.types.is_dictionary(t):
        a, t = a.dictionary_decode(), t.value_type
    if not (pa.types.is_null(t)
            or (kind == "text" and (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)))
            or (kind != "text" and pa.types.is_integer(t))
            or (kind == "float" and pa.types.is_floating(t))):
        raise _Unread
    try:
        return a.cast(target)  # a safe cast: a value the target does not hold exactly raises
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise _Unread from None


def _items(a: pa.Array | None, n: int) -> tuple[np.ndarray, pa.Array | None, np.ndarray]:
    """A list column's offsets, its items (None: a missing column, whose lists are all empty), and
    where a list is there."""
    if a is None:
        return np.zeros(n + 1, np.int64), None, np.zeros(n, bool)
    if not (pa.types.is_list(a.type) or pa.types.is_large_list(a.type)):
        raise _Unread
    lengths = pc.fill_null(pc.list_value_length(a), 0).to_numpy(zero_copy_only=False)
    return np.concatenate([[0], np.cumsum(lengths)]), a.flatten(), _ok(a.is_valid())


def _times(a: pa.Array | None, n: int) -> tuple[pa.Array, np.ndarray]:
    """A time column as timestamps (microseconds, UTC), and which of them the exact path reads so."""
    if a is None:
        return pa.nulls(n, _TIME), np.zeros(n, bool)
    t = a.type
    if not pa.types.is_timestamp(t):
        text = _typed(a, n, "text")
        ok = _ok(pc.match_substring_regex(text, _RFC3339))
        at = _rfc3339(text, ok)
        if at is None:
            raise _Unread
        return at, ok
    # Naive, refused; nanoseconds (which a file's reader cuts to microseconds, see
    # sources._in_microseconds), left to the exact path.
    if t.tz is None or t.unit == "ns":
        raise _Unread
    try:
        pa.scalar(0, t).as_py()  # a zone that Python does not know fails every row
        at = a.cast(_TIME)
    except Exception:  # noqa: BLE001 - pyarrow and the zone database raise several types
        raise _Unread from None
    return at, _held_by_datetime(at)


def _record(a: pa.Array | None, n: int, kinds: dict[str, str]) -> tuple[dict[str, pa.Array], np.ndarray, set[str]]:
    """The children of a struct column named in ``kinds``, each :func:`_typed` (null where the struct
    is null; all null where the struct or the child is missing); where the struct is there; and
    which children are missing."""
    if a is None:
        return {name: _typed(None, n, kind) for name, kind in kinds.items()}, np.zeros(n, bool), set(kinds)
    if not pa.types.is_struct(a.type):
        raise _Unread
    present = [a.type.field(i).name for i in range(a.type.num_fields)]
    if len(set(present)) < len(present):  # a name twice: which one a dict keeps is not ours to guess
        raise _Unread
    children = {name: _typed(pc.struct_field(a, name) if name in present else None, n, kind)
                for name, kind in kinds.items()}
    return children, _ok(a.is_valid()), set(kinds) - set(present)


def _rfc3339(text: pa.Array, checked: np.ndarray) -> pa.Array | None:
    """The texts at ``checked`` (those that passed :data:`_RFC3339`) as timestamps, null elsewhere;
    None when pyarrow refuses one all the same (a date such as February 30th)."""
    try:
        return pc.cast(pc.if_else(pa.array(checked), text, pa.scalar(None, pa.string())), _TIME)
    except pa.ArrowInvalid:
        return None


def _shaped(lines: list[bytes], shape: msgspec.json.Decoder) -> list[int]:
    """The index of each line that ``shape`` decodes (skipping, at memory speed, what it does not name)."""
    return [i for i, _ in _decoded(lines, shape)]


def _decoded(lines: list[bytes], shape: msgspec.json.Decoder) -> Iterator[tuple[int, Any]]:
    """(index, what ``shape`` makes of it) of each line that it decodes."""
    for i, line in enumerate(lines):
        try:
            yield i, shape.decode(line)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            pass


def _read_json(lines: list[bytes], options: pj.ParseOptions) -> pa.Table | None:
    """The lines as one table, or None when pyarrow refuses any of them (a type other than the
    schema's, a duplicated key, bad UTF-8) or reads them as another number of rows."""
    if not lines:
        return None
    data = b"\n".join(lines)
    try:
        table = pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(use_threads=False, block_size=1 << 30),
                             parse_options=options)
        if not data.isascii():  # the reader leaves bad UTF-8 in a string without escapes: the exact path names it
            table.validate(full=True)
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    return table if table.num_rows == len(lines) else None


def parse_openai_lines(lines: list[bytes]) -> tuple[pa.Table, np.ndarray] | None:
    """:func:`parse_lines` for OpenAI chat-completion logs, request beside response: the rows
    :func:`ctpipe.formats.from_openai` and the trace's validation make of them, with the same values,
    column by column, a row a choice. Anything else (a flat log, content as parts, a tool call, a field
    null where the reader would tell null from missing, a time beyond 2242, a choice the reader
    refuses beside others it reads) is left to the exact path, as is a block pyarrow refuses. So are
    the logs of several choices past :data:`_COPIES_BYTES` of their prompts' copies in a block (each
    choice's row carries the whole prompt): the exact path makes their rows a piece at a time.
    """
    shaped = [i for i in _shaped(lines, _OPENAI_SHAPE) if b'"resourceSpans"' not in lines[i]]  # that is OTLP
    chosen = [lines[i] for i in shaped]
    table = _read_json(chosen, _OPENAI_PARSE)
    if table is None:
        return None
    n = table.num_rows
    # Children with their parents' nulls (a null request has null messages), by name.
    request, response, metadata = (_fields(table[name].combine_chunks()) for name in ("request", "response", "metadata"))
    messages, choices, usage = request["messages"], response["choices"], response["usage"]
    answers = pc.fill_null(pc.list_value_length(choices), 0).to_numpy(zero_copy_only=False)
    line = np.repeat(np.arange(n), answers)  # the log of each choice
    if not len(line):
        return None
    choice = _fields(pc.list_flatten(choices))
    completions = pc.fill_null(_fields(choice["message"])["content"], "")  # a null message: a blank completion
    # A log's choices are taken together or left together, as the reader reads it whole: one it
    # refuses (a finish reason of no answer, a blank answer) leaves the log to it.
    single = bool((answers == 1).all())  # a choice a log: the checks of the traces below check its answer
    good = ~_not_answers(choice["finish_reason"])
    if not single:
        good &= _ok(pc.match_substring_regex(completions, _NOT_SPACE))
    # A null id, model or chat fails the trace's own checks below; a null created would read as 1970.
    sure = (answers > 0) & (np.bincount(line[~good], minlength=n) == 0) & _ok(response["created"].is_valid())
    counts = [_fields(usage)[name] for name in ("prompt_tokens", "completion_tokens", "total_tokens")]
    for c in counts:  # usage absent or null: no tokens; a count of it null: left to the reader
        sure &= _ok(pc.or_kleene(pc.invert(usage.is_valid()), c.is_valid()))
    created = pc.fill_null(response["created"], 0).to_numpy(zero_copy_only=False)
    latency = pc.fill_null(table["latency_ms"].combine_chunks(), 0.0)
    start, end, timed = _call_span(created.astype(np.float64), latency.to_numpy(zero_copy_only=False))
    sure &= timed
    version = pc.coalesce(_empty_as_null(metadata["model_version"]), _empty_as_null(response["system_fingerprint"]),
                          response["model"])
    message = _fields(messages.values)  # a null one (skipped by the reader) has no role: the exact path decides
    first = np.minimum(np.cumsum(answers) - answers, len(line) - 1)  # a log's first choice (any, for one of none)
    canonical = {
        "trace_id": response["id"],
        "start_time": start,
        "end_time": end,
        "model": pa.StructArray.from_arrays([response["model"], version], fields=list(_MODEL)),
        "messages": chats(messages.offsets, message["role"], pc.fill_null(message["content"], ""),
                          mask=pc.invert(messages.is_valid())),
        "completion": completions if single else completions.take(pa.array(first)),  # the others' checked above
        "usage": pa.StructArray.from_arrays([pc.fill_null(c, 0) for c in counts], fields=list(_USAGE)),
        "latency_ms": latency,
        "feedback": pa.StructArray.from_arrays([metadata["thumb"], metadata["rating"]], fields=list(_FEEDBACK)),
        "reference_answer": pa.nulls(n, pa.string()),
        "scores": _no_scores(n),
    }
    sure &= _canonical(canonical, n)  # latency >= 0 among its rules: the end is never before the start
    if single:
        return _taken(canonical, np.flatnonzero(sure), np.asarray(shaped))
    return _choices(canonical, sure, answers, line, choice["index"], completions, np.asarray(shaped))


# Of a block's OpenAI logs of several choices, the fast path takes those whose prompts' copies (a
# choice's row carries its log's prompt) come to this much; the exact path makes the others' rows a
# piece at a time (see materialize._in_order).
_COPIES_BYTES = 32 * 1024 * 1024


def _choices(canonical: dict[str, pa.Array], sure: np.ndarray, answers: np.ndarray, line: np.ndarray, index: pa.Array,
             completions: pa.Array, shaped: np.ndarray) -> tuple[pa.Table, np.ndarray] | None:
    """:func:`parse_openai_lines`' rows of the logs it is ``sure`` of, a row a choice (``line``: the
    log of each), as :func:`ctpipe.formats.from_openai` makes them: with several choices, the log's id
    and the choice's ``index`` (its place, where it has none) as its trace's id, and the call's counts
    split as :func:`ctpipe.formats._usage` splits them (a log with a negative one is not ``sure``: the
    trace's checks refuse it, where the reader keeps them as given for its validation to name)."""
    many = answers > 1
    messages = canonical["messages"]
    sizes = np.bincount(pc.list_parent_indices(messages).to_numpy(zero_copy_only=False),
                        pc.fill_null(pc.binary_length(messages.flatten().field("content")), 0).to_numpy(zero_copy_only=False),
                        len(answers))
    sure &= ~many | (np.cumsum(np.where(many & sure, sizes * (answers - 1), 0)) <= _COPIES_BYTES)
    keep = np.flatnonzero(sure[line])  # the choices taken
    if not len(keep):
        return None
    of = pa.array(line[keep])
    out = {name: column.take(of) for name, column in canonical.items()}
    out["completion"] = completions.take(pa.array(keep))
    several = pa.array(many[line[keep]])
    position = (np.arange(len(line)) - np.repeat(np.cumsum(answers) - answers, answers))[keep]
    named = pc.binary_join_element_wise(out["trace_id"], pc.cast(pc.coalesce(index.take(pa.array(keep)), pa.array(position)),
                                                                 pa.string()), ":")
    out["trace_id"] = pc.if_else(several, named, out["trace_id"])
    prompt = out["usage"].field("prompt_tokens")
    out["usage"] = pa.StructArray.from_arrays([prompt, pc.if_else(several, 0, out["usage"].field("completion_tokens")),
                                               pc.if_else(several, prompt, out["usage"].field("total_tokens"))],
                                              fields=list(_USAGE))
    return _taken(out, np.arange(len(keep)), shaped[line[keep]])


_CACHED = formats.CONVERSE_CACHED


# Bedrock's invocation log records of Converse calls: what the fast path asks of them. Any other key
# (an error's code, a body kept apart, another format's key at the top), block (an image, a tool's
# call, a guardrail's text, reasoning, a cache point) or stop reason (a tool's call, a guardrail's
# or a filter's intervention) fails the decoding and leaves the line to the reader.
class _ConverseText(msgspec.Struct, forbid_unknown_fields=True):
    text: str


class _ConverseMessage(msgspec.Struct):
    role: str
    content: list[_ConverseText]


class _ConverseRequest(msgspec.Struct):
    messages: list[_ConverseMessage]
    system: list[_ConverseText] = []
    prompt: msgspec.UnsetType = msgspec.UNSET  # a text completion's, which the reader refuses


class _ConverseOutput(msgspec.Struct):
    message: _ConverseMessage


class _ConverseAnswer(msgspec.Struct):
    output: _ConverseOutput
    stopReason: Literal["end_turn", "stop_sequence"]  # one cut off ("max_tokens") the reader's, as the run says
    system_fingerprint: msgspec.UnsetType = msgspec.UNSET  # a model version, where the reader would take one
    guardrail: msgspec.UnsetType = msgspec.field(default=msgspec.UNSET, name="amazon-bedrock-guardrailAction")


class _BedrockInput(msgspec.Struct):
    inputBodyJson: _ConverseRequest


class _BedrockOutput(msgspec.Struct):
    outputBodyJson: _ConverseAnswer


class _BedrockShape(msgspec.Struct, forbid_unknown_fields=True):
    schemaType: Literal["ModelInvocationLog"]
    requestId: str
    operation: Literal["Converse", "ConverseStream"]
    input: _BedrockInput
    output: _BedrockOutput
    timestamp: str
    modelId: str
    schemaVersion: Any = None
    accountId: Any = None
    identity: Any = None
    region: Any = None
    inferenceRegion: Any = None
    requestMetadata: Any = None
    performanceConfig: Any = None


_BEDROCK_SHAPE = msgspec.json.Decoder(_BedrockShape)
_TEXTS = pa.list_(pa.struct([("text", pa.string())]))
_CONVERSE_MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", _TEXTS)]))
_BEDROCK_PARSE = pj.ParseOptions(unexpected_field_behavior="ignore", explicit_schema=pa.schema([
    ("requestId", pa.string()), ("timestamp", pa.string()), ("modelId", pa.string()),
    ("input", pa.struct([("inputBodyJson", pa.struct([("system", _TEXTS), ("messages", _CONVERSE_MESSAGES)]))])),
    ("output", pa.struct([("outputBodyJson", pa.struct([
        ("output", pa.struct([("message", _CONVERSE_MESSAGES.value_type)])),
        ("metrics", pa.struct([("latencyMs", pa.float64())])),
        ("usage", pa.struct([(k, pa.int64()) for k in ("inputTokens", "outputTokens", "totalTokens", *_CACHED)])),
    ]))])),
]))
# Bedrock's times as its logging writes them (whole seconds, "Z"): others are the reader's.
_BEDROCK_TIME = r"^\d{4}-\d\d-\d\dT([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?Z$"


def parse_bedrock_lines(lines: list[bytes]) -> tuple[pa.Table, np.ndarray] | None:
    """:func:`parse_lines` for Bedrock's invocation log records of Converse calls (``Converse``,
    ``ConverseStream``) of text blocks alone: the rows :func:`ctpipe.formats.from_bedrock` and the
    trace's validation make of them, with the same values. Anything else is left to the exact path."""
    shaped = _shaped(lines, _BEDROCK_SHAPE)
    table = _read_json([lines[i] for i in shaped], _BEDROCK_PARSE)
    if table is None:
        return None
    n = table.num_rows
    request = _fields(_fields(table["input"].combine_chunks())["inputBodyJson"])
    answer = _fields(_fields(table["output"].combine_chunks())["outputBodyJson"])
    usage = _fields(answer["usage"])
    sure = _ok(pc.match_substring_regex(table["timestamp"].combine_chunks(), _BEDROCK_TIME))
    at = _rfc3339(table["timestamp"].combine_chunks(), sure)
    if at is None:
        return None
    for name in ("inputTokens", "outputTokens", "totalTokens"):  # the reader's where a count is missing
        sure &= _ok(usage[name].is_valid())
    prompt_tokens = usage["inputTokens"]
    for name in _CACHED:  # read from or written to the prompt cache: input all the same, as the reader counts it
        prompt_tokens = pc.add(prompt_tokens, pc.fill_null(usage[name], 0))
    latency = pc.fill_null(_fields(answer["metrics"])["latencyMs"], 0.0)
    start, end, timed = _call_span(_seconds(at), latency.to_numpy(zero_copy_only=False))
    sure &= timed
    model = pc.replace_substring_regex(table["modelId"].combine_chunks(), "^.*/", "")  # an inference profile's ARN: its id
    system = request["system"]
    has_system = _ok(pc.greater(pc.list_value_length(system), 0))
    messages = request["messages"]
    message = _fields(messages.values)
    canonical = {
        "trace_id": table["requestId"].combine_chunks(),
        "start_time": start,
        "end_time": end,
        "model": pa.StructArray.from_arrays([model, model], fields=list(_MODEL)),
        "messages": _with_system(messages.offsets, message["role"], _turn_texts(message["role"], message["content"]),
                                 has_system, _texts(system, formats.PART_SEPARATOR)),
        "completion": _texts(_fields(_fields(answer["output"])["message"])["content"], ""),  # one answer, as the reader joins it
        "usage": pa.StructArray.from_arrays([prompt_tokens, usage["outputTokens"], usage["totalTokens"]], fields=list(_USAGE)),
        "latency_ms": latency,
        **_unlabelled(n),
    }
    sure &= _canonical(canonical, n)
    return _taken(canonical, np.flatnonzero(sure), np.asarray(shaped))


def _with_system(offsets: pa.Array, roles: pa.Array, texts: pa.Array, has_system: np.ndarray,
                 system: pa.Array) -> pa.ListArray:
    """A :data:`ctpipe.datasets.MESSAGES` column of each row's messages, after a system message of
    ``system``'s text where ``has_system``."""
    offsets = np.asarray(offsets, np.int64)
    counts = np.diff(offsets) + has_system
    starts = np.concatenate([[0], np.cumsum(counts)])
    first = np.zeros(starts[-1], bool)
    first[starts[:-1][has_system]] = True
    place = np.empty(starts[-1], np.int64)  # each slot's message: a row's own (after offsets[0]), or its system's
    place[~first] = np.arange(offsets[0], offsets[-1])
    place[first] = len(roles) + np.arange(int(has_system.sum()))
    kept = np.flatnonzero(has_system)
    return chats(starts, pa.concat_arrays([roles, pa.array(["system"] * len(kept), pa.string())]).take(pa.array(place)),
                 pa.concat_arrays([texts.cast(pa.string()), system.take(pa.array(kept, pa.int64()))]).take(pa.array(place)))


# Vertex AI's rows of Gemini's calls: what the fast path asks of them. The row's own columns alone
# (another format's key at the top is the reader's); its request and answer JSON, as text or as
# objects, read apart; a part that is no text (a tool's call or result, media), a second candidate,
# another finish reason, a context cache, an error or a stream's chunks leave the row to the reader.
class _VertexRow(msgspec.Struct, forbid_unknown_fields=True):
    request_id: Annotated[str, msgspec.Meta(min_length=1)]
    logging_time: str
    full_request: msgspec.Raw
    full_response: msgspec.Raw
    metadata: msgspec.Raw
    model: str | None = None
    endpoint: Any = None
    deployed_model_id: Any = None
    request_payload: Any = None
    response_payload: Any = None
    model_version: Any = None
    api_method: Any = None
    otel_log: Any = None


class _GeminiPart(msgspec.Struct, forbid_unknown_fields=True):
    text: str
    thought: bool = False
    thoughtSignature: Any = None


class _GeminiContent(msgspec.Struct):
    parts: list[_GeminiPart]
    role: str | None = None


class _GeminiRequest(msgspec.Struct):
    contents: list[_GeminiContent]
    systemInstruction: _GeminiContent | None = None
    system_instruction: msgspec.UnsetType = msgspec.UNSET
    cachedContent: msgspec.UnsetType = msgspec.UNSET
    cached_content: msgspec.UnsetType = msgspec.UNSET


class _GeminiCandidate(msgspec.Struct):
    content: _GeminiContent
    finishReason: Literal["STOP", "MAX_TOKENS"] | None = None


class _GeminiUsage(msgspec.Struct):
    promptTokenCount: int = 0
    candidatesTokenCount: int = 0
    thoughtsTokenCount: int = 0
    totalTokenCount: int | msgspec.UnsetType = msgspec.UNSET


class _GeminiResponse(msgspec.Struct):
    candidates: Annotated[list[_GeminiCandidate], msgspec.Meta(min_length=1, max_length=1)]
    usageMetadata: _GeminiUsage | None = None
    modelVersion: str | None = None
    error: None = None
    streamed_data: msgspec.UnsetType = msgspec.UNSET
    system_fingerprint: msgspec.UnsetType = msgspec.UNSET


class _VertexMetadata(msgspec.Struct):
    request_latency: float


_VERTEX_ROW = msgspec.json.Decoder(_VertexRow)
_GEMINI_REQUEST = msgspec.json.Decoder(_GeminiRequest)
_GEMINI_RESPONSE = msgspec.json.Decoder(_GeminiResponse)
_VERTEX_METADATA = msgspec.json.Decoder(_VertexMetadata)
_TEXT = msgspec.json.Decoder(str)
_GEMINI_PARTS = pa.list_(pa.struct([("text", pa.string()), ("thought", pa.bool_())]))
_GEMINI_CONTENT = pa.struct([("role", pa.string()), ("parts", _GEMINI_PARTS)])
_GEMINI_REQUEST_PARSE = pj.ParseOptions(unexpected_field_behavior="ignore", explicit_schema=pa.schema([
    ("systemInstruction", _GEMINI_CONTENT), ("contents", pa.list_(_GEMINI_CONTENT))]))
_GEMINI_RESPONSE_PARSE = pj.ParseOptions(unexpected_field_behavior="ignore", explicit_schema=pa.schema([
    ("candidates", pa.list_(pa.struct([("content", _GEMINI_CONTENT), ("finishReason", pa.string())]))),
    ("usageMetadata", pa.struct([(k, pa.int64()) for k in ("promptTokenCount", "candidatesTokenCount",
                                                           "thoughtsTokenCount", "totalTokenCount")])),
    ("modelVersion", pa.string())]))
# Vertex AI's logging times: ISO 8601 in UTC, or as BigQuery writes a timestamp in JSON (" UTC").
_VERTEX_TIME = r"^\d{4}-\d\d-\d\d[T ]([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z| UTC)$"


def _inner_json(raw: msgspec.Raw) -> bytes:
    """The JSON a column holds: as text (BigQuery's export of a JSON column), or as itself, on one line
    (a raw newline is only ever white space between JSON's tokens)."""
    text = bytes(raw)
    text = _TEXT.decode(text).encode() if text[:1] == b'"' else text
    return text.replace(b"\n", b" ") if b"\n" in text else text


def parse_vertex_lines(lines: list[bytes]) -> tuple[pa.Table, np.ndarray] | None:
    """:func:`parse_lines` for rows of Vertex AI's request-response logging table of Gemini's calls of
    text parts and one candidate: the rows :func:`ctpipe.formats.from_vertex` and the trace's
    validation make of them, with the same values. Anything else is left to the exact path."""
    rows, requests, responses, latencies, shaped = [], [], [], [], []
    for i, line in enumerate(lines):
        try:
            row = _VERTEX_ROW.decode(line)
            request, response = _inner_json(row.full_request), _inner_json(row.full_response)
            _GEMINI_REQUEST.decode(request)
            _GEMINI_RESPONSE.decode(response)
            latency = _VERTEX_METADATA.decode(_inner_json(row.metadata)).request_latency
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            continue
        rows.append(row)
        requests.append(request)
        responses.append(response)
        latencies.append(latency)
        shaped.append(i)
    asked, answered = _read_json(requests, _GEMINI_REQUEST_PARSE), _read_json(responses, _GEMINI_RESPONSE_PARSE)
    if asked is None or answered is None:
        return None
    n = asked.num_rows
    logged = pa.array([r.logging_time for r in rows], pa.string())
    sure = _ok(pc.match_substring_regex(logged, _VERTEX_TIME))
    logged_at = _rfc3339(pc.replace_substring_regex(pc.replace_substring_regex(logged, " UTC$", "Z"), "^(.{10}) ", "\\1T"), sure)
    if logged_at is None:
        return None
    latency = np.array(latencies, np.float64)  # the reader starts the call its latency before it was logged
    start, end, timed = _call_span(_seconds(logged_at) - latency / 1000, latency)
    sure &= timed
    system = asked["systemInstruction"].combine_chunks()
    contents = asked["contents"].combine_chunks()
    content = _fields(contents.values)
    roles = pc.if_else(pc.equal(pc.fill_null(content["role"], ""), "model"), "assistant", "user")  # no role: the user's
    candidate = _fields(_fields(answered["candidates"].combine_chunks().values)["content"])
    finish = _fields(answered["candidates"].combine_chunks().values)["finishReason"]
    usage = _fields(answered["usageMetadata"].combine_chunks())
    prompt_tokens, answer_tokens, thoughts = (pc.fill_null(usage[k], 0) for k in (
        "promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount"))
    answer_tokens = pc.add(answer_tokens, thoughts)  # thoughts are answer tokens, as the reader counts them
    named = pc.replace_substring_regex(pa.array([r.model or "" for r in rows], pa.string()), "^.*/", "")
    model = pc.coalesce(_empty_as_null(answered["modelVersion"].combine_chunks()), named)
    canonical = {
        "trace_id": pa.array([r.request_id for r in rows], pa.string()),
        "start_time": start,
        "end_time": end,
        "model": pa.StructArray.from_arrays([model, model], fields=list(_MODEL)),
        "messages": _with_system(contents.offsets, roles, _turn_texts(roles, content["parts"]),
                                 _ok(system.is_valid()), _texts(_fields(system)["parts"], formats.PART_SEPARATOR)),
        "completion": _texts(candidate["parts"], ""),  # an answer's parts are one text, cut anywhere
        "usage": pa.StructArray.from_arrays([prompt_tokens, answer_tokens, pc.coalesce(
            usage["totalTokenCount"], pc.add(prompt_tokens, answer_tokens))], fields=list(_USAGE)),
        "latency_ms": pa.array(latency, pa.float64()),
        **_unlabelled(n),
    }
    sure &= _ok(pc.is_in(pc.fill_null(finish, "STOP"), value_set=pa.array(["STOP"])))  # MAX_TOKENS: as the run says
    sure &= _canonical(canonical, n)
    return _taken(canonical, np.flatnonzero(sure), np.asarray(shaped))


def _turn_texts(roles: pa.Array, parts: pa.ListArray) -> pa.Array:
    """:func:`_texts` of each message of ``roles``, joined as formats.turn_joined says: an assistant's
    earlier answer as written, others on a new line."""
    return pc.if_else(_ok(pc.equal(roles, "assistant")), _texts(parts, ""), _texts(parts, formats.PART_SEPARATOR))


def _texts(parts: pa.ListArray, separator: str) -> pa.Array:
    """The text of each list of text parts (Converse's blocks, Gemini's parts), a thinking model's
    ``thought`` parts left out, joined with ``separator``; "" for none."""
    values = parts.values
    kept = ~_ok(values.field("thought")) if values.type.get_field_index("thought") >= 0 else np.ones(len(values), bool)
    offsets = np.asarray(parts.offsets, np.int64)
    counts = np.concatenate([[0], np.cumsum(kept)])
    texts = pa.ListArray.from_arrays(pa.array(counts[offsets], pa.int32()), values.field("text").filter(pa.array(kept)))
    return pc.fill_null(pc.binary_join(texts, separator), "")


class _BatchResponse(msgspec.Struct):
    status_code: int
    body: msgspec.Raw


class _BatchOutput(msgspec.Struct):
    response: _BatchResponse
    error: None = None  # any other value (even an empty one, which the reader passes over) is the reader's


class _BatchInput(msgspec.Struct):
    url: str
    body: msgspec.Raw


_BATCH_OUTPUT, _BATCH_INPUT = msgspec.json.Decoder(_BatchOutput), msgspec.json.Decoder(_BatchInput)


def parse_batch_lines(outputs: list[bytes], requests: list[list[bytes]]) -> tuple[pa.Table, np.ndarray] | None:
    """:func:`parse_lines` for the output lines of a batch, each with the input lines of its custom_id
    as the join found them: the rows :func:`ctpipe.formats.joined` makes of them, with the same
    values. An output of status 200 and no error, of the one request (as text) of its custom_id, a
    chat completion, is read as the OpenAI log of that request's body and its response's
    (:func:`parse_openai_lines`, whose rows are those :func:`ctpipe.formats.from_openai` makes of
    them, as the reader's are); anything else is left to the exact path."""
    logs, at = [], []
    for i, (line, asked) in enumerate(zip(outputs, requests)):
        if len(set(asked)) != 1:
            continue
        try:
            output, request = _BATCH_OUTPUT.decode(line), _BATCH_INPUT.decode(asked[0])
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            continue
        if output.response.status_code == 200 and formats.chat_completion_url(request.url):
            logs.append(b'{"request":%s,"response":%s}' % (bytes(request.body), bytes(output.response.body)))
            at.append(i)
    got = parse_openai_lines(logs)
    return None if got is None else (got[0], np.asarray(at, np.int64)[got[1]])


class _LangfuseMessage(_PlainMessage):
    role: str | None = None
    content: str | None = None


class _LangfuseUsage(msgspec.Struct):  # counts as the trace takes them: a negative one fails it either way
    input: traces.Count | None = None
    output: traces.Count | None = None
    total: traces.Count | None = None


class _LangfuseShape(msgspec.Struct):
    """A generation as the Langfuse fast path reads it: chat messages in, an object out, and each
    field it reads of the type pyarrow is asked for, so that a line of another is left to the exact
    path alone rather than failing the others' read."""

    id: str
    traceId: str
    input: list[_LangfuseMessage]
    output: _LangfuseMessage
    startTime: str | None = None
    endTime: str | None = None
    model: str | None = None
    providedModelName: str | None = None
    version: str | None = None
    release: str | None = None
    usageDetails: dict[str, traces.Count | None] | None = None  # usage types: see _other_usage_types
    usage: _LangfuseUsage | None = None
    promptTokens: traces.Count | None = None
    completionTokens: traces.Count | None = None


_LANGFUSE_SHAPE = msgspec.json.Decoder(_LangfuseShape)
_LANGFUSE_USAGE = pa.struct([("input", pa.int64()), ("output", pa.int64()), ("total", pa.int64())])
_LANGFUSE_PARSE = pj.ParseOptions(unexpected_field_behavior="ignore", explicit_schema=pa.schema([
    ("id", pa.string()), ("traceId", pa.string()), ("startTime", pa.string()), ("endTime", pa.string()),
    ("model", pa.string()), ("providedModelName", pa.string()), ("version", pa.string()), ("release", pa.string()),
    ("input", MESSAGES),
    ("output", pa.struct([("content", pa.string()), ("finish_reason", pa.string())])), ("usageDetails", _LANGFUSE_USAGE),
    ("usage", _LANGFUSE_USAGE),
    ("promptTokens", pa.int64()), ("completionTokens", pa.int64()),
]))
_MOST_TOKENS = 1 << 62  # token counts the fast path adds up: two of them stay within int64


_READ_TYPES = frozenset({"input", "output", "total"})  # the usage types the fast path reads with pyarrow
_NONE_ADDED = (0, 0)


def _other_usage_types(details: dict[str, int | None] | None) -> tuple[int, int] | None:
    """What a generation's usage details add to its ``input`` and ``output`` counts: the other usage
    types whose names hold those (``input_cached_tokens``, ``output_reasoning_tokens``), which the
    reader adds as Langfuse does. None where the reader's sum is not that: a null among them, or
    ``input`` or ``output`` not given beside them, or none of the three counts the fast path reads."""
    if not details:
        return _NONE_ADDED
    if all(details.get(k) is None for k in _READ_TYPES):
        return None
    if details.keys() <= _READ_TYPES:  # nearly all
        return _NONE_ADDED
    sums = []
    for side in ("input", "output"):
        other = [v for k, v in details.items() if side in k and k != side]
        if other and (details.get(side) is None or None in other or sum(other) >= _MOST_TOKENS):
            return None
        sums.append(sum(other))
    return sums[0], sums[1]


def parse_langfuse_lines(lines: list[bytes], versions: list[str | None],
                         scores: list[list[dict]]) -> tuple[pa.Table, np.ndarray] | None:
    """:func:`parse_lines` for Langfuse generations (JSON lines), each with its trace's version and its
    scores as the join found them: the rows that :func:`ctpipe.formats.joined` and the trace's
    validation make of them, with the same values. Anything else (text or parts for messages, text
    for the output, a usage object without the counts, a count that may be null rather than missing,
    a time beyond 2242) is left to the exact path, as is a block pyarrow refuses.
    """
    shaped, others = [], []
    for i, doc in _decoded(lines, _LANGFUSE_SHAPE):
        shaped.append(i)
        others.append(_other_usage_types(doc.usageDetails))
    chosen = [lines[i] for i in shaped]
    table = _read_json(chosen, _LANGFUSE_PARSE)
    if table is None:
        return None
    n = table.num_rows
    col = {name: table[name].combine_chunks() for name in table.column_names}
    # Times as the reader makes them: an ISO time's float seconds, then datetime.fromtimestamp.
    start_text = _utc(col["startTime"])
    end_text = pc.coalesce(_empty_as_null(_utc(col["endTime"])), start_text)  # no end (or ""): the start
    seconds, sure = [], np.ones(n, bool)
    for text in (start_text, end_text):
        checked = _ok(pc.match_substring_regex(text, _RFC3339))
        at = _rfc3339(text, checked)
        if at is None:  # a date pyarrow refuses (February 30th): its row is the reader's, not the whole part
            checked &= [_rfc3339(text.slice(i, 1), checked[i:i + 1]) is not None for i in range(n)]
            at = _rfc3339(text, checked)
        us = pc.fill_null(pc.cast(at, pa.int64()), 0).to_numpy(zero_copy_only=False)
        seconds.append(us.astype(np.float64) / 1e6)  # what datetime.timestamp() gives: exact below 2**53 us
        sure &= checked
    (start_us, start_ok), (end_us, end_ok) = (_fromtimestamp_micros(s) for s in seconds)
    sure &= start_ok & end_ok & (end_us >= start_us)
    # Usage: usageDetails when it is a non-empty object, else usage; each count from it or, when it
    # has none, from promptTokens/completionTokens. pyarrow reads a missing count and a null one
    # alike, which the reader does not: such a row is the reader's, unless its line has no null.
    details, legacy = _fields(col["usageDetails"]), _fields(col["usage"])
    has_details = _ok(pc.or_kleene(pc.or_kleene(details["input"].is_valid(), details["output"].is_valid()),
                                   details["total"].is_valid()))
    unsure = _ok(col["usageDetails"].is_valid()) & ~has_details  # {} or only other keys: the reader's `or` decides
    usage_given = np.where(has_details, _ok(col["usageDetails"].is_valid()), _ok(col["usage"].is_valid()))
    pick = pa.array(has_details)
    counts = {name: pc.if_else(pick, details[name], legacy[name]) for name in ("input", "output", "total")}
    tokens = []
    for name, fallback in (("input", "promptTokens"), ("output", "completionTokens")):
        given = counts[name].is_valid()
        other = pc.fill_null(col[fallback], 0)
        unsure |= usage_given & ~_ok(given) & _ok(pc.not_equal(other, 0))  # missing: the fallback; null: 0
        tokens.append(pc.fill_null(pc.if_else(given, counts[name], other), 0).to_numpy(zero_copy_only=False))
    sure &= (tokens[0] < _MOST_TOKENS) & (tokens[1] < _MOST_TOKENS) & np.fromiter(
        (o is not None for o in others), bool, len(others))
    added = np.zeros((len(others), 2), np.int64)  # each below _MOST_TOKENS too
    for i, more in enumerate(others):
        if more is not _NONE_ADDED and more is not None:
            added[i] = more
    tokens = [np.where(sure, count + more, 0) for count, more in zip(tokens, added.T)]  # the others' sums wrapped
    sure &= (tokens[0] < _MOST_TOKENS) & (tokens[1] < _MOST_TOKENS)
    for i in np.flatnonzero(unsure & sure):
        unsure[i] = _JSON_NULL.search(chosen[i]) is not None
    sure &= ~unsure
    total = pc.fill_null(counts["total"], pa.array(np.where(sure, tokens[0] + tokens[1], 0)))  # missing or null: the sum
    output = _fields(col["output"])
    sure &= ~_not_answers(output["finish_reason"])  # the reader's to refuse
    # Scores come whole from the join; a name or label of another type is the reader's to refuse.
    chosen_scores = [scores[i] for i in shaped]
    for i, found in enumerate(chosen_scores):
        if not all(type(s["name"]) is str and (s["label"] is None or type(s["label"]) is str) for s in found):
            sure[i], chosen_scores[i] = False, []
    model = pc.coalesce(_empty_as_null(col["model"]), _empty_as_null(col["providedModelName"]), "")
    chosen_versions = pa.array([versions[i] for i in shaped], pa.string())
    messages = col["input"]
    message = _fields(messages.values)
    canonical = {
        "trace_id": pc.binary_join_element_wise(col["traceId"], col["id"], ":"),
        "start_time": pa.array(start_us, pa.int64()).cast(_TIME),
        "end_time": pa.array(end_us, pa.int64()).cast(_TIME),
        "model": pa.StructArray.from_arrays([model, pc.coalesce(_empty_as_null(col["version"]), _empty_as_null(chosen_versions),
                                                                _empty_as_null(col["release"]), model)],
                                            fields=list(_MODEL)),
        "messages": chats(messages.offsets, message["role"], pc.fill_null(message["content"], "")),
        "completion": pc.fill_null(output["content"], ""),
        "usage": pa.StructArray.from_arrays([pa.array(tokens[0]), pa.array(tokens[1]), total], fields=list(_USAGE)),
        "latency_ms": pa.array(np.rint((seconds[1] - seconds[0]) * 1e6) / 1000),  # as the reader: whole microseconds
        "feedback": pa.StructArray.from_arrays([pa.nulls(n, pa.string()), pa.nulls(n, pa.float64())],
                                               fields=list(_FEEDBACK)),
        "reference_answer": pa.nulls(n, pa.string()),
        "scores": pa.array([[(s["name"], s["value"], s["label"], s["source"]) for s in found]
                            for found in chosen_scores], SCORES),
    }
    sure &= _canonical(canonical, n)
    return _taken(canonical, np.flatnonzero(sure), np.asarray(shaped))


def _utc(text: pa.Array) -> pa.Array:
    """Langfuse's times, those without a zone in UTC (as the reader takes them): "Z" added."""
    return pc.if_else(_ok(pc.match_substring_regex(text, _NAIVE)), pc.binary_join_element_wise(text, "Z", ""), text)


def prompts_at(roles: pa.Array, parents: np.ndarray, n: int) -> np.ndarray:
    """Of ``n`` chats whose messages' roles are ``roles`` (flattened; ``parents[i]``, message ``i``'s
    chat), where each one's prompt, its last user message, is among them (-1: it has none)."""
    at = np.full(n, -1)
    users = np.flatnonzero(_ok(pc.equal(roles, "user")))
    np.maximum.at(at, parents[users], users)
    return at


def chats(offsets, roles, contents, mask: pa.Array | None = None) -> pa.ListArray:
    """A :data:`ctpipe.datasets.MESSAGES` column: chat ``i`` is the messages
    ``roles[offsets[i]:offsets[i + 1]]`` / ``contents[...]`` (arrays or lists), null where ``mask`` is true."""
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.StructArray.from_arrays(
        [pa.array(roles, pa.string()), pa.array(contents, pa.string())], ["role", "content"]), type=MESSAGES, mask=mask)


def _seconds(at: pa.Array) -> np.ndarray:
    """Timestamps as the float seconds ``datetime.timestamp()`` gives (exact below 2**53 us; 0 for null)."""
    return pc.fill_null(pc.cast(at, pa.int64()), 0).to_numpy(zero_copy_only=False).astype(np.float64) / 1e6


def _call_span(start_s: np.ndarray, latency_ms: np.ndarray) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """(start and end times as a reader makes a call's, ``datetime.fromtimestamp`` of float seconds, the
    end ``latency_ms`` after the start and rounded half to even; which rows the fast paths take)."""
    (start, start_ok), (end, end_ok) = (_fromtimestamp_micros(s) for s in (start_s, start_s + latency_ms / 1000))
    return pa.array(start, pa.int64()).cast(_TIME), pa.array(end, pa.int64()).cast(_TIME), start_ok & end_ok


def _fromtimestamp_micros(seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(microseconds since the epoch of ``datetime.fromtimestamp`` of each of ``seconds``, the
    fraction rounded half to even as it rounds; whether it is one the fast paths take, 1970 to 2242:
    elsewhere, 0)."""
    with np.errstate(invalid="ignore"):  # NaN is none of them
        ok = (seconds >= 0) & (seconds < 2**33)
    whole, fraction = np.divmod(np.where(ok, seconds, 0.0), 1.0)
    return whole.astype(np.int64) * 1_000_000 + np.rint(fraction * 1e6).astype(np.int64), ok


class _OtelShape(msgspec.Struct):
    resourceSpans: msgspec.Raw


class _Part(msgspec.Struct):
    type: str = ""
    content: str = ""


class _GenAIMessage(msgspec.Struct):
    role: str | None = None
    parts: list[_Part] = []
    finish_reason: str | None = None

    def text(self) -> str | None:
        return _parts_text(self.parts, formats.turn_joined(self.role))


class _GenAIAnswer(_GenAIMessage):
    def text(self) -> str | None:
        return _parts_text(self.parts, "")  # one answer's parts, as written (formats._parts_answer)


def _parts_text(parts: list[_Part], joined: str = formats.PART_SEPARATOR) -> str | None:
    """As formats._parts_text reads them; None for parts the reader reads apart (a part of any type but
    text or reasoning, which it drops: it refuses the others, or reads a refusal as its own) or for
    none (a message whose content was not recorded)."""
    one = parts[0] if len(parts) == 1 else None  # the common case, without a join
    if one is not None and one.type == "text" and not formats.text_block(one.content):
        return one.content
    if not parts or any(p.type != "text" and p.type not in formats.REASONING_PARTS or formats.text_block(p.content)
                        for p in parts):  # or a content block's JSON (formats._blocks)
        return None
    return joined.join([p.content for p in parts if p.type == "text"])


class _TextPart(msgspec.Struct):
    type: str = ""
    text: str | None = None  # a text part without its text: the reader refuses it


class _OlderMessage(_PlainMessage):
    """A message of the older JSON names: its content a text, or OpenAI's typed parts."""

    role: str | None = None
    content: str | list[_TextPart] = ""
    finish_reason: str | None = None

    def text(self, joined: str | None = None) -> str | None:
        """As formats._text reads it (an assistant's earlier answer's parts as written, others' on a new
        line, or ``joined``); None for parts it refuses, and refusals."""
        if isinstance(self.content, str):
            return self.content
        # Any part but text (read apart, dropped, refused as a kind not read): the reader's to read.
        texts = [p.text for p in self.content if p.type == "text"]
        if any(p.type != "text" for p in self.content) or None in texts:
            return None
        return (formats.turn_joined(self.role) if joined is None else joined).join(texts)


class _OlderAnswer(_OlderMessage):
    def text(self) -> str | None:
        return super().text("")  # one answer's parts, as written


_OTEL_SHAPE = msgspec.json.Decoder(_OtelShape)
_GENAI_MESSAGES = msgspec.json.Decoder(list[_GenAIMessage])
_GENAI_ANSWERS = msgspec.json.Decoder(list[_GenAIAnswer])
_PARTS = msgspec.json.Decoder(list[_Part])  # gen_ai.system_instructions
_OLDER_MESSAGES = msgspec.json.Decoder(list[_OlderMessage])
_OLDER_ANSWERS = msgspec.json.Decoder(list[_OlderAnswer])
_SCALAR_FIELDS = [("stringValue", pa.string()), ("intValue", pa.string()), ("doubleValue", pa.float64()),
                  ("boolValue", pa.bool_())]
# An array of strings too, which the fast path passes over where the reader reads nothing of it
# (see _Attributes): current instrumentations set gen_ai.response.finish_reasons on every span.
_ANY_VALUE = pa.struct([*_SCALAR_FIELDS, ("arrayValue", pa.struct([("values", pa.list_(pa.struct([("stringValue", pa.string())])))]))])
# Attributes of a span that are arrays, which the reader reads nothing of (but the finish reasons of the
# flattened older names: parse_otel_lines leaves those spans to it).
_PASSED_ARRAYS = ("gen_ai.response.finish_reasons", "gen_ai.request.stop_sequences", "gen_ai.request.encoding_formats")
_RESOURCE_READ = ("service.version",)  # what the reader reads of a resource's attributes
_ATTRIBUTES = pa.list_(pa.struct([("key", pa.string()), ("value", _ANY_VALUE)]))
_OTEL_PARSE = pj.ParseOptions(unexpected_field_behavior="ignore", explicit_schema=pa.schema([
    ("resourceSpans", pa.list_(pa.struct([
        ("resource", pa.struct([("attributes", _ATTRIBUTES)])),
        ("scopeSpans", pa.list_(pa.struct([("spans", pa.list_(pa.struct([
            ("traceId", pa.string()), ("spanId", pa.string()), ("startTimeUnixNano", pa.string()),
            ("endTimeUnixNano", pa.string()), ("attributes", _ATTRIBUTES),
            ("events", pa.list_(pa.struct([("name", pa.string()), ("attributes", _ATTRIBUTES)]))),
        ])))]))),
    ]))),
]))
_STRING, _INT, _DOUBLE, _BOOL = 1, 2, 3, 4  # kinds of an OTLP AnyValue, in the order formats._otel_value looks for them
_INTEGER = r"^-?[0-9]{1,18}$"  # what int() reads the same way, and two of which add up within int64
_NANOS = r"^[0-9]{1,19}$"
# A null value (pyarrow reads it as missing; the reader may not): the word alone in a text is fine. Nulls
# inside the messages' JSON text fail their typed decoding instead.
_JSON_NULL = re.compile(rb"[:,\[][ \t\r]*null")
_OLDER_JSON = ("gen_ai.prompt", "gen_ai.completion")  # the older names of JSON messages
_SESSION_SPANS = tuple(f'"{name}"'.encode() for name in formats.CHAT_SESSION_SPANS)  # the reader refuses them
_MOST_FLATTENED = 64  # messages of the flattened older names read here; a longer prompt is left to the reader
_PROMPT_KEYS = r"^gen_ai\.prompt\.(0|[1-9][0-9]*)\.(role|content)$"  # a flattened message's, as the reader finds them
_TEXT_PROMPT = r"^gen_ai\.prompt\.(0|[1-9][0-9]*)\.user$"  # a text completion's prompt: the reader's
# The same, and a flattened message's tool calls, which the reader refuses in a prompt.
_PROMPT_FIELDS = r"^gen_ai\.prompt\.(0|[1-9][0-9]*)\.(role$|content$|tool_calls\.|function_call\.)"
# A flattened choice past the first, or a choice's tool call: the reader's, which makes each choice a
# trace and refuses a tool call.
_OTHER_CHOICES = r"^gen_ai\.completion\.([1-9][0-9]*\.(role|content)$|(0|[1-9][0-9]*)\.(tool_calls|function_call)\.)"
# A text that the reader may read as a JSON list of parts: "[" after whitespace (str.isspace's, as _NOT_SPACE).
_JSON_LIST = "^" + _NOT_SPACE.replace("[^", "[", 1) + "*\\["


class _Attributes:
    """OTLP attribute lists, one per owner (a resource, a span, an event), read as
    :func:`ctpipe.formats._attrs` reads them: the last of a key wins. An owner is ``sure`` when each
    of its values is one the fast path reads exactly as the reader does: a string, a double, a boolean,
    or an integer of up to 18 digits (anything else, an empty value or an array for one, is left to
    the reader)."""

    def __init__(self, lists: pa.Array, arrays: tuple[str, ...] = (), arrays_but: tuple[str, ...] | None = None):
        """``arrays``: the keys whose value may be an array of strings, passed over (any key but
        ``arrays_but``'s, where it is given)."""
        flat, self.parents = _fields(lists.flatten()), pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
        self.keys, self.values = flat["key"], _fields(flat["value"])
        valid = [_ok(self.values[name].is_valid()) for name, _ in _SCALAR_FIELDS]
        self.kind = np.select(valid, [_STRING, _INT, _DOUBLE, _BOOL], 0)
        integer_ok = _ok(pc.match_substring_regex(self.values["intValue"], _INTEGER))
        double_ok = _ok(pc.is_finite(self.values["doubleValue"]))
        self._read = (self.kind != 0) & ((self.kind != _INT) | integer_ok) & ((self.kind != _DOUBLE) | double_ok)
        passed_over = ~_ok(self.keys.is_valid())  # an item without a key
        if arrays or arrays_but is not None:  # an array of strings alone, which the reader reads as a list of them
            array = self.values["arrayValue"]
            items = array.field("values")
            strings = _all_per_row(_ok(pc.list_flatten(items).field("stringValue").is_valid()),
                                   pc.list_parent_indices(items).to_numpy(zero_copy_only=False), len(array))
            passed = ~_ok(pc.is_in(self.keys, value_set=pa.array(arrays_but, pa.string()))) if arrays_but is not None \
                else _ok(pc.is_in(self.keys, value_set=pa.array(arrays, pa.string())))
            passed_over |= (self.kind == 0) & _ok(array.is_valid()) & strings & passed
        self.sure = np.bincount(self.parents[~(self._read | passed_over)], minlength=len(lists)) == 0
        self._positions = np.arange(len(self.parents))
        self._owners = len(lists)

    def find(self, key: str) -> np.ndarray:
        """Per owner, the position of the value of ``key`` (-1: absent)."""
        at = np.full(self._owners, -1)
        match = _ok(pc.equal(self.keys, key))
        np.maximum.at(at, self.parents[match], self._positions[match])
        return at

    def count(self, pattern: str) -> np.ndarray:
        """Per owner, how many of its keys match ``pattern``."""
        match = _ok(pc.match_substring_regex(self.keys, pattern))
        return np.bincount(self.parents[match], minlength=self._owners)

    def has(self, *keys: str) -> np.ndarray:
        """Per owner, whether it has any of ``keys``."""
        match = _ok(pc.is_in(self.keys, value_set=pa.array(keys, pa.string())))
        return np.bincount(self.parents[match], minlength=self._owners) > 0

    def holds(self, key: str, values: Iterable[str]) -> np.ndarray:
        """Per owner, whether its value of ``key`` is an array holding any of the strings ``values``."""
        items = self.values["arrayValue"].field("values")
        hit = _ok(pc.is_in(pc.list_flatten(items).field("stringValue"), value_set=pa.array(sorted(values), pa.string())))
        held = np.bincount(pc.list_parent_indices(items).to_numpy(zero_copy_only=False)[hit], minlength=len(items)) > 0
        at = self.find(key)
        found = np.zeros(len(at), bool)
        found[at >= 0] = held[at[at >= 0]]
        return found

    def get(self, key: str, kind: int) -> tuple[pa.Array, np.ndarray]:
        """(per owner, the value of ``key`` when it is of ``kind``, null otherwise; whether it is
        absent or of that kind)."""
        return self.pick(self.find(key), kind)

    def pick(self, at: np.ndarray, kind: int) -> tuple[pa.Array, np.ndarray]:
        """:meth:`get` of the values at positions ``at`` (-1: none); an integer as int64, a value the
        fast path does not read as null."""
        found, of_kind = at >= 0, np.zeros(len(at), bool)
        of_kind[found] = (self.kind[at[found]] == kind) & self._read[at[found]]
        name = {_STRING: "stringValue", _INT: "intValue", _DOUBLE: "doubleValue"}[kind]
        values = self.values[name].take(pa.array(at, mask=~of_kind))
        return (pc.cast(values, pa.int64()) if kind == _INT else values), ~found | of_kind


class _Evaluations:
    """The ``gen_ai.evaluation.result`` events of spans (a list of events per span), as the reader
    makes scores of them. A span is ``sure`` when each of its evaluations has a name, a number or no
    value, a label or none, and only values :class:`_Attributes` reads."""

    def __init__(self, events: pa.ListArray):
        event = _fields(events.flatten())
        self._span = pc.list_parent_indices(events).to_numpy(zero_copy_only=False)
        self._evaluation = _ok(pc.equal(event["name"], "gen_ai.evaluation.result"))
        attrs = _Attributes(event["attributes"])
        (self._name, name_ok), (double, double_ok), (integer, integer_ok), (self._label, label_ok) = (
            attrs.get(f"gen_ai.evaluation.{key}", kind) for key, kind in (
                ("name", _STRING), ("score.value", _DOUBLE), ("score.value", _INT), ("score.label", _STRING)))
        self._value = pc.coalesce(double, pc.cast(integer, pa.float64()))
        ok = ~self._evaluation | (attrs.sure & (attrs.find("gen_ai.evaluation.name") >= 0) & name_ok
                                  & (double_ok | integer_ok) & label_ok)
        self.sure = np.bincount(self._span[~ok], minlength=len(events)) == 0

    def scores(self, spans: np.ndarray) -> pa.ListArray:
        """The scores of each of ``spans`` (ascending), their evaluations in order."""
        at = np.flatnonzero(self._evaluation & np.isin(self._span, spans))
        per_span = np.bincount(self._span[at], minlength=len(self.sure))[spans]
        take = pa.array(at)
        return pa.ListArray.from_arrays(
            pa.array(np.concatenate([[0], np.cumsum(per_span)]), pa.int32()),
            pa.StructArray.from_arrays([self._name.take(take), self._value.take(take), self._label.take(take),
                                        pa.array(["otel"] * len(at), pa.string())], fields=list(SCORES.value_type)),
            type=SCORES)


def _flattened(attrs: _Attributes, chosen: np.ndarray) -> tuple[pa.ListArray, pa.Array, np.ndarray]:
    """Per span, the messages and the completion of the flattened older names for the spans
    ``chosen`` (none for the others), as the reader reads them: ``gen_ai.prompt.<i>.role`` (user when
    there is none) and ``.content`` ("" for a system message without one) of each index present, and
    ``gen_ai.completion.0.content`` ("" when there is none); and whether each span's are read so:
    texts, indices from 0 without a gap (no more than :data:`_MOST_FLATTENED`), none that the reader
    may read as JSON parts, no tool calls, no other turn without content, and one choice, not
    stopped by the content filter."""
    spans, roles, contents = [], [], []
    ok, going = np.ones(len(chosen), bool), chosen.copy()
    read = np.zeros(len(chosen), np.int64)  # the prompt's keys read, to be all of them
    for i in range(_MOST_FLATTENED + 1):
        if not going.any():
            break
        content_at, role_at = attrs.find(f"gen_ai.prompt.{i}.content"), attrs.find(f"gen_ai.prompt.{i}.role")
        going &= (content_at >= 0) | (role_at >= 0)
        at = np.flatnonzero(going)
        if i == _MOST_FLATTENED:
            ok[at] = False
            break
        read[at] += (content_at[at] >= 0).astype(np.int64) + (role_at[at] >= 0)
        content, content_ok = attrs.pick(content_at[at], _STRING)
        role, role_ok = attrs.pick(role_at[at], _STRING)
        ok[at] &= content_ok & role_ok & ~_ok(pc.match_substring_regex(content, _JSON_LIST))
        ok[at] &= (content_at[at] >= 0) | _ok(pc.equal(role, "system"))  # a turn not recorded: the reader's to refuse
        spans.append(at)
        roles.append(pc.fill_null(role, "user"))
        contents.append(pc.fill_null(content, ""))
    ok &= ~chosen | (read == attrs.count(_PROMPT_FIELDS))
    span_of = np.concatenate(spans) if spans else np.zeros(0, np.int64)
    order = pa.array(np.argsort(span_of, kind="stable"))  # a span's messages together, in order
    offsets = np.concatenate([[0], np.cumsum(np.bincount(span_of, minlength=len(chosen)))])
    messages = chats(offsets, *(pa.concat_arrays(texts).take(order) if texts else [] for texts in (roles, contents)))
    if not chosen.any():
        return messages, pa.nulls(len(chosen), pa.string()), ok
    (completion, completion_ok), (finish, finish_ok), (role, role_ok) = (
        attrs.get(f"gen_ai.completion.0.{name}", _STRING) for name in ("content", "finish_reason", "role"))
    ok &= ~chosen | (completion_ok & finish_ok & role_ok & (attrs.count(_OTHER_CHOICES) == 0)
                     & ~_not_answers(finish) & ~_ok(pc.equal(role, "thinking"))
                     & ~_ok(pc.match_substring_regex(completion, _JSON_LIST)))
    return messages, pc.fill_null(completion, ""), ok


def _older_json(attrs: _Attributes, chosen: np.ndarray) -> tuple[pa.ListArray, pa.Array, np.ndarray]:
    """Per span, the messages and the completion of the older JSON names (``gen_ai.prompt``,
    ``gen_ai.completion``) for the spans ``chosen`` (null for the others), as the reader reads them;
    and whether each span's are read so (texts holding JSON lists of messages that
    :class:`_OlderMessage` decodes, and a completion of one message: of several, each is a choice,
    which the reader makes a trace of its own)."""
    (prompt, prompt_ok), (completion, completion_ok) = (attrs.get(name, _STRING) for name in _OLDER_JSON)
    at = np.flatnonzero(chosen)
    messages, messages_ok = _messages(prompt.take(pa.array(at)).to_pylist(), _OLDER_MESSAGES)
    answers, answers_ok = _messages(completion.take(pa.array(at)).to_pylist(), _OLDER_ANSWERS)
    ok = ~chosen | (prompt_ok & completion_ok)
    ok[at] &= messages_ok & answers_ok & (pc.list_value_length(answers).to_numpy(zero_copy_only=False) <= 1)
    texts = _joined(answers)
    position = np.full(len(chosen), -1)
    position[at] = np.arange(len(at))
    spread = pa.array(position, mask=~chosen)
    return messages.take(spread), texts.take(spread), ok


def _messages(encoded: list[str | None], decoder: msgspec.json.Decoder,
              system: list[str | None] | None = None) -> tuple[pa.ListArray, np.ndarray]:
    """Each JSON messages attribute (None or "" is none) as the list of messages ``decoder`` reads,
    with the ``text()`` of each, after a system message of the JSON parts of ``system`` when it has
    some; and whether it could be read so (otherwise the reader decides)."""
    lengths, roles, texts, sure = [0], [], [], np.ones(len(encoded), bool)
    for i, text in enumerate(encoded):
        try:
            messages = decoder.decode(text or "[]")
            instructions = _PARTS.decode(system[i]) if system is not None and system[i] else []
        except (msgspec.DecodeError, RecursionError):
            messages, instructions, sure[i] = [], [], False
        first = len(texts)
        if instructions:
            roles.append("system")
            texts.append(_parts_text(instructions))
        for m in messages:
            roles.append(m.role)
            texts.append(m.text())
            if getattr(m, "finish_reason", None) in formats.not_answers():  # the reader refuses its answer
                sure[i] = False
        if None in texts[first:]:  # parts the reader refuses (an image, a file): it decides
            texts[first:] = [""] * (len(texts) - first)
            sure[i] = False
        lengths.append(lengths[-1] + len(messages) + bool(instructions))
    return chats(lengths, roles, texts), sure


def _joined(chats: pa.ListArray) -> pa.Array:
    """The texts of each chat's messages, joined: a completion of several messages."""
    return pc.binary_join(pa.ListArray.from_arrays(chats.offsets, pc.struct_field(chats.values, "content")), "")


def parse_otel_lines(lines: list[bytes]) -> tuple[pa.Table, np.ndarray] | None:
    """:func:`parse_lines` for OTLP JSON exports whose GenAI spans carry the current
    ``gen_ai.input.messages`` / ``gen_ai.output.messages``, or the older ``gen_ai.prompt`` /
    ``gen_ai.completion`` (JSON), or the older flattened ``gen_ai.prompt.<i>.content`` /
    ``gen_ai.completion.0.content``: the rows :func:`ctpipe.formats.from_otel` and the trace's
    validation make, a row per GenAI span, with the same values. A line is taken whole or not at
    all, as the reader maps it: one holding a null value (pyarrow reads it as missing), a value
    other than those :class:`_Attributes` reads, messages JSON that the typed decoding refuses, a
    time outside 1970 to 2242, or a record the validation fails is left to the reader, as is a
    block pyarrow refuses.
    """
    shaped = [i for i in _shaped(lines, _OTEL_SHAPE)
              if not (b"null" in lines[i] and _JSON_NULL.search(lines[i])) and b'"trace_id"' not in lines[i]
              and not any(name in lines[i] for name in _SESSION_SPANS)]
    chosen = [lines[i] for i in shaped]
    table = _read_json(chosen, _OTEL_PARSE)
    if table is None:
        return None
    resource_spans = table["resourceSpans"].combine_chunks()
    line_of_resource = pc.list_parent_indices(resource_spans).to_numpy(zero_copy_only=False)
    rs = _fields(resource_spans.flatten())
    scope_spans = rs["scopeSpans"]
    resource_of_scope = pc.list_parent_indices(scope_spans).to_numpy(zero_copy_only=False)
    spans = _fields(scope_spans.flatten())["spans"]
    resource_of_span = resource_of_scope[pc.list_parent_indices(spans).to_numpy(zero_copy_only=False)]
    span = _fields(spans.flatten())
    line_of_span = line_of_resource[resource_of_span]

    resource = _Attributes(_fields(rs["resource"])["attributes"], arrays_but=_RESOURCE_READ)
    attrs = _Attributes(span["attributes"], arrays=_PASSED_ARRAYS)
    inputs, outputs = (attrs.get(f"gen_ai.{side}.messages", _STRING) for side in ("input", "output"))
    # Which names a span's messages are read from: the current ones, or else the older JSON ones, or
    # else the older flattened ones, as the reader looks for them; of a model call's span only.
    operation_at = attrs.find("gen_ai.operation.name")
    operation, operation_ok = attrs.pick(operation_at, _STRING)
    request, request_ok = attrs.get("llm.request.type", _STRING)
    model_call = np.where(operation_at < 0, ~_ok(pc.is_in(request, value_set=pa.array(formats.OTHER_REQUESTS))),
                          _ok(pc.is_in(operation, value_set=pa.array(formats.MODEL_CALLS))))
    current = model_call & attrs.has("gen_ai.input.messages", "gen_ai.output.messages")
    older_json = model_call & attrs.has(*_OLDER_JSON)
    json_named = ~current & older_json
    flattened = model_call & ~current & ~older_json & (attrs.count(_PROMPT_KEYS) > 0)
    genai = current | json_named | flattened
    # A span that says it is a model call (formats._says_model_call), without content: the reader's no_content.
    silent = model_call & ((operation_at >= 0) | attrs.has("gen_ai.request.model")) & ~genai
    sure = attrs.sure & resource.sure[resource_of_span] & inputs[1] & outputs[1] & operation_ok & request_ok & ~silent
    # Spans of instrumentations with names of their own for their content (the Vercel AI SDK's, Google
    # ADK's, OpenInference's), and Strands Agents' (refused without a system prompt): the reader's.
    sure &= (attrs.count(_TEXT_PROMPT) == 0) & ~attrs.has(*formats.OWN_NAMES)
    for key in ("gen_ai.system", "gen_ai.provider.name"):
        sure &= ~_ok(pc.equal(attrs.get(key, _STRING)[0], formats.STRANDS))
    sure &= ~(flattened & attrs.has(_PASSED_ARRAYS[0]))  # its choices' finish reasons, where they have none
    # A span's finish reason that is no answer (content_filter) stands for a message without its own.
    sure &= ~attrs.holds(_PASSED_ARRAYS[0], formats.not_answers())
    vendor, model = (attrs.get(key, _STRING)[0] for key in ("gen_ai.system", "gen_ai.request.model"))
    sure &= ~(flattened & _ok(pc.and_kleene(pc.is_in(vendor, value_set=pa.array(formats.BEDROCK_SYSTEMS)),  # the reader's
                                            pc.match_substring_regex(model, f"^{formats.BEDROCK_CLAUDE}$"))))
    older = [(flattened, *_flattened(attrs, flattened)), (json_named, *_older_json(attrs, json_named))]
    for _, _, _, older_ok in older:
        sure &= older_ok
    for name in ("startTimeUnixNano", "endTimeUnixNano"):
        sure &= ~genai | _ok(pc.match_substring_regex(span[name], _NANOS))

    evaluations = _Evaluations(span["events"])
    sure &= evaluations.sure
    # Content on events (semconv v1.26 and v1.27) is the reader's, even of a span without GenAI attributes.
    events = span["events"]
    on_events = _ok(pc.is_in(_fields(events.flatten())["name"], value_set=pa.array(list(formats.CONTENT_EVENTS))))
    sure &= np.bincount(pc.list_parent_indices(events).to_numpy(zero_copy_only=False)[on_events], minlength=len(sure)) == 0

    # Lines whose every resource and span is sure; of those, the rows of their GenAI spans.
    unsure = np.concatenate([line_of_span[~sure], line_of_resource[~resource.sure]])
    line_ok = np.bincount(unsure, minlength=len(chosen)) == 0
    rows = np.flatnonzero(genai & line_ok[line_of_span])
    if not len(rows):
        return None
    take = pa.array(rows)
    ok, nanos = np.ones(len(rows), bool), []
    for name in ("startTimeUnixNano", "endTimeUnixNano"):
        text = span[name].take(take)
        fits = _ok(pc.or_(pc.less(pc.utf8_length(text), 19), pc.less_equal(text, "9223372036854775807")))
        ok &= fits
        fitting = pc.if_else(pa.array(fits), text, pa.scalar("0"))
        nanos.append(pc.cast(fitting, pa.int64()).to_numpy(zero_copy_only=False))
    start_ns, end_ns = nanos
    # Cut to the microsecond, as the reader does: every time that fits (1970 to 2262) is one it reads.
    start_us, end_us = (ns // 1000 for ns in nanos)

    instructions, instructions_ok = attrs.get("gen_ai.system_instructions", _STRING)
    ok &= instructions_ok[rows]
    messages, prompts_ok = _messages(inputs[0].take(take).to_pylist(), _GENAI_MESSAGES,
                                     instructions.take(take).to_pylist())
    answers, answers_ok = _messages(outputs[0].take(take).to_pylist(), _GENAI_ANSWERS)
    ok &= prompts_ok & answers_ok & _ok(pc.less_equal(pc.list_value_length(answers), 1))  # a trace per choice: the reader's
    completion = _joined(answers)
    for named, older_messages, older_completion, _ in older:
        read = pa.array(named[rows])
        messages = pc.if_else(read, older_messages.take(take), messages)
        completion = pc.if_else(read, older_completion.take(take), completion)

    # The model: the response's, or the request's, or ""; its version the resource's service.version, or the model.
    (response_model, response_ok), (request_model, request_ok) = (attrs.get(f"gen_ai.{side}.model", _STRING)
                                                                  for side in ("response", "request"))
    ok &= (response_ok & request_ok)[rows]
    model = pc.coalesce(_empty_as_null(response_model), _empty_as_null(request_model), pa.scalar("")).take(take)
    version, version_ok = resource.get("service.version", _STRING)
    ok &= version_ok[resource_of_span[rows]]
    version = pc.coalesce(_empty_as_null(version.take(pa.array(resource_of_span[rows]))), model)

    counts = []  # the current names' token counts, or the older ones', or 0
    for now, before in (("input_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens")):
        present, older = attrs.find(f"gen_ai.usage.{now}"), attrs.find(f"gen_ai.usage.{before}")
        count, count_ok = attrs.pick(np.where(present >= 0, present, older)[rows], _INT)
        ok &= count_ok
        counts.append(pc.fill_null(count, 0))

    n = len(rows)
    ids = [pc.fill_null(span[name].take(take), "") for name in ("traceId", "spanId")]
    ok &= _ok(pc.and_(*(pc.greater(pc.binary_length(i), 0) for i in ids)))  # the reader's to refuse
    trace_id = pc.binary_join_element_wise(*ids, ":")
    canonical = {
        "trace_id": trace_id,
        "start_time": pa.array(start_us, pa.int64()).cast(_TIME),
        "end_time": pa.array(end_us, pa.int64()).cast(_TIME),
        "model": pa.StructArray.from_arrays([model, version], fields=list(_MODEL)),
        "messages": messages,
        "completion": completion,
        "usage": pa.StructArray.from_arrays([counts[0], counts[1], pc.add(counts[0], counts[1])], fields=list(_USAGE)),
        "latency_ms": pa.array((end_ns - start_ns).astype(np.float64) / 1e6, pa.float64()),
        "feedback": pa.StructArray.from_arrays([pa.nulls(n, pa.string()), pa.nulls(n, pa.float64())],
                                               fields=list(_FEEDBACK)),
        "reference_answer": pa.nulls(n, pa.string()),
        "scores": evaluations.scores(rows),
    }
    ok &= _canonical(canonical, n)
    line = line_of_span[rows]
    line_ok &= np.bincount(line[~ok], minlength=len(chosen)) == 0
    return _taken(canonical, np.flatnonzero(line_ok[line]), np.asarray(shaped)[line])


def _no_scores(n: int) -> pa.ListArray:
    """A scores column of ``n`` rows of none, as a source that carries none gives them."""
    return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], SCORES.value_type), type=SCORES)


def _unlabelled(n: int) -> dict[str, pa.Array]:
    """The feedback, reference answer and scores of ``n`` rows of a source that carries none."""
    return {"feedback": pa.StructArray.from_arrays([pa.nulls(n, pa.string()), pa.nulls(n, pa.float64())],
                                                   fields=list(_FEEDBACK)),
            "reference_answer": pa.nulls(n, pa.string()), "scores": _no_scores(n)}


def _taken(canonical: dict[str, pa.Array], keep: np.ndarray, lines: np.ndarray) -> tuple[pa.Table, np.ndarray] | None:
    """(the rows ``keep`` of a fast path's canonical columns; the line of each, of ``lines``, one per
    row); None when it keeps none."""
    if not len(keep):
        return None
    out = pa.table([canonical[name] for name, _ in _FIELDS], schema=pa.schema(_FIELDS))
    return (out if len(keep) == out.num_rows else out.take(keep)), lines[keep]


def _empty_as_null(texts: pa.Array) -> pa.Array:
    """``texts`` with "" as null: for the readers' ``a or b``, with :func:`pyarrow.compute.coalesce`."""
    return pc.if_else(pc.equal(texts, ""), pa.scalar(None, pa.string()), texts)


def _fields(struct: pa.StructArray) -> dict[str, pa.Array]:
    """A struct column's children by name, null where the struct is."""
    return dict(zip((f.name for f in struct.type), struct.flatten()))


def _ok(mask) -> np.ndarray:
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def _not_answers(finish_reasons: pa.Array) -> np.ndarray:
    """Where a finish reason says the answer is none (:func:`formats.not_answers`): the reader's to refuse.
    Its set is made an array here, not at import, which would import pandas in the workers."""
    return _ok(pc.is_in(finish_reasons, value_set=pa.array(sorted(formats.not_answers()))))


def _all_per_row(element_ok: np.ndarray, parents: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(parents[~element_ok], minlength=n) == 0


def _valid(table: pa.Table, lines: list[bytes]) -> np.ndarray:
    """Which rows the exact path would accept as they are (see the module's doc)."""
    col = {name: table[name].combine_chunks() for name in table.column_names}
    ok = _canonical(col, table.num_rows)
    for name in ("start_time", "end_time"):
        ok &= _ok(pc.match_substring_regex(col[name], _RFC3339))
    return ok


def _canonical(col: dict[str, pa.Array], n: int) -> np.ndarray:
    """Which rows of canonical columns (times aside) :class:`ctpipe.traces.TraceRecord` accepts."""

    def nonempty(a: pa.Array) -> np.ndarray:
        return _ok(pc.greater(pc.utf8_length(a), 0))

    ok = nonempty(col["trace_id"])
    model = col["model"]
    ok &= _ok(model.is_valid()) & nonempty(model.field("name")) & nonempty(model.field("version"))
    ok &= _ok(pc.match_substring_regex(col["completion"], _NOT_SPACE))
    usage = col["usage"]
    ok &= _ok(usage.is_valid())
    for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
        ok &= _ok(pc.greater_equal(usage.field(name), 0))
    ok &= _ok(pc.and_kleene(pc.greater_equal(col["latency_ms"], 0), pc.is_finite(col["latency_ms"])))

    messages = col["messages"]
    ok &= _ok(pc.greater_equal(pc.list_value_length(messages), 1))
    flat = messages.flatten()
    parents = pc.list_parent_indices(messages).to_numpy(zero_copy_only=False)
    roles = flat.field("role")
    known = pc.and_kleene(pc.is_in(roles, value_set=pa.array(traces.ROLES)), flat.field("content").is_valid())
    ok &= _all_per_row(_ok(known), parents, n)
    prompt_at = prompts_at(roles, parents, n)
    ok &= prompt_at >= 0
    # A chat ending in the assistant's turn: a prefill that some APIs' answers continue, which their
    # readers join to the answer (formats._continues); rare, and theirs to tell.
    last = np.append(parents[1:] != parents[:-1], True)[:len(parents)]
    ok[parents[last & _ok(pc.equal(roles, "assistant"))]] = False
    has = np.flatnonzero(prompt_at >= 0)
    ok[has] &= _ok(pc.match_substring_regex(flat.field("content").take(pa.array(prompt_at[has])), _NOT_SPACE))

    feedback = col["feedback"]
    thumb = feedback.field("thumb")
    ok &= _ok(pc.or_kleene(pc.is_null(thumb), pc.is_in(thumb, value_set=pa.array(["up", "down"]))))
    rating = feedback.field("rating")
    ok &= _ok(pc.or_kleene(pc.is_null(rating), pc.and_kleene(pc.greater_equal(rating, 1), pc.less_equal(rating, 5))))
    scores = col["scores"]
    elements = scores.flatten()
    score_parents = pc.list_parent_indices(scores).to_numpy(zero_copy_only=False)
    value = elements.field("value")  # a NaN or infinite one only a Parquet row holds: the exact path refuses it
    ok &= _all_per_row(_ok(pc.and_kleene(pc.and_kleene(elements.field("name").is_valid(), elements.field("source").is_valid()),
                                         pc.or_kleene(pc.is_null(value), pc.is_finite(value)))), score_parents, n)
    return ok


def from_records(found: list[tuple[str, int, traces.TraceRecord]]) -> pa.Table:
    """(source file, line or row, record) triples as a :data:`RAW_SCHEMA` table, in their order.

    Built column by column (Python lists, then Arrow arrays), several times faster than row dicts.
    """
    recs = [r for _, _, r in found]
    offsets = [0]
    for r in recs:
        offsets.append(offsets[-1] + len(r.messages))
    messages = chats(offsets, [m.role for r in recs for m in r.messages], [m.content for r in recs for m in r.messages])
    columns = {
        "trace_id": [r.trace_id for r in recs],
        "start_time": [r.start_time for r in recs],
        "end_time": [r.end_time for r in recs],
        "model": [(r.model.name, r.model.version) for r in recs],
        "messages": messages,
        "completion": [r.completion for r in recs],
        "usage": [(r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) for r in recs],
        "latency_ms": [r.latency_ms for r in recs],
        "feedback": [(r.feedback.thumb, r.feedback.rating) for r in recs],
        "reference_answer": [r.reference_answer for r in recs],
        "scores": [[(s.name, s.value, s.label, s.source) for s in r.scores] for r in recs],
        "source_file": [f for f, _, _ in found],
        "source_line": [n for _, n, _ in found],
    }
    return pa.Table.from_arrays([columns[f.name] if isinstance(columns[f.name], pa.Array) else pa.array(columns[f.name], f.type)
                                 for f in RAW_SCHEMA], schema=RAW_SCHEMA)
