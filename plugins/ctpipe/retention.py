"""Retention: which dataset versions a store keeps, and removing the others.

An hourly ``trace_to_dataset`` publishes some 8,800 versions a year, each with its Parquet parts and
a pointer under ``_sources/``; nothing else ever removes them. :func:`prune` removes

* the versions of intervals that ended more than ``older_than`` ago, and
* with ``superseded_after``, the versions of an interval other than its current one (the one its
  last run built or found, else the one published last), once that one has been current that long,

but never the version ``LATEST`` names, nor one published within :data:`JUST_PUBLISHED` (a backfill,
a catch-up or a re-run of an old interval publishes versions of intervals long past, and ``train``
reads them next), nor one a training run holds (:meth:`~ctpipe.datasets.Output.hold`: its job
reads it again after a preemption, and its gate after that). With them go the ``_sources/``
pointers naming them (or any version no longer there), the ``_listed/`` records and the
``_learned/`` examples (see :meth:`~ctpipe.datasets.Output.mark_learned`) of the intervals past the
age, holds past their time, and staged folders of runs killed before they published. The
``_announced/`` marks stay: a few bytes each, they keep a version built again (a backfill over an
interval pruned) from being announced a second time.
"""

from __future__ import annotations

import json
import logging
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from ctpipe.datasets import Output, entries, interval_named, interval_part, sharing_time
from ctpipe.errors import EmptyStore

log = logging.getLogger(__name__)

# A version published this recently is kept whatever its interval's age or its successors: a reader
# (a training job) may have just found it. The same age lets a folder without a manifest go: one
# younger may be a version an object store is still copying in.
JUST_PUBLISHED = timedelta(days=1)
_SAID = 20  # versions named in a report: a first prune of a year's store removes thousands


@dataclass
class Pruned:
    """What :func:`prune` removed (or, in a dry run, would remove)."""

    removed: list[str] = field(default_factory=list)  # versions, oldest interval first
    aged: int = 0  # of them, of intervals that ended before the cutoff
    superseded: int = 0  # of them, of intervals whose current version is another
    kept: int = 0  # versions left
    latest: str | None = None  # the version LATEST names, kept whatever its age
    held: int = 0  # versions kept, past the age or superseded, that training runs hold
    holds: int = 0  # holds past their time removed
    pointers: int = 0  # _sources/ pointers removed
    records: int = 0  # _listed/ records and _learned/ examples removed
    staged: int = 0  # staged folders of killed runs removed
    failed: dict[str, str] = field(default_factory=dict)  # version (or what else): why it could not be removed
    dry_run: bool = False

    def lines(self) -> list[str]:
        """What was done, for a log or a terminal: the counts, then the first versions removed, then the
        first that could not be."""
        did, staged = ("would remove", "") if self.dry_run else ("removed", f", {self.staged} staged folders of "
                                                                            "runs killed before they published")
        kept = (f"{self.kept} versions kept" + (f", the one LATEST names ({self.latest}) among them" if self.latest else "")
                + (f", {self.held} that training runs hold" if self.held else ""))
        failed = list(self.failed.items())
        holds = f", {self.holds} holds past their time" if self.holds else ""
        return [f"{did} {len(self.removed)} versions ({self.aged} of intervals past their age, {self.superseded} "
                f"superseded), {self.pointers} source pointers, {self.records} records of listed files and examples "
                f"learned{holds}{staged}; {kept}",
                *(f"  {v}" for v in self.removed[:_SAID]),
                *[f"  and {len(self.removed) - _SAID} more"] * (len(self.removed) > _SAID),
                *(f"not removed: {what}: {why}" for what, why in failed[:_SAID]),
                *[f"and {len(failed) - _SAID} more not removed"] * (len(failed) > _SAID)]


def prune(store: Output, older_than: timedelta | None, superseded_after: timedelta | None = None,
          now: datetime | None = None, dry_run: bool = False) -> Pruned:
    """Remove from ``store`` the versions :mod:`this module <ctpipe.retention>` says, and what names
    them. The manifests go first, so that readers stop finding a version before its parts go; what
    cannot be removed is named in :attr:`Pruned.failed`, and the rest still goes. EmptyStore for a
    store that holds nothing: a mistyped one would otherwise be pruned of nothing, day after day."""
    now = now or datetime.now(timezone.utc)
    fs, root = store.fs, store.root
    listing = entries(fs, root, detail=True)
    if not listing:
        raise EmptyStore(f"dataset store {store.uri!r} holds nothing: no version was published there (is it the "
                         "store the DAGs publish to?)")
    names = {info["name"].rstrip("/").rpartition("/")[2]: info["type"] for info in listing}
    folders = {name: interval for name, kind in names.items() if kind == "directory" and (interval := interval_named(name))}
    done = Pruned(dry_run=dry_run, latest=store.latest())
    old = now - JUST_PUBLISHED
    past_age = {v for v, (_, end) in folders.items() if older_than is not None and end < now - older_than}
    by_interval: dict[tuple, list[str]] = {}
    for version, interval in folders.items():
        by_interval.setdefault(interval, []).append(version)
    alike = {v for vs in by_interval.values() if len(vs) > 1 for v in vs} if superseded_after is not None else set()
    manifests = _manifests(store, past_age | alike)
    # A version folder without a manifest is an object store's copy in progress, or one cut short (its
    # run publishing again removes it): gone only once its interval is past the age and it lies idle.
    aged = {v for v in past_age if (_time(manifests[v].get("published_at")) if v in manifests
                                    else _idle_since(store, v)) < old}
    superseded = set()
    if superseded_after is not None:
        for interval, versions in by_interval.items():
            superseded |= _superseded(store, interval, versions, manifests, now - superseded_after, old)
    held, ended = store.held(now)
    gone = (aged | superseded) - {done.latest} - held
    done.held = len((aged | superseded) & held - {done.latest})
    removed = sorted(gone, key=lambda v: (folders[v], v))
    pointers = _pointers_to(store, gone, set(folders))
    records = _records_before(store, now - older_than, held) if older_than is not None else []
    if not dry_run:
        # Pointers first: a re-run of an interval would find a version being removed, and return it.
        left = _remove(fs, {path: path for path in pointers + records + ended})
        pointers, records = [p for p in pointers if p not in left], [p for p in records if p not in left]
        ended = [p for p in ended if p not in left]
        # Each manifest's folder is looked at again with the folders (a listing each would be a request each).
        failed = _remove(fs, {v: f"{root}/{v}/manifest.json" for v in removed if v in manifests}, look_again=False)
        failed |= _remove(fs, {v: f"{root}/{v}" for v in removed if v not in failed}, recursive=True)
        done.failed = {what.removeprefix(f"{root}/"): why for what, why in (left | failed).items()}
        removed = [v for v in removed if v not in failed]
        done.staged = store.remove_stale(now, list(names))  # staged a day before this listing, or more
    done.removed, done.pointers, done.records, done.holds = removed, len(pointers), len(records), len(ended)
    done.aged, done.superseded = len(aged & set(removed)), len(superseded & set(removed) - aged)
    done.kept = len(folders) - len(removed)
    return done


def _manifests(store: Output, versions: set[str]) -> dict[str, dict]:
    """The manifests of ``versions`` that have one that reads, read together (an object store's
    client fetches them at once)."""
    paths = {f"{store.root}/{v}/manifest.json": v for v in versions}
    found = {}
    for path, body in (store.fs.cat(list(paths), on_error="omit") if paths else {}).items():
        with suppress(ValueError):  # not whole: no version yet, as one without a manifest
            found[paths[path]] = json.loads(body)
    return {v: m for v, m in found.items() if isinstance(m, dict)}  # nor is a manifest of another kind


_LONG_AGO = datetime.min.replace(tzinfo=timezone.utc)


def _time(value, fallback: datetime | None = _LONG_AGO) -> datetime | None:
    """An ISO 8601 time as a manifest or a record holds it (one without its zone is UTC's); ``fallback``
    where there is none (manifests older than ``published_at``), or not a time."""
    try:
        return _utc(datetime.fromisoformat(value))
    except (TypeError, ValueError):
        return fallback


def _utc(at: datetime) -> datetime:
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def _idle_since(store: Output, version: str) -> datetime:
    """When the last file of a version folder was written (now, for one that cannot be told)."""
    try:
        times = [_utc(store.fs.modified(path)) for path in store.fs.find(f"{store.root}/{version}")]
    except (FileNotFoundError, NotImplementedError):
        return datetime.now(timezone.utc)
    return max(times, default=_LONG_AGO)


def _superseded(store: Output, interval: tuple[datetime, datetime], versions: list[str], manifests: dict[str, dict],
                before: datetime, old: datetime) -> set[str]:
    """Of an interval's ``versions`` (those with a manifest), all but its current one, once that one
    has been current since ``before``, those published before ``old``. The current one is what the
    interval's last run built or found (``_listed/``), which may be an older version (a config tried,
    then put back); else the one published last. A manifest older than ``published_at`` is dated by
    its time on the store."""
    published = {v: _time(manifests[v].get("published_at"), None)
                 or _utc(store.fs.modified(f"{store.root}/{v}/manifest.json")) for v in versions if v in manifests}
    if len(published) < 2:
        return set()
    last = store.listed(*interval) or {}
    if last.get("version") in published:
        current, since = last["version"], _time(last.get("at"), published[last["version"]])
    else:
        current = max(published, key=lambda v: (published[v], v))
        since = published[current]
    if since >= before:
        return set()
    return {v for v, at in published.items() if v != current and at < old}


def _remove(fs, paths: dict[str, str], recursive: bool = False, look_again: bool = True) -> dict[str, str]:
    """Remove ``paths`` (by what each is, for the report) and say which could not be, and why: all in
    one call (an object store deletes a thousand keys a request), one at a time where that fails (those
    gone already, by another prune, are no failure). s3fs reads no per-key error of a batch's reply
    (S3 answers 200 and lists the keys it refused): with ``look_again``, what is still there is looked
    for, a listing of each folder they are in."""
    if not paths:
        return {}
    failed = {}
    try:
        fs.rm(list(paths.values()), recursive=recursive)
    except Exception:  # noqa: BLE001 - each filesystem raises its own types: found one at a time
        for what, path in paths.items():
            try:
                fs.rm(path, recursive=recursive)
            except FileNotFoundError:
                pass
            except Exception as e:  # noqa: BLE001
                failed[what] = f"{type(e).__name__}: {e}"
    there = set()
    for folder in {p.rpartition("/")[0] for p in paths.values()} if look_again else ():
        there |= {path.rstrip("/") for path in entries(fs, folder)}
    for what, path in paths.items():
        if what not in failed and path in there:
            failed[what] = "still there after it was removed: the store refused it"
    for what, why in failed.items():
        log.warning("could not remove %s: %s", what, why)
    return failed


def _records_before(store: Output, cutoff: datetime, held: set[str]) -> list[str]:
    """The ``_listed/`` records and ``_learned/`` examples of the intervals that ended before ``cutoff``;
    but the examples of an interval sharing time with a ``held`` version's, which its training job
    reads again."""
    records = [(path, name) for path in entries(store.fs, f"{store.root}/_listed")
               if (name := path.rstrip("/").rpartition("/")[2])]
    learned = [(path, interval_part(path.rstrip("/").rpartition("/")[2]))
               for model in entries(store.fs, f"{store.root}/_learned") for table in entries(store.fs, model)
               for path in entries(store.fs, table)]
    read = sharing_time([name for _, name in learned], [interval_part(v) for v in held])
    records += [record for record, sharing in zip(learned, read) if not sharing]
    return sorted(path for path, name in records
                  if (interval := interval_named(name, version=False)) and interval[1] < cutoff)


def _pointers_to(store: Output, gone: set[str], present: set[str]) -> list[str]:
    """The ``_sources/`` pointers that name a version of ``gone``, or one neither ``present`` nor
    there now (removed by hand, say): read together, which an object store's client does at once."""
    paths = entries(store.fs, f"{store.root}/_sources")
    if not paths:
        return []
    named = {path: body.decode().strip() for path, body in store.fs.cat(paths, on_error="omit").items()}
    return sorted(path for path, version in named.items()
                  if version in gone or (version not in present
                                         and not store.fs.exists(f"{store.root}/{version}/manifest.json")))
