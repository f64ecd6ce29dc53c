"""Retention: ``ctpipe prune``, the dataset_retention DAG's task, on a local store and on S3."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from ctpipe import datasets, retention
from ctpipe.cli import main
from ctpipe.config import DatasetConfig
from ctpipe.errors import NothingToPublish
from ctpipe.pipeline import prune_datasets
from tests.conftest import T0, trace, write_traces
from tests.test_datasets import HOUR, run

DAY = timedelta(days=1)
MINUTE = timedelta(minutes=1)


@pytest.fixture
def hours(settings):
    """Four hourly versions, T0 to T0+4h, the last of them the one LATEST names."""
    for h in range(4):
        at = T0 + h * HOUR
        write_traces(settings.traces_dir, [trace(n, f"What is {n} plus 1?", str(n + 1), at=at + timedelta(seconds=n))
                                               for n in range(10 * h, 10 * h + 3)], at=at)
    made = [run(settings, T0 + h * HOUR, T0 + (h + 1) * HOUR) for h in range(4)]
    assert datasets.resolve(settings.datasets_dir, None).version == made[-1].version
    for h, m in enumerate(made):  # each published as its hour ended, not today
        _published_at(settings, m.version, T0 + (h + 1) * HOUR + MINUTE)
    return settings, made


def _published_at(s, version: str, at: datetime | str | None) -> None:
    path = s.datasets_dir / version / "manifest.json"
    body = json.loads(path.read_text())
    body.pop("published_at")
    path.write_text(json.dumps(body | ({"published_at": str(at)} if at is not None else {})))


def _listed(s) -> list[str]:
    return sorted(p.name for p in s.datasets_dir.iterdir() if datasets.interval_named(p.name))


def _pointed(s) -> set[str]:
    return {p.read_text().strip() for p in (s.datasets_dir / "_sources").iterdir()}


def test_versions_past_their_age_go_with_their_pointers_and_a_pruned_interval_is_built_again(hours):
    s, made = hours
    store = datasets.Output(s.datasets_dir)
    for m in made:  # what a model learned of them: of the first two, past the age, it goes too
        store.mark_learned("a model/of ours", "grpo", m.version, "2", "0a1b", np.arange(3, dtype=np.uint64))
    # A training run reads the second hour's (a backfill's, say), named in its job spec: it stays.
    store.hold("manual__train1", [made[1].version.rsplit("-", 1)[0] + "-0123456789"], T0 + 9 * DAY)
    # Two intervals ended more than a day before: T0+1h and T0+2h; the third ended at the cutoff.
    done = retention.prune(store, DAY, now=T0 + 3 * HOUR + DAY)
    assert done.removed == [made[0].version, made[1].version] and (done.aged, done.superseded) == (2, 0)
    assert sorted(p.name for p in (s.datasets_dir / "_learned" / "a%20model%2Fof%20ours" / "grpo").iterdir()) == \
        [f"{m.version}.v2.0a1b" for m in made[1:]]
    assert done.pointers == 2 and done.kept == 2 and done.latest == made[-1].version and not done.failed
    assert _listed(s) == sorted(m.version for m in made[2:]) == sorted(_pointed(s))
    # The records of the files the runs listed go with the intervals past the age, whatever is kept.
    assert done.records == 2 + 1 and sorted(p.name for p in (s.datasets_dir / "_listed").iterdir()) == \
        [m.version.rsplit("-", 1)[0] for m in made[2:]]
    assert store.resolve(None).version == made[-1].version and store.resolve(made[2].version).counts["traces"] == 3
    with pytest.raises(datasets.DatasetNotFound):
        store.resolve(made[0].version)
    # Its pointer gone, a re-run of a pruned interval builds it again, as it was.
    again = run(s, T0, T0 + HOUR)
    assert again.version == made[0].version and not again.found and again.counts == made[0].counts


def test_the_version_latest_names_is_kept_whatever_its_age(hours):
    s, made = hours
    done = retention.prune(datasets.Output(s.datasets_dir), HOUR, now=T0 + 400 * DAY)
    assert done.removed == [m.version for m in made[:3]] and done.kept == 1
    assert _listed(s) == [made[-1].version] and _pointed(s) == {made[-1].version}
    assert "the one LATEST names" in done.lines()[0]


def test_a_dry_run_says_what_would_go_and_removes_nothing(hours):
    s, made = hours
    before = sorted(p.relative_to(s.datasets_dir) for p in s.datasets_dir.rglob("*"))
    done = retention.prune(datasets.Output(s.datasets_dir), DAY, now=T0 + 3 * HOUR + DAY, dry_run=True)
    assert done.removed == [made[0].version, made[1].version] and done.pointers == 2 and done.dry_run
    assert done.lines()[:3] == ["would remove 2 versions (2 of intervals past their age, 0 superseded), 2 source "
                                "pointers, 2 records of listed files and examples learned; 2 versions kept, the one LATEST names "
                                f"({made[-1].version}) among them",
                                f"  {made[0].version}", f"  {made[1].version}"]
    assert sorted(p.relative_to(s.datasets_dir) for p in s.datasets_dir.rglob("*")) == before


def test_a_version_superseded_goes_once_the_later_one_is_old_enough(hours):
    s, made = hours
    later = run(s, T0, T0 + HOUR, dataset=DatasetConfig(dpo_min_margin=0.3))  # a re-run of the first hour, another config
    assert later.version != made[0].version
    published = datetime.fromisoformat(later.published_at)
    store = datasets.Output(s.datasets_dir)
    assert retention.prune(store, None, DAY, now=published + DAY - timedelta(seconds=1)).removed == []
    done = retention.prune(store, None, DAY, now=published + DAY + timedelta(seconds=1))
    assert done.removed == [made[0].version] and (done.aged, done.superseded) == (0, 1) and done.kept == 4
    assert store.resolve(later.version).version == later.version


@pytest.mark.parametrize("said", [None, "yesterday", 1700000000, "2026-11-21T23:00:00"])
def test_a_manifest_that_predates_published_at_is_dated_by_its_time_on_the_store(hours, said):
    s, made = hours
    later = run(s, T0, T0 + HOUR, dataset=DatasetConfig(dpo_min_margin=0.3))
    (s.datasets_dir / "_listed" / later.version.rsplit("-", 1)[0]).unlink()  # as before runs recorded it
    for m in (made[0], later):  # as versions of an older code version wrote them, or a hand did
        _published_at(s, m.version, said)
    if said is None or not str(said).startswith("2026"):
        old = (T0 - DAY).timestamp()
        os.utime(s.datasets_dir / made[0].version / "manifest.json", (old, old))
        os.utime(s.datasets_dir / later.version / "manifest.json", (old + 60, old + 60))
    else:  # a time without its zone is UTC's; both the same: the later name wins
        made[0], later = sorted([made[0], later], key=lambda m: m.version)
    done = retention.prune(datasets.Output(s.datasets_dir), None, HOUR, now=T0 + 3 * DAY)
    assert done.removed == [made[0].version] and done.superseded == 1


def test_the_current_version_is_the_one_the_last_run_built_or_found(hours):
    """A config tried, then put back: the run with the first config again finds its version, which is
    the interval's current one, not the version published last."""
    s, made = hours
    tried = run(s, T0, T0 + HOUR, dataset=DatasetConfig(dpo_min_margin=0.3))
    _published_at(s, tried.version, T0 + 2 * HOUR)
    assert run(s, T0, T0 + HOUR).found
    store = datasets.Output(s.datasets_dir)
    assert retention.prune(store, None, HOUR, now=datetime.now(timezone.utc) + 30 * MINUTE).removed == []
    done = retention.prune(store, None, HOUR, now=datetime.now(timezone.utc) + 2 * HOUR)
    assert done.removed == [tried.version] and store.resolve(made[0].version).version == made[0].version


def test_what_was_just_published_or_is_being_copied_in_is_kept_whatever_its_interval(hours):
    """A backfill, a catch-up or a re-run of an old interval publishes versions of intervals long past,
    which train reads next; a version folder without its manifest may be an object store's copy in
    progress; a file named as a version is none."""
    s, made = hours
    _published_at(s, made[1].version, datetime.now(timezone.utc) - MINUTE)
    copying = s.datasets_dir / "20261120T000000-20261120T010000-0123456789"
    (copying / "traces").mkdir(parents=True)
    (copying / "traces" / "part-00000.parquet").write_bytes(b"PAR1")
    left = s.datasets_dir / "20261119T000000-20261119T010000-0123456789"
    (left / "traces").mkdir(parents=True)
    (left / "traces" / "part-00000.parquet").write_bytes(b"PAR1")
    old = (T0 - DAY).timestamp()
    os.utime(left / "traces" / "part-00000.parquet", (old, old))
    (s.datasets_dir / "20261118T000000-20261118T010000-0123456789").write_text("not a version")
    done = retention.prune(datasets.Output(s.datasets_dir), HOUR, now=datetime.now(timezone.utc))
    assert done.removed == [left.name, made[0].version, made[2].version]
    assert _listed(s) == sorted([copying.name, made[1].version, made[3].version, "20261118T000000-20261118T010000-0123456789"])


def test_what_was_learned_of_intervals_sharing_time_with_a_held_version_is_kept(hours):
    """A run on a form's version of 10:30-11:30 leaves out, after each preemption too, what its base
    learned of the hours 10:00-11:00 and 11:00-12:00: their records stay while it holds the version."""
    s, made = hours
    store = datasets.Output(s.datasets_dir)
    for m in made:
        store.mark_learned("m", "grpo", m.version, "2", "0a1b", np.arange(3, dtype=np.uint64))
    form = datasets.version_name(T0 + 30 * MINUTE, T0 + 90 * MINUTE, "0123456789")
    store.hold("manual__train1", [form], T0 + 9 * DAY)
    done = retention.prune(store, DAY, now=T0 + 3 * HOUR + DAY)
    assert done.removed == [made[0].version, made[1].version]
    assert sorted(p.name for p in (s.datasets_dir / "_learned" / "m" / "grpo").iterdir()) == \
        [f"{m.version}.v2.0a1b" for m in made]


def test_versions_a_training_run_holds_are_kept_until_it_releases_them_or_its_time_is_up(hours, caplog):
    s, made = hours
    store, now = datasets.Output(s.datasets_dir), T0 + 3 * HOUR + DAY
    store.hold("manual__train1", [made[0].version, made[1].version], until=now + HOUR)
    store.hold("scheduled__train0", [made[1].version], until=now - MINUTE)  # its run never came to its gate
    (s.datasets_dir / "_in_use" / "notes.txt").write_text("kept by hand")
    done = retention.prune(store, DAY, now=now)
    assert done.removed == [] and (done.held, done.holds, done.kept) == (2, 1, 4)
    assert "1 holds past their time" in done.lines()[0] and done.lines()[0].endswith(", 2 that training runs hold")
    assert sorted(p.name for p in (s.datasets_dir / "_in_use").iterdir()) == ["manual__train1", "notes.txt"]
    assert "notes.txt is not a hold of dataset versions" in caplog.text
    # A dry run says the same, and removes no hold.
    store.hold("scheduled__train0", [made[1].version], until=now - MINUTE)
    assert retention.prune(store, DAY, now=now, dry_run=True).holds == 1
    assert (s.datasets_dir / "_in_use" / "scheduled__train0").exists()
    # Released (the gate judged the candidate), or past their time, they go.
    store.release("manual__train1")
    store.release("manual__train1")  # twice: a retried gate
    assert retention.prune(store, DAY, now=now).removed == [made[0].version, made[1].version]
    store.hold("manual__train2", [made[2].version], until=now + HOUR)
    assert retention.prune(store, DAY, now=now + HOUR).removed == [made[2].version]


def test_pointers_gone_already_are_no_failure(hours):
    """Two prunes at once (the DAG's and a shell's): what the other removed first is no failure."""
    s, made = hours
    pointers = sorted(str(p) for p in (s.datasets_dir / "_sources").iterdir())
    (s.datasets_dir / "_sources" / pointers[0].rpartition("/")[2]).unlink()
    fs = datasets.Output(s.datasets_dir).fs
    assert retention._remove(fs, {path: path for path in pointers}) == {}
    assert not (s.datasets_dir / "_sources").exists() or not list((s.datasets_dir / "_sources").iterdir())


def test_what_a_store_refuses_is_named_whether_it_says_so_or_not(hours, monkeypatch):
    """s3fs reads no per-key error of a batch's reply (S3 answers 200, listing the keys it refused), so
    what is still there after a removal is looked for; one pointer refused stops no other."""
    from fsspec.implementations.local import LocalFileSystem

    s, made = hours
    pointers = sorted((s.datasets_dir / "_sources").iterdir())
    refused = next(p for p in pointers if p.read_text().strip() == made[0].version)
    rm = LocalFileSystem.rm

    def silent(fs, path, recursive=False, maxdepth=None):
        paths = path if isinstance(path, list) else [path]
        if str(refused) in paths:  # said, as a local disk says it
            raise PermissionError(f"[Errno 13] Permission denied: {str(refused)!r}")
        kept = [p for p in paths if not p.endswith(made[1].version) and p != str(refused)]  # refused, nothing said
        return rm(fs, kept, recursive=recursive, maxdepth=maxdepth) if kept else None

    monkeypatch.setattr(LocalFileSystem, "rm", silent)
    done = retention.prune(datasets.Output(s.datasets_dir), DAY, now=T0 + 3 * DAY)
    assert done.removed == [made[0].version, made[2].version] and done.pointers == 2 and done.records == 4
    assert done.failed == {made[1].version: "still there after it was removed: the store refused it",
                           f"_sources/{refused.name}": f"PermissionError: [Errno 13] Permission denied: {str(refused)!r}"}
    assert (done.aged, done.kept) == (2, 2) and _listed(s) == [made[1].version, made[3].version]


def test_pointers_to_versions_removed_by_hand_and_stale_staging_go_too(hours):
    import shutil

    s, made = hours
    shutil.rmtree(s.datasets_dir / made[1].version)
    staged = s.datasets_dir / f".tmp-{T0:%Y%m%dT%H%M%SZ}-{'0' * 32}"
    staged.mkdir()
    done = retention.prune(datasets.Output(s.datasets_dir), DAY, now=T0 + 3 * DAY)
    assert done.removed == [made[0].version, made[2].version] and done.pointers == 3 and done.staged == 1
    assert not staged.exists() and _pointed(s) == {made[3].version}


def test_a_version_that_cannot_be_removed_is_named_and_the_others_go(hours, monkeypatch, capsys):
    s, made = hours
    from fsspec.implementations.local import LocalFileSystem

    rm = LocalFileSystem.rm

    def refusing(fs, path, recursive=False, maxdepth=None):  # as a folder made immutable (chattr +i) refuses
        if any(made[1].version in p for p in (path if isinstance(path, list) else [path])):
            raise PermissionError(f"[Errno 13] Permission denied: {path!r}")
        return rm(fs, path, recursive=recursive, maxdepth=maxdepth)

    monkeypatch.setattr(LocalFileSystem, "rm", refusing)
    code = main(["prune", "--out", str(s.datasets_dir), "--older-than", "1h"])
    out = capsys.readouterr().out
    assert code == 1
    assert out.splitlines()[0].startswith("removed 2 versions (2 of intervals past their age, 0 superseded)")
    assert made[1].version not in out.splitlines()[1:3]
    assert f"not removed: {made[1].version}: PermissionError: [Errno 13] Permission denied" in out
    assert _listed(s) == [made[1].version, made[3].version]


def test_the_command_takes_its_ages_from_the_config_and_says_when_there_are_none(hours, monkeypatch, capsys):
    s, made = hours
    assert main(["prune", "--dry-run"]) == 2
    assert "no retention is set (dataset.keep_for, dataset.keep_superseded_for)" in capsys.readouterr().err
    monkeypatch.setenv("CTPIPE_DATASET__KEEP_FOR", "P1D")  # every interval ended days ago: all go but LATEST's
    assert main(["prune", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["removed"] == [m.version for m in made[:3]] and done["latest"] == made[-1].version
    with pytest.raises(SystemExit) as e:
        main(["prune", "--out", " ", "--older-than", "1d"])
    assert e.value.code == 2 and "--out is empty" in capsys.readouterr().err
    # The flags given are the ages: the configured one is not added to them.
    assert main(["prune", "--superseded-after", "1h", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == []


@pytest.mark.parametrize("args, said", [
    (["--out", "{tmp}/nowhere", "--older-than", "1d"], "dataset store '{tmp}/nowhere' holds nothing: no version was "
                                                       "published there (is it the store the DAGs publish to?)"),
    (["--older-than", "3000000d"], "older_than=3000000 days, 0:00:00 reaches back before the year 1"),
])
def test_a_store_that_holds_nothing_or_an_age_past_the_calendar_is_named(settings, capsys, tmp_path, args, said):
    assert main(["prune", *(a.format(tmp=tmp_path) for a in args)]) == 1
    assert said.format(tmp=tmp_path) in capsys.readouterr().err


def test_an_empty_setting_keeps_versions_forever_and_ages_may_be_seconds(monkeypatch):
    from ctpipe.config import Settings

    monkeypatch.setenv("CTPIPE_DATASET__KEEP_FOR", "")
    monkeypatch.setenv("CTPIPE_DATASET__KEEP_SUPERSEDED_FOR", "86400")
    monkeypatch.setenv("CTPIPE_DATASET__ARRIVAL_LAG", "30")
    d = Settings().dataset
    assert (d.keep_for, d.keep_superseded_for, d.arrival_lag) == (None, DAY, timedelta(seconds=30))


def test_retention_changes_no_version_name(settings):
    write_traces(settings.traces_dir, [trace(i, f"What is {i} plus 1?", str(i + 1)) for i in range(3)])
    kept = run(settings, dataset=DatasetConfig(keep_for=timedelta(days=30), keep_superseded_for=DAY))
    assert run(settings).version == kept.version


def test_the_task_is_skipped_without_retention(settings):
    with pytest.raises(NothingToPublish, match="no retention is set"):
        prune_datasets(settings)


def test_the_dag_runs_daily_only_when_a_retention_is_set_and_its_task_prunes_or_skips(hours):
    from tests.dags.test_dag_integrity import ROOT, _in_other_settings

    s, made = hours
    dag = f"__import__('airflow.dag_processing.dagbag').dag_processing.dagbag.DagBag({str(ROOT / 'dags')!r}).dags['dataset_retention']"
    code = (f"d = {dag}\n"
            "try:\n"
            "    done = d.get_task('prune').python_callable()\n"
            "except Exception as e:\n"
            "    done = {'raised': type(e).__name__}\n"
            "print(getattr(d.timetable, 'expression', None), [t.task_id for t in d.tasks], __import__('json').dumps(done), sep='|')\n")
    home = {"CTPIPE_HOME": str(s.home)}
    assert _in_other_settings(code, **home) == 'None|[\'prune\']|{"raised": "AirflowSkipException"}'
    schedule, tasks, done = _in_other_settings(code, **home, CTPIPE_DATASET__KEEP_FOR="P1D").split("|")
    assert (schedule, tasks) == ("0 0 * * *", "['prune']")
    assert json.loads(done)["removed"] == [m.version for m in made[:3]] and _listed(s) == [made[-1].version]
    # A first install: nothing published yet is nothing to prune, not a failure each day.
    fresh = {"CTPIPE_HOME": str(s.home / "fresh"), "CTPIPE_DATASET__KEEP_FOR": "P1D"}
    assert _in_other_settings(code, **fresh).endswith('|{"raised": "AirflowSkipException"}')
