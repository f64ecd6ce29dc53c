"""Trace-to-dataset materialization, streaming: decode, validate, scrub, decontaminate, label, dedup, pair.

Blocks of a source (:mod:`ctpipe.sources`) go to a pool of worker processes, which turn each block
into canonical rows (:mod:`ctpipe.columns`: our own schema, OpenAI logs and OTLP exports at native
speed, any format of :mod:`ctpipe.formats` exactly), drop prompts that overlap an evaluation set,
scrub PII and label rewards, column by column. A worker keeps a block's rows in memory and sends
this process only their dedup keys; this process decides, in source order, which rows are
duplicates (the first occurrence stays) and which trace ids were seen twice with different content,
so the answer is the same whatever the number of workers. The same worker then writes the block's
kept rows as a part of the version's traces table, its quarantined items as a part of the
quarantine table, and its rows for pairing, hashed by prompt into buckets; once every block is in,
each bucket (split again first, past a thousand buckets) yields its prompts' GRPO rows and DPO
pairs as parts of those tables. Langfuse rows, OTLP spans without content with the log records
of their content, and the output lines of a batch with its requests, which join across files, are
spilled the same way, by trace (or custom_id), and their generations, spans and outputs come as
parts of their own once every block is in (their buckets split again first too). Memory is
bounded by the block size, the bucket size and the spill buffer, plus the three 64-bit keys of each
kept trace: a million of each in hash tables
(:class:`~ctpipe.keyset.KeySet`, 16 to 32 bytes a key), the others on disk behind Bloom filters
with a fixed budget, 32 MB a set.

Every record read ends up in the traces or the quarantine table with its source file, line or
row and a machine-readable reason; ``traces_in == traces + quarantined`` is checked before
anything is published. The layout and publication rules are in :mod:`ctpipe.datasets`.
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import functools
import hashlib
import heapq
import itertools
import json
import logging
import math
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack, contextmanager, suppress
from contextvars import Token
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from multiprocessing import get_context
from typing import Any

import fsspec
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctpipe import arith, columns, dedup, eval_sets, formats, pii, rewards, sources, traces
from ctpipe.config import DatasetConfig, RewardConfig, TaskConfig
from ctpipe.datasets import (
    CODE_VERSION, DPO_SCHEMA, GRPO_SCHEMA, MESSAGES, QUARANTINE_SCHEMA, TRACES_SCHEMA, Manifest, Output, Staging,
    dpo_pairs, utc, version_name,
)
from ctpipe.keyset import KeySet
from ctpipe.sources import RAW_CHARS, RAW_KEPT

log = logging.getLogger(__name__)

_IN_PROCESS_BYTES = 8 * 1024 * 1024  # smaller sources are not worth starting worker processes for
# Source bytes (decompressed) per pairing bucket: bounds the memory of the pairing step. The buckets
# spilled into are chosen by the listing's estimate of those bytes (see sources.Files.held); once
# every block is read, they are cut again by the bytes the blocks held, so that a source compressed
# better than the estimate assumes (a long system prompt on every line) does not crowd them.
_BUCKET_BYTES = 24 * 1024 * 1024
# Kept rows a process gathers for pairing before it appends them to the buckets' spill files. Each
# spill adds a record batch to every bucket, so batches are (spills x buckets): spilling every
# block (6 MB) made 300,000 of them at three million traces, and the pairing step grew five times
# for three times the input.
_SPILL_BYTES = 24 * 1024 * 1024
# A block's records are made into rows in pieces of about this much text (see _in_order), and a
# part's rows past _HELD_BYTES wait for finish() on disk: a block's rows are about its size, unless
# its records share one text (an OpenAI log's choices its prompt).
_PIECE_BYTES = 8 * 1024 * 1024
_HELD_BYTES = 48 * 1024 * 1024
# Evaluation items of more characters (some 4,000 of 60 words) are built into n-grams once, by the
# main process, for its workers to share (see _Pool); fewer, by each worker, whose build then costs
# about what the main process would pay for pandas alone, which pyarrow imports at its first list
# (37 MB; the workers keep it out): the bench's peak rose by 15 to 40 MB with its two items shared.
_SHARED_EVAL_CHARS = 1_000_000
# Buckets a spill writes to, at most (sources up to 24 GB); a larger source's buckets are split
# again when they are paired (see _sub_buckets). With as many buckets as the source needs, a spill's
# appends grew with the input, so all spills' with its square: a million traces spilled into the
# 8,885 buckets of a hundred million took 32 to 37 s to read instead of 22, 24 with this.
_FANOUT = 1024
# Peak size of the spill folder per source byte: a Langfuse export is joined through it whole (1.6
# measured on 224 MB), other formats keep only the rows for pairing there (0.42 on 215 MB).
_SPILL_NEED = {"langfuse": 2.0, "other": 0.5}
_JOIN_PART = 2000  # records of a join (generations, spans, batch outputs) to a part: about a block's worth
_JOIN_PART_BYTES = sources.BLOCK_BYTES  # and of larger records, fewer: about a block's bytes (see _join_part_size)
# The entries of a join as they are spilled (formats.langfuse_entry, formats.Held.entry, and where
# each was read: the part of its block, its place there, and its file and line).
_JOIN_SCHEMA = pa.schema([("part", pa.int64()), ("at", pa.int64()), ("kind", pa.string()), ("trace", pa.binary()),
                          ("key", pa.binary()), ("value", pa.binary()), ("file", pa.string()), ("line", pa.int64())])
_OUR_KEY = b'"trace_id"'  # in every line of our schema (unless escaped); of the others, only in Langfuse's snake_case rows
_OTLP_KEY = b'"resourceSpans"'  # in every OTLP export (unless escaped)
# Reasons that say an item is in no trace format at all (rather than a broken record of a known one),
# damage included: a file of nothing else is reported by name, not guessed at (an HTML error page saved
# as .csv, of a comma, or as .jsonl.gz, went unnamed, its items only counted).
_UNRECOGNIZED = frozenset({"unknown_format", "invalid_json", "not_an_object", "invalid_utf8", "too_deeply_nested",
                        "invalid_csv", "unreadable_csv", "corrupt_gzip", "corrupt_zstd", "truncated_gzip",
                        "truncated_zstd", "unreadable_parquet"})
# Columns kept beside a trace's row until it is deduplicated and paired.
_KEYS = [("id_key", pa.uint64()), ("exact_key", pa.uint64()), ("norm_key", pa.uint64()), ("prompt_key", pa.uint64())]
_ROWS_SCHEMA = pa.schema(list(TRACES_SCHEMA) + [pa.field(n, t) for n, t in _KEYS])
_SPILL_SCHEMA = pa.schema([("row", pa.int64()), ("prompt_key", pa.uint64()), ("trace_id", pa.string()),
                           ("messages", MESSAGES), ("completion", pa.string()), ("reference_answer", pa.string()),
                           ("final_reward", pa.float64())])


@dataclass(frozen=True)
class Job:
    """What a worker needs: picklable, sent once per worker."""

    start: datetime
    end: datetime
    task: TaskConfig
    reward: RewardConfig
    dataset: DatasetConfig
    eval_items: tuple[str, ...]
    staging: Staging  # where the version's parts are written
    spill_dir: str  # rows for pairing, between their writing and their pairing
    buckets: int  # spilled into, by the top bits of the prompt key
    # OTLP spans that hold their content join their log records too, for the evaluation results among
    # them (see formats.from_otel): set when a run meets both (see _HoldSpans).
    hold_spans: bool = False
    source: str = ""  # the source's URI: a copy of Bedrock's logs holds the bodies they keep apart
    root: str = ""  # its folder's path (see sources.Files.root): partitions are named below it
    eval_index: str = ""  # where the main process saved eval_items' n-grams, for its workers (see _Pool)


@dataclass
class Part:
    """One block, processed: the keys of its rows (the rows themselves, and its quarantined items,
    stay in the worker until this process has deduplicated them), and what it counted."""

    index: int
    quarantine: list[dict]  # while it is processed (then they wait with its rows, see _keyed)
    keys: dict[str, np.ndarray] = field(default_factory=dict)  # id_key, exact_key, norm_key of each row
    read: int = 0  # records and undecodable items of the interval
    outside: int = 0  # records of other intervals, not counted
    outside_span: tuple[int, int] | None = None  # the first and last start time (µs) of those records
    pii: Counter = field(default_factory=Counter)
    formats: Counter = field(default_factory=Counter)
    digests: list[tuple[str, bytes]] = field(default_factory=list)  # of its block's files (see _digest), each
    joined: list[tuple] = field(default_factory=list)  # entries of formats.join, kept here until finish()
    file: str = ""  # the block's file, the first of those gathered into it (a join's part has none)
    by_file: dict[str, Counter] = field(default_factory=dict)  # of each file read: read, unformatted, known
    size: int = 0  # bytes of records its block held, decompressed (Parquet: decoded): they size the pairing
    unformatted: int = 0  # of ``read``, the items in no trace format (see _UNRECOGNIZED)
    # Records read (in the interval or not) that started before their file's partition, by more than
    # the dataset's partition_lag(), or after it ended: runs of shorter intervals skip that partition
    # and miss them. Of each side: (records, the most microseconds before its start or after its end).
    misplaced: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Of the entries of a join that attach to records (scores, log records, batch requests), those that
    # found none, by kind.
    unjoined: Counter = field(default_factory=Counter)
    # Entries of a join read, by kind (formats.Held.kind, a Langfuse row's), and the evaluation results
    # among the events.
    held: Counter = field(default_factory=Counter)
    # Lines of its file the block covers, when they were not counted before it was loaded: then its
    # items are numbered from 1, until this process, taking parts in order, says where it starts.
    lines: int | None = None


# ------------------------------------------------------------------------------------------ labels


class Labeler:
    """The reward signals of a trace and its ``final_reward``, as :class:`RewardConfig` says."""

    def __init__(self, cfg: RewardConfig):
        self.cfg, self.weights = cfg, cfg.weights()
        # The verifiable reward of a (completion, reference), picked once, not per trace; None: no such signal.
        self.verify = rewards.verifier(cfg.verifier, cfg.answer_regex)

    def labels(self, prompts: pa.Array, completions: pa.Array, given: pa.Array, feedback: pa.Array,
               scores: pa.Array) -> tuple[pa.Array, list[pa.Array]]:
        """(each trace's reference answer; its verifiable, feedback, judge and final rewards), as columns.
        A blank reference is none, as the verifiers take it, so that no prompt's GRPO row answers with it."""
        blank = pc.equal(pc.utf8_trim_whitespace(given), "")
        references = given = pc.if_else(blank, pa.scalar(None, pa.string()), given)
        if self.cfg.verifier == "arith":  # the question, not a logged reference, says which answers are right
            questions = prompts.to_pylist()
            answers = [arith.reference_answer(q) for q in questions]
            found = [None if r is None else arith.verify(q, c) for q, c, r in zip(questions, completions.to_pylist(), answers)]
            references = pc.coalesce(pa.array(answers, pa.string()), given)  # another prompt keeps the one given
        elif self.verify is not None:
            found = [None if r is None else self.verify(c, r) for c, r in zip(completions.to_pylist(), given.to_pylist())]
        else:
            found = [None] * len(prompts)
        feedback_signal = rewards.feedback_rewards(pc.struct_field(feedback, "thumb"), pc.struct_field(feedback, "rating"))
        if self.cfg.feedback_score:  # a thumb or rating the trace holds comes first
            scored = rewards.score_rewards(scores, self.cfg.feedback_score, *self.cfg.feedback_range)
            feedback_signal = np.where(np.isnan(feedback_signal), scored, feedback_signal)
        signals = {
            "verifiable": np.array([math.nan if v is None else v for v in found], float),
            "feedback": feedback_signal,
            "judge": rewards.score_rewards(scores, self.cfg.judge_score, *self.cfg.judge_range),
        }
        final = rewards.combine_columns(signals, self.weights, self.cfg.missing, len(prompts))
        return references, [pa.array(x, pa.float64(), from_pandas=True) for x in (*signals.values(), final)]


# ------------------------------------------------------------------------------------------ workers

_JOB: Job | None = None
_LABELER: Labeler | None = None
_EVAL: dedup.NgramIndex | None = None
# Rows, quarantined items and entries of a join of the parts made here, until finished.
_ROWS: dict[int, tuple[pa.Table, list[dict], list[tuple]]] = {}
# Kept rows of the parts finished here, for pairing, not written yet, with the memory each holds.
_SPILLING: list[tuple[pa.Table, int]] = []
# Prompt keys whose messages this process has spilled (9 MB whatever the number of prompts; a prompt
# it forgot only has its messages spilled again).
_PROMPT_SLOTS = 1 << 20
_SPILLED_PROMPTS: dedup.Recent | None = None
# Entries of a join of the parts made here (see _JOIN_SCHEMA), not spilled yet, and their bytes.
_JOINED: list[pa.Table] = []
_JOINED_BYTES = 0
# Records of a join this process has spilled into each bucket, and what may attach to them (see spill_joined).
_JOINED_COUNTS = np.zeros((3, 0), np.int64)


def _init(job: Job) -> Token:
    """Ready this process for ``job``; the token of the readers' policy for answers cut off, set for it."""
    global _JOB, _LABELER, _EVAL, _SPILLED_PROMPTS, _JOINED_BYTES, _JOINED_COUNTS
    _JOB, _LABELER = job, Labeler(job.reward)
    _JOINED.clear()
    _JOINED_BYTES, _JOINED_COUNTS = 0, np.zeros((3, job.buckets), np.int64)
    _SPILLED_PROMPTS = dedup.Recent(_PROMPT_SLOTS, bool)
    _EVAL = None
    return formats.REFUSE_TRUNCATED.set(job.dataset.truncated_answers == "quarantine")


def _eval_index() -> dedup.NgramIndex:
    """The evaluation items' n-grams where first asked for: mapped from the files the main process
    saved, for a large set (see _Pool), else built here. What the build freed is given back at once."""
    global _EVAL
    if _EVAL is None:
        if _JOB.eval_index:
            _EVAL = dedup.NgramIndex.mapped(_JOB.eval_index)
        else:
            _EVAL = dedup.NgramIndex(_JOB.eval_items, _JOB.dataset.decontamination_ngram)
            _release_arrow_memory()
    return _EVAL


class _NoPandas:
    """An import finder that says pandas is not installed. pyarrow imports pandas the first time it
    is given a Python list or a numpy array (to ask whether it is a pandas object), which cost each
    worker 0.36 s and 30 MB for a library it never uses; told there is none, pyarrow never asks again."""

    @staticmethod
    def find_spec(name: str, path=None, target=None) -> None:
        if name == "pandas":
            raise ModuleNotFoundError("pandas is not imported in the materializer's workers", name=name)


def _start_worker(job: Job, parent: int) -> None:
    if "pandas" not in sys.modules:  # the module of the parent's __main__ may have imported it already
        sys.meta_path.insert(0, _NoPandas())
    threading.Thread(target=_orphaned, args=(parent,), daemon=True, name="ctpipe-orphaned").start()
    _init(job)


def _orphaned(parent: int) -> None:
    """End this worker once its parent (pid ``parent``, as the parent said: it may be gone already)
    is gone, killed (SIGKILL, the OOM killer), which nothing else tells it: it would wait on its task
    queue forever, holding its memory."""
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(1)


def _quarantined(file: str, n: int, reason: str, detail: str, raw: str) -> dict:
    """A quarantined item. Its texts are cut to ``RAW_CHARS`` once scrubbed (see :func:`_keyed`), except a
    duplicate's raw text: its row, as the traces table has it, whole."""
    return {"source_file": file, "source_line": n, "reason": reason, "detail": detail[:RAW_KEPT], "raw": raw}


def _decode(raw: bytes, fmt: str) -> tuple[str, list]:
    """(format, canonical records) of one line; InvalidTrace or FormatError when it has none. An OTLP
    export that breaks off (the last line of a Collector that died) gives the spans before the break,
    as one past a record's size does (see :class:`sources._Exports`), and an item for the rest."""
    try:
        return _decode_line(raw, fmt)
    except traces.InvalidTrace as e:
        if e.reason != "invalid_json" or fmt not in ("auto", "otel") or (split := sources.exports_of(raw)) is None:
            raise
        broken = e
    exports, failures = split
    records: list = []
    for export in exports:
        try:
            records += _decode_line(export, fmt)[1]
        except (traces.InvalidTrace, formats.FormatError) as e:
            records.append(_Refused(e, export[:RAW_KEPT].decode("utf-8", "replace")))
    if not any(isinstance(r, (traces.TraceRecord, formats.Held)) for r in records):
        raise broken
    head = raw[:RAW_KEPT].decode("utf-8", "replace")
    return "otel", records + [_Refused(formats.FormatError(reason, f"not read: {why}"), head) for reason, why in failures]


def _decode_line(raw: bytes, fmt: str) -> tuple[str, list]:
    if fmt in ("auto", "otel") and raw.startswith(b'{"resourceLogs"'):
        held = formats.held_log_records(raw)
        if held is not None:
            return _canonical_records("otel", held)
    if fmt == "auto" and _OUR_KEY not in raw:
        # Another format's line, most likely: our schema's typed decoding would fail it only after
        # parsing all of it, and it would be parsed again as a document. Anything else goes on below.
        doc = traces.loads(raw)
        found = formats.detect(doc)
        if isinstance(doc, dict) and found != "ctpipe":
            return _from_doc(doc, fmt, found)
    if fmt in ("auto", "ctpipe"):
        try:
            return "ctpipe", [traces.decode(raw)]
        except traces.InvalidTrace as e:
            if e.reason not in ("missing_field", "invalid_field"):
                raise
            doc = traces.loads(raw)
            found = formats.detect(doc)
            if found == "ctpipe" or (fmt == "ctpipe" and found is None):
                raise  # another format's record, even under --format ctpipe, is wrong_format (see formats.normalize)
    else:
        doc = traces.loads(raw)
        found = formats.detect(doc)
    return _from_doc(doc, fmt, found)


def _read_body(place: str) -> bytes:
    """A body a record keeps apart (see formats.with_offloaded_bodies), its digest kept for the
    version's name (see process): the same records with another body are another version."""
    import xxhash

    body = sources.read_object(place)
    _BODIES_READ.append(xxhash.xxh3_128(place.encode() + b"\0" + body).digest())
    return body


_BODIES_READ: list[bytes] = []  # of the file being read


def _from_doc(doc, fmt: str, found: str | None) -> tuple[str, list]:
    """(format, canonical records) of a decoded document of format ``found`` (:func:`formats.detect`).
    Of a document of several records (an OTLP export's spans, an OpenAI response's choices), one that
    is not a trace comes in its place as :class:`_Refused`: the others are traces all the same."""
    if found is None and (events := formats.log_events(doc)) is not None:
        return _from_events(events, fmt)
    if found == "langfuse" and fmt in ("auto", "langfuse"):
        return "langfuse", [doc]
    if found == "ctpipe" and fmt in ("auto", "ctpipe"):
        return "ctpipe", [traces.convert(doc)]
    if found == "bedrock" and fmt in ("auto", "bedrock"):
        doc = formats.with_offloaded_bodies(doc, _read_body, _JOB.source)
    return _canonical_records(found or fmt, formats.normalize(doc, fmt, _JOB.hold_spans))


def _canonical_records(fmt: str, records: list) -> tuple[str, list]:
    """(format, canonical records) of a document's records (traces' dicts, FormatErrors in the place of
    those that are none, Held): its only record raises why it is none, its line's item; of several,
    each that is none comes as :class:`_Refused` in its place."""
    if len(records) < 2:
        if records and isinstance(records[0], formats.FormatError):
            raise records[0]
        try:
            return fmt, [d if isinstance(d, formats.Held) else traces.convert(d) for d in records]
        except traces.InvalidTrace as e:
            e.record = records[0]  # as mapped: its time places the line's item
            raise
    return fmt, [_converted(d) for d in records]


def _from_events(events: list, fmt: str) -> tuple[str, list]:
    """(format, records) of the log events of a CloudWatch Logs subscription's record, each event's
    message read as a line is: one that gives no trace comes as :class:`_Refused` in its place. Its
    records count as of its first event's format: a log group holds one kind of log."""
    found, records = None, []
    for event in events:
        message = event.get("message") if isinstance(event, dict) else None
        try:
            if not isinstance(message, str):
                raise formats.FormatError("invalid_field", f"log event {str(event)[:80]}: its message is not text")
            kind, recs = _decode(message.encode(), fmt)
            if kind == "langfuse":  # rows of a join, kept by their line, which is not this one
                raise formats.FormatError("invalid_field", "a Langfuse export's row in a log event is not read")
        except (traces.InvalidTrace, formats.FormatError) as e:
            records.append(_Refused(e, event))
            continue
        found = found or kind
        # A batch's line joins as its own text, not as the line of many events it came in (see formats.Held.entry).
        records += [replace(r, value=message.encode()) if isinstance(r, formats.Held) and r.kind in ("request", "response")
                    else r for r in recs]
    return found or fmt, records


@dataclass
class _Refused:
    """One record of a document that is not a trace: why, and the record as its format has it."""

    error: traces.InvalidTrace | formats.FormatError
    record: Any


def _converted(record: dict | formats.FormatError | formats.Held) -> traces.TraceRecord | _Refused | formats.Held:
    if isinstance(record, formats.Held):
        return record
    if isinstance(record, formats.FormatError):
        return _Refused(record, record.record)
    try:
        return _named_convert(record)
    except traces.InvalidTrace as e:
        return _Refused(e, record)


def _named_convert(doc: dict) -> traces.TraceRecord:
    """``traces.convert(doc)``, for one of the records a line or a join holds: its error names the
    trace the record maps to."""
    try:
        return traces.convert(doc)
    except traces.InvalidTrace as e:
        raise traces.InvalidTrace(e.reason, f"trace {doc.get('trace_id')}: {e.detail}") from None


def _own_time(record: Any) -> datetime | None:
    """The start time a record refused holds, where it holds one: as mapped to our schema, or an OTLP span's."""
    return _mapped_time(record) or formats.span_time(record)


def _read(block: sources.Block, job: Job, part: Part, fast: tuple | None = None) -> pa.Table:
    """The block's records in the interval, as a :data:`columns.RAW_SCHEMA` table in line order; the rest
    goes to ``part``.

    Lines and Parquet rows take the fast paths (:data:`_FAST`, :data:`_FAST_PARQUET`) where they can;
    every other line or row is decoded one by one, which also says why it is not a trace (``fast``: the
    block's lines and what the fast paths made of them, when they were run on more than the block's
    lines at once, see :func:`_fast_members`). An unreadable line belongs to
    the interval of the record before it; at the start of a block, of the first record after it (a
    block never knows the records of the block before); in a block with no readable record, to the
    hour of its file's partition (or to every run, outside that layout). In a partition, the time so
    found is brought within those the partition may hold (see :func:`_holds`).
    """
    lo, hi = columns.micros(job.start), columns.micros(job.end)
    lines, parsed, taken = None, None, None
    fast_at, fast_times = np.zeros(0, np.int64), np.zeros(0, np.int64)  # line and start time of each parsed row
    if fast is not None:
        lines, parsed, fast_at = fast
    elif block.batch is None:
        lines = block.data.split(b"\n")
        parsed, fast_at = _fast(block.data, lines, job.dataset.format, part.formats)
    else:
        parsed, fast_at = _fast_rows(block.batch, job.dataset.format, part.formats)
    if parsed is not None:
        fast_times = pc.cast(parsed["start_time"], pa.int64()).to_numpy(zero_copy_only=False)
        taken = np.zeros(len(lines) if lines is not None else block.batch.num_rows, bool)
        taken[fast_at] = True

    # The other lines, one by one: records (with their start times) and rejected items, by line.
    slow: list[tuple[str, int, traces.TraceRecord]] = []
    slow_times: list[int] = []
    record_lines: list[tuple[int, int, int]] = []  # (line, first start time, last start time) of lines with records
    rejected: list[tuple[int, dict, datetime | None]] = []  # with the item's own time, where it holds one
    for n, raw in sources.entries(block, lines, taken):
        if isinstance(raw, sources.Item):  # an oversized line, or the damage that ends a file
            rejected.append((n, _quarantined(block.file, n, raw.reason, raw.detail, raw.raw), None))
            continue
        try:
            if isinstance(raw, dict):  # a Parquet row
                fmt, recs = _from_doc(raw, job.dataset.format, formats.detect(raw))
            else:
                fmt, recs = _decode(raw, job.dataset.format)
        except (traces.InvalidTrace, formats.FormatError) as e:
            text = json.dumps(raw, default=str) if isinstance(raw, dict) else raw[:RAW_KEPT].decode("utf-8", "replace")
            rejected.append((n, _quarantined(block.file, n, e.reason, str(e), text), _own_time(getattr(e, "record", None))))
            continue
        if fmt == "langfuse":  # joined across files (see joined_part); a row that cannot join is quarantined here
            part.formats[fmt] += 1
            try:
                entry = formats.langfuse_entry(recs[0], (block.file, n), raw if isinstance(raw, bytes) else None)
            except formats.FormatError as e:
                rejected.append((n, _quarantined(block.file, n, e.reason, str(e), json.dumps(recs[0], default=str)),
                                 formats.langfuse_time(recs[0])))
                continue
            if entry is not None:
                part.joined.append(entry)
                part.held[entry[0]] += 1
            continue
        for r in recs:
            if isinstance(r, formats.Held):  # joined with what attaches to it (see joined_part), as Langfuse rows are
                part.formats[fmt] += 1
                part.held[r.kind] += 1
                part.held["evaluation"] += r.evaluation
                part.joined.append(r.entry((block.file, n), raw if isinstance(raw, bytes) else None))
            elif isinstance(r, _Refused):
                rejected.append((n, _quarantined(block.file, n, r.error.reason, str(r.error),
                                                 json.dumps(r.record, default=str)[:RAW_KEPT]), _own_time(r.record)))
        recs = [r for r in recs if isinstance(r, traces.TraceRecord)]
        part.formats[fmt] += len(recs)  # the records of each format read as traces (Langfuse's: its rows)
        if recs:
            times = [columns.micros(rec.start_time) for rec in recs]
            record_lines.append((n, times[0], times[-1]))
            slow += [(block.file, n, rec) for rec in recs]
            slow_times += times

    # Which records are in the interval, and to which interval each rejected item belongs.
    span = traces.partition_span(block.file, job.root)
    if span is not None:
        _misplaced(part, span, job.dataset.partition_lag(), np.concatenate([fast_times, np.array(slow_times, np.int64)]))
    inside_fast = (fast_times >= lo) & (fast_times < hi)
    inside_slow = [lo <= t < hi for t in slow_times]
    inside = int(inside_fast.sum()) + sum(inside_slow)
    part.read += inside
    _outside(part, np.concatenate([fast_times[~inside_fast], np.array(slow_times, np.int64)[~np.array(inside_slow, bool)]]))
    if rejected:
        slow_lines = np.array(record_lines, np.int64).reshape(-1, 3)
        lines_with = np.concatenate([block.numbers(fast_at), slow_lines[:, 0]])
        firsts, lasts = (np.concatenate([fast_times, slow_lines[:, i]]) for i in (1, 2))
        order = np.argsort(lines_with, kind="stable")
        lines_with, firsts, lasts = lines_with[order], firsts[order], lasts[order]
        for n, q, own in rejected:
            before = int(np.searchsorted(lines_with, n))
            at = (columns.micros(own) if own is not None else int(lasts[before - 1]) if before
                  else int(firsts[0]) if len(firsts) else columns.micros(span[0]) if span else None)
            # A neighbour misplaced in a partition would take the item to a run that never reads it.
            if at is None or lo <= _within_partition(block.file, at) < hi:
                part.read += 1
                part.unformatted += q["reason"] in _UNRECOGNIZED
                part.quarantine.append(q)

    slow_inside = [r for r, kept in zip(slow, inside_slow) if kept]
    fast, lines_at = None, np.zeros(0, np.int64)
    if inside_fast.any():
        keep = np.flatnonzero(inside_fast)
        rows = parsed if len(keep) == len(parsed) else parsed.take(keep)
        lines_at = np.asarray(block.numbers(fast_at[keep]), np.int64)
        fast = _placed(rows, pa.array([block.file] * len(keep), pa.string()), lines_at)
    return _in_order(slow_inside, np.array([n for _, n, _ in slow_inside], np.int64), fast, lines_at)


def _in_order(found: list[tuple[str, int, traces.TraceRecord]], found_at: np.ndarray, fast: pa.Table | None,
              fast_at: np.ndarray) -> Iterator[pa.Table]:
    """The records ``found`` (file, line, record) and a fast path's rows ``fast`` as
    :data:`columns.RAW_SCHEMA` tables, in the order of their places ``found_at`` and ``fast_at`` (the
    records of one place before its rows, each in its order; both given in that order), built one
    after another in pieces of about :data:`_PIECE_BYTES`: an OpenAI log of ``n`` choices makes ``n``
    traces that each carry its prompt, and 300 logs of a 0.1 MB prompt with ``n=64`` (a 34 MB file)
    made a block's rows 64 times its size and peaked at 2.4 GB."""
    sizes = [sum(len(m.content) for m in r.messages) + len(r.completion) for _, _, r in found]
    order = np.argsort(np.concatenate([found_at, fast_at]), kind="stable")
    bounds = [0, len(order)]
    if sum(sizes) + (fast.nbytes if len(fast_at) else 0) > _PIECE_BYTES:
        sizes += [fast.nbytes / len(fast_at)] * len(fast_at) if len(fast_at) else []  # fast rows are much alike
        placed = np.asarray(sizes, np.float64)[order].tolist()
        bounds = [run[0] for run in _runs(range(len(order)), placed.__getitem__)] + [len(order)]
    slow = np.concatenate([[0], np.cumsum(order < len(found))])  # records among the first items
    for lo, hi in zip(bounds, bounds[1:]):
        a, b = int(slow[lo]), int(slow[hi])  # its records, then its rows of a fast path
        i, j = lo - a, hi - b
        tables = [columns.from_records(found[a:b])] if b > a or j == i else []  # 0.25 ms for none
        if j > i:
            tables.append(fast.slice(i, j - i))
        if len(tables) == 1:
            yield tables[0]
            continue
        table = pa.concat_tables(tables)  # a stable sort: the records of one place keep their order
        yield table.take(np.argsort(np.concatenate([found_at[a:b], fast_at[i:j]]), kind="stable"))


def _runs(items: Iterable, size: Callable[[Any], float]) -> Iterator[list]:
    """Consecutive ``items`` in runs of about :data:`_PIECE_BYTES` (by ``size``), as they come: each run
    after the first starts at an item that would take the one before it past the size."""
    run, held = [], 0
    for item in items:
        n = size(item)
        if run and held + n > _PIECE_BYTES:
            yield run
            run, held = [], 0
        run.append(item)
        held += n
    if run:
        yield run


# The fast paths, each for lines of one format (:mod:`ctpipe.columns`), and a key that its lines hold
# (unless escaped): lines left without it are not worth the look.
_FAST = (("ctpipe", _OUR_KEY, columns.parse_lines), ("openai", b'"choices"', columns.parse_openai_lines),
         ("otel", _OTLP_KEY, columns.parse_otel_lines), ("bedrock", b'"ModelInvocationLog"', columns.parse_bedrock_lines),
         ("vertex", b'"full_request"', columns.parse_vertex_lines))


# Our schema's rows in Parquet take a fast path of their own (None: every row takes the exact path).
_FAST_PARQUET = columns.parse_batch


def _fast(data: bytes, lines: list[bytes], fmt: str, formats_read: Counter) -> tuple[pa.Table | None, np.ndarray]:
    """(the rows the fast paths take, in line order; the line of each): our schema's first, then
    OpenAI logs, OTLP exports, Bedrock's Converse records and Vertex AI's Gemini rows among the lines
    left. Their formats are counted in ``formats_read``.

    A block that begins with an OTLP export tries that path first: no other path takes its lines
    (the OTLP path refuses a line with our key, the OpenAI path one with its), and the lines it
    takes are then not searched through for the others' keys (a tenth of the CPU of one span a line)."""
    limit = sources.MAX_RECORD_BYTES  # an oversized line is quarantined unread, never parsed
    usable = lines if len(data) <= limit else [b"" if len(x) > limit else x for x in lines]
    left, tables, at = np.arange(len(lines)), [], []
    paths = sorted(_FAST, key=lambda path: path[0] != "otel") if usable and _OTLP_KEY in usable[0] else _FAST
    for name, key, parse in paths:
        if fmt not in ("auto", name) or not len(left) or (name == "otel" and _JOB.hold_spans):  # held: the reader's
            continue
        whole = len(left) == len(lines)
        rest = usable if whole else [usable[i] for i in left]
        # The lines left, not the block: a few broken lines, most often. Where all lines are left, a
        # key that is nowhere in the block is found so at memory speed, where a loop over every line
        # of another format costs a few percent (a search of the block each time would cost as much
        # for our schema's few broken lines).
        if (not whole or key in data) and any(key in line for line in rest):
            got = parse(rest)
            if got is not None:
                tables.append(got[0])
                at.append(left[got[1]])
                formats_read[name] += len(got[1])
                left = np.delete(left, got[1])
    if not tables:
        return None, np.zeros(0, np.int64)
    table, at = pa.concat_tables(tables), np.concatenate(at)
    if len(tables) > 1:
        order = np.argsort(at, kind="stable")
        table, at = table.take(order), at[order]
    return table, at


def _fast_rows(batch: pa.RecordBatch, fmt: str, formats_read: Counter) -> tuple[pa.Table | None, np.ndarray]:
    """:func:`_fast` for Parquet rows: (the rows our schema's fast path takes, the row of each)."""
    got = _FAST_PARQUET(batch) if _FAST_PARQUET and fmt in ("auto", "ctpipe") else None
    if got is None:
        return None, np.zeros(0, np.int64)
    formats_read["ctpipe"] += len(got[1])
    return got


def _fast_members(block: sources.Block, members: list[sources.Block], fmt: str,
                  formats_read: Counter) -> list[tuple]:
    """:func:`_fast` (or, for Parquet rows, :data:`_FAST_PARQUET`) run once over the lines or rows of
    the files gathered into ``block`` (its ``members``), as ``_read`` takes each file's share: the fast
    paths cost some 3 ms a call whatever the lines, most of the time it took a file of ten traces."""
    if block.batch is not None:
        lines = None
        parsed, at = _fast_rows(block.batch, fmt, formats_read)
        sizes = [m.batch.num_rows for m in members]
    else:
        lines = block.data.split(b"\n")  # each file ends with a newline: its lines, and no other's
        parsed, at = _fast(block.data, lines, fmt, formats_read)
        sizes = [m.data.count(b"\n") for m in members]
    ends = np.cumsum(sizes)
    out = []
    for lo, hi in zip(itertools.chain([0], ends[:-1].tolist()), ends.tolist()):
        i, j = np.searchsorted(at, [lo, hi]).tolist()
        # A file the fast paths took nothing of gets no slice, which read as none would: a slice of
        # a table is a few KB of objects, whatever its rows, and 60,000 small files of bad lines beside
        # a large file's rows made the block's worker 666 MB.
        out.append((None if lines is None else lines[lo:hi], None if parsed is None or j == i else parsed.slice(i, j - i),
                    at[i:j] - lo))
    return out


def _all_fast(member: sources.Block, got: tuple | None) -> bool:
    """Whether the fast paths took every item of a file gathered into a block (``got``: its share of
    :func:`_fast_members`): then :func:`_read_fast` gives what :func:`_read` would."""
    if got is None or got[1] is None or not len(got[2]) or member.damage is not None:
        return False
    lines, _, at = got
    at = np.unique(at)  # a line of several records (an OpenAI log's choices, an OTLP export's spans) has a row each
    if lines is None:
        return len(at) == member.batch.num_rows
    return len(at) == len(lines) or all(sources.blank(lines[i]) for i in np.setdiff1d(np.arange(len(lines)), at))


def _read_fast(members: tuple[sources.Block, ...], got: tuple[tuple, ...], job: Job, part: Part) -> pa.Table:
    """:func:`_read` of consecutive files of a gathered block that the fast paths took whole (see
    :func:`_all_fast`), at once, with the same rows and counts: a file of one trace read on its own
    took some ten pyarrow calls, which set the pace of a source of such files."""
    counts = np.array([len(at) for _, _, at in got], np.int64)
    parsed = pa.concat_tables([rows for _, rows, _ in got])
    times = pc.cast(parsed["start_time"], pa.int64()).to_numpy(zero_copy_only=False)
    of = np.repeat(np.arange(len(members)), counts)  # the file of each row
    spans = [traces.partition_span(m.file, job.root) for m in members]
    for span in dict.fromkeys(spans):  # a partition at a time (files share a few): counts add up as file by file
        if span is not None:
            _misplaced(part, span, job.dataset.partition_lag(), times[np.array([s == span for s in spans])[of]])
    inside = (times >= columns.micros(job.start)) & (times < columns.micros(job.end))
    part.read += int(inside.sum())
    _outside(part, times[~inside])
    for member, n, k in zip(members, np.bincount(of[inside], minlength=len(members)).tolist(), counts.tolist()):
        part.by_file[member.file] = Counter(read=n, unformatted=0, known=k)
    keep = np.flatnonzero(inside)
    lines = np.concatenate([m.numbers(at) for m, (_, _, at) in zip(members, got)])
    rows = parsed.take(keep)
    files = pa.array([m.file for m in members], pa.string()).take(pa.array(of[keep]))
    return _placed(rows, files, lines[keep])


def _placed(rows: pa.Table, files: pa.Array, lines) -> pa.Table:
    """A fast path's rows with the file and line each came from, as :data:`columns.RAW_SCHEMA` rows."""
    return pa.Table.from_arrays(rows.columns + [files, pa.array(lines, pa.int64())], schema=columns.RAW_SCHEMA)


def _holds(span: tuple[datetime, timedelta], lag: timedelta) -> tuple[datetime, datetime]:
    """The start times a partition ``span`` (see traces.partition_span) may hold: from ``lag`` before it to its end."""
    return span[0] - lag, span[0] + span[1]


def _misplaced(part: Part, span: tuple[datetime, timedelta], lag: timedelta, times: np.ndarray) -> None:
    """Counts in ``part`` the start ``times`` that the partition ``span`` may not hold (see Part.misplaced),
    in the runs whose intervals reach the partition's own span: one that reads it for the lag alone
    (the hour before, with partitioned_by=arrival) said them again, twice in a backfill."""
    if not (_JOB.start < span[0] + span[1] and span[0] < _JOB.end):
        return
    start = columns.micros(span[0])
    lo, hi = map(columns.micros, _holds(span, lag))
    early, late = times[times < lo], times[times >= hi]
    for side, by in (("before", start - early), ("after", late - hi)):
        if len(by):
            _add_misplaced(part.misplaced, side, len(by), int(by.max()))


def _outside(part: Part, times: np.ndarray) -> None:
    """Count in ``part`` the records of other intervals, by their start times (µs)."""
    if len(times):
        part.outside += len(times)
        part.outside_span = _widened(part.outside_span, (int(times.min()), int(times.max())))


def _widened(span: tuple[int, int] | None, other: tuple[int, int] | None) -> tuple[int, int] | None:
    if span is None or other is None:
        return span or other
    return min(span[0], other[0]), max(span[1], other[1])


def _add_misplaced(into: dict[str, tuple[int, int]], side: str, n: int, most: int) -> None:
    """``n`` more misplaced records on ``side``, the farthest ``most`` µs out (see Part.misplaced)."""
    had, farthest = into.get(side, (0, 0))
    into[side] = (had + n, max(farthest, most))


def _decontaminated(raw: pa.Table, part: Part) -> pa.Table:
    """``raw`` without the traces whose chats share an n-gram with an evaluation item, which go to quarantine.
    The user messages of a chat are searched as one text (a question may span turns); the others (a
    system prompt, earlier answers) each alone, as the same few of them come in chat after chat."""
    messages = raw["messages"].combine_chunks()
    flat = messages.flatten()
    parents = pc.list_parent_indices(messages).to_numpy(zero_copy_only=False)
    contents = pc.struct_field(flat, "content")
    user = pc.equal(pc.struct_field(flat, "role"), "user").to_numpy(zero_copy_only=False)
    counts = np.bincount(parents[user], minlength=raw.num_rows)
    per_chat = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(counts)]), pa.int32()),
                                        contents.filter(pa.array(user)))
    contaminated = _eval_index().overlaps_array(pc.binary_join(per_chat, " "))
    if not user.all():
        others = pc.dictionary_encode(contents.filter(pa.array(~user)))
        found = _eval_index().overlaps_array(others.dictionary)[others.indices.to_numpy()]
        contaminated[parents[~user][found]] = True
    if not contaminated.any():
        return raw
    bad = pa.array(contaminated)
    n = _JOB.dataset.decontamination_ngram
    detail = f"a prompt shares a {n}-word sequence with an evaluation item, or holds one shorter than {n} words whole"
    for row in raw.filter(bad).to_pylist():
        part.quarantine.append(_quarantined(row["source_file"], row["source_line"], "eval_contamination", detail,
                                            msgspec.json.encode({k: v for k, v in row.items()
                                                                 if not k.startswith("source_")}).decode()))
    return raw.filter(pc.invert(bad))


def _rows(raw: pa.Table, part: Part) -> pa.Table:
    """The canonical rows of valid records (a :data:`columns.RAW_SCHEMA` table): decontaminated,
    scrubbed, labeled, keyed. Column-wise: Arrow where it can, Python lists where a rule needs one."""
    job, labeler = _JOB, _LABELER
    raw = _decontaminated(raw, part)
    messages = raw["messages"].combine_chunks()
    flat = messages.flatten()
    roles, contents = pc.struct_field(flat, "role"), pc.struct_field(flat, "content")
    completions = raw["completion"].combine_chunks()
    lengths = pc.list_value_length(messages).to_numpy(zero_copy_only=False)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    prompt_at = pa.array(columns.prompts_at(roles, np.repeat(np.arange(raw.num_rows), lengths), raw.num_rows))
    feedback, scores = raw["feedback"].combine_chunks(), raw["scores"].combine_chunks()
    # Labeled from the texts as written: a number scrubbed as a phone's or a card's (a long math
    # answer may look like one) must not turn a right answer wrong. For the same reason a reference
    # keeps its numbers: GRPO's reward reads it in training.
    references, labels = labeler.labels(contents.take(prompt_at), completions, raw["reference_answer"].combine_chunks(),
                                        feedback, scores)
    # Keyed as written too: two questions or answers that differ in a number scrubbed alike (What is
    # 734-256-1289?) are no duplicates, and pairing does not take them for one prompt.
    prompt_keys = dedup.chat_keys(roles, contents, offsets)
    exact_keys = dedup.mix(prompt_keys, dedup.keys(completions))
    near_keys = _near_key(prompt_keys, completions, labels[0])
    if job.dataset.scrub_pii:
        contents, completions = pii.scrub_array(contents, part.pii), pii.scrub_array(completions, part.pii, repeats=False)
        references, scores = pii.scrub_array(references, part.pii, numbers=False), _scrubbed_scores(scores, part.pii)
    messages = columns.chats(offsets, roles, contents)
    prompt = contents.take(prompt_at)
    model = raw["model"].combine_chunks()
    usage = raw["usage"].combine_chunks()
    out = {
        "trace_id": raw["trace_id"],
        "start_time": raw["start_time"],
        "end_time": raw["end_time"],
        "model_name": pc.struct_field(model, "name"),
        "model_version": pc.struct_field(model, "version"),
        "messages": messages,
        "prompt": prompt,
        "completion": completions,
        "reference_answer": references,
        "feedback_thumb": pc.struct_field(feedback, "thumb"),
        "feedback_rating": pc.struct_field(feedback, "rating"),
        "scores": scores,
        "prompt_tokens": pc.struct_field(usage, "prompt_tokens"),
        "completion_tokens": pc.struct_field(usage, "completion_tokens"),
        "latency_ms": pc.add(raw["latency_ms"], 0.0),  # -0.0 (a JSON "-0") as 0.0: IEEE adds them so
        "verifiable_reward": labels[0],
        "feedback_reward": labels[1],
        "judge_reward": labels[2],
        "final_reward": labels[3],
        "source_file": raw["source_file"],
        "source_line": raw["source_line"],
        "id_key": pa.array(dedup.keys(raw["trace_id"].combine_chunks()), pa.uint64()),
        "prompt_key": pa.array(prompt_keys, pa.uint64()),
        "exact_key": pa.array(exact_keys, pa.uint64()),
        "norm_key": pa.array(near_keys, pa.uint64()),
    }
    return pa.Table.from_arrays([out[f.name] for f in _ROWS_SCHEMA], schema=_ROWS_SCHEMA)


def _near_key(prompt_keys: np.ndarray, completions: pa.Array, verified: pa.Array) -> np.ndarray:
    """The near-duplicate key: the chat as it is (pairing groups answers by it, so an answer is never
    dropped for one to another prompt), the completion as :func:`dedup.squash` makes it, and the
    verifier's label: two answers it tells apart differ by more than their spelling."""
    label = pc.fill_null(verified, -1.0).to_numpy(zero_copy_only=False).astype(np.float64).view(np.uint64)
    return dedup.mix(dedup.mix(prompt_keys, dedup.keys(completions, normalized=True)), label)


def _scrubbed_scores(scores: pa.Array, found: Counter) -> pa.Array:
    """``scores`` (a list of structs a trace) with their texts scrubbed, as every text published is."""
    offsets = scores.offsets  # of the slice ``scores`` may be: they need not start at 0
    first = offsets[0].as_py()
    flat = scores.values.slice(first, offsets[-1].as_py() - first)
    if not len(flat):
        return scores
    fields = {f.name: flat.field(f.name) for f in flat.type}
    for name in ("name", "label", "source"):
        fields[name] = pii.scrub_array(fields[name], found)
    entries = pa.StructArray.from_arrays(list(fields.values()), fields=list(flat.type), mask=flat.is_null())
    return pa.ListArray.from_arrays(pc.subtract(offsets, first), entries, type=scores.type, mask=scores.is_null())


def _digest(block: sources.Block) -> bytes:
    """What a block of one file holds, and where its items are numbered from: the same whether the
    file was read alone or gathered with others (which ends its lines with a newline)."""
    import xxhash

    h = xxhash.xxh3_128(f"{block.file}:{block.first}:".encode())
    if block.batch is not None:
        # Its values as Arrow's IPC format writes them, not its buffers: a buffer may hold bytes past
        # the values (the Parquet reader's spare capacity), which a batch sent to a worker loses, and a
        # file's rows gathered with others' are a slice of their buffers, which IPC writes whole.
        compact = [pa.concat_arrays([column]) for column in block.batch.columns]
        h.update(pa.RecordBatch.from_arrays(compact, schema=block.batch.schema).serialize())
    h.update(block.data)
    if block.data and not block.data.endswith(b"\n"):
        h.update(b"\n")
    if block.damage is not None:
        h.update(f"{block.damage.reason}:{block.damage.position}".encode())
    return h.digest()


def process(item: tuple[int, sources.Block]) -> Part:
    """One block, decoded to deduplication keys (in a worker, or in this process for small sources)."""
    index, block = item[0], item[1].load()
    counted = block.first is not None
    block = block if counted else block.numbered_from(1)  # see Part.lines
    members, raws = block.members(), []
    part = Part(index, [], digests=[(m.file, _digest(m)) for m in members],
                file=block.file, lines=None if counted else block.lines,
                size=len(block.data) if block.batch is None else block.batch.nbytes)
    # Small files gathered into the block have their lines parsed together; the files the fast paths
    # take whole are then read together too, the others one by one.
    fast = _fast_members(block, members, _JOB.dataset.format, part.formats) if len(members) > 1 else [None]
    for quick, run in itertools.groupby(zip(members, fast), key=lambda m: _all_fast(*m)):
        if quick:  # files whose every item the fast paths took: all at once
            raws.append([_read_fast(*zip(*run), _JOB, part)])
            continue
        for member, got in run:
            before = part.read, part.unformatted, part.formats.total()
            _BODIES_READ.clear()
            raws.append(_read(member, _JOB, part, got))
            part.digests += [(member.file, body) for body in _BODIES_READ]
            part.by_file[member.file] = Counter(read=part.read - before[0], unformatted=part.unformatted - before[1],
                                                known=part.formats.total() - before[2] + (len(got[2]) if got else 0))
    part = _keyed(part, (_rows(raw, part) for raw in _gathered(itertools.chain.from_iterable(raws))))
    _release_arrow_memory()
    return part


def _gathered(tables: Iterable[pa.Table]) -> Iterator[pa.Table]:
    """Consecutive ``tables`` joined into pieces of up to about :data:`_PIECE_BYTES`, one chunk a
    column, not one a file: filtering and taking run per chunk, and with a chunk per file of ten rows,
    cost more than all the rest of a part.

    Empty tables after the first are left out (a part of no row keeps one): of files whose records
    are all quarantined, or all joined, some bytes each, they filled a piece by tens of thousands, at
    about 24 KB each: 60,000 files of one unreadable line peaked at 2,008 MB."""
    tables = iter(tables)
    first = list(itertools.islice(tables, 1))
    for run in _runs(itertools.chain(first, (table for table in tables if table.num_rows)), lambda table: table.nbytes):
        yield run[0] if len(run) == 1 else pa.concat_tables(run).combine_chunks()


class _Held:
    """A part's rows from :func:`process` to :func:`finish`, in the pieces they were made in: in
    memory, or past :data:`_HELD_BYTES` in a file of the spill folder (the rows of an OpenAI log of
    many choices with a long prompt are many times its size, see :func:`_in_order`)."""

    def __init__(self, index: int):
        self.tables: list[pa.Table] = []
        self.size, self.path, self.file, self.writer = 0, f"{_JOB.spill_dir}/held-{index}.arrow", None, None

    def add(self, rows: pa.Table) -> None:
        self.tables.append(rows)
        self.size += rows.nbytes
        if self.writer is None and self.size <= _HELD_BYTES:
            return
        if self.writer is None:
            self.file = pa.OSFile(self.path, "wb")
            self.writer = pa.ipc.new_file(self.file, _ROWS_SCHEMA)
        for table in self.tables:
            self.writer.write_table(table)
        self.tables = []

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.file.close()

    def pieces(self) -> Iterator[tuple[pa.Table, bool]]:
        """The rows, each piece with whether it was read from the file: those held in memory as one
        table, one chunk a column (a part's files are then written as they were before rows came in
        pieces), those in the file a piece at a time, and the file removed. A piece read is one
        buffer that its columns are slices of: a column kept keeps all of it."""
        if self.tables:
            yield (self.tables[0] if len(self.tables) == 1 else pa.concat_tables(self.tables).combine_chunks()), False
        if self.writer is not None:
            with pa.OSFile(self.path) as f:
                reader = pa.ipc.open_file(f)
                for i in range(reader.num_record_batches):
                    yield pa.Table.from_batches([reader.get_batch(i)]), True
            os.remove(self.path)


def _keyed(part: Part, pieces: Iterable[pa.Table]) -> Part:
    """``part`` with the keys of its rows (given in ``pieces``); the rows, quarantined items and
    entries of a join stay in this process for :func:`finish`."""
    held, keys = _Held(part.index), []
    for rows in pieces:
        keys.append([rows[name].to_numpy() for name in ("id_key", "exact_key", "norm_key")])
        held.add(rows)
    held.close()
    part.keys = {name: np.concatenate(of) for name, of in zip(("id_key", "exact_key", "norm_key"), zip(*keys))}
    # Published with the version, as the traces are: scrubbed, then cut. A detail may quote a value
    # (a content neither chat nor text), as Python writes it.
    for field in ("raw", "detail") if part.quarantine else ():
        texts = pa.array([q[field] for q in part.quarantine], pa.string())
        if _JOB.dataset.scrub_pii:
            texts = pii.scrub_array(pii.unescaped(texts, python=field == "detail"), part.pii, repeats=False)
            texts = pii.scrub_cut_short(texts, part.pii, within=RAW_CHARS) if field == "raw" else texts
        for q, text in zip(part.quarantine, pc.utf8_slice_codeunits(texts, 0, RAW_CHARS).to_pylist()):
            q[field] = text
    _ROWS[part.index] = held, part.quarantine, part.joined
    part.joined = []
    part.quarantine = []
    return part


@dataclass
class Finish:
    """What this process decided about a part's rows: duplicates, by position, and where its rows start."""

    index: int
    first: int  # the number of traces kept before this part's
    duplicates: dict[int, str]
    lines_before: int  # lines of its file before its block, when they were not counted (see Part.lines)


@dataclass
class Written:
    traces: dict | None
    quarantine: dict | None
    reasons: Counter
    rewards: tuple[int, float, float, float, Counter]  # labeled, sum, min, max; signals' counts (see _signal_counts)


def finish(item: Finish) -> Written:
    """Write a deduplicated part: its kept rows as a part of the traces table and its quarantined
    items; keep its rows for pairing (see :func:`spill`) and its entries of a join (see :func:`joined_part`).

    Its rows come piece by piece (see :class:`_Held`), and so do its duplicates, each quarantined with
    its whole row: they are written as they come, merged in line order with the part's other items."""
    held, quarantine, joined = _ROWS.pop(item.index)
    if joined:
        _hold_joined(item.index, joined, item.lines_before)
    for q in quarantine if item.lines_before else ():
        q["source_line"] += item.lines_before
    own = sorted(quarantine, key=_line_order)  # their texts cut (see _keyed): they wait in memory
    own_at, taken = [_line_order(q) for q in own], 0
    reasons = Counter(q["reason"] for q in own)
    duplicates = np.array(sorted(item.duplicates), np.int64)
    stats, signals, start, first = [(0, 0.0, math.inf, -math.inf)], Counter(), 0, item.first
    with ExitStack() as stack:
        out = _PartOut(stack, "traces", item.index, TRACES_SCHEMA)
        quarantined = _PartOut(stack, "quarantine", item.index, QUARANTINE_SCHEMA)
        for rows, read in held.pieces():
            quarantined.flush(_PIECE_BYTES)  # what earlier pieces left waiting, past its size
            if item.lines_before:
                at = rows.schema.get_field_index("source_line")
                rows = rows.set_column(at, "source_line", pc.add(rows["source_line"], item.lines_before))
            lo, hi = np.searchsorted(duplicates, [start, start + rows.num_rows]).tolist()
            positions, start = duplicates[lo:hi] - start, start + rows.num_rows
            if len(positions):
                found = sorted((_quarantined(row["source_file"], row["source_line"], item.duplicates[i],
                                             _DEDUP_DETAIL[item.duplicates[i]], msgspec.json.encode(row).decode())
                                for i, row in zip(duplicates[lo:hi].tolist(),
                                                  rows.select(TRACES_SCHEMA.names).take(positions).to_pylist())),
                               key=_line_order)
                upto = bisect.bisect_right(own_at, _line_order(found[-1]), lo=taken)
                quarantined.add(list(heapq.merge(own[taken:upto], found, key=_line_order)))
                taken = upto
                reasons.update(q["reason"] for q in found)
                kept = np.ones(rows.num_rows, bool)
                kept[positions] = False
                rows = rows.filter(kept)
            stats.append(_reward_stats(rows["final_reward"]))
            signals += _signal_counts(rows)
            if not rows.num_rows:
                continue
            out.write(rows.select(TRACES_SCHEMA.names))
            copied = read and not len(positions)  # a piece read back, unless filtering its duplicates copied it
            spilling, first = _for_pairing(rows, first, copied), first + rows.num_rows
            _SPILLING.append((spilling, spilling.get_total_buffer_size()))
            if sum(size for _, size in _SPILLING) >= _SPILL_BYTES:
                spill()
        quarantined.add(own[taken:])
        quarantined.flush()
    labeled, total, low, high = zip(*stats)
    return Written(out.written, quarantined.written, reasons, (sum(labeled), sum(total), min(low), max(high), signals))


def _line_order(q: dict) -> tuple[str, int]:
    return q["source_file"], q["source_line"]


class _PartOut:
    """A part's file of one table (see :meth:`Staging.part_writer`), opened at its first row. Rows
    added as dicts wait for :meth:`flush`, so that a part's file is one row group unless it is large."""

    def __init__(self, stack: ExitStack, name: str, index: int, schema: pa.Schema):
        self.stack, self.name, self.index, self.schema = stack, name, index, schema
        self.writer, self.waiting, self.size = None, [], 0

    @property
    def written(self) -> dict | None:
        return self.writer and self.writer.written

    def write(self, table: pa.Table) -> None:
        if self.writer is None:
            self.writer = self.stack.enter_context(_JOB.staging.part_writer(self.name, self.index, self.schema))
        self.writer.write(table)

    def add(self, rows: list[dict]) -> None:
        self.waiting += rows
        self.size += sum(len(q["raw"]) for q in rows)

    def flush(self, past: int = -1) -> None:
        """Write the rows waiting, if their raw texts hold more than ``past`` characters."""
        if self.waiting and self.size > past:
            self.write(pa.Table.from_pylist(self.waiting, schema=self.schema))
            self.waiting, self.size = [], 0


def _for_pairing(rows: pa.Table, first: int, copied: bool) -> pa.Table:
    """The kept rows of a part, numbered from ``first`` (in the source's order of kept rows), as they
    are spilled for pairing: with all that a GRPO row or a DPO pair takes from them. They are copied
    out of ``rows``'s buffers with ``copied``; otherwise the columns are taken as they are where
    every row is spilled.

    Held until spilled, they must hold no more memory than their own columns' size says: a piece of
    a part's file, one buffer, was kept whole by them, with the long prompt its many choices repeat.
    300 logs of 64 choices of a 100 KB prompt peaked at 3,556 MB, now 718.

    A prompt's messages are the same in each of its rows, so a row carries them only when this
    process has not spilled them already (as far as :data:`_SPILLED_PROMPTS` remembers), and a row
    without a reward, which pairs with none, is spilled only when it carries them or a reference
    answer (which the prompt's GRPO row may take). The first row
    of a prompt in the whole source always does (no kept row of it came before, here or anywhere),
    and pairing takes a prompt's messages from its first row. At a million bench traces, this
    spills a quarter less."""
    keys = rows["prompt_key"].to_numpy()
    _, once = np.unique(keys, return_index=True)  # a prompt's first row in the part
    new = ~_SPILLED_PROMPTS.recall(keys[once])[0]
    _SPILLED_PROMPTS.store(keys[once][new], np.ones(new.sum(), bool))
    openers = np.zeros(len(keys), bool)
    openers[once[new]] = True
    wanted = openers | rows["final_reward"].is_valid().to_numpy(zero_copy_only=False) \
        | rows["reference_answer"].is_valid().to_numpy(zero_copy_only=False)
    at = np.flatnonzero(wanted)
    rest = rows.select([name for name in _SPILL_SCHEMA.names if name not in ("row", "messages")])
    rest = rest.take(at) if copied or len(at) < rows.num_rows else rest
    messages = rows["messages"].take(pa.array(np.where(openers[at], at, -1), mask=~openers[at]))
    return pa.table({"row": pa.array(first + at, pa.int64()), "messages": messages,
                     **{name: rest[name] for name in rest.column_names}}, schema=_SPILL_SCHEMA)


def _signal_counts(rows: pa.Table) -> Counter:
    """Of kept rows: how many carry each signal, and how many judge (and feedback) scores lie outside
    their range."""
    cfg = _JOB.reward
    counts = Counter({name: rows.num_rows - rows[f"{name}_reward"].null_count for name in rewards.SIGNALS})
    if cfg.judge_weight > 0:
        counts["judge_outside_range"] = rewards.scores_outside(rows["scores"], cfg.judge_score, *cfg.judge_range)
    if cfg.feedback_weight > 0 and cfg.feedback_score:  # of the rows whose feedback is the score's: no thumb, no rating
        scored = np.isnan(rewards.feedback_rewards(rows["feedback_thumb"].combine_chunks(),
                                                   rows["feedback_rating"].combine_chunks()))
        counts["feedback_outside_range"] = rewards.scores_outside(
            rows["scores"].filter(pa.array(scored)), cfg.feedback_score, *cfg.feedback_range)
    return counts


def _reward_stats(column: pa.ChunkedArray) -> tuple[int, float, float, float]:
    valid = pc.drop_null(column)
    if not len(valid):
        return 0, 0.0, math.inf, -math.inf
    low_high = pc.min_max(valid).as_py()
    return len(valid), pc.sum(valid).as_py(), low_high["min"], low_high["max"]


def spill() -> int:
    """Append the kept rows this process has gathered to the spill files of their buckets (a hash of
    the prompt), to be paired once every row is in.

    A bucket has a file per process, an Arrow stream that each spill appends a record batch to, so
    pairing a bucket reads a few whole files, and nothing about the pieces is kept in memory: with a
    file per spill, the list of (spill, bucket) pieces grew with the square of the input (about a
    million pieces, some 100 MB, at ten million traces). Returns this process's id, which names its
    files."""
    if not _SPILLING:
        return os.getpid()
    rows = _pairable(pa.concat_tables([t for t, _ in _SPILLING]), _JOB.dataset.dpo_max_pairs_per_prompt)
    _SPILLING.clear()
    _append_runs(rows, _bucket_of(rows["prompt_key"]), lambda b: _spill_path(b, os.getpid()))
    # A spill's copies (some 60 MB for 24 MB of rows) otherwise stayed in the worker into the next
    # parts, where the other worker and the main process were at their largest too: a million bench
    # traces peaked at 822 to 831 MB, now 740 to 776 MB, in the same time; a million Langfuse
    # generations, with the main process's key sets as twenty million traces fill them, at 926 to
    # 991 MB in five runs, now 906 to 946 MB in four.
    del rows
    _release_arrow_memory()
    return os.getpid()


def _release_arrow_memory() -> None:
    """Give back now what Arrow's allocator holds of the memory freed in this process, not after the
    second the workers have it wait (see _WORKER_ALLOCATORS): where a step frees much at once."""
    pa.default_memory_pool().release_unused()


def _bucket_of(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The bucket of each 64-bit key, by its top 31 bits, spread evenly."""
    top = pc.shift_right(keys, pa.scalar(33, pa.uint64()))
    return pc.divide(pc.multiply(pc.cast(top, pa.int64()), _JOB.buckets), 2**31)


def _append_runs(rows: pa.Table, target: pa.Array, path: Callable[[int], str]) -> None:
    """Append each row of ``rows`` to the Arrow stream file ``path(target)``, a record batch per file;
    rows keep their order within a file."""
    order = pc.sort_indices(target)  # stable
    rows, target = rows.take(order), target.take(order)
    start = 0
    for run in pc.run_end_encode(target).cast(pa.run_end_encoded(pa.int32(), pa.int64())).chunks:
        for end, b in zip(run.run_ends.to_pylist(), run.values.to_pylist()):
            # Uncompressed: compressing cost more than the disk it saved.
            with open(path(b), "ab") as f:
                if not f.tell():  # a new stream: its schema first
                    f.write(rows.schema.serialize())
                f.write(rows.slice(start, end - start).combine_chunks().to_batches()[0].serialize())
            start = end


def _pairable(rows: pa.Table, k: int) -> pa.Table:
    """``rows`` less the answers that can never be paired, whatever other rows come, given at most
    ``k`` pairs a prompt: of a prompt with many answers, only its earliest row (the one that orders
    it and carries its messages), its earliest with a reference answer (its GRPO row's answer) and
    the answers at either end of its ranking, where every pair lies.

    An answer is left out when ``k + 1`` answers of distinct texts rank above it: whatever answer it
    would pair with, at least ``k`` of them make pairs as wide or wider that come first (a tie goes
    to the higher-ranked answer), so neither strategy takes it; best_vs_worst only looks ``k`` deep
    anyway. From below, only answers of a strictly lower reward count, and of answers of one reward,
    those ``k + 1`` texts of either end by trace id (all_pairs pairs a chosen answer with the lowest
    ids of a tie first, best_vs_worst takes its highest last): rewards that take few values (a
    verifier's 0 or 1) tie half a popular prompt's answers. More rows only add answers above and
    below, so leaving these out of a spill leaves pairing as it is, and a prompt that a million users
    sent costs a few rows a spill, not a million in one bucket's memory."""
    _, group, sizes = np.unique(rows["prompt_key"].to_numpy(), return_inverse=True, return_counts=True)
    crowded = np.flatnonzero(sizes[group] > 2 * k + 3)  # the two ends hold at least 2k + 2 rows: fewer are kept whole
    if not len(crowded):
        return rows
    keep = np.ones(rows.num_rows, bool)
    keep[crowded] = False
    prompts: dict[int, list[tuple[int, dict]]] = {}
    for i, row in zip(crowded.tolist(), rows.select(["row", "final_reward", "trace_id", "completion", "reference_answer"])
                      .take(crowded).to_pylist()):
        prompts.setdefault(int(group[i]), []).append((i, row))
    for answers in prompts.values():
        keep[min(answers, key=lambda a: a[1]["row"])[0]] = True
        if referenced := [a for a in answers if a[1]["reference_answer"] is not None]:
            keep[min(referenced, key=lambda a: a[1]["row"])[0]] = True
        ranked = sorted((a for a in answers if a[1]["final_reward"] is not None),
                        key=lambda a: (-a[1]["final_reward"], a[1]["trace_id"]))
        _keep_texts(keep, ranked, k)
        below: set[str] = set()
        for _, tied in itertools.groupby(reversed(ranked), key=lambda a: a[1]["final_reward"]):
            if len(below) > k:
                break
            tied = list(tied)  # by trace id, highest first: best_vs_worst takes a tie's highest, all_pairs its lowest
            below |= _keep_texts(keep, tied, k) | _keep_texts(keep, tied[::-1], k)
    return rows.filter(keep)


def _keep_texts(keep: np.ndarray, answers: list[tuple[int, dict]], k: int) -> set[str]:
    """Keep ``answers`` in order until ``k + 1`` texts are kept; those texts."""
    texts: set[str] = set()
    for i, row in answers:
        if len(texts) > k:
            break
        keep[i] = True
        texts.add(row["completion"].strip())
    return texts


def _spill_path(bucket: int, writer: int | str) -> str:
    """A bucket's spill file written by ``writer``: a process id, or the bucket's split (see _sub_buckets)."""
    return os.path.join(_JOB.spill_dir, f"bucket-{bucket:06d}-{writer}.arrow")


def _bucket_files(bucket: int, writers: Iterable[int | str]) -> list[str]:
    """The spill files of a bucket that ``writers`` wrote (one that had no rows for it wrote none)."""
    return [p for p in (_spill_path(bucket, w) for w in writers) if os.path.exists(p)]


def _records(kinds: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Which entries of a join are its records (see formats.RECORD_KINDS), not what attaches to them."""
    return pc.is_in(kinds, value_set=pa.array(formats.RECORD_KINDS)).to_numpy(zero_copy_only=False)


def _attaching(kinds: pa.ChunkedArray | pa.Array, record: np.ndarray) -> np.ndarray:
    """Which entries of a join (``record``: which are its records) may attach to a record and be
    missed: scores, log records, batch requests; a Langfuse trace's version attaches to what there is."""
    return ~record & pc.not_equal(kinds, "version").to_numpy(zero_copy_only=False)


def _kinds(rows: pa.Table, buckets: pa.ChunkedArray | pa.Array, n: int) -> np.ndarray:
    """Of a join's entries in ``n`` buckets: per bucket, its records, what may attach to them, and the
    bytes of its records (which size its parts, see :func:`_join_part_size`)."""
    kinds, at = rows["kind"], buckets.to_numpy()
    record = _records(kinds)
    sizes = pc.binary_length(rows["value"]).to_numpy(zero_copy_only=False)[record]
    return np.stack([np.bincount(at[record], minlength=n), np.bincount(at[_attaching(kinds, record)], minlength=n),
                     np.bincount(at[record], weights=sizes, minlength=n).astype(np.int64)])


def _hold_joined(index: int, entries: list[tuple], lines_before: int) -> None:
    """Keep the entries of a join of part ``index`` in this process, as columns, their lines moved on
    by ``lines_before`` as its other items are (they go to the join through the spill files, not
    through this process's parent); spill them once the spill buffer is full."""
    global _JOINED_BYTES
    rows = [(index, at, kind, trace, key, value, *((where[0], where[1] + lines_before) if where else (None, None)))
            for at, (kind, trace, key, value, where) in enumerate(entries)]
    table = pa.Table.from_arrays([pa.array(c, t) for c, t in zip(zip(*rows), _JOIN_SCHEMA.types)],
                                 schema=_JOIN_SCHEMA)
    _JOINED.append(table)
    _JOINED_BYTES += table.nbytes
    if _JOINED_BYTES >= _SPILL_BYTES:
        spill_joined()


def spill_joined() -> tuple[int, np.ndarray]:
    """Append the entries of a join this process holds to the spill files of their buckets, by a hash
    of their trace's id: a bucket holds all of an export's rows of its traces, which
    :func:`joined_part` joins without the rest. A bucket has a file per process, as pairing's.
    Returns this process's id, which names its files, and per bucket, the records it spilled into it and
    what may attach to them (see :func:`_kinds`)."""
    global _JOINED_BYTES
    if _JOINED:
        table = pa.concat_tables(_JOINED)
        _JOINED.clear()
        _JOINED_BYTES = 0
        bucket = _bucket_of(_trace_keys(table))
        _JOINED_COUNTS[:] += _kinds(table, bucket, _JOB.buckets)
        _append_runs(table, bucket, lambda b: _spill_path(b, _join_writer(os.getpid())))
        del table, bucket  # as spill() does
        _release_arrow_memory()
    return os.getpid(), _JOINED_COUNTS


def _join_writer(pid: int) -> str:
    """How a process's spill files of a join are named (see :func:`_spill_path`), apart from its pairing ones."""
    return f"join-{pid}"


def _trace_keys(table: pa.Table) -> pa.ChunkedArray:
    traces = table["trace"].to_pylist()
    return pa.chunked_array([np.fromiter(map(dedup.key, traces), np.uint64, len(traces))])


def split_joined(item: tuple[int, list[str], int]) -> list[tuple[str, int, int, int]]:
    """Cut a bucket of a join's entries (the spill files of ``writers``) into ``n`` by trace, as
    pairing's buckets are (see :func:`_sub_buckets`): the writer of each piece, its records, what
    may attach to them, and its records' bytes.
    Each join part sorts and searches its whole bucket: past about 24 GB of export, with buckets ever
    larger, a million generations in two buckets took 92 to 102 s and peaked at 1.21 to 1.22 GB; cut
    again, 63.5 s and 839 MB."""
    bucket, writers, n = item
    counts = np.zeros((3, n), np.int64)

    def spread(rows: pa.Table, sub: pa.ChunkedArray) -> None:
        counts[:] += _kinds(rows, sub, n)

    pieces = _split(bucket, _bucket_files(bucket, writers), n, _trace_keys, _JOIN_SCHEMA, "join-split", spread)
    return list(zip(pieces, *counts.tolist()))


def _join_part_size(records: int, size: int) -> int:
    """How many of a bucket's ``records`` (of ``size`` bytes in all) make a part of its join:
    _JOIN_PART, or fewer for records larger than a block's lines, about a block's worth of them. One
    trace of 50,000 generations of 12 KB (627 MB of export in one bucket) peaked at 1,029 to 1,170 MB
    in parts of 2,000; 717 MB in parts of 498, in less time (6.8 s against 8.1 to 10.1)."""
    return int(max(1, min(_JOIN_PART, _JOIN_PART_BYTES * max(records, 1) // max(size, 1))))


def joined_part(item: tuple[int, tuple[int, list[str], int, int]]) -> Part:
    """``size`` records of a bucket's spill files (those of ``writers``: see :func:`spill_joined` and
    :func:`split_joined`) from its ``first``, in the order they were read, joined with what attaches
    to them (a Langfuse generation's scores and version, an OTLP span's log records), as one more
    part, as :func:`process` makes a block's.

    The bucket's files are mapped, not read: only the rows of this part are copied (see
    :func:`_take_rows`), and those of what attaches to its records a few records at a time, about
    :data:`_PIECE_BYTES` of it (see :func:`_joined_rows`), so a part holds no more memory than a
    block's, whatever the bucket, unless one record carries many times that (a generation with a
    hundred thousand scores: the README's limits)."""
    index, (bucket, writers, first, size) = item
    batches = [b for path in _bucket_files(bucket, writers) for b in pa.ipc.open_stream(pa.memory_map(path))]
    rows = pa.Table.from_batches(batches, schema=_JOIN_SCHEMA)
    record = _records(rows["kind"])
    order = pc.sort_indices(rows.select(["part", "at"]), [("part", "ascending"), ("at", "ascending")]).to_numpy()
    ours = _take_rows(batches, order[record[order]][first:first + size], _JOIN_SCHEMA)
    ids = pa.concat_arrays([ours[name].combine_chunks() for name in ("key", "trace")])
    theirs = ~record & pc.is_in(rows["key"], value_set=ids).to_numpy()  # their scores, versions and log records
    theirs = order[theirs[order]]
    part = Part(index, [])
    if first == 0:  # one part of the bucket counts what attached to none of its records
        part.unjoined = _unjoined(rows, record)
    part = _keyed(part, (_rows(table, part) for table in _joined_rows(batches, rows, ours, theirs, part)))
    # A join part's Python rows and Arrow buffers churn through memory fast enough that a second's
    # worth of freed pages added some 100 MB to each worker, and took a million generations to
    # 875-902 MB. Given back after each part: 814-832 MB, in the same time (52.5-56.5 s against
    # 56.4-58.7).
    _release_arrow_memory()
    return part


def _joined_rows(batches: list[pa.RecordBatch], rows: pa.Table, ours: pa.Table, theirs: np.ndarray,
                 part: Part) -> Iterator[pa.Table]:
    """The traces of a join part's records ``ours`` (a :func:`formats.join` of them with the entries
    at ``theirs`` in the bucket's ``rows``), as :data:`columns.RAW_SCHEMA` tables, counted into ``part``.

    Joined a few records at a time, each time with about :data:`_PIECE_BYTES` of what attaches to
    them: a trace-level score attaches to every generation of its trace, and ten generations with two
    million scores peaked at 1.8 GB, one trace of 4,000 generations with 1,000 trace-level scores at
    1.6 GB, when a part's 2,000 records were joined at once."""
    keys = rows["key"].take(theirs)
    grouped = pa.table({"key": keys, "size": pc.binary_length(rows["value"]).take(theirs)}).group_by("key")
    sizes = grouped.aggregate([("size", "sum")])
    attached = sum(pc.fill_null(sizes["size_sum"].take(pc.index_in(ours[name], value_set=sizes["key"])), 0).to_numpy()
                   for name in ("key", "trace")).tolist()
    # A part of no records (a bucket of what attaches to none) is one group all the same: its rows, none.
    starts = [run[0] for run in _runs(range(len(attached)), attached.__getitem__)] or [0]
    for lo, hi in zip(starts, starts[1:] + [ours.num_rows]):
        mine = ours.slice(lo, hi - lo)
        if len(starts) > 1:  # only what attaches to these
            ids = pa.concat_arrays([mine[name].combine_chunks() for name in ("key", "trace")])
            at = theirs[pc.is_in(keys, value_set=ids).to_numpy(zero_copy_only=False)]
        else:
            at = theirs
        attaching = _take_rows(batches, at, _JOIN_SCHEMA)
        entries = [*zip(*(attaching[name].to_pylist() for name in ("kind", "trace", "key", "value")), itertools.repeat(None)),
                   *zip(*(mine[name].to_pylist() for name in ("kind", "trace", "key", "value")),
                        zip(mine["file"].to_pylist(), mine["line"].to_pylist()))]
        del attaching
        records = formats.join(entries)
        del entries  # while its traces are made: their kinds, ids and places, a Python object each
        found = _joined_records(records, part)
        del records  # what attaches to them (a generation's scores), as the traces now hold it
        yield from _in_order(*found)


def _joined_records(records: list[tuple], part: Part) -> tuple[list, np.ndarray, pa.Table | None, np.ndarray]:
    """The traces of records of :func:`formats.join` in the interval, counted into ``part``: as
    :func:`_in_order` takes them, those of the fast paths as rows."""
    fast, taken, fast_at = _fast_joined(records, part)
    found, found_at, outside = [], [], []
    lo, hi = columns.micros(_JOB.start), columns.micros(_JOB.end)
    for i in np.setdiff1d(np.arange(len(records)), taken).tolist():  # taken: a record a row, or several
        (file, n), value = records[i][2], records[i][1]
        for doc in formats.joined(records[i]):  # a span's choices each a trace
            try:
                if isinstance(doc, formats.FormatError):
                    raise doc
                rec = _named_convert(doc)
            except (traces.InvalidTrace, formats.FormatError) as e:  # the row itself stays in its source file
                at = _mapped_time(doc) or formats.record_time(records[i])
                if at is not None and not lo <= _within_partition(file, columns.micros(at)) < hi:
                    continue  # the run of its own time quarantines it, as _read places what it rejects
                part.read += 1
                raw = (value.decode("utf-8", "replace") if formats.is_line(value)
                       else json.dumps(formats.entry_row(value), default=str))
                part.quarantine.append(_quarantined(file, n, e.reason, str(e), raw[:RAW_KEPT]))
                continue
            if _JOB.start <= rec.start_time < _JOB.end:
                part.read += 1
                found.append((file, n, rec))
                found_at.append(i)
            else:
                outside.append(columns.micros(rec.start_time))
    _outside(part, np.array(outside, np.int64))
    return found, np.array(found_at, np.int64), fast, fast_at


def _within_partition(file: str, at: int) -> int:
    """``at`` (microseconds), brought within the times the partition of ``file`` may hold (see
    :func:`_holds`): the runs that read its folder are those whose intervals its times may fall in,
    so an item of a time it may not hold would go to a run that never reads it."""
    span = traces.partition_span(file, _JOB.root)
    if span is None:
        return at
    lo, hi = map(columns.micros, _holds(span, _JOB.dataset.partition_lag()))
    return min(max(at, lo), hi - 1)


def _mapped_time(doc: Any) -> datetime | None:
    """The start time of a record mapped to our schema that did not pass its checks, where it is one."""
    try:
        return datetime.fromisoformat(doc["start_time"]) if isinstance(doc, dict) else None
    except (KeyError, TypeError, ValueError):
        return None


def _unjoined(rows: pa.Table, record: np.ndarray) -> Counter:
    """Of a bucket of a join's entries (all of an export's rows of its traces), by kind, those that
    may attach to a record and attach to none: by its own id or its trace's, as :func:`formats.join`
    finds them."""
    records = rows.select(["key", "trace"]).filter(pa.array(record))  # not their values: the bucket's bulk
    ids = pa.concat_arrays([records[name].combine_chunks() for name in ("key", "trace")])
    kinds = rows["kind"]
    loose = _attaching(kinds, record) & ~pc.is_in(rows["key"], value_set=ids).to_numpy(zero_copy_only=False)
    return Counter(kinds.filter(pa.array(loose)).to_pylist())


def _take_rows(batches: list[pa.RecordBatch], rows: np.ndarray, schema: pa.Schema) -> pa.Table:
    """The ``rows`` (positions in ``batches``, one after another) in the order given, copied batch by
    batch. A table's take first joins each column's chunks into one: for a bucket's rows, mapped from
    its spill files, a copy of the whole bucket (it took a 50 MB column 116 ms and 100 MB to take
    2,000 rows, and a million Langfuse generations some 50 MB more at their peak)."""
    rows, ends = np.asarray(rows, np.int64), np.cumsum([b.num_rows for b in batches], dtype=np.int64)
    at = np.searchsorted(ends, rows, side="right")  # the batch of each row
    by_batch = np.argsort(at, kind="stable")
    bounds = np.searchsorted(at[by_batch], np.arange(len(batches) + 1))
    taken = pa.Table.from_batches([batches[i].take(pa.array(rows[by_batch[lo:hi]] - (ends[i] - batches[i].num_rows)))
                                   for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])) if hi > lo], schema=schema)
    return taken.take(np.argsort(by_batch))  # back in the order given: a copy of what was taken only


def _fast_joined(records: list[tuple], part: Part) -> tuple[pa.Table | None, np.ndarray, np.ndarray]:
    """The records of :func:`formats.join` read from JSON lines that a fast path takes, Langfuse
    generations (:func:`columns.parse_langfuse_lines`) and a batch's outputs
    (:func:`columns.parse_batch_lines`), counted into ``part``: (those in the interval, as
    :data:`columns.RAW_SCHEMA` rows in the records' order; the index of each taken; the index of each row)."""
    def lines(kind: str) -> np.ndarray:
        return np.array([i for i, (k, value, *_) in enumerate(records) if k == kind and formats.is_line(value)], np.int64)

    generations, outputs = lines("generation"), lines("response")
    got = [(columns.parse_langfuse_lines([records[i][1] for i in generations], [records[i][4] for i in generations],
                                         [formats.distinct_scores(records[i][3]) for i in generations]), generations),
           (columns.parse_batch_lines([records[i][1] for i in outputs], [records[i][3] for i in outputs]), outputs)]
    got = [(found[0], at[found[1]]) for found, at in got if found is not None]
    if not got:
        return None, np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows, at = pa.concat_tables([rows for rows, _ in got]), np.concatenate([at for _, at in got])
    if len(got) > 1:  # in the order of the records, as _fast gives its rows
        order = np.argsort(at, kind="stable")
        rows, at = rows.take(order), at[order]
    start = pc.cast(rows["start_time"], pa.int64()).to_numpy(zero_copy_only=False)
    inside = (start >= columns.micros(_JOB.start)) & (start < columns.micros(_JOB.end))
    part.read += int(inside.sum())
    _outside(part, start[~inside])
    places = [records[i][2] for i in at[inside].tolist()]
    rows = rows.filter(pa.array(inside))
    return _placed(rows, pa.array([f for f, _ in places], pa.string()), [n for _, n in places]), at, at[inside]


# Workers keep the memory they free for their next block instead of handing it back to the system
# and faulting it in again: glibc's malloc (Python's large objects) and mimalloc (pyarrow's buffers,
# released after a second unused rather than at once). A page fault costs microseconds on a virtual
# machine, and a worker otherwise takes some 700,000 of them per million traces, 140,000 with these
# settings; the whole process tree stays under 900 MB at a million traces.
_WORKER_ALLOCATORS = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 26),
                      "MIMALLOC_PURGE_DELAY": "1000"}


def _map_large_buffers() -> None:
    """Have glibc map each buffer of a megabyte or more in this process, and unmap it once freed (as
    ``MALLOC_MMAP_THRESHOLD_`` would; a user's setting of it is kept).

    With workers, this process reads gzip and Parquet sources through, buffers of megabytes each,
    and writes their blocks for the workers (:func:`sources.spilled`). glibc's default raises its
    threshold to the largest buffer freed so far, after which such buffers come from its heap, which
    they fragment: reading 600,000 gzip traces of 10 KB, this process grew from 230 to 400 MB, and the
    run passed 1 GB; with this it stayed at 150 to 190 MB. Blocks written to files rather than pickled
    left fewer buffers alive at once, but not few enough: 600,000 gzip traces with an 8 KB system
    prompt still peaked at 955 MB without this, 830 MB with it. The setting is process-wide and lasts,
    as the process of a task it runs in does."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    try:
        ctypes.CDLL(None).mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD, from glibc's malloc.h
    except (AttributeError, OSError):  # not glibc
        pass


@contextmanager
def _environment(settings: dict[str, str]) -> Iterator[None]:
    """``settings`` in the environment of the processes started meanwhile (never overriding the user's)."""
    added = {k: v for k, v in settings.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


@contextmanager
def _main_left_alone() -> Iterator[None]:
    """Processes spawned meanwhile do not import this process's ``__main__`` again, as spawn does
    (as ``__mp_main__``) to find what the main module defines: no worker's code is there. Under
    Airflow, ``__main__`` is the ``airflow`` script, and importing Airflow in a worker failed, in a
    task whose environment blocks the metadata database's URL, so every interval a worker took failed."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = type(sys)("__main__")  # no __file__, no __spec__: nothing to import
    try:
        yield
    finally:
        sys.modules["__main__"] = main


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """Processes spawned meanwhile keep Ctrl-C's SIGINT blocked for good. A terminal sends it to every
    process of its group, and a worker it reached printed a traceback of its own (in its imports, or
    waiting for a task); this process alone stops the run, and a Ctrl-C pressed meanwhile reaches it
    once they are started."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


class _Pool:
    """Worker processes for both steps (processing blocks, then pairing buckets), started once: a
    spawned worker costs about a second of imports, as much as it processes of a 100k-trace source.

    Item ``i`` of :meth:`ordered` goes to worker ``i % workers``, and :meth:`submit` can send a task
    to the worker of an item: a part is finished where it was made, with the rows it kept in memory.
    """

    def __init__(self, job: Job, workers: int):
        self.policy = _init(job)  # this process labels small sources itself
        if workers > 1:
            _map_large_buffers()
        # math-verify's CPU limit is a signal's timer, which only a process's main thread may set: run
        # from another thread, a run labels in a worker of its own, where a hard answer reaches the
        # limit rather than hangs it.
        limited = job.reward.verifier != "math" or threading.current_thread() is threading.main_thread()
        # Large evaluation sets' n-grams are built here once, while the workers import, and mapped by
        # each. Built by each, they took as much memory again per worker: 100,000 items of 60 words and
        # 100,000 traces peaked at 1,272 MB, where they now take 720 to 790.
        large = sum(map(len, job.eval_items)) > _SHARED_EVAL_CHARS
        shared = replace(job, eval_items=(), eval_index=os.path.join(job.spill_dir, "eval-ngrams")) if large else job
        context = get_context("spawn")
        self.workers = [ProcessPoolExecutor(1, mp_context=context, initializer=_start_worker,
                                         initargs=(shared, os.getpid()))
                        for _ in range(workers)] if workers > 1 or not limited else []
        with _environment(_WORKER_ALLOCATORS), _main_left_alone(), _interrupts_held():
            for pool in self.workers:
                pool.submit(int)  # starts its process now, under these settings
        if self.workers and shared.eval_index:
            try:
                dedup.NgramIndex(job.eval_items, job.dataset.decontamination_ngram).save(shared.eval_index)
            except BaseException:  # the run fails, its workers with it: nothing has them stopped yet
                self.close(stop=True)
                raise
            _release_arrow_memory()

    def ordered(self, fn, items: Iterable) -> Iterator:
        """``fn`` of each item, in order; at most two items per worker in flight, so memory stays bounded."""
        if not self.workers:
            yield from map(fn, items)
            return
        pending: deque = deque()
        for i, item in enumerate(items):
            pending.append(self.submit(fn, item, i))
            if len(pending) >= 2 * len(self.workers):
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def submit(self, fn, item, worker: int) -> Future:
        """``fn(item)`` in the worker of item number ``worker`` of :meth:`ordered` (in this process, without workers)."""
        if self.workers:
            return self.workers[worker % len(self.workers)].submit(fn, item)
        done: Future = Future()
        done.set_result(fn(item))
        return done

    def everywhere(self, fn) -> list:
        """``fn()`` in this process and in every worker: what each of them holds."""
        return [fn(), *(pool.submit(fn).result() for pool in self.workers)]

    def close(self, stop: bool = False) -> None:
        """End the workers once the tasks they began are done; with ``stop`` (a run that failed, or was
        interrupted: Ctrl-C does not reach them, see :func:`_interrupts_held`), at once: nothing they
        would still write is wanted, and a worker still importing or writing a part held the run up."""
        for pool in self.workers:
            if stop:
                for process in list((pool._processes or {}).values()):  # public only from Python 3.14 (kill_workers)
                    process.kill()
            pool.shutdown(cancel_futures=True)
        formats.REFUSE_TRUNCATED.reset(self.policy)  # the readers' default again, for whatever this process reads next


# ------------------------------------------------------------------------------------------ pairing


def pair_bucket(item: tuple[int, list[int], int]) -> list[tuple[dict | None, dict | None, int, int]]:
    """Write the GRPO rows and DPO pairs of the prompts spilled into one bucket (by the processes
    ``pids``), cut into ``splits`` sub-buckets: a part of each per sub-bucket, prompts in order of
    first appearance; their parts, and their counts."""
    bucket, pids, splits = item
    return [_pair(bucket * splits + i, _read_spilled(files))
            for i, files in _sub_buckets(bucket, _bucket_files(bucket, pids), splits)]


def _read_spilled(paths: list[str]) -> pa.Table:
    batches = []
    for path in paths:
        with pa.OSFile(path) as f:
            batches += pa.ipc.open_stream(f).read_all().to_batches()
    return pa.Table.from_batches(batches, schema=_SPILL_SCHEMA)


def _sub_buckets(bucket: int, paths: list[str], n: int) -> Iterator[tuple[int, list[str]]]:
    """(sub-bucket, its spill files) of a bucket: the bucket itself when ``n`` is 1; otherwise cut
    into ``n`` by prompt (see :func:`_split`). A sub-bucket's files are removed once its caller has
    paired it (see :data:`_REMOVER`)."""
    if n == 1:
        subs = [(0, paths)]
    else:
        pieces = _split(bucket, paths, n, lambda rows: rows["prompt_key"], _SPILL_SCHEMA, "split")
        subs = [(i, [path]) for i, path in enumerate(_spill_path(bucket, piece) for piece in pieces)]
    for i, files in subs:
        if files and os.path.exists(files[0]):
            yield i, files
            _REMOVER.submit(_remove, files)  # paired by now: its disk is free for the next


# Removes the spill files a process has paired, while it pairs the next: on a disk mounted with
# ``discard`` (which trims what a file held as it is removed), removing is mostly waiting on the disk,
# which the end of a run sat through for 1 to 2.4 s of a million bench traces (1.3 GB), one process
# busy. Its thread starts with the first file; a worker finishes what it was given before it exits,
# and this process's last files may go with the spill folder (see materialize).
_REMOVER = ThreadPoolExecutor(1, thread_name_prefix="ctpipe-remove")


def _remove(paths: list[str]) -> None:
    for path in paths:
        with suppress(FileNotFoundError):  # the spill folder went first, at the end of a run
            os.remove(path)


def _split(bucket: int, paths: list[str], n: int, keys: Callable[[pa.Table], pa.ChunkedArray], schema: pa.Schema,
           name: str, spread: Callable[[pa.Table, pa.ChunkedArray], None] = lambda rows, sub: None) -> list[str]:
    """Spread the rows of a bucket's files over ``n`` files by the low bits of their ``keys`` (the top
    bits chose the bucket), a spill buffer at a time, each file removed once read; ``spread`` sees the
    rows and their sub-buckets. Rows keep their order within one. Returns the writer of each new file
    (see :func:`_spill_path`), which has none where no row went."""
    pieces = [f"{name}-{i:04d}" for i in range(n)]
    held: list[pa.RecordBatch] = []

    def flush() -> None:
        rows = pa.Table.from_batches(held, schema=schema)
        held.clear()
        low = pc.bit_wise_and(keys(rows), pa.scalar(0xFFFFFFFF, pa.uint64()))
        sub = pc.cast(pc.shift_right(pc.multiply(low, pa.scalar(n, pa.uint64())), pa.scalar(32, pa.uint64())),
                      pa.int64())
        spread(rows, sub)
        _append_runs(rows, sub, lambda i: _spill_path(bucket, pieces[i]))

    size = 0
    for path in paths:
        with pa.OSFile(path) as f:
            for batch in pa.ipc.open_stream(f):
                held.append(batch)
                size += batch.get_total_buffer_size()
                if size >= _SPILL_BYTES:
                    flush()
                    size = 0
        _REMOVER.submit(_remove, [path])
    flush()
    return pieces


def _pair(index: int, table: pa.Table) -> tuple[dict | None, dict | None, int, int]:
    """The GRPO rows and DPO pairs of the spilled rows of ``table`` (all rows of their prompts), as part ``index``."""
    if not table.num_rows:
        return None, None, 0, 0
    cfg = _JOB.dataset
    # Rows by prompt, then by source order: an order of row numbers, not a sorted copy of the texts.
    order = pc.sort_indices(table.select(["prompt_key", "row"]),
                            sort_keys=[("prompt_key", "ascending"), ("row", "ascending")]).to_numpy()
    keys, rows = table["prompt_key"].to_numpy()[order], table["row"].to_numpy()[order]
    new = np.r_[True, keys[1:] != keys[:-1]] if len(keys) else np.zeros(0, bool)
    starts = np.flatnonzero(new)  # the first (earliest) row of each prompt
    by_appearance = np.argsort(rows[starts], kind="stable")
    rank = np.empty(len(starts), np.int64)
    rank[by_appearance] = np.arange(len(starts))
    first = order[starts[by_appearance]]  # a prompt's first row, which carries its messages (see _for_pairing)
    # A prompt's GRPO answer: the first reference given, in source order, by whichever of its rows.
    prompt_of = np.cumsum(new) - 1  # of each row in sorted order, its prompt's number among starts
    given = np.flatnonzero(table["reference_answer"].is_valid().to_numpy(zero_copy_only=False)[order])
    answer = np.full(len(starts), -1, np.int64)
    answered, at = np.unique(prompt_of[given], return_index=True)
    answer[answered] = order[given[at]]
    answer = answer[by_appearance]
    grpo, grpo_answer = first[answer >= 0].tolist(), answer[answer >= 0].tolist()
    group = np.empty(len(order), np.int64)  # of each row, its prompt's number in output order
    group[order] = rank[prompt_of]
    if cfg.dpo_strategy == "best_vs_worst":
        chosen, rejected = best_vs_worst(group, table["final_reward"], table["trace_id"], table["completion"], cfg)
    else:
        chosen, rejected = [], []
        ids, finals, completions = (table[c].to_pylist() for c in ("trace_id", "final_reward", "completion"))
        bounds = np.r_[starts, len(keys)]
        for g in by_appearance.tolist():
            answers = [{"i": i, "trace_id": ids[i], "final_reward": finals[i], "completion": completions[i]}
                       for i in order[bounds[g]:bounds[g + 1]].tolist()]
            for c, r in dpo_pairs(answers, cfg):
                chosen.append(c["i"])
                rejected.append(r["i"])

    grpo, grpo_answer, chosen, rejected = (pa.array(x, pa.int64()) for x in (grpo, grpo_answer, chosen, rejected))

    def said(indices: pa.Array) -> pa.Array:
        content = table["completion"].take(indices).combine_chunks()
        roles = pa.array(["assistant"] * len(indices))
        return pa.ListArray.from_arrays(pa.array(range(len(indices) + 1), pa.int32()),
                                        pa.StructArray.from_arrays([roles, content], ["role", "content"]))

    grpo_table = pa.table({"prompt": table["messages"].take(grpo), "answer": table["reference_answer"].take(grpo_answer)},
                          schema=GRPO_SCHEMA)
    dpo_table = pa.table({"prompt": table["messages"].take(first[group[chosen.to_numpy()]]),
                          "chosen": said(chosen), "rejected": said(rejected),
                          "chosen_reward": table["final_reward"].take(chosen),
                          "rejected_reward": table["final_reward"].take(rejected)}, schema=DPO_SCHEMA)
    staging = _JOB.staging
    return (staging.write_part("grpo", index, grpo_table) if grpo_table.num_rows else None,
            staging.write_part("dpo", index, dpo_table) if dpo_table.num_rows else None,
            grpo_table.num_rows, dpo_table.num_rows)


def best_vs_worst(group: np.ndarray, finals: pa.ChunkedArray, ids: pa.ChunkedArray, completions: pa.ChunkedArray,
                  cfg: DatasetConfig) -> tuple[list[int], list[int]]:
    """:func:`ctpipe.datasets.dpo_pairs`' ``best_vs_worst`` for many prompts at once: (chosen, rejected)
    row indices, prompts in the order of ``group`` (each row's prompt, numbered in output order).

    Within a prompt, answers are ranked by reward, then trace id; the i-th best pairs with the i-th
    worst. The gap narrows as i grows, so "while the gap holds" is a filter on it.
    """
    valid = np.flatnonzero(finals.is_valid().to_numpy(zero_copy_only=False))
    ranked = pa.table({"group": group[valid], "reward": finals.take(valid), "id": ids.take(valid), "i": valid})
    ranked = ranked.sort_by([("group", "ascending"), ("reward", "descending"), ("id", "ascending")])
    g, reward, at = (ranked[c].to_numpy() for c in ("group", "reward", "i"))
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if len(g) else np.zeros(0, np.int64)
    sizes = np.diff(np.r_[starts, len(g)])
    per_group = np.minimum(cfg.dpo_max_pairs_per_prompt, sizes // 2)
    nth = np.arange(per_group.sum()) - np.repeat(np.cumsum(per_group) - per_group, per_group)
    best = np.repeat(starts, per_group) + nth
    worst = np.repeat(starts + sizes - 1, per_group) - nth
    wide = rewards.reward_gap(reward[best], reward[worst]) >= cfg.dpo_min_margin
    best, worst = at[best[wide]], at[worst[wide]]
    texts = [t.strip() if t is not None else t for t in completions.take(np.r_[best, worst]).to_pylist()]
    differ = [a != b for a, b in zip(texts[:len(best)], texts[len(best):])]
    return best[differ].tolist(), worst[differ].tolist()


# ------------------------------------------------------------------------------------------ driver


class WorkerLost(RuntimeError):
    """A worker process died mid-run: the environment's doing (memory, a signal), not the input's."""


class DiskFull(OSError):
    """A disk the run writes to filled up. Retried like any failure of the environment: another run
    may have freed the space by then."""


def _disk_full(e: OSError, spill_dir: str, output: Output, size: int) -> DiskFull:
    """The error for a full disk, naming the folders written to and the room left on each, while the
    spill files still take theirs."""
    places = [f"the spill folder {spill_dir} (set TMPDIR to move it; {_free(spill_dir)} free)"]
    if output.local:
        places.append(f"the dataset store {output.root} ({_free(output.root)} free)")
    return DiskFull(e.errno, f"no space left on the device of {' or of '.join(places)}. {_spill_room(size)}; "
                    f"nothing was published")


def _no_room(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def _spill_room(size: int) -> str:
    return (f"A source of {size / 1e6:,.0f} MB spills up to about {_SPILL_NEED['langfuse'] * size / 1e6:,.0f} MB "
            f"as what joins on disk (a Langfuse export, a batch's files, OTLP log records), "
            f"{_SPILL_NEED['other'] * size / 1e6:,.0f} MB in other formats, and a compressed file's largest member "
            "waits there decompressed while its checksum is checked")


def _free(path: str) -> str:
    try:
        return f"{shutil.disk_usage(path).free / 1e6:,.0f} MB"
    except OSError:
        return "unknown"


class _Dedup:
    """First occurrence wins, in source order. Three sets of 64-bit keys (:class:`KeySet`): 16 to 32
    bytes a key up to a million, where Python sets of ints took 70 (the main process then outgrew the
    workers, and the whole run passed 1 GB at about two million traces); past that, the keys go to
    ``spill_dir`` in runs, whose filters share a fixed budget, so the sets stop growing."""

    def __init__(self, spill_dir: str, **keyset):
        self.ids, self.exact, self.norm = (KeySet(spill_dir=spill_dir, **keyset) for _ in range(3))

    def verdicts(self, keys: dict[str, np.ndarray]) -> dict[int, str]:
        """Position -> reason of the duplicates among a part's rows."""
        columns = [keys["id_key"], keys["exact_key"], keys["norm_key"]]
        known = [self.ids, self.exact, self.norm]
        # A row whose keys are all new (to the sets and to the rows before it in the part) is kept
        # whatever else happens; only the others are decided one by one, in order. A sure row never
        # shares a key with an unsure row before it (the sure one would not be that key's first).
        seen = [found.contains(column) for found, column in zip(known, columns)]
        unsure = seen[0] | seen[1] | seen[2]
        for column in columns:
            first = np.zeros(len(column), bool)
            first[np.unique(column, return_index=True)[1]] = True
            unsure |= ~first  # a key repeated within the part: its later rows are unsure
        kept = ~unsure
        out: dict[int, str] = {}
        if unsure.any():
            # The keys of this part's kept rows that an unsure row may meet again (the sets do not hold
            # them yet): the sure rows' keys that unsure rows also have, then each kept unsure row's.
            part_ids, part_exact, part_norm = (set(column[kept & np.isin(column, column[unsure])].tolist())
                                               for column in columns)
            for i in np.flatnonzero(unsure).tolist():
                id_key, exact_key, norm_key = (int(column[i]) for column in columns)
                if seen[1][i] or exact_key in part_exact:  # the same content again (a record logged twice, or another user's)
                    out[i] = "duplicate"
                elif seen[0][i] or id_key in part_ids:  # a known id with content never seen: two traces under one id
                    out[i] = "duplicate_trace_id"
                elif seen[2][i] or norm_key in part_norm:
                    out[i] = "near_duplicate"
                else:
                    part_ids.add(id_key)
                    part_exact.add(exact_key)
                    part_norm.add(norm_key)
                    kept[i] = True
        for found, column in zip(known, columns):
            found.add(column[kept])
        return out


_DEDUP_DETAIL = {
    "duplicate_trace_id": "trace_id already read with different content",
    "duplicate": "same prompt and completion as an earlier trace",
    "near_duplicate": "same prompt and completion as an earlier trace, ignoring case, spacing and punctuation",
}


def materialize(
    source: str,
    out: str,
    start: datetime,
    end: datetime,
    *,
    task: TaskConfig,
    reward: RewardConfig,
    dataset: DatasetConfig,
) -> Manifest | NoTraces:
    """Build (or find) the dataset version of ``[start, end)`` from the traces under ``source``.

    NoTraces, saying what was read, when the interval has no trace; SourceError when the source does not exist.
    """
    start, end = utc(start), utc(end)
    if end <= start:
        raise ValueError(f"interval end {end.isoformat()} is not after start {start.isoformat()}")
    lag = dataset.partition_lag()
    output = Output(out)
    # A store inside the source folder (--out under --source) would be read back as traces, each run
    # publishing another version. Local paths as they resolve: srcf/./store, srcf//store or a link
    # name the same folder. A source inside the store (traces/ beside the versions) is read whole.
    here = os.path.realpath if output.local else str
    store = here(output.root).rstrip("/") + "/" if _protocol(source) == _protocol(out) else None

    def resolved(folder: str) -> str:
        return here(folder).rstrip("/") + "/"

    def keeper(lo: datetime, hi: datetime, said: bool = True) -> Callable[[str, str], bool]:
        """Which folders a run of [lo, hi) lists (``said``: and warns of the store inside the source)."""
        def keep(folder: str, root: str) -> bool:
            if store and folder == root and resolved(root) == store:  # the first folder listed
                raise sources.SourceError(f"the dataset store {out!r} is the source {source!r}: its versions would "
                                          "be read back as traces; give the store a folder of its own")
            if store and resolved(folder).startswith(store) and not resolved(root).startswith(store):
                if said:
                    log.warning("the dataset store %s lies inside the source: its folder is not read as traces", out)
                return False
            return _may_hold(folder, root, lo, hi, lag)
        return keep

    fs, files, skipped = sources.list_files(source, keep=keeper(start, end))
    late = _late(source, output, start, end, files, dataset, keeper)
    if skipped:  # named in the manifest too, all of them, with why
        log.warning("%d files of the source are not read: %s", len(skipped),
                    "; ".join(some_files(skipped, "{}: {}", "not read (the manifest, or --json, names them all)")))
    # What the eval sets hold, not only where they are, makes the version: prompts are decontaminated
    # against it, and an eval set grows. Read first, so that a missing one leaves nothing behind.
    eval_items = eval_sets.items(task, dataset)
    config = {"task": task.model_dump(), "reward": reward.model_dump(),
              # How long versions are kept changes none of them.
              "dataset": dataset.model_dump(exclude={"workers", "arrival_lag", "partitioned_by", "keep_for",
                                                     "keep_superseded_for"}),
              "eval_items_sha256": hashlib.sha256(json.dumps(eval_items).encode()).hexdigest()}
    config["dataset"]["eval_sets"] = sorted(set(dataset.eval_sets))  # what they hold counts, not their order
    if lag:  # it changes which files a run reads, and which records it calls misplaced; the wait changes neither
        config["dataset"]["partition_lag_s"] = lag.total_seconds()
    known = output.known_version(start, end, config, files.digest)
    if known is not None:
        log.info("version %s was built before from these very files: found, not built again", known.version)
        made = replace(known, source={**known.source, "late": late})  # as this run found them, not that one
    else:
        build = functools.partial(_build, source, fs, files, skipped, output, config, eval_items, start, end,
                                  task=task, reward=reward, dataset=dataset, late=late)
        try:
            made = build(hold_spans=False)
        except _HoldSpans:
            log.warning("the source holds OTLP spans that hold their content and log records of evaluation results "
                        "(scores): read again, the spans joined with their records, as those without content are")
            made = build(hold_spans=True)
    # What the next runs compare the interval's files with, and the version that is now its current one.
    output.record_listed(start, end, files.digest, made.version if isinstance(made, Manifest) else None)
    return made


# How many intervals before its own a run lists again, to say which have files their run did not read.
RECHECKED = 3


def _late(source: str, output: Output, start: datetime, end: datetime, files: sources.Files, dataset: DatasetConfig,
          keeper: Callable[..., Callable[[str, str], bool]]) -> list[dict]:
    """Of the :data:`RECHECKED` intervals before ``[start, end)``, those whose files changed since
    their run listed them (files that arrived late, or were written again), each with the version
    that run built (None: it found no trace) and how many files there are now; none where a run
    cannot tell.

    Files that arrive after their interval's run are read by no later run, which reads its own
    partitions: a re-run of that interval publishes them. A run can tell only where partitions say
    which interval a file is of: a source whose files are all in partition folders by start time
    (with partitioned_by=arrival, a late trace lands in a later partition, whose run counts it as
    misplaced), each within the interval (an hour's run would see the day's folder grow, a 90-minute
    run's last hour would hold the next run's traces). Each run records the digest of the files it
    listed (``<out>/_listed/``, see :meth:`Output.record_listed`), and lists the earlier intervals
    again, as their runs did, to compare."""
    length = end - start
    spans = [traces.partition_span(folder, files.root) for folder in files.folders()]
    if dataset.partitioned_by != "start" or not all(span and start <= span[0] and span[0] + span[1] <= end
                                                    for span in spans):
        return []
    late = []
    for k in range(1, RECHECKED + 1):
        lo, hi = start - k * length, end - k * length
        listed = output.listed(lo, hi)
        if listed is None:  # never built, or before runs recorded it
            continue
        _, now, _ = sources.list_files(source, keep=keeper(lo, hi, said=False))
        if now.digest != listed["files_sha256"]:
            late.append({"interval": [lo.isoformat(), hi.isoformat()], "version": listed["version"], "files": len(now)})
    for line in late_lines(late):
        log.warning("%s", line)
    return late


def late_lines(late: list[dict]) -> list[str]:
    """A manifest's ``source.late`` in words (see :func:`_late`)."""
    return [f"the files of [{each['interval'][0]}, {each['interval'][1]}) changed since its run listed them ("
            + (f"it built {each['version']}" if each["version"] else "it found no trace")
            + f"): {each['files']} files now, which no later run reads; a re-run of that interval publishes what "
            "they hold" for each in late]


def _protocol(uri: str) -> str:
    return fsspec.core.split_protocol(uri)[0] or "file"


_SPILLS = "ctpipe-spill-"  # the spill folders' names, then <pid>@<host>- of the run that owns one


def _spill_owner() -> str:
    return f"{os.getpid()}@{socket.gethostname().replace('-', '_')}-"


def _reclaim_spills() -> None:
    """Remove the spill folders of runs on this host whose process is gone: a killed run leaves its
    own (SIGKILL runs no cleanup), a hundred megabytes or more each. The host, in the name, keeps
    off the folders of runs in other containers that share the folder, whose pids mean nothing here."""
    root, host = tempfile.gettempdir(), _spill_owner().split("@", 1)[1]
    for name in os.listdir(root):
        pid, _, rest = name[len(_SPILLS):].partition("@")
        if not (name.startswith(_SPILLS) and pid.isdigit() and rest.startswith(host)):
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            log.info("removing %s, the spill folder of a run that ended without removing it", name)
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        except OSError:  # alive, another user's
            pass


class _HoldSpans(Exception):
    """A run met OTLP spans that hold their content, read where they lie, and log records of evaluation
    results, which join only spans held for a join: it starts again, holding them (see Job.hold_spans).
    Spans that hold their content are not held from the start: that takes some 2.3 times their fast
    path's time, and few sources keep evaluation results apart from the spans they score."""


def _build(source: str, fs, files: sources.Files, skipped: dict[str, str], output: Output, config: dict,
           eval_items: tuple[str, ...], start: datetime, end: datetime, *, task: TaskConfig, reward: RewardConfig,
           dataset: DatasetConfig, hold_spans: bool, late: list[dict]) -> Manifest | NoTraces:
    """The version of what :func:`materialize` found (the source's files, where the version goes, what
    makes it), built and published; what it read when its interval has no trace."""
    size = files.held  # what the run holds, not its files' size: compressed, they hold more
    workers = 1 if size < _IN_PROCESS_BYTES else (dataset.workers or os.cpu_count() or 1)
    buckets = min(_buckets_for(size), _FANOUT)
    splits = 1  # known once every block is read
    staging = output.staging()  # first: a store that refuses it leaves no spill folder behind
    _reclaim_spills()
    spill_dir = tempfile.mkdtemp(prefix=_SPILLS + _spill_owner())
    need = _SPILL_NEED[dataset.format if dataset.format == "langfuse" else "other"] * size
    if shutil.disk_usage(spill_dir).free < need:  # a warning: much of a source may lie outside the interval
        log.warning("the spill folder %s has %s free. %s: set TMPDIR to a folder on a larger disk", spill_dir,
                    _free(spill_dir), _spill_room(size))
    job = Job(start, end, task, reward, dataset, eval_items, staging, spill_dir, buckets, hold_spans, source, files.root)
    digest = hashlib.sha256(json.dumps({"interval": [start.isoformat(), end.isoformat()], "config": config,
                                        "code": CODE_VERSION}, sort_keys=True).encode())
    content = hashlib.sha256()  # of the source's blocks alone: the same data built otherwise has the same
    counts: Counter = Counter()
    reasons: Counter = Counter()
    found_pii: Counter = Counter()
    found_formats: Counter = Counter()
    misplaced: dict[str, tuple[int, int]] = {}  # see Part.misplaced
    unjoined: Counter = Counter()  # see Part.unjoined
    outside_span = None  # see Part.outside_span
    unformatted = _Unformatted()
    lines_before = sources.LinesBefore()
    dedupe = _Dedup(spill_dir)
    stats = _RewardStats()
    parts: dict[str, list[dict]] = {"traces": [], "quarantine": [], "grpo": [], "dpo": []}
    started = time.monotonic()
    pool, failed = None, False
    try:  # from here on, a failure (starting the workers too) leaves no spill files nor staged parts
        pool = _Pool(job, workers)
        finishing: deque[Future] = deque()

        def written(w: Written) -> None:
            parts["traces"] += [w.traces] if w.traces else []
            parts["quarantine"] += [w.quarantine] if w.quarantine else []
            reasons.update(w.reasons)
            stats.add(*w.rewards)

        def take(part: Part, worker: int) -> None:
            nonlocal outside_span
            counts["bytes"] += part.size
            counts["traces_in"] += part.read
            counts["outside_interval"] += part.outside
            outside_span = _widened(outside_span, part.outside_span)
            found_pii.update(part.pii)
            found_formats.update(part.formats)
            for side, (n, most) in part.misplaced.items():
                _add_misplaced(misplaced, side, n, most)
            unjoined.update(part.unjoined)
            counts["otel_spans_read"] += part.formats["otel"] - part.held["span"] - part.held["event"]
            counts["evaluations_held"] += part.held["evaluation"]
            if counts["otel_spans_read"] and counts["evaluations_held"] and not hold_spans:
                raise _HoldSpans
            unformatted.add(part.by_file)
            before = 0 if part.lines is None else lines_before.take(part.file, part.lines)
            # The version is named by the blocks that make it (of small files gathered into one, the
            # files), and where their lines are numbered from: a block of other intervals' records
            # alone (a file of the next hour's, added to a day's folder) leaves it as it was, and a
            # re-run of the interval publishes nothing new. What a join holds may attach anywhere.
            for file, made in part.digests:
                if part.held or part.by_file.get(file, {}).get("read"):
                    digest.update(made + b"%d" % before)
                    content.update(made + b"%d" % before)
            duplicates = dedupe.verdicts(part.keys)
            finishing.append(pool.submit(finish, Finish(part.index, counts["traces"], duplicates, before), worker))
            counts["traces"] += len(part.keys["id_key"]) - len(duplicates)
            while finishing and (len(finishing) > 2 * workers or finishing[0].done()):
                written(finishing.popleft().result())

        index = -1
        blocks = sources.gathered(sources.blocks(fs, files))
        if workers > 1:
            blocks = sources.spilled(blocks, os.path.join(spill_dir, "blocks"))
        for index, part in enumerate(pool.ordered(process, enumerate(blocks))):
            take(part, index)
        # Langfuse rows, OTLP spans without content and batch outputs join across files, so their parts come once
        # every block is read: from the buckets their entries were spilled into, by trace, _JOIN_PART
        # records a part.
        # (A worker takes this call after the blocks' finish() calls sent to it, which hold them.)
        # Cut by what the source held, not by the estimate the buckets were chosen by: blocks are cut
        # the same way whatever the workers, so the parts are too.
        splits = math.ceil(_buckets_for(counts["bytes"]) / buckets)
        held = pool.everywhere(spill_joined)
        found = sum(n for _, n in held)  # per bucket: records, and what may attach to them
        if found.any():
            writers = [_join_writer(pid) for pid, _ in held]
            full = np.flatnonzero(found.any(axis=0)).tolist()
            if splits == 1:
                subs = [(b, writers, int(found[0, b]), int(found[2, b])) for b in full]
            else:
                cut = pool.ordered(split_joined, ((b, writers, splits) for b in full))
                subs = [(b, [piece], n, size) for b, pieces in zip(full, cut)
                        for piece, n, attaching, size in pieces if n or attaching]
            # A bucket of what attaches to records alone has a part too, which counts it (see _unjoined).
            chunks = [(b, names, first, step) for b, names, n, size in subs
                      for step in [_join_part_size(n, size)] for first in range(0, max(n, 1), step)]
            for i, part in enumerate(pool.ordered(joined_part, enumerate(chunks, index + 1))):
                take(part, i)
        while finishing:
            written(finishing.popleft().result())
        pids = pool.everywhere(spill)  # the rows each process still holds for pairing
        read = time.monotonic()
        dedupe = None  # its keys are not needed for pairing
        counts["quarantined"] = sum(reasons.values())
        misplaced_report = {f"{side}_partition": {"traces": n, "most_seconds": most / 1e6}
                            for side, (n, most) in sorted(misplaced.items())}
        unjoined_report = {_UNJOINED[kind]: n for kind, n in sorted(unjoined.items())}
        # Said before a run with no trace ends.
        for line in misplaced_lines(misplaced_report, dataset) + unjoined_lines(unjoined_report):
            log.warning("%s", line)
        if changed := files.changed():  # what was read is of no one state of the source: read it again
            raise sources.SourceChanged(f"{len(changed)} files of the source changed while they were read: "
                                        + ", ".join(changed[:_SAID_FILES]) + (", ..." if len(changed) > _SAID_FILES else ""))
        if counts["traces_in"] == 0:
            staging.discard()
            return NoTraces((start.isoformat(), end.isoformat()), _shown(source), len(files),
                            dict(sorted((+found_formats).items())), counts["outside_interval"],
                            outside_span and tuple(map(_iso, outside_span)), skipped, misplaced_report, unjoined_report,
                            late)
        if counts["traces_in"] != counts["traces"] + counts["quarantined"]:
            raise AssertionError(f"lost traces: {dict(counts)}")  # a bug, never an input problem

        for paired_parts in pool.ordered(pair_bucket, ((b, pids, splits) for b in range(buckets))):
            for grpo, dpo, n_grpo, n_dpo in paired_parts:
                parts["grpo"] += [grpo] if grpo else []
                parts["dpo"] += [dpo] if dpo else []
                counts["grpo_prompts"] += n_grpo
                counts["dpo_pairs"] += n_dpo
        for name, schema in (("traces", TRACES_SCHEMA), ("quarantine", QUARANTINE_SCHEMA), ("grpo", GRPO_SCHEMA),
                             ("dpo", DPO_SCHEMA)):
            staging.add_table(name, schema, parts[name])
        paired = time.monotonic()
    except OSError as e:
        failed = True
        if _no_room(e):
            raise _disk_full(e, spill_dir, output, size) from e
        raise
    except BrokenProcessPool as e:  # retried by Airflow: a worker killed for memory may fit next time
        failed = True
        raise WorkerLost("a worker process stopped abruptly (killed from outside, as by the out-of-memory "
                         "killer, or crashed: what it said, if anything, is in the log before this); nothing was "
                         "published") from e
    except BaseException:
        failed = True
        raise
    finally:
        try:
            if pool is not None:
                pool.close(stop=failed)  # no part is written after this
        except BaseException:  # stopped (SIGTERM) while it waits: what was staged goes all the same
            failed = True
            raise
        finally:
            if failed:
                staging.discard()
            _ROWS.clear()  # what this process kept of a run that failed
            _SPILLING.clear()
            _JOINED.clear()
            shutil.rmtree(spill_dir, ignore_errors=True)

    version = version_name(start, end, digest.hexdigest())
    stats.warn(reward, counts["traces"])
    unrecognized = unformatted.files()
    if unrecognized:
        log.warning("%d files with no trace in %s (all they hold is quarantined): %s", len(unrecognized),
                    "any known format" if dataset.format == "auto" else f"format {dataset.format}",
                    ", ".join(some_files(unrecognized, "{} ({} items)", "so (the manifest names them all)")))
    try:
        manifest = staging.publish(
            version,
            interval=(start.isoformat(), end.isoformat()),
            counts={k: counts[k] for k in ("traces_in", "traces", "quarantined", "grpo_prompts", "dpo_pairs", "outside_interval")},
            quarantine_reasons=dict(sorted(reasons.items())),
            reward_stats=stats.summary(),
            scrubbed=dict(sorted(found_pii.items())),
            source={"uri": _shown(source),
                    "files": len(files), "formats": dict(sorted((+found_formats).items())),
                    "unrecognized_files": unrecognized, "skipped_files": skipped, "misplaced": misplaced_report,
                    "unjoined": unjoined_report, "late": late,
                    "content_hash": content.hexdigest()},
            config=config,
        )
    except BaseException as e:  # stopped while it publishes: what is still staged goes (a version moved in place stays)
        with suppress(Exception):  # the store may be what failed: its error is the one said
            staging.discard()
        if _no_room(e):
            room = f" ({_free(output.root)} free)" if output.local else ""
            raise DiskFull(e.errno, f"no space left on the device of the dataset store {output.root}{room} while "
                           f"publishing {version}: readers see a version once its manifest is written; free room and "
                           "run again, which finishes it or finds it") from e
        raise
    output.remember(start, end, config, files.digest, manifest.version)
    log.info("%s: %d traces in %.1f s with %d workers: read, labeled and deduplicated in %.1f s, %d buckets paired "
             "in %.1f s, published in %.1f s", version, counts["traces_in"], time.monotonic() - started, workers,
             read - started, buckets * splits, paired - read, time.monotonic() - paired)
    return manifest


# What may attach to a join's records, as a manifest's ``source.unjoined`` names it, and what it says of
# those that attached to none.
_UNJOINED = {"score": "langfuse_scores", "event": "otel_log_records", "request": "batch_requests"}
_UNJOINED_WORDS = {
    "langfuse_scores": "Langfuse scores attached to no generation of the interval's files (scores of another "
                       "observation, of a trace without a generation, or of a generation in files of another "
                       "interval): not read",
    "otel_log_records": "OTLP log records of GenAI events attached to no model call's span of the interval's files "
                        "that takes them (their spans hold the content themselves, as when it is recorded on "
                        "both, and take only evaluation results; or are in files of another interval, or were "
                        "not exported; or the records name no span, as an evaluation result naming only its "
                        "response's id): not read",
    "batch_requests": "requests of a batch's input file had no line of its output among the interval's files "
                      "(not run yet, or answered in files of another interval)",
}


_SAID_FILES = 20


def some_files(files: dict, each: str, more: str, what: str = "files") -> list[str]:
    """The first of ``files`` (file: what is said of it), each as ``each`` formats the two, and how many
    ``more`` there are: a log line, a skip's reason or a summary names some files (or other ``what``),
    not tens of thousands."""
    said = [each.format(*item) for item in itertools.islice(files.items(), _SAID_FILES)]
    return said + [f"and {len(files) - _SAID_FILES} more {what} {more}"] * (len(files) > _SAID_FILES)


@dataclass(frozen=True)
class NoTraces:
    """What a run that found no trace of its interval read: enough to say why, where a version's
    manifest would (its fields are named as the manifest's ``source`` fields and counts that hold them)."""

    interval: tuple[str, str]
    source: str
    files: int  # read
    formats: dict[str, int]  # records read, all of other intervals, by format
    outside_interval: int
    outside_span: tuple[str, str] | None  # the first and last start time of those records
    skipped_files: dict[str, str]
    misplaced: dict
    unjoined: dict[str, int]
    late: list[dict] = field(default_factory=list)  # as a manifest's source.late

    def lines(self, dataset: DatasetConfig) -> list[str]:
        """Why, in words: the first line says it all when there was nothing to read."""
        out = [f"no trace started in [{self.interval[0]}, {self.interval[1]}) in {self.source}: "
               f"{_files(self.files)} read" + (f", {len(self.skipped_files)} not read" if self.skipped_files else "")]
        if self.outside_interval:
            out.append(f"{self.outside_interval} records of other times read ({', '.join(self.formats)}), started "
                       f"from {self.outside_span[0]} to {self.outside_span[1]}")
        # A skip's reason, which Airflow keeps and the run's tab shows.
        return (out + some_files(self.skipped_files, "{}: not read: {}", "not read (ctpipe materialize --json lists them all)")
                + misplaced_lines(self.misplaced, dataset) + unjoined_lines(self.unjoined) + late_lines(self.late))


def _shown(source: str) -> str:
    return os.path.abspath(source) if "://" not in str(source) else source  # a local one absolute


def _files(n: int) -> str:
    return f"{n} file" + "s" * (n != 1)


def _iso(micros: int) -> str:
    return (datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=micros)).isoformat()


def unjoined_lines(report: dict) -> list[str]:
    """A manifest's ``source.unjoined`` in words."""
    return [f"{n} {_UNJOINED_WORDS[name]}" for name, n in report.items()]


def misplaced_lines(report: dict, dataset: DatasetConfig) -> list[str]:
    """A manifest's ``source.misplaced`` in words."""
    out = []
    if before := report.get("before_partition"):
        most = timedelta(seconds=before["most_seconds"])
        if dataset.partitioned_by == "arrival":
            beyond, fix = f", more than dataset.arrival_lag ({dataset.arrival_lag})", "set"
        else:
            beyond, fix = "", "for a source partitioned by arrival time, set partitioned_by to 'arrival' and"
        out.append(f"{before['traces']} traces started up to {most} before the partition folder holding them{beyond}: "
                   f"the run of the interval each started in read that partition only if its interval reached it; "
                   f"{fix} arrival_lag to at least {most}, and run those intervals again")
    if after := report.get("after_partition"):
        out.append(f"{after['traces']} traces started up to {timedelta(seconds=after['most_seconds'])} after the "
                   f"partition folder holding them ended: the run of the interval each started in does not "
                   f"read that partition")
    return out


def _buckets_for(size: int) -> int:
    """Pairing buckets that ``size`` bytes of source need (see _BUCKET_BYTES)."""
    return max(1, math.ceil(size / _BUCKET_BYTES))


def _may_hold(folder: str, root: str, start: datetime, end: datetime, lag: timedelta) -> bool:
    """False only for a folder (ending in "/") of a partition (an hour or a day) that cannot hold a
    record started in the interval (its partition named below the source folder ``root``): one that
    ends before it, or begins more than ``lag`` after it.
    The folders in it are inside it (see traces.partition_span), so they are not listed either."""
    span = traces.partition_span(folder, root)
    if span is None:
        return True
    lo, hi = _holds(span, lag)
    return lo < end and start < hi


class _Unformatted:
    """The files of which every item read is in no format and no record is of a known format (a
    file of another kind, not one with a few bad lines): named in the manifest and the log, with their
    items. Parts come in source order, file after file, so a file is settled once a part shows a later
    one, and only the files not yet settled are kept: a Counter for each file of a run took 75 MB of
    the main process at 200,000 files."""

    def __init__(self):
        self.open: dict[str, Counter] = {}  # items read in the interval, of them in no format, records in a format
        self.found: dict[str, int] = {}

    def add(self, by_file: dict[str, Counter]) -> None:
        for file, seen in by_file.items():
            if file not in self.open:
                self._settle()
            self.open.setdefault(file, Counter()).update(seen)

    def files(self) -> dict[str, int]:
        self._settle()
        return dict(sorted(self.found.items()))

    def _settle(self) -> None:
        self.found.update((f, c["read"]) for f, c in self.open.items()
                          if c["read"] and c["read"] == c["unformatted"] and not c["known"])
        self.open.clear()


class _RewardStats:
    def __init__(self):
        self.n, self.total, self.low, self.high, self.counts = 0, 0.0, math.inf, -math.inf, Counter()

    def add(self, n: int, total: float, low: float, high: float, counts: Counter) -> None:
        self.n, self.total = self.n + n, self.total + total
        self.low, self.high = min(self.low, low), max(self.high, high)
        self.counts += counts

    def warn(self, reward: RewardConfig, kept: int) -> None:
        """Say what makes the labels other than the config meant: a weighted signal none of the ``kept``
        traces carries (a misspelt judge_score: its weight counts as 0 everywhere, or drops every label),
        and a judge or feedback score of another scale than its range (its scores all count as 1, or 0)."""
        unseen = [name for name, w in reward.weights().items() if w > 0 and not self.counts[name]]
        if kept and unseen:
            log.warning("no trace of the %d kept carries a %s signal, weighted %s (missing=%s)%s", kept,
                        " or ".join(unseen), " and ".join(str(getattr(reward, f"{name}_weight")) for name in unseen),
                        reward.missing, f": no score named {reward.judge_score!r} with a number" if "judge" in unseen else "")
        for kind in ("judge", "feedback"):
            if self.counts[f"{kind}_outside_range"]:
                log.warning("%d scores named %r lie outside %s_range %s and count as its nearer end: set "
                            "CTPIPE_REWARD__%s_RANGE to the %s's scale", self.counts[f"{kind}_outside_range"],
                            getattr(reward, f"{kind}_score"), kind, list(getattr(reward, f"{kind}_range")),
                            kind.upper(), kind)

    def summary(self) -> dict:
        # Scores outside their range count as its nearer end; a signal no trace carries, as 0 or not at all.
        said = {f"{kind}_outside_range": self.counts[f"{kind}_outside_range"] for kind in ("judge", "feedback")
                if self.counts[f"{kind}_outside_range"]}
        said["signals"] = {name: self.counts[name] for name in rewards.SIGNALS}
        if not self.n:
            return {"labeled": 0, "mean": None, "min": None, "max": None, **said}
        return {"labeled": self.n, "mean": round(self.total / self.n, rewards.DECIMALS), "min": self.low, "max": self.high,
                **said}
