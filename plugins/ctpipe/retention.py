"""Retention: which dataset versions a store keeps, and removing the others.

An hourly ``trace_to_dataset`` publishes some 8,800 versions a year, each with its Parquet parts and
a pointer under ``_sources/``; nothing else ever removes them. :func:`prune` removes

* the versions of intervals that ended more than ``older_than`` ago, and
* with ``superseded_after``, the versions of an interval that has one published later (a re-run
  with late files, another config or code version) once that one is ``superseded_after`` old,

never the version ``LATEST`` names, and with them the ``_sources/`` pointers naming them (or any
version no longer there), and staged folders of runs killed before they published. The
``_announced/`` marks stay: a few bytes each, they keep a version built again (a backfill over an
interval pruned) from being announced, and trained on, a second time.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from ctpipe.datasets import LATEST, Output

log = logging.getLogger(__name__)

# A version's folder name (datasets.version_name): its interval's start and end (UTC), a digest.
_VERSION = re.compile(r"(\d{8}T\d{6})-(\d{8}T\d{6})-[0-9a-f]{10}")


@dataclass
class Pruned:
    """What :func:`prune` removed (or, in a dry run, would remove)."""

    removed: list[str] = field(default_factory=list)  # versions, oldest interval first
    aged: int = 0  # of them, of intervals that ended before the cutoff
    superseded: int = 0  # of them, of intervals with a version published later
    kept: int = 0  # versions left
    latest: str | None = None  # the version LATEST names, kept whatever its age
    pointers: int = 0  # _sources/ pointers removed
    staged: int = 0  # staged folders of killed runs removed
    failed: dict[str, str] = field(default_factory=dict)  # version: why it could not be removed
    dry_run: bool = False

    def lines(self, named: int = 20) -> list[str]:
        """What was done, for a log or a terminal: the counts, then the first ``named`` versions removed
        (a first prune of a year's store removes thousands), then each that could not be."""
        did, staged = ("would remove", "") if self.dry_run else ("removed", f", {self.staged} staged folders of "
                                                                            "runs killed before they published")
        kept = f"{self.kept} versions kept" + (f", the one LATEST names ({self.latest}) among them" if self.latest else "")
        return [f"{did} {len(self.removed)} versions ({self.aged} of intervals past their age, {self.superseded} "
                f"superseded), {self.pointers} source pointers{staged}; {kept}",
                *(f"  {v}" for v in self.removed[:named]),
                *[f"  and {len(self.removed) - named} more"] * (len(self.removed) > named),
                *(f"not removed: {v}: {why}" for v, why in self.failed.items())]


def interval_of(name: str) -> tuple[datetime, datetime] | None:
    """The interval (UTC) a version's folder name says, None for any other name."""
    found = _VERSION.fullmatch(name)
    try:
        return tuple(datetime.strptime(t, "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc) for t in found.groups()) \
            if found else None
    except ValueError:  # no day of the calendar: not a name datasets gave
        return None


def prune(store: Output, older_than: timedelta | None, superseded_after: timedelta | None = None,
          now: datetime | None = None, dry_run: bool = False) -> Pruned:
    """Remove from ``store`` the versions :mod:`this module <ctpipe.retention>` says, and what names
    them. A version's manifest goes first, so that readers stop finding it before its parts go: a
    training job still reading one would fail, hence ages of days. A version that cannot be removed
    is named in :attr:`Pruned.failed`, and the others still go."""
    now = now or datetime.now(timezone.utc)
    fs, root = store.fs, store.root
    try:
        names = sorted(path.rstrip("/").rpartition("/")[2] for path in fs.ls(root, detail=False))
    except FileNotFoundError:  # nothing published yet
        names = []
    finally:
        fs.invalidate_cache(root)
    versions = {name: interval for name in names if (interval := interval_of(name))}
    done = Pruned(dry_run=dry_run)
    done.latest = fs.cat_file(f"{root}/{LATEST}").decode().strip() if fs.exists(f"{root}/{LATEST}") else None
    aged = {v for v, (_, end) in versions.items() if older_than is not None and end < now - older_than}
    superseded = _superseded(store, versions, now - superseded_after) - aged if superseded_after is not None else set()
    gone = (aged | superseded) - {done.latest}
    done.aged, done.superseded = len(aged - {done.latest}), len(superseded - {done.latest})
    done.removed = sorted(gone, key=lambda v: (versions[v], v))
    done.kept = len(versions) - len(gone)
    pointers = _pointers_to(store, gone, set(versions))
    done.pointers = len(pointers)
    if dry_run:
        return done
    if pointers:  # first: a re-run of the interval would find a version it is removing
        fs.rm(pointers)
    for version in list(done.removed):
        try:
            if fs.exists(f"{root}/{version}/manifest.json"):
                fs.rm_file(f"{root}/{version}/manifest.json")
            fs.rm(f"{root}/{version}", recursive=True)
        except FileNotFoundError:  # removed meanwhile, by another prune
            pass
        except Exception as e:  # noqa: BLE001 - each filesystem raises its own types: named, and the rest go on
            done.failed[version] = f"{type(e).__name__}: {e}"
            done.removed.remove(version)
            done.kept += 1
            log.warning("could not remove version %s of %s: %s", version, store.uri, done.failed[version])
    done.staged = store.remove_stale(now)
    return done


def _superseded(store: Output, versions: dict[str, tuple[datetime, datetime]], before: datetime) -> set[str]:
    """Of ``versions``, those of an interval whose version published last was published before
    ``before``, but that one. When each was published is its manifest's ``published_at``, or, in a
    manifest older than that field, the manifest's own time on the store; a folder without a
    manifest (an object store's copy cut short) is no version, and left to the run that publishes there."""
    by_interval: dict[tuple, list[str]] = {}
    for version, interval in versions.items():
        by_interval.setdefault(interval, []).append(version)
    out = set()
    for alike in (vs for vs in by_interval.values() if len(vs) > 1):
        published = {v: at for v in alike if (at := _published(store, v)) is not None}
        if not published:
            continue
        last = max(published, key=lambda v: (published[v], v))
        if published[last] < before:
            out |= set(published) - {last}
    return out


def _published(store: Output, version: str) -> datetime | None:
    try:
        at = store.load(version).published_at
    except (FileNotFoundError, ValueError, TypeError):  # no manifest, or not one datasets wrote
        return None
    if at:
        return datetime.fromisoformat(at)
    when = store.fs.modified(f"{store.root}/{version}/manifest.json")
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _pointers_to(store: Output, gone: set[str], listed: set[str]) -> list[str]:
    """The ``_sources/`` pointers that name a version of ``gone``, or one neither ``listed`` nor
    there now (removed by hand, say): read together, which an object store's client does at once."""
    folder = f"{store.root}/_sources"
    try:
        paths = store.fs.ls(folder, detail=False)
    except FileNotFoundError:
        return []
    finally:
        store.fs.invalidate_cache(folder)
    if not paths:
        return []
    named = {path: body.decode().strip() for path, body in store.fs.cat(paths, on_error="omit").items()}
    return sorted(path for path, version in named.items()
                  if version in gone or (version not in listed
                                         and not store.fs.exists(f"{store.root}/{version}/manifest.json")))
