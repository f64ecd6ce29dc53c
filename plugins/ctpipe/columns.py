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
:func:`ctpipe.formats.from_openai` and the same validation would make.

:func:`from_records` turns records of the exact path (and of the other formats) into the same table.
"""

from __future__ import annotations

import calendar
import io
from datetime import datetime

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from ctpipe import traces
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
# A character that is not whitespace by Python's str.isspace (which the exact path's blank check uses).
_NOT_SPACE = "[^\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"


class _Shape(msgspec.Struct):
    trace_id: str


_SHAPE = msgspec.json.Decoder(_Shape)


class _OpenAIRequest(msgspec.Struct):
    messages: msgspec.Raw


class _OpenAIResponse(msgspec.Struct):
    id: str


class _OpenAIShape(msgspec.Struct):
    request: _OpenAIRequest
    response: _OpenAIResponse


_OPENAI_SHAPE = msgspec.json.Decoder(_OpenAIShape)
_OPENAI_PARSE = pj.ParseOptions(unexpected_field_behavior="ignore", explicit_schema=pa.schema([
    ("request", pa.struct([("messages", MESSAGES)])),
    ("response", pa.struct([("id", pa.string()), ("created", pa.int64()), ("model", pa.string()),
                            ("system_fingerprint", pa.string()), ("choices", pa.list_(pa.struct([("message", MESSAGES.value_type)]))),
                            ("usage", _USAGE)])),
    ("metadata", pa.struct([("model_version", pa.string()), ("thumb", pa.string()), ("rating", pa.float64())])),
    ("latency_ms", pa.float64()),
]))


def micros(ts: datetime) -> int:
    """Microseconds since the epoch, exactly (a float timestamp would round). Whole-number arithmetic
    on the UTC fields, so that datetime subclasses (Airflow's pendulum times) give the same answer."""
    return calendar.timegm(ts.utctimetuple()) * 1_000_000 + ts.microsecond


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
    times = []
    for name in ("start_time", "end_time"):
        checked = pc.if_else(pa.array(valid), table[name].combine_chunks(), pa.scalar(None, pa.string()))
        try:  # only the rows that passed the pattern: a date such as February 30th still fails here
            times.append(pc.cast(checked, _TIME))
        except pa.ArrowInvalid:
            return None
    valid &= _ok(pc.greater_equal(times[1], times[0]))
    table = table.set_column(1, "start_time", times[0]).set_column(2, "end_time", times[1])
    # A missing feedback or scores, null as pyarrow reads it, is what the exact path makes of it: no
    # thumb and no rating, no scores.
    feedback, scores = table["feedback"].combine_chunks(), table["scores"].combine_chunks()
    table = table.set_column(8, "feedback", pa.StructArray.from_arrays(
        [pc.struct_field(feedback, "thumb"), pc.struct_field(feedback, "rating")], fields=list(_FEEDBACK)))
    table = table.set_column(10, "scores", pa.ListArray.from_arrays(scores.offsets, scores.values, type=SCORES))
    keep = np.flatnonzero(valid)
    return (table if len(keep) == len(table) else table.take(keep)), np.asarray(shaped)[keep]


def _shaped(lines: list[bytes], shape: msgspec.json.Decoder) -> list[int]:
    """The index of each line that ``shape`` decodes (skipping, at memory speed, what it does not name)."""
    shaped = []
    for i, line in enumerate(lines):
        try:
            shape.decode(line)
            shaped.append(i)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            pass
    return shaped


def _read_json(lines: list[bytes], options: pj.ParseOptions) -> pa.Table | None:
    """The lines as one table, or None when pyarrow refuses any of them (a type other than the
    schema's, a duplicated key, bad UTF-8) or reads them as another number of rows."""
    if not lines:
        return None
    try:
        table = pj.read_json(io.BytesIO(b"\n".join(lines)),
                             read_options=pj.ReadOptions(use_threads=False, block_size=1 << 30), parse_options=options)
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    return table if table.num_rows == len(lines) else None


def parse_openai_lines(lines: list[bytes]) -> tuple[pa.Table, np.ndarray] | None:
    """:func:`parse_lines` for OpenAI chat-completion logs of one choice, request beside response:
    the rows :func:`ctpipe.formats.from_openai` and the trace's validation make of them, with the
    same values, column by column. Anything else (several choices, a flat log, content as parts,
    a field null where the reader would tell null from missing, a time beyond 2242) is left to
    the exact path, as is a block pyarrow refuses.
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
    # A null id, model or chat fails the trace's own checks below; a null created would read as 1970.
    one = _ok(pc.equal(pc.list_value_length(choices), 1))
    sure = one & _ok(response["created"].is_valid())
    first = np.asarray(choices.offsets)[:-1]
    answer = _fields(_fields(choices.values.take(pa.array(first, mask=~one)))["message"])  # null: a blank completion
    counts = [_fields(usage)[name] for name in ("prompt_tokens", "completion_tokens", "total_tokens")]
    for c in counts:  # usage absent or null: no tokens; a count of it null: left to the reader
        sure &= _ok(pc.or_kleene(pc.invert(usage.is_valid()), c.is_valid()))
    # Times as datetime.fromtimestamp makes them: whole seconds, and the end rounded half to even.
    created = pc.fill_null(response["created"], 0).to_numpy(zero_copy_only=False)
    latency = pc.fill_null(table["latency_ms"].combine_chunks(), 0.0)
    end_s = created + latency.to_numpy(zero_copy_only=False) / 1000
    with np.errstate(invalid="ignore"):
        sure &= (created >= 0) & (created < 2**33) & (end_s >= 0) & (end_s < 2**33)
    whole, fraction = np.divmod(np.where(sure, end_s, 0.0), 1.0)
    end_us = whole.astype(np.int64) * 1_000_000 + np.rint(fraction * 1e6).astype(np.int64)
    empty = pa.scalar(None, pa.string())
    version = pc.coalesce(*(pc.if_else(pc.equal(v, ""), empty, v) for v in (metadata["model_version"],
                                                                           response["system_fingerprint"])),
                          response["model"])
    message = _fields(messages.values)  # a null one (skipped by the reader) has no role: the exact path decides
    canonical = {
        "trace_id": response["id"],
        "start_time": pa.array(created * 1_000_000, pa.int64()).cast(_TIME),
        "end_time": pa.array(end_us, pa.int64()).cast(_TIME),
        "model": pa.StructArray.from_arrays([response["model"], version], fields=list(_MODEL)),
        "messages": pa.ListArray.from_arrays(messages.offsets, pa.StructArray.from_arrays(
            [message["role"], pc.fill_null(message["content"], "")], ["role", "content"]), type=MESSAGES,
            mask=pc.invert(messages.is_valid())),
        "completion": pc.fill_null(answer["content"], ""),
        "usage": pa.StructArray.from_arrays([pc.fill_null(c, 0) for c in counts], fields=list(_USAGE)),
        "latency_ms": latency,
        "feedback": pa.StructArray.from_arrays([metadata["thumb"], metadata["rating"]], fields=list(_FEEDBACK)),
        "reference_answer": pa.nulls(n, pa.string()),
        "scores": pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], SCORES.value_type),
                                           type=SCORES),
    }
    sure &= _canonical(canonical, n)  # latency >= 0 among its rules: the end is never before the start
    keep = np.flatnonzero(sure)
    if not len(keep):
        return None
    out = pa.table([canonical[name] for name, _ in _FIELDS], schema=pa.schema(_FIELDS))
    return (out if len(keep) == n else out.take(keep)), np.asarray(shaped)[keep]


def _fields(struct: pa.StructArray) -> dict[str, pa.Array]:
    """A struct column's children by name, null where the struct is."""
    return dict(zip((f.name for f in struct.type), struct.flatten()))


def _ok(mask) -> np.ndarray:
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def _all_per_row(element_ok: np.ndarray, parents: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(parents[~element_ok], minlength=n) == 0


def _valid(table: pa.Table, lines: list[bytes]) -> np.ndarray:
    """Which rows the exact path would accept as they are (see the module's doc)."""
    col = {name: table[name].combine_chunks() for name in table.column_names}
    ok = _canonical(col, table.num_rows)
    for name in ("start_time", "end_time"):
        ok &= _ok(pc.match_substring_regex(col[name], _RFC3339))
    # A missing feedback or scores is allowed, an explicit null is not: pyarrow reads both as null,
    # so a null one is accepted only when its key is nowhere in the line.
    for name, key in (("feedback", b'"feedback"'), ("scores", b'"scores"')):
        missing = np.flatnonzero(_ok(col[name].is_null()))
        for i in missing:
            if key in lines[i]:
                ok[i] = False
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
    ok &= np.bincount(parents[_ok(pc.equal(roles, "user"))], minlength=n) > 0

    feedback = col["feedback"]
    thumb = feedback.field("thumb")
    ok &= _ok(pc.or_kleene(pc.is_null(thumb), pc.is_in(thumb, value_set=pa.array(["up", "down"]))))
    rating = feedback.field("rating")
    ok &= _ok(pc.or_kleene(pc.is_null(rating), pc.and_kleene(pc.greater_equal(rating, 1), pc.less_equal(rating, 5))))
    scores = col["scores"]
    elements = scores.flatten()
    score_parents = pc.list_parent_indices(scores).to_numpy(zero_copy_only=False)
    ok &= _all_per_row(_ok(pc.and_kleene(elements.field("name").is_valid(), elements.field("source").is_valid())), score_parents, n)
    return ok


def from_records(found: list[tuple[str, int, traces.TraceRecord]]) -> pa.Table:
    """(source file, line or row, record) triples as a :data:`RAW_SCHEMA` table, in their order.

    Built column by column (Python lists, then Arrow arrays), several times faster than row dicts.
    """
    recs = [r for _, _, r in found]
    offsets = [0]
    for r in recs:
        offsets.append(offsets[-1] + len(r.messages))
    messages = pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()),
        pa.StructArray.from_arrays([pa.array([m.role for r in recs for m in r.messages], pa.string()),
                                    pa.array([m.content for r in recs for m in r.messages], pa.string())],
                                   ["role", "content"]),
    )
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
