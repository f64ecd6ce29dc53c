"""Dataset versions: their tables, how they are published, and how readers find them.

A version is a directory under the output URI (any fsspec URI; a local path by default)::

    <out>/<version>/
        traces/       the canonical trace table (TRACES_SCHEMA), rewards included
        grpo/         prompt (chat messages) + answer: TRL GRPOTrainer's conversational layout;
                      NeMo-RL reads it as ResponseDataset JSONL (problem, expected_answer)
        dpo/          prompt / chosen / rejected chat messages: TRL DPOTrainer's conversational
                      layout (NeMo-RL's BinaryPreferenceDataset takes chosen and rejected as
                      text, not messages: DPO runs with TRL here)
        quarantine/   source file, line or row, reason, detail, raw record
        manifest.json written last: the version exists for readers only once it is there

Each table is a folder of zstd Parquet parts (``part-00000.parquet``, ...), written in parallel by
the materializer's workers; the manifest lists them in row order (:meth:`Manifest.part_paths`,
:meth:`Manifest.read`), and any Parquet reader also takes the folder as one table. Files are
written under a hidden staging name and moved into place, then the manifest (URI, content hashes,
schemas, row counts, reward statistics, PII and dedup counts, source interval, source content
hash, code version, config) is written; a reader never sees a partial version.
The version name is derived from the interval, the config and the content read of the blocks that
give the interval its records, so re-running an interval yields the same version and leaves it
untouched; a small index of the source files' keys
lets such a re-run return at once. Building a version is :mod:`ctpipe.materialize`'s job.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import heapq
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from ctpipe.atomic import atomic_write_text
from ctpipe.config import DatasetConfig
from ctpipe.errors import PipelineError
from ctpipe.rewards import reward_gap
from ctpipe.sources import filesystem, reachable

log = logging.getLogger(__name__)

CODE_VERSION = "38"  # bumped whenever the same input and config would give other tables
LATEST = "LATEST"
# A staged version this old is of a run that will never publish it (killed by SIGKILL, its node lost
# to a spot reclaim): the next run removes it. Far past any run's length, so none is removed under it.
STALE_STAGING = timedelta(days=2)
_STAGED = re.compile(r"\.tmp-(\d{8}T\d{6}Z)-[0-9a-f]{32}")  # a staged version's name: when it began
# When this process last looked for stale staging in each store (time.monotonic()), which lists every
# version: a backfill looked at each interval, 0.4 s of 8,000 versions on S3, where once an hour finds
# all that staleness, days long, needs.
_SWEPT: dict[tuple, float] = {}
_SWEEP_EVERY = 3600.0

MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
SCORES = pa.list_(pa.struct([("name", pa.string()), ("value", pa.float64()), ("label", pa.string()), ("source", pa.string())]))
# The canonical trace table. Text columns hold the scrubbed text; rewards are in [0, 1] or null when
# the signal is absent; source_file and source_line say where each row was read.
TRACES_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("start_time", pa.timestamp("us", tz="UTC")),
        ("end_time", pa.timestamp("us", tz="UTC")),
        ("model_name", pa.string()),
        ("model_version", pa.string()),
        ("messages", MESSAGES),
        ("prompt", pa.string()),  # the last user message
        ("completion", pa.string()),
        ("reference_answer", pa.string()),
        ("feedback_thumb", pa.string()),
        ("feedback_rating", pa.float64()),
        ("scores", SCORES),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("latency_ms", pa.float64()),
        ("verifiable_reward", pa.float64()),
        ("feedback_reward", pa.float64()),
        ("judge_reward", pa.float64()),
        ("final_reward", pa.float64()),
        ("source_file", pa.string()),
        ("source_line", pa.int64()),
    ]
)
GRPO_SCHEMA = pa.schema([("prompt", MESSAGES), ("answer", pa.string())])
DPO_SCHEMA = pa.schema(
    [
        ("prompt", MESSAGES),
        ("chosen", MESSAGES),
        ("rejected", MESSAGES),
        ("chosen_reward", pa.float64()),
        ("rejected_reward", pa.float64()),
    ]
)
QUARANTINE_SCHEMA = pa.schema(
    [
        ("source_file", pa.string()),
        ("source_line", pa.int64()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("raw", pa.string()),
    ]
)


class DatasetNotFound(LookupError):
    pass


def dpo_pairs(group: list[dict], cfg: DatasetConfig) -> list[tuple[dict, dict]]:
    """(chosen, rejected) pairs within one prompt's answers, at least ``dpo_min_margin`` apart.

    Answers are ranked by reward (ties broken by trace id, so the result is deterministic).
    ``best_vs_worst`` pairs the i-th best with the i-th worst while the gap holds; ``all_pairs``
    takes every pair wide enough, widest first. Either way at most ``dpo_max_pairs_per_prompt``;
    identical texts never pair, so ties and single-answer groups give none.
    """
    ranked = sorted((r for r in group if r["final_reward"] is not None), key=lambda r: (-r["final_reward"], r["trace_id"]))
    if cfg.dpo_strategy == "all_pairs":
        return _widest(ranked, cfg)
    pairs = []
    for i in range(min(cfg.dpo_max_pairs_per_prompt, len(ranked) // 2)):
        best, worst = ranked[i], ranked[-1 - i]
        if _gap(best, worst) < cfg.dpo_min_margin:
            break
        if best["completion"].strip() != worst["completion"].strip():
            pairs.append((best, worst))
    return pairs


def _gap(a: dict, b: dict) -> float:
    return reward_gap(a["final_reward"], b["final_reward"])


def _widest(ranked: list[dict], cfg: DatasetConfig) -> list[tuple[dict, dict]]:
    """``all_pairs``: of the pairs (a ranked above b) at least the margin apart, of different texts, the
    ``dpo_max_pairs_per_prompt`` first by (widest, a's trace id, b's trace id), without making all n²
    of them: a prompt a million users sent may bring thousands of answers. Each chosen answer's
    partners come lowest reward first, then by trace id, which is the order of their pairs (rewards
    are labels, of 6 decimals at most, and the margin is above 0: no tie pairs); a heap holds each
    chosen answer's next pair, so the work is n log n and a few steps a pair taken."""
    low = sorted(ranked, key=lambda r: (r["final_reward"], r["trace_id"]))

    def next_pair(i: int, p: int) -> tuple | None:
        """Chosen ``ranked[i]``'s first pair from ``low[p]`` on, as a heap entry; None when it has no more."""
        a = ranked[i]
        for p in range(p, len(low)):
            gap = _gap(a, low[p])
            if gap < cfg.dpo_min_margin:
                return None  # so are all the rest
            if a["completion"].strip() != low[p]["completion"].strip():
                return -gap, a["trace_id"], low[p]["trace_id"], i, p
        return None

    heap = [e for i in range(len(ranked)) if (e := next_pair(i, 0)) is not None]
    heapq.heapify(heap)
    pairs = []
    while heap and len(pairs) < cfg.dpo_max_pairs_per_prompt:
        *_, i, p = heapq.heappop(heap)
        pairs.append((ranked[i], low[p]))
        if (e := next_pair(i, p + 1)) is not None:
            heapq.heappush(heap, e)
    return pairs


@dataclass(frozen=True)
class Manifest:
    version: str
    uri: str
    interval: tuple[str, str]
    counts: dict
    quarantine_reasons: dict
    reward_stats: dict
    files: dict
    code_version: str
    config: dict
    scrubbed: dict = field(default_factory=dict)  # PII replaced, per kind
    source: dict = field(default_factory=dict)  # uri, files, formats, content_hash
    schemas: dict = field(default_factory=dict)  # table -> Arrow schema, as text
    # When it was published (UTC, ISO 8601): orders an interval's versions (a re-run with late files,
    # another config), as the folders' times stop doing once a store is copied. Empty in older ones.
    published_at: str = field(default="", compare=False)
    # Found by the run that returned it, built before from the same files: not in manifest.json.
    found: bool = field(default=False, compare=False)

    def part_paths(self, table: str, root: str | Path | None = None) -> list[str]:
        """The files of ``table``, in row order, under ``root``: where the version is seen from (a
        training job's mount of it, say), the version's own folder by default."""
        return [f"{str(root or self.uri).rstrip('/')}/{part}" for part in self.files[table]["parts"]]

    def read(self, table: str, columns: list[str] | None = None, root: str | Path | None = None) -> pa.Table:
        """The whole ``table``, from the version's folder or from ``root`` (as :meth:`part_paths`); either
        may be any fsspec URI."""
        fs, path = filesystem(str(root or self.uri))
        return pa.concat_tables(pq.read_table(part, columns=columns, filesystem=fs) for part in self.part_paths(table, path))

    def asset_extra(self) -> dict:
        return {
            "version": self.version,
            "uri": self.uri,
            "interval": list(self.interval),
            "rows": {k: self.counts[k] for k in ("traces", "grpo_prompts", "dpo_pairs")},
            "traces_in": self.counts["traces_in"],
            "quarantined": self.counts["quarantined"],
            "quarantine_reasons": self.quarantine_reasons,
            "scrubbed": self.scrubbed,  # PII, per kind
            "outside_interval": self.counts.get("outside_interval", 0),  # records of other times the files held
            # Files of the source none of whose lines is a trace, and files not read (for their names, mostly).
            "files_in_no_format": len(self.source.get("unrecognized_files", {})),
            "files_not_read": len(self.source.get("skipped_files", {})),
            # Scores, log records and batch requests that attached to no record (see source.unjoined).
            "unjoined": self.source.get("unjoined", {}),
            "reward": self.reward_stats,
        }

    @classmethod
    def load(cls, version_uri: str | Path) -> Manifest:
        """The manifest of the version at ``version_uri`` (a folder, or any fsspec URI), its ``uri`` that
        folder: a store copied, moved or mounted elsewhere is read where it is, not where it was
        written. FileNotFoundError when there is none."""
        fs, path = filesystem(str(version_uri))
        where = str(version_uri).rstrip("/")
        with fs.open(f"{path.rstrip('/')}/manifest.json", "r") as f:
            return cls(**{**json.load(f), "uri": where if "://" in where else os.path.abspath(where)})


def resolve(datasets_dir: Path | str, version: str | None) -> Manifest:
    """The manifest of ``version``, or of the latest version when it is empty."""
    return Output(datasets_dir).resolve(version)


def _low_cardinality(schema: pa.Schema) -> list[str]:
    """Columns worth dictionary-encoding: names, versions, roles, files. Trying it on free text (prompts,
    completions) only costs time before Parquet falls back to plain encoding."""
    wanted = {"model_name", "model_version", "feedback_thumb", "source_file", "reason", "role", "answer"}
    return [path for path in _leaf_paths(schema) if path.rsplit(".", 1)[-1] in wanted]


def _with_statistics(schema: pa.Schema) -> list[str]:
    """Columns worth min/max statistics: all but free text, whose statistics cost time and prune nothing."""
    text = {"content", "prompt", "completion", "detail", "raw", "label", "reference_answer", "answer"}
    return [path for path in _leaf_paths(schema) if path.rsplit(".", 1)[-1] not in text]


def _leaf_paths(schema: pa.Schema) -> list[str]:
    def walk(prefix: str, t: pa.DataType) -> list[str]:
        if pa.types.is_struct(t):
            return [p for f in t for p in walk(f"{prefix}.{f.name}", f.type)]
        if pa.types.is_list(t):
            return walk(f"{prefix}.list.element", t.value_type)
        return [prefix]

    return [p for f in schema for p in walk(f.name, f.type)]


class _HashingFile:
    """A writable file that hashes what passes through it, so a file's digest costs no second read.
    xxh3-128, not SHA-256: the digest names content, it guards against no one, and SHA-256 took 2% of
    the materializer's time on a machine without SHA instructions (360 MB/s)."""

    def __init__(self, f):
        self.f, self.hash = f, xxhash.xxh3_128()

    def write(self, data) -> int:
        self.hash.update(data)
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)


class _PartWriter:
    def __init__(self, writer: pq.ParquetWriter, path: str):
        self.writer, self.written = writer, {"path": path, "rows": 0}

    def write(self, table: pa.Table) -> None:
        self.writer.write_table(table)
        self.written["rows"] += table.num_rows


def _staged_name(now: datetime) -> str:
    return f".tmp-{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex}"


def _staged_at(name: str) -> datetime | None:
    """When the version staged under ``name`` began (see :func:`_staged_name`); None for another name."""
    found = _STAGED.fullmatch(name)
    try:
        return datetime.strptime(found[1], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc) if found else None
    except ValueError:  # no day of the calendar: not a name this module gave
        return None


class Staging:
    """A version being written: hidden until :meth:`publish`."""

    def __init__(self, output: Output):
        self.output = output
        self.dir = f"{output.root}/{_staged_name(datetime.now(timezone.utc))}"
        self.files: dict[str, dict] = {}
        self.schemas: dict[str, str] = {}
        try:
            output.fs.makedirs(self.dir, exist_ok=True)
        except OSError as e:  # named as the store the user gave, not the hidden folder it writes first
            raise PipelineError(f"dataset store {output.uri!r} cannot be written: {e.strerror or e}") from None

    def write_part(self, name: str, index: int, table: pa.Table) -> dict:
        """Part ``index`` of the version's ``name`` table, from any process; what the manifest says of it."""
        with self.part_writer(name, index, table.schema) as part:
            part.write(table)
        return part.written

    @contextmanager
    def part_writer(self, name: str, index: int, schema: pa.Schema) -> Iterator[_PartWriter]:
        """:meth:`write_part` of a table given in pieces (``.write`` each; ``.written`` once closed)."""
        path = f"{name}/part-{index:05d}.parquet"
        self.output.fs.makedirs(f"{self.dir}/{name}", exist_ok=True)
        with self.output.fs.open(f"{self.dir}/{path}", "wb") as raw:
            f = _HashingFile(raw)
            with pq.ParquetWriter(f, schema, compression="zstd", use_dictionary=_low_cardinality(schema),
                                  write_statistics=_with_statistics(schema)) as writer:
                part = _PartWriter(writer, path)
                yield part
        part.written["digest"] = f.hash.hexdigest()

    def add_table(self, name: str, schema: pa.Schema, parts: list[dict]) -> None:
        """List a table's parts (from :meth:`write_part`) in the manifest, in row order. A table with no
        rows still gets one empty part, so that every reader finds its schema."""
        parts = parts or [self.write_part(name, 0, schema.empty_table())]
        # Each part's xxh3-128 (what `xxh128sum` prints), and the table's: SHA-256 of those, in order.
        digest = hashlib.sha256("".join(p["digest"] for p in parts).encode()).hexdigest()
        self.files[name] = {"path": name, "parts": [p["path"] for p in parts], "rows": sum(p["rows"] for p in parts),
                            "parts_xxh3_128": [p["digest"] for p in parts], "sha256": digest}
        self.schemas[name] = schema.to_string(show_schema_metadata=False)

    def _all_there(self) -> list[str]:
        """The staged files; raise, and remove what is left, when a part listed is not among them:
        another run took the folder for a stale one's (see :data:`STALE_STAGING`: its clock days
        ahead, or this run longer than that), and a manifest naming it would publish a version that
        cannot be read."""
        staged = [path.rstrip("/") for path in self.output.fs.find(self.dir)]
        there = set(staged)
        missing = [part for table in self.files.values() for part in table["parts"] if f"{self.dir}/{part}" not in there]
        if missing:
            self.discard()
            raise FileNotFoundError(f"the staged parts {missing[:3]} of {self.output.uri} are gone: another run removed "
                                    f"{self.dir} as staged more than {STALE_STAGING} before (is a machine's clock off?)")
        return staged

    def _moved_in(self, final: str) -> None:
        """Rename the staged folder, its manifest in it, to ``final``; where another run's version is
        there already, keep that one (the same rows); where a folder without a manifest is, put it
        aside and remove it first, unless it turns out to be a version published meanwhile."""
        for _ in range(3):  # a run that puts the same folder aside at once makes this one try again
            try:
                os.rename(self.dir, final)
                return
            except OSError:
                if os.path.exists(f"{final}/manifest.json"):  # a concurrent writer of the same version got there first
                    self.discard()
                    return
            aside = f"{self.output.root}/{_staged_name(datetime.now(timezone.utc))}"
            try:
                os.rename(final, aside)
            except FileNotFoundError:
                continue
            if os.path.exists(f"{aside}/manifest.json"):  # published between the two looks: put back, and kept
                with suppress(OSError):
                    os.rename(aside, final)
                self.discard()
                return
            shutil.rmtree(aside, ignore_errors=True)
        os.rename(self.dir, final)  # raises, naming the folder, what keeps it out of place

    def _left_removed(self, final: str, staged: set[str]) -> None:
        """On an object store, the files of ``final`` (a version's folder without a manifest) that this
        run will not write over (``staged``: its files, by their paths under the folder): a run stopped
        while it copied them in left them, perhaps of other parts. Looked for again just before: a
        version published meanwhile is no one's to remove."""
        fs = self.output.fs
        left = [path for path in fs.find(final) if path[len(final):] not in staged] if fs.exists(final) else []
        if left and not fs.exists(f"{final}/manifest.json"):
            fs.rm(left)

    def discard(self) -> None:
        if self.output.fs.exists(self.dir):
            self.output.fs.rm(self.dir, recursive=True)

    def publish(self, version: str, **fields: Any) -> Manifest:
        """Move the files into place as ``version`` and write its manifest; an existing version is kept as it is."""
        out = self.output
        final = f"{out.root}/{version}"
        if out.fs.exists(f"{final}/manifest.json"):  # the same content was published before (or concurrently)
            self.discard()
        else:
            staged = self._all_there()
            body = json.dumps({"version": version, "uri": out.uri_of(version), **fields, "files": self.files,
                               "schemas": self.schemas, "code_version": CODE_VERSION,
                               "published_at": datetime.now(timezone.utc).isoformat()}, indent=2, default=str)
            # A version's folder without its manifest is what a run stopped while it published left
            # (an object store's copy cut short): its files, of another run, are no part of this one's
            # manifest (the parts of a table follow the pairing buckets, which the listing sizes), and
            # go first. A local version appears with its manifest, in one rename.
            if out.local:
                out.write_text(f"{self.dir}/manifest.json", body)
                self._moved_in(final)
            else:  # an object store has no directories to rename: each file is copied, the manifest last
                self._left_removed(final, {path[len(self.dir):] for path in staged})
                out.fs.mv(staged, [final + path[len(self.dir):] for path in staged])
                self.discard()  # the folders left, on a filesystem that has them
                with suppress(FileExistsError):  # a concurrent writer of the same version wrote it first
                    out.write_text(f"{final}/manifest.json", body, exclusive=True)
        manifest = out.load(version)
        out.point_latest(manifest)
        return manifest


def utc(t: datetime) -> datetime:
    """An interval's bound ``t`` in UTC, as the standard library's datetime. Airflow gives a run's data
    interval as pendulum's, whose arithmetic loses the zone: ``start - 3 * (end - start)`` is naive,
    and comparing it with an aware time failed every scheduled run whose earlier hours were built."""
    t = t.astimezone(timezone.utc)
    return datetime(t.year, t.month, t.day, t.hour, t.minute, t.second, t.microsecond, tzinfo=timezone.utc)


def version_name(start: datetime, end: datetime, digest: str) -> str:
    """A version's name: its interval (UTC) and the start of the digest of what makes it. Years of four
    digits, 0999 too (strftime's %Y writes 999), so that names sort as their intervals do."""
    return f"{_stamp(start)}-{_stamp(end)}-{digest[:10]}"


def _stamp(t: datetime) -> str:
    return f"{t.year:04d}{t:%m%dT%H%M%S}"


# A version's name (version_name): its interval's start and end, a digest; an interval's record
# under _listed/ is named by the first two.
_NAMED = re.compile(r"(\d{8}T\d{6})-(\d{8}T\d{6})(-[0-9a-f]{10})?")


def interval_named(name: str, version: bool = True) -> tuple[datetime, datetime] | None:
    """The interval (UTC) a version's name says (or, not ``version``, the name of an interval's
    record under ``_listed/``); None for any other name."""
    found = _NAMED.fullmatch(name)
    if not found or bool(found[3]) != version:
        return None
    try:
        return tuple(datetime.strptime(t, "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc) for t in found.groups()[:2])
    except ValueError:  # no day of the calendar: not a name this module gave
        return None


def entries(fs, folder: str, detail: bool = False) -> list:
    """A store's folder's entries, none where there is no folder, listed anew and not kept: s3fs would
    answer from this listing, for LATEST say, hours on."""
    try:
        return fs.ls(folder, detail=detail)
    except FileNotFoundError:  # a store's first version
        return []
    finally:
        fs.invalidate_cache(folder)


def interval_part(version: str) -> str:
    """The part of a version's name that names its interval (``<start>-<end>``)."""
    return version.rsplit("-", 1)[0]


def sharing_time(intervals: list[str], others: list[str]) -> list[list[int]]:
    """For each of ``intervals`` (each an :func:`interval_part`), the indices of ``others`` whose
    intervals share some time with it, in order; a name that says no interval, those of the same name.
    Sorted by start, as a year's hours against a year's hours would take a while pair by pair.

    >>> sharing_time(["20261122T100000-20261122T110000", "legacy"], ["20261122T090000-20261122T100000",
    ...     "20261122T105000-20261122T120000", "20261122T100000-20261122T110000", "legacy"])
    [[1, 2], [3]]
    """
    def bounds(names: list[str]) -> np.ndarray:
        said = [interval_named(name, version=False) or (datetime.min, datetime.min) for name in names]
        return np.array([[(t.replace(tzinfo=None) - datetime.min).total_seconds() for t in interval]
                         for interval in said], dtype=np.int64).reshape(-1, 2)

    theirs = bounds(others)
    order = np.argsort(theirs[:, 0], kind="stable")
    starts, ends = theirs[order, 0], theirs[order, 1]
    longest = int((ends - starts).max(initial=0))
    unnamed: dict[str, list[int]] = {}  # of an empty interval, found by name alone
    for j, name in enumerate(others):
        if theirs[j, 0] == theirs[j, 1]:
            unnamed.setdefault(name, []).append(j)
    found = []
    for name, (start, end) in zip(intervals, bounds(intervals).tolist()):
        # Only those starting within the longest interval's length before it can reach it.
        first, past = np.searchsorted(starts, start - longest, "right"), np.searchsorted(starts, end, "left")
        found.append(sorted(order[first:past][ends[first:past] > start].tolist()) if start < end
                     else unnamed.get(name, []))
    return found


def read_keys(uri: str) -> tuple[np.ndarray, str]:
    """(the example keys of a record of :meth:`Output.mark_learned`, the dataset version it is of)."""
    fs, path = filesystem(uri)
    return np.frombuffer(base64.b64decode(fs.cat_file(path)), "<u8"), _learned_by(path.rpartition("/")[2])[0]


def _learned_by(name: str) -> tuple[str, str, str]:
    """(the dataset version, the model version, its MLflow run id) a record of
    :meth:`Output.mark_learned` is named after; the run id "" in a record written before it was named."""
    version, _, model = name.rpartition(".v")
    model_version, _, run_id = model.partition(".")
    return version, model_version, run_id


def _interval_of(version: str) -> tuple[str, str]:
    """(end, start) of a :func:`version_name`: ordered as its interval is."""
    start, _, rest = version.partition("-")
    return rest.partition("-")[0], start


class Output:
    """Where versions are published: a local path or any fsspec URI."""

    def __init__(self, uri: str | Path):
        from fsspec.implementations.local import LocalFileSystem

        self.uri = str(uri)
        self.fs, root = filesystem(self.uri, "dataset store")
        self.local = isinstance(self.fs, LocalFileSystem)
        self.root = os.path.normpath(root) if self.local else root.rstrip("/")  # store/./x is store/x, in manifests too
        reachable(self.fs, self.root, f"dataset store {self.uri!r}")  # fails now, naming the store, if it refuses
        if self.local and os.path.exists(self.root) and not os.path.isdir(self.root):
            raise PipelineError(f"dataset store {self.uri!r} is a file, not a folder")

    def uri_of(self, version: str) -> str:
        return f"{self.root}/{version}" if self.local else f"{self.uri.rstrip('/')}/{version}"

    def write_text(self, path: str, text: str, exclusive: bool = False) -> None:
        """Write ``path`` whole; with ``exclusive``, only where it is not yet (FileExistsError): a put
        with If-None-Match on S3 and GCS (fsspec's "x" mode)."""
        if self.local:
            atomic_write_text(Path(path), text, exclusive=exclusive)
        else:
            with self.fs.open(path, "x" if exclusive else "w") as f:  # an object store's put is atomic
                f.write(text)

    def _read(self, path: str) -> str:
        return self.fs.cat_file(path).decode().strip()

    def latest(self) -> str | None:
        """The version ``LATEST`` names, if any."""
        path = f"{self.root}/{LATEST}"
        return self._read(path) if self.fs.exists(path) else None

    def resolve(self, version: str | None) -> Manifest:
        if not version:
            version = self.latest()
            if version is None:
                raise DatasetNotFound(f"no dataset has been published under {self.uri} yet")
        if not self.fs.exists(f"{self.root}/{version}/manifest.json"):
            raise DatasetNotFound(f"dataset version {version!r} does not exist under {self.uri}")
        return self.load(version)

    def load(self, version: str) -> Manifest:
        return Manifest.load(self.uri_of(version))

    def point_latest(self, manifest: Manifest) -> None:
        """Point LATEST at ``manifest``'s version, unless it points there or at a version of a later
        interval (a backfill, or a re-run of an earlier interval, leaves the readers of the latest on
        the newest), or the version has no rows: of its quarantine alone, it is no one's latest data.

        On a local disk the read and the write hold a lock: the runs of a backfill finish together
        (Airflow runs ten at once), and one that read LATEST before another wrote it would write an
        older interval over a newer one. An object store has no lock: there the last to write wins."""
        version, path = manifest.version, f"{self.root}/{LATEST}"
        if not manifest.counts.get("traces"):
            return
        with self._latest_lock():
            current = self.latest()
            if current == version or (current and _interval_of(current) > _interval_of(version)):
                return
            self.write_text(path, version + "\n")

    @contextmanager
    def _latest_lock(self) -> Iterator[None]:
        if not self.local:
            yield
            return
        with open(f"{self.root}/.{LATEST}.lock", "a") as f:  # hidden: no reader lists it as a version
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def staging(self) -> Staging:
        store = (self.fs.protocol, self.root)  # however its URI is spelled
        if time.monotonic() - _SWEPT.get(store, -_SWEEP_EVERY) >= _SWEEP_EVERY:
            self.remove_stale(datetime.now(timezone.utc))
            _SWEPT[store] = time.monotonic()
        return Staging(self)

    def remove_stale(self, now: datetime, names: list[str] | None = None) -> int:
        """Remove the versions staged more than :data:`STALE_STAGING` before ``now``, and say how many, of
        the store's entries ``names`` (listed, where not given). A run stopped by a signal removes its
        own; one killed outright cannot, and on an object store its parts would be kept, and paid for,
        forever."""
        if names is None:
            names = [path.rstrip("/").rpartition("/")[2] for path in entries(self.fs, self.root)]
        removed = 0
        for name in names:
            began = _staged_at(name)
            if began is not None and now - began > STALE_STAGING:
                try:
                    self.fs.rm(f"{self.root}/{name}", recursive=True)
                    removed += 1
                    log.info("removed %s/%s, staged by a run that stopped before publishing it", self.uri, name)
                except Exception as e:  # noqa: BLE001 - another run removing it too, or a store that refuses: not this run's
                    log.warning("could not remove %s/%s, staged by a run that stopped before publishing it: %s",
                                self.uri, name, e)
        return removed

    @staticmethod
    def _source_key(start, end, config: dict, files_digest: str) -> str:
        blob = json.dumps({"interval": [start.isoformat(), end.isoformat()], "config": config, "code": CODE_VERSION,
                           "files": files_digest}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    def known_version(self, start, end, config: dict, files_digest: str) -> Manifest | None:
        """The version already built from these very files (their names and keys, see
        :attr:`ctpipe.sources.Files.digest`), if any."""
        pointer = f"{self.root}/_sources/{self._source_key(start, end, config, files_digest)}"
        if not self.fs.exists(pointer):
            return None
        try:
            manifest = self.resolve(self._read(pointer))
        except DatasetNotFound:  # the version was removed since: build it again
            return None
        self.point_latest(manifest)
        return replace(manifest, found=True)

    def remember(self, start, end, config: dict, files_digest: str, version: str) -> None:
        self.fs.makedirs(f"{self.root}/_sources", exist_ok=True)
        self.write_text(f"{self.root}/_sources/{self._source_key(start, end, config, files_digest)}", version + "\n")

    def mark_learned(self, model: str, table: str, version: str, model_version: str, run_id: str,
                     keys: np.ndarray) -> None:
        """Record that version ``model_version`` of registered model ``model``, logged by MLflow run
        ``run_id``, learned the examples of ``version``'s ``table`` (their
        :func:`ctpipe.jobspec.example_keys`): a run from it, or from a model descending from it, trains
        on a version of an interval sharing time with ``version``'s (a re-run with late traces, which
        holds them too) without them. The keys are kept, not the version's name alone: retention may
        remove the version. Another model trained from the same store numbers its versions too, and so does a registry
        begun again (its database lost): the run id tells its v2 from the v2 that learned these."""
        folder = f"{self.root}/_learned/{quote(model, safe='')}/{table}"
        self.fs.makedirs(folder, exist_ok=True)
        self.write_text(f"{folder}/{version}.v{model_version}.{run_id}",
                        base64.b64encode(keys.astype("<u8").tobytes()).decode())

    def learned(self, model: str, table: str) -> dict[str, list[tuple[str, str, str]]]:
        """The records of :meth:`mark_learned` of ``model``'s ``table``, one listing: (its URI, the model
        version, its run id) of each, by the interval (:func:`interval_part`) of the version it is of."""
        folder, found = f"_learned/{quote(model, safe='')}/{table}", {}
        for path in entries(self.fs, f"{self.root}/{folder}"):
            name = path.rstrip("/").rpartition("/")[2]
            version, model_version, run_id = _learned_by(name)
            if version and model_version:
                found.setdefault(interval_part(version), []).append(
                    (self.uri_of(f"{folder}/{name}"), model_version, run_id))
        return found

    def hold(self, run: str, versions: list[str], until: datetime) -> None:
        """Keep ``versions`` from retention for train's run ``run`` (its run directory's name) until
        :meth:`release`, or ``until``: the job reads them again on each resume after a preemption, and
        the gate after it, days later where training is long or the pool is short of spot GPUs."""
        self.fs.makedirs(f"{self.root}/_in_use", exist_ok=True)
        self.write_text(f"{self.root}/_in_use/{run}", json.dumps({"versions": versions, "until": until.isoformat()}))

    def release(self, run: str) -> None:
        """End what :meth:`hold` kept for ``run`` (nothing held: nothing to do)."""
        with suppress(FileNotFoundError):
            self.fs.rm_file(f"{self.root}/_in_use/{run}")

    def held(self, now: datetime) -> tuple[set[str], list[str]]:
        """(the versions some run holds at ``now``, the paths of holds past their time). A hold that
        does not read as one is left where it is, and holds nothing."""
        paths = entries(self.fs, f"{self.root}/_in_use")
        versions, ended = set(), []
        for path, body in (self.fs.cat(paths, on_error="omit") if paths else {}).items():
            try:
                hold = json.loads(body)
                until, held = datetime.fromisoformat(hold["until"]), hold["versions"]
                if until.tzinfo is None or not isinstance(held, list):
                    raise ValueError("no zone in its time, or no list of versions")
            except (ValueError, TypeError, KeyError) as e:
                log.warning("%s is not a hold of dataset versions (%s): left as it is", path, e)
                continue
            if until > now:
                versions.update(map(str, held))
            else:
                ended.append(path)
        return versions, ended

    def _listed_path(self, start: datetime, end: datetime) -> str:
        return f"{self.root}/_listed/{_stamp(start)}-{_stamp(end)}"

    def listed(self, start: datetime, end: datetime) -> dict | None:
        """What the last run of ``[start, end)`` recorded of the files it listed (see :meth:`record_listed`)."""
        path = self._listed_path(start, end)
        try:
            return json.loads(self.fs.cat_file(path))
        except (FileNotFoundError, ValueError):  # none, or not whole (a store that failed mid-write): nothing to compare
            return None

    def record_listed(self, start: datetime, end: datetime, files_digest: str, version: str | None) -> None:
        """Record the digest of the files a run of ``[start, end)`` listed, and the version it built or
        found (None: it found no trace), the interval's current one: later runs list the interval
        again, and say when its files changed; retention keeps that version, not the one published last."""
        self.fs.makedirs(f"{self.root}/_listed", exist_ok=True)
        self.write_text(self._listed_path(start, end), json.dumps({
            "files_sha256": files_digest, "version": version, "at": datetime.now(timezone.utc).isoformat()}))

    def announced_by(self, version: str) -> tuple[str, datetime | None] | None:
        """(the trace_to_dataset run that announced ``version``, its asset event on which train runs;
        when it marked it, unknown for a mark written before marks said), if any."""
        path = f"{self.root}/_announced/{version}"
        if not self.fs.exists(path):
            return None
        run, _, at = self._read(path).partition("\n")
        return run, datetime.fromisoformat(at) if at else None

    def announced_alike(self, version: str) -> list[str]:
        """The other versions of ``version``'s interval announced (of another code version, or config)."""
        found = self.fs.glob(f"{self.root}/_announced/{interval_part(version)}-*")
        return sorted(name for name in (path.rsplit("/", 1)[-1] for path in found) if name != version)

    def mark_announced(self, version: str, run_id: str, again: bool = False) -> str | None:
        """Mark ``version`` announced by ``run_id``: with ``again``, over the mark a run left; else only
        where no mark is, returning the run whose mark is there when one is (it came meanwhile)."""
        self.fs.makedirs(f"{self.root}/_announced", exist_ok=True)
        path, text = f"{self.root}/_announced/{version}", f"{run_id}\n{datetime.now(timezone.utc).isoformat()}\n"
        try:
            self.write_text(path, text, exclusive=not again)
        except FileExistsError:
            return (self.announced_by(version) or ("another run",))[0]
        return None
