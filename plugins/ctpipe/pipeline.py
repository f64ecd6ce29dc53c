"""The work behind each DAG task, as plain functions (testable without a scheduler).

DAG files stay thin: they wire these functions to Airflow tasks and assets.
Every failure a user can cause raises :class:`PipelineError` with a message
naming the field and the value.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ctpipe import arith, datasets
from ctpipe.config import ALGORITHMS, Settings
from ctpipe.errors import NothingToPublish, PipelineError
from ctpipe.jobspec import METRICS_FILE, SPEC_FILE, DatasetRef, JobSpec, table_of
from ctpipe.preemption import backoff_seconds

if TYPE_CHECKING:
    from ctpipe.retention import Pruned

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- trace_to_dataset


def aware_time(text: str) -> datetime:
    """An ISO 8601 time with its timezone, as the command line and the trigger form give an interval's
    bounds; ValueError saying what it is not."""
    try:  # RFC 3339 lets "t" and "z" be lower case, and the trigger form's date-time check takes them
        t = datetime.fromisoformat(text.upper())
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time (e.g. 2026-11-22T10:00:00+00:00)") from None
    if t.tzinfo is None:
        raise ValueError(f"{text!r} has no timezone (e.g. 2026-11-22T10:00:00+00:00)")
    if re.search(r"[.,]\d{7}", text):  # read cut to microseconds: an error would then quote other times
        raise ValueError(f"{text!r} is more precise than a microsecond, which an interval's bounds are kept to")
    try:
        t.astimezone(timezone.utc)
    except OverflowError:  # 9999-12-31T20:00-05:00 is in year 10000 in UTC
        raise ValueError(f"{text!r} is outside the years 1 to 9999 in UTC") from None
    return t


def interval_to_build(params: dict[str, Any], start: datetime | None, end: datetime | None) -> tuple[datetime, datetime]:
    """The interval a ``trace_to_dataset`` run builds: the trigger form's ``start`` and ``end`` when
    given (both), else the run's data interval; PipelineError, naming the field and its value, when
    there is none to build. A manual run of a manual-only DAG (no schedule) has a data interval of
    no length; one triggered without a logical date has none at all. A key of the run's conf that is
    no param of the form (Airflow puts them among the params) is refused by name: a run given a
    ``source`` or a ``format`` would build from the configured ones, and announce it."""
    given = {name: params.get(name) for name in ("start", "end")}
    if unknown := sorted(set(params) - set(given)):
        raise PipelineError(f"{', '.join(f'{k}={params[k]!r}' for k in unknown)}: trace_to_dataset's run conf takes "
                            "start and end alone (the source, store and format are settings: CTPIPE_TRACE_SOURCE, "
                            "CTPIPE_DATASET_STORE, CTPIPE_DATASET__FORMAT)")
    if any(given.values()):
        if not all(given.values()):
            empty = next(name for name, value in given.items() if not value)
            raise PipelineError(f"{empty} is empty: give both start and end, or neither (the run's data interval)")
        at = {}
        for name, value in given.items():
            try:
                at[name] = aware_time(str(value))
            except ValueError as e:
                raise PipelineError(f"{name}={e}") from None
        (start, end), names = at.values(), ("start", "end")
    elif start is None or end is None:
        raise PipelineError("the run has no data interval (it was triggered without a logical date): give start "
                            "and end in the trigger form")
    else:
        names = ("data_interval_start", "data_interval_end")
    if end <= start:
        raise PipelineError(f"{names[1]}={end.isoformat()} is not after {names[0]}={start.isoformat()}"
                            + ("" if names[0] == "start" else ": a run of a manual-only trace_to_dataset (no "
                               "trace_schedule) has a data interval of no length; give start and end in the "
                               "trigger form"))
    if why := unfinished(end):
        raise PipelineError(f"{names[1]}={why}")
    return datasets.utc(start), datasets.utc(end)


# How far a worker's clock may lag the scheduler's: a scheduled run begins right after its interval ends.
_CLOCK_SKEW = timedelta(minutes=1)


def unfinished(end: datetime, lag: timedelta = timedelta(0), skew: timedelta = _CLOCK_SKEW) -> str | None:
    """Why an interval that ends at ``end`` cannot be built yet, if it cannot: its traces are still
    coming (and a version of part of them, announced, would be the interval's for good), until the
    arrival ``lag`` after it. ``skew``: how far behind the clock that decided to build it this one may be."""
    now = datetime.now(timezone.utc)
    if end <= now + skew - lag:  # not end + lag: past year 9999
        return None
    at = f"(it is {now.isoformat(timespec='seconds')}): the interval's traces are not all in"
    if lag:
        return f"{end.isoformat()} and the arrival lag of {lag} after it have not passed {at}; build it once they have"
    return f"{end.isoformat()} has not come yet {at}; build it once it has passed"


def ready_at(params: dict[str, Any] | None, data_interval_end: datetime | None, lag: timedelta) -> str:
    """When a trace_to_dataset run's interval is all in: its end (the trigger form's, when given) and
    the arrival lag after it; now, when the form gives no end it can read (materialize says why)."""
    given = (params or {}).get("end")
    try:
        end = aware_time(str(given)) if given else data_interval_end
    except ValueError:
        end = None
    return (end + lag if end else datetime.now(timezone.utc)).isoformat()


# How long after its mark a run's asset event is surely recorded (the task returns right after it).
_EVENT_RECORDED = timedelta(minutes=5)


def materialize_interval(s: Settings, start: datetime, end: datetime, run_id: str | None = None,
                         in_airflow: Callable[[str, str, datetime | None], bool] | None = None) -> dict:
    """Publish the interval's dataset version (its asset event's extra); NothingToPublish, saying
    what was read, when no trace arrived in it, or, for a run (``run_id``), when a run announced the
    version before: a re-run (a cleared run, a backfill that reprocesses) finds it again, and its
    event would start another training on the same data.

    The mark is the last thing written before the task returns, so that a run that died after
    publishing announces the version on its retry. One that died after the mark, before Airflow
    recorded its event, left a mark all the same: ``in_airflow(version, run, marked_at)`` tells
    whether Airflow has that run's event, and without one the version is announced again, or train
    would never hear of it; by this run's retry at once, by another run once the mark is older than
    :data:`_EVENT_RECORDED` (until then, the run that marked it may still be on its way to Airflow)."""
    from ctpipe.materialize import NoTraces, materialize, some_files

    if s.trace_source is None:
        s.traces_dir.mkdir(parents=True, exist_ok=True)
    manifest = materialize(
        s.trace_source or str(s.traces_dir), s.datasets_uri, start, end, task=s.task, reward=s.reward, dataset=s.dataset
    )
    if isinstance(manifest, NoTraces):
        raise NothingToPublish("; ".join(manifest.lines(s.dataset)))
    store = datasets.Output(s.datasets_uri)
    mark = store.announced_by(manifest.version) if run_id else None
    if mark:
        by, at = mark
        recent = by != run_id and (at is None or datetime.now(timezone.utc) - at < _EVENT_RECORDED)
        held = in_airflow is None or in_airflow(manifest.version, by, at)
        if held or recent:
            who = "this run (cleared since)" if by == run_id else f"run {by}"
            # A run marked failed as it finished (Airflow stops a try at its next heartbeat) may have
            # marked the version and never have its event recorded: say when a run announces it.
            then = (": nothing new to train on" if held or at is None else
                    f", at {at:%H:%M:%S} UTC, whose asset event Airflow does not hold yet: if that run failed, a run "
                    f"of this interval from {at + _EVENT_RECORDED:%H:%M:%S} UTC on announces it")
            raise NothingToPublish(f"version {manifest.version} was published and announced before, by {who}{then}")
        log.warning("version %s was marked announced by %s, but Airflow holds no event of it (the try ended before "
                    "Airflow recorded it): announced now", manifest.version,
                    "an earlier try of this run" if by == run_id else f"run {by}")
    c = manifest.counts
    log.info(
        "dataset %s: %d traces in = %d rows + %d quarantined %s; %d records of other times; %d GRPO prompts, "
        "%d DPO pairs; PII scrubbed %s; formats (of all records read) %s; files in no known format %s; files not "
        "read %s; not joined %s",
        manifest.version, c["traces_in"], c["traces"], c["quarantined"], manifest.quarantine_reasons,
        c.get("outside_interval", 0), c["grpo_prompts"], c["dpo_pairs"], manifest.scrubbed, manifest.source.get("formats"),
        "; ".join(some_files(manifest.source.get("unrecognized_files", {}), "{} ({} items)", "so (the manifest names them all)"))
        or "none",
        "; ".join(some_files(manifest.source.get("skipped_files", {}), "{}: {}", "not read (the manifest names them all)")) or "none",
        manifest.source.get("unjoined") or "none",
    )
    if not c["traces"]:  # its event would start a training that can only fail
        raise NothingToPublish(f"version {manifest.version} holds no rows, only its quarantine ({c['quarantined']} "
                               f"items: {manifest.quarantine_reasons}): published, not announced, nothing to train on")
    algorithm = s.train.algorithm
    if not manifest.files[table_of(algorithm)]["rows"]:  # nor one of no rows train's algorithm takes
        raise NothingToPublish(f"version {manifest.version} holds {c['traces']} rows but no {table_of(algorithm)} rows "
                               f"(train.algorithm={algorithm!r}: {c['grpo_prompts']} GRPO prompts, {c['dpo_pairs']} "
                               "DPO pairs): published, not announced, nothing to train on")
    if run_id and (alike := _same_tables(store, manifest)):  # a new code version that changed nothing here
        raise NothingToPublish(f"version {manifest.version} holds the same tables as version {alike[0]}, announced "
                               f"by run {alike[1]}: nothing new to train on")
    # Marked only if no other run marked it since it looked (two runs of one interval at once, a
    # backfill's and a manual one): one of them announces.
    if run_id and (first := store.mark_announced(manifest.version, run_id, again=mark is not None)):
        raise NothingToPublish(f"version {manifest.version} was announced meanwhile, by run {first}: nothing new "
                               "to train on")
    return manifest.asset_extra()


def _same_tables(store: datasets.Output, manifest: datasets.Manifest) -> tuple[str, str] | None:
    """(version, the run that announced it) of an announced version of the same interval whose tables
    are byte for byte ``manifest``'s, if any."""
    tables = {name: table["sha256"] for name, table in manifest.files.items()}
    for other in store.announced_alike(manifest.version):
        try:
            found = store.resolve(other)
        except datasets.DatasetNotFound:  # removed since
            continue
        if {name: table["sha256"] for name, table in found.files.items()} == tables:
            return other, (store.announced_by(other) or ("?",))[0]
    return None


def prune_datasets(s: Settings, older_than: timedelta | None = None, superseded_after: timedelta | None = None,
                   dry_run: bool = False) -> Pruned:
    """Remove the dataset versions the store keeps no longer (:func:`ctpipe.retention.prune`): by
    ``older_than`` and ``superseded_after`` where either is given (the other then not applied), else
    by ``dataset.keep_for`` and ``dataset.keep_superseded_for``; NothingToPublish when none says how long."""
    from ctpipe.retention import prune

    ages = {"older_than": older_than, "superseded_after": superseded_after}
    if older_than is None and superseded_after is None:
        ages = {"dataset.keep_for": s.dataset.keep_for, "dataset.keep_superseded_for": s.dataset.keep_superseded_for}
    if not any(ages.values()):
        raise NothingToPublish("no retention is set (dataset.keep_for, dataset.keep_superseded_for): every version "
                               "is kept")
    now = datetime.now(timezone.utc)
    for name, age in ages.items():
        try:
            now - (age or timedelta(0))
        except OverflowError:
            raise PipelineError(f"{name}={age} reaches back before the year 1") from None
    done = prune(datasets.Output(s.datasets_uri), *ages.values(), now=now, dry_run=dry_run)
    for line in done.lines():
        log.info("%s", line)
    return done


# ---------------------------------------------------------------- train


def run_dir_for(s: Settings, dag_run_id: str) -> Path:
    """One directory per DAG run; every try of the run shares it (so a retry resumes)."""
    return s.runs_dir / re.sub(r"[^A-Za-z0-9_.-]", "_", dag_run_id)


def _base_checkpoint(s: Settings, value: str) -> tuple[str, str]:
    from ctpipe.registry import Registry

    registry = Registry(s)
    if not value:
        champ = registry.champion()
        if champ is None:
            raise PipelineError(f"base_checkpoint is empty and model {s.model_name!r} has no champion yet")
        return str(champ.path), champ.version
    if value.isdigit():
        try:
            v = registry.get(value)
        except LookupError as e:
            raise PipelineError(f"base_checkpoint={value!r}: {e}") from None
        return str(v.path), v.version
    if not (Path(value) / "config.json").exists():
        raise PipelineError(f"base_checkpoint={value!r} is neither a registry version nor a model directory")
    return value, "path"


def _to_train_on(s: Settings, params: dict[str, Any], triggered_by: list[dict] | None,
                 algorithm: str) -> list[datasets.Manifest]:
    """The versions a run trains on, the newest interval's first, which the run is named after: the
    trigger form's ``dataset_version``; else those announced by the events that started it (Airflow
    gives one run every asset event queued while the run before it went on: a backfill's hours, say),
    of each interval the one announced last (late traces reprocessed make another), with rows to
    train on, and labeled and laid out as the newest of them; else the latest. The announced
    versions left out are named in the log, each for a run of its own from the form."""
    from ctpipe.materialize import some_files

    form, named = params.get("dataset_version"), [e["version"] for e in triggered_by or [] if e.get("version")]
    if form or not named:
        wanted, left = [form or ""], []
    else:
        wanted = list(dict.fromkeys(named))
        left = [f"events naming no version: {n}"] if (n := len(triggered_by) - len(named)) else []
    store, by_interval, missing = datasets.Output(s.datasets_uri), {}, []
    for version in wanted:  # in the order announced
        try:
            manifest = store.resolve(version)
        except datasets.DatasetNotFound as e:
            missing.append((version, e))
            continue
        interval = tuple(datetime.fromisoformat(t) for t in manifest.interval)
        if (earlier := by_interval.get(interval)) is not None:
            left.append(f"{earlier.version} (of the interval of {manifest.version}, announced after it)")
        by_interval[interval] = manifest
    if not by_interval:
        version, e = missing[0]
        raise PipelineError(f"dataset_version={version!r}: {e}")
    found = [by_interval[i] for i in sorted(by_interval, key=lambda i: (i[1], i[0]), reverse=True)]
    table = table_of(algorithm)
    with_rows = [m for m in found if m.files[table]["rows"]]
    if not with_rows:
        raise PipelineError(f"dataset_version={found[0].version!r} has no {table} rows to train {algorithm} on")
    newest, chosen = with_rows[0], []
    for m in with_rows:
        if m.config.get("reward") != newest.config.get("reward"):
            left.append(f"{m.version} (labeled with another reward config than {newest.version})")
        elif m.schemas.get(table) != newest.schemas.get(table):
            left.append(f"{m.version} (its {table} table is laid out otherwise than {newest.version}'s)")
        else:
            chosen.append(m)
    left += [f"{version} ({e})" for version, e in missing]
    left += [f"{m.version} (no {table} rows)" for m in found if not m.files[table]["rows"]]
    # A backfill of a year announces thousands: the job spec names them all, the log some.
    if len(chosen) > 1:
        log.info("%d dataset versions were announced while train's run before this one went on: this run trains "
                 "on them all: %s", len(chosen),
                 ", ".join(some_files(dict.fromkeys(m.version for m in chosen), "{}", "(the job spec names them all)",
                                      "versions")))
    if left:
        log.warning("announced, not trained on: %s; give one as the trigger form's dataset_version to train on it",
                    "; ".join(some_files(dict.fromkeys(left), "{}", "left out", "versions")))
    return chosen


def _learned_before(s: Settings, chosen: list[datasets.Manifest], table: str, base_version: str) -> list[str]:
    """The records of the examples of intervals sharing time with ``chosen``'s that the base model
    learned, or a model it descends from (:meth:`datasets.Output.mark_learned`): a re-run with late
    traces holds them and the late ones, as a form's run of 03:17-04:05 holds some of the hour
    04:00-05:00's, and they are not trained on again. Examples a candidate the gate refused, or one
    rolled back, learned are no model's in the lineage, and are. NothingToPublish when ``chosen``
    holds no other row of ``table``."""
    from ctpipe.jobspec import EXAMPLE_COLUMNS, learned, training_data
    from ctpipe.registry import Registry

    marks = datasets.Output(s.datasets_uri).learned(s.model_name, table)
    of_chosen, named = [datasets.interval_part(m.version) for m in chosen], list(marks)
    intervals = {named[j] for sharing in datasets.sharing_time(of_chosen, named) for j in sharing}
    models = {model for i in intervals for _, model, _ in marks[i] if model.isdigit()}
    lineage = Registry(s).lineage(base_version, since=min(map(int, models))) if models else {}
    # Its version number and its run: a registry begun again numbers from 1 again. A record written
    # before records named the run has its number alone.
    found = [(uri, model) for i in sorted(intervals) for uri, model, run in marks[i]
             if model in lineage and run in ("", lineage[model])]
    if not found:
        return []
    keys = learned([uri for uri, _ in found])
    marked = [m for m, sharing in zip(chosen, datasets.sharing_time(of_chosen, list(keys))) if sharing]
    rows = sum(m.files[table]["rows"] for m in marked)
    left = training_data(marked, table, EXAMPLE_COLUMNS[table], keys, repeats=True).num_rows
    models = ", ".join(f"v{model}" for model in sorted({m for _, m in found}, key=int))
    if not left and len(marked) == len(chosen):
        raise NothingToPublish(f"every {table} row of {', '.join(m.version for m in chosen)} is an example model "
                               f"{models} learned (base v{base_version} or a model it descends from): nothing new to "
                               "train on")
    log.info("%d of the %d %s rows of %d versions are left out: examples model %s learned (base v%s or a model it "
             "descends from)", rows - left, rows, table, len(marked), models, base_version)
    return [uri for uri, _ in found]


# How long after its training a candidate's gate may come: eval_and_deploy runs one at a time.
_GATE_WAIT = timedelta(days=1)


def longest_training(s: Settings) -> timedelta:
    """The longest a train DAG run's job can go on: its timeout for each submission (a resubmission
    after a preemption has a fresh one), the backoffs between, and again for the train task's retry
    (dags/train.py: one)."""
    t = s.train
    backoffs = sum(backoff_seconds(n, t.preemption_backoff_s) for n in range(1, t.max_preemptions + 1))
    return 2 * timedelta(seconds=(1 + t.max_preemptions) * t.timeout_s + backoffs)


def _versions_param(versions: list[str]) -> str:
    """Dataset versions as one MLflow param: all of them, or, past MLflow's 6,000 characters (a
    long backfill's), how many."""
    joined = ",".join(versions)
    return joined if len(joined) <= 6000 else f"{len(versions)} versions: see the job spec and the checkpoint's event"


def prepare_training(s: Settings, params: dict[str, Any], triggered_by: list[dict] | None, dag_run_id: str) -> dict:
    """Resolve the run's inputs and write its job spec; returns what the Ray job needs. ``triggered_by``:
    the extras of the asset events that started the run, in the order announced (none for a manual run)."""
    algorithm = params.get("algorithm")
    if algorithm not in ALGORITHMS:
        raise PipelineError(f"algorithm={algorithm!r} is not supported; choose one of {', '.join(ALGORITHMS)}")
    manifest, *others = _to_train_on(s, params, triggered_by, algorithm)
    more = [DatasetRef(uri=m.uri, version=m.version) for m in reversed(others)]  # the earliest interval's first
    base, base_version = _base_checkpoint(s, params.get("base_checkpoint") or "")
    # A version the form names is trained on whole; one announced leaves out what the base learned before.
    left_out = [] if params.get("dataset_version") else _learned_before(s, [manifest, *others], table_of(algorithm),
                                                                        base_version)
    run_dir = run_dir_for(s, dag_run_id)
    until = datetime.now(timezone.utc) + longest_training(s) + _GATE_WAIT
    # In the store they were found in, as the records of what was learned (and so the gate's).
    datasets.Output(s.datasets_uri).hold(run_dir.name, [m.version for m in (manifest, *others)], until)
    try:
        spec = JobSpec(
            algorithm=algorithm,
            base_checkpoint=base,
            base_version=base_version,
            dataset_uri=manifest.uri,
            dataset_version=manifest.version,
            more_datasets=more,
            left_out=left_out,
            run_dir=str(run_dir),
            max_steps=params["max_steps"],
            learning_rate=params.get("learning_rate") or s.train.rate_for(algorithm),
            seed=params["seed"],
            train=s.train,
        )
    except ValidationError as e:
        err = e.errors()[0]
        raise PipelineError(f"{'.'.join(map(str, err['loc']))}={err.get('input')!r}: {err['msg']}") from None
    path = spec.write()
    from ctpipe.registry import Registry

    Registry(s).training_run("train", dag_run_id, {
        "algorithm": algorithm, "dataset_version": manifest.version, "base_version": base_version,
        "more_dataset_versions": _versions_param([d.version for d in more]),
        "max_steps": spec.max_steps, "learning_rate": spec.learning_rate, "seed": spec.seed,
    })
    python = s.ray_python or sys.executable
    return {
        "spec_path": str(path),
        "run_dir": str(run_dir),
        "entrypoint": " ".join(spec.command(python, s.jobs_dir)),
        "algorithm": algorithm,
        "dataset_version": manifest.version,
        "base_version": base_version,
    }


CURVE_POINTS = 200  # enough for a chart; keeps the asset event's extra small on long runs


def curve(history: list[dict]) -> dict[str, list]:
    """Step-aligned series of every numeric metric in the history, thinned to ``CURVE_POINTS``.

    >>> curve([{"step": i, "loss": 1 / i, "note": "x"} for i in range(1, 1001)])["step"][:3]
    [1, 6, 11]
    """
    stride = max(1, -(-len(history) // CURVE_POINTS))
    points = history[::stride]
    keys = [k for k in (history[0] if history else {}) if k != "max_steps" and isinstance(history[0][k], (int, float))]
    return {k: [p.get(k) for p in points] for k in keys}


def record_training(s: Settings, dag_run_id: str, spec_path: str) -> None:
    """The training history, by step, into the DAG run's MLflow run (which ``prepare_training`` opened)."""
    from ctpipe.registry import Registry

    metrics = json.loads((Path(JobSpec.read(spec_path).run_dir) / METRICS_FILE).read_text())
    registry = Registry(s)
    registry.log_history(registry.training_run("train", dag_run_id, {}), metrics.get("history") or [])


def publish_checkpoint(spec_path: str) -> dict:
    """Check the run's checkpoint is whole and loadable; the checkpoint asset's extra."""
    from transformers import AutoConfig

    spec = JobSpec.read(spec_path)
    ckpt = spec.checkpoint_dir
    if not (ckpt / "config.json").exists():
        raise PipelineError(f"run {spec.run_dir} finished without a checkpoint at {ckpt}")
    AutoConfig.from_pretrained(ckpt)  # fails loudly on a damaged directory
    metrics = json.loads((Path(spec.run_dir) / METRICS_FILE).read_text())
    return {
        "checkpoint": str(ckpt),
        "run_dir": spec.run_dir,
        "algorithm": spec.algorithm,
        "base_version": spec.base_version,
        "dataset_version": spec.dataset_version,
        "dataset_uri": spec.dataset_uri,
        "more_datasets": [d.model_dump() for d in spec.more_datasets],
        "steps": metrics["steps"],
        "epochs": metrics.get("epochs"),
        "passes": metrics.get("passes"),  # over every row: with one, register_candidate records them as learned
        "first": metrics["first"],
        "last": metrics["last"],
        "curve": curve(metrics.get("history") or []),
    }


# ---------------------------------------------------------------- eval_and_deploy


def evaluate_candidate(s: Settings, candidate: dict, run_name: str, alpha: float, min_gain: float) -> dict:
    """Score candidate and champion on the untouched test split; log everything to MLflow."""
    from ctpipe import evaluation
    from ctpipe.registry import Registry

    gate_cfg = s.gate.model_copy(update={"alpha": alpha, "min_gain": min_gain})
    ckpt = Path(candidate.get("checkpoint") or "")
    if not (ckpt / "config.json").exists():
        raise PipelineError(f"checkpoint={str(ckpt)!r} does not exist or is not a model directory")
    test = arith.splits(s.task).test
    trained_on = [(candidate.get("dataset_version"), candidate["dataset_uri"]),
                  *((d["version"], d["uri"]) for d in candidate.get("more_datasets") or [])]
    for version, uri in trained_on:
        try:
            manifest = datasets.Manifest.load(uri)
            evaluation.check_disjoint(evaluation.training_prompts(manifest), [q.prompt for q in test])
        except FileNotFoundError:
            raise PipelineError(f"dataset_version={version!r}, which the candidate trained on, is gone from {uri}: "
                                "the gate cannot check it against the test questions") from None
        except evaluation.ContaminationError as e:
            raise PipelineError(f"dataset_version={manifest.version!r}: {e}") from None
    registry = Registry(s)
    champion = registry.champion()
    if champion is None:
        raise PipelineError(f"model {s.model_name!r} has no champion to compare against")
    flags, engine, why = _answer_test(s, {"champion": champion.path, "candidate": ckpt}, test, gate_cfg.max_new_tokens)
    cmp = evaluation.compare(flags["champion"], flags["candidate"])
    decision = evaluation.gate(cmp, gate_cfg)
    log.info(
        "champion v%s %.3f %s vs candidate %.3f %s: gain %+.3f (95%% CI %+.3f..%+.3f), McNemar p=%.3g -> %s (%s)",
        champion.version, cmp.champion_accuracy, _ci(cmp.champion_ci), cmp.candidate_accuracy, _ci(cmp.candidate_ci),
        cmp.gain, *cmp.gain_ci, cmp.p_value, "PASS" if decision.passed else "FAIL", decision.reason,
    )
    run = registry.start_run(run_name, tags={"ctpipe.kind": "eval", "ctpipe.decision": "pass" if decision.passed else "fail"})
    rid = run.info.run_id
    for k, v in {
        "candidate_checkpoint": str(ckpt),
        "algorithm": candidate.get("algorithm"),
        "dataset_version": candidate.get("dataset_version"),
        "more_dataset_versions": _versions_param([d["version"] for d in candidate.get("more_datasets") or []]),
        "champion_version": champion.version,
        "base_version": candidate.get("base_version"),
        "alpha": gate_cfg.alpha,
        "min_gain": gate_cfg.min_gain,
        "test_questions": cmp.n,
        "generation_engine": engine,
        "generation_engine_reason": why[:500],
    }.items():
        registry.client.log_param(rid, k, v)
    for k in ("champion_accuracy", "candidate_accuracy", "gain", "p_value"):
        registry.client.log_metric(rid, k, getattr(cmp, k))
    registry.client.set_tag(rid, "ctpipe.reason", decision.reason)
    registry.client.set_terminated(rid)
    return {
        "passed": decision.passed,
        "reason": decision.reason,
        "comparison": cmp.as_dict(),
        "champion_version": champion.version,
        "mlflow_run_id": rid,
        "candidate": candidate,
        "generation_engine": engine,
    }


def _eval_engine(s: Settings) -> tuple[str, str | None, str]:
    """(engine, vLLM python or None, why) for answering the test split."""
    from ctpipe.canary import servers

    if s.gate.engine == "transformers":
        return "transformers", None, "gate.engine=transformers"
    if s.gate.engine == "vllm":
        try:
            return "vllm", str(servers.ensure_vllm_env(s.home, s.serving)), "gate.engine=vllm"
        except servers.ServingError as e:
            return "transformers", None, f"fallback: {e}"
    import torch

    if not torch.cuda.is_available():
        return "transformers", None, "auto: no GPU, where vLLM's start-up per model outweighs its speed on this model"
    python = servers.built_vllm_env(s.home, s.serving)
    if python is None:
        return "transformers", None, f"auto: no vLLM environment at {servers.vllm_python(s.home, s.serving).parents[1]}"
    return "vllm", str(python), "auto: GPU and vLLM environment present"


def _answer_test(s: Settings, checkpoints: dict[str, Path], test, max_new_tokens: int) -> tuple[dict, str, str]:
    """Correctness flags per checkpoint on ``test``; both checkpoints always answer with the same engine."""
    from ctpipe import generation

    engine, python, why = _eval_engine(s)
    prompts = [q.prompt for q in test]
    if engine == "vllm":
        try:
            flags = {
                name: [q.check(c) for c, q in zip(
                    generation.generate_vllm(python, s.jobs_dir, path, prompts, max_new_tokens=max_new_tokens), test)]
                for name, path in checkpoints.items()
            }
            log.info("test answers generated with vLLM (%s)", why)
            return flags, engine, why
        except RuntimeError as e:
            engine, why = "transformers", f"fallback: {e}"
    log.info("test answers generated with transformers (%s)", why)
    flags = {}
    for name, path in checkpoints.items():
        model, tok = generation.load(path)
        flags[name] = generation.correct_flags(model, tok, test, max_new_tokens)
    return flags, engine, why


def release_datasets(s: Settings, candidate: dict) -> None:
    """End the hold of the versions the candidate's training read (see prepare_training): judged, and
    what it learned recorded where it was registered, none of them is read again."""
    if candidate.get("run_dir"):
        datasets.Output(s.datasets_uri).release(Path(candidate["run_dir"]).name)


def evaluation_record(result: dict, registered_version: str | None, rollout: dict | None) -> dict:
    """The evaluation asset's extra: what was compared, what the gate and the deployer decided."""
    cand = result["candidate"]
    return {
        "train_run_id": cand.get("train_run_id"),
        "dataset_version": cand.get("dataset_version"),
        "algorithm": cand.get("algorithm"),
        "passed": result["passed"],
        "reason": result["reason"],
        "comparison": result["comparison"],
        "champion_version": result["champion_version"],
        "registered_version": registered_version,
        "rollout": rollout,
        "mlflow_run_id": result["mlflow_run_id"],
    }


def _ci(ci: tuple[float, float]) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _readable(m: datasets.Manifest, table: str, by: str) -> bool:
    from ctpipe.jobspec import EXAMPLE_COLUMNS

    try:
        m.read(table, EXAMPLE_COLUMNS[table])
        return True
    except FileNotFoundError as e:
        log.warning("dataset version %s lost a part (%s): its examples are not recorded as learned by v%s",
                    m.version, e, by)
        return False


def register_candidate(s: Settings, result: dict) -> str:
    """Register a passing candidate as a new model version (not yet serving)."""
    from ctpipe.jobspec import EXAMPLE_COLUMNS, example_keys, learned, training_parts
    from ctpipe.registry import Registry

    cand = result["candidate"]
    version = Registry(s).register(
        result["mlflow_run_id"],
        Path(cand["checkpoint"]),
        tags={
            "origin": cand.get("algorithm", ""),
            "dataset_version": cand.get("dataset_version", ""),
            "more_dataset_versions": _versions_param([d["version"] for d in cand.get("more_datasets") or []]),
            "parent_version": str(result["champion_version"]),
            "base_version": str(cand.get("base_version") or ""),  # its lineage (Registry.lineage)
            "test_accuracy": f"{result['comparison']['candidate_accuracy']:.4f}",
        },
    )
    # What it learned, for the runs from it (see _learned_before); a retried task writes the same. A run
    # that made no pass over every row (it stopped within one; GRPO's sampler dropped a short batch) saw
    # some of them, which the trainer's shuffle does not say: none is recorded, and a re-run of their
    # intervals trains on all of them again.
    if not cand.get("passes"):
        log.warning("v%s made no pass over every row it trained on (%s epochs): none is recorded as learned (a later "
                    "version of an interval sharing time with theirs is trained on whole)", version, cand.get("epochs"))
        return version
    # In the store the versions were found in, where _learned_before looks; in the job's order, each with
    # the rows it gave the run (training_parts). A row left out as learned of another interval is that
    # interval's: recorded again as this one's, it would leave out the same question asked again in an
    # interval sharing time with this one and not with that one.
    table, store, found = table_of(cand["algorithm"]), datasets.Output(s.datasets_uri), []
    for v in [*(d["version"] for d in cand.get("more_datasets") or []), cand.get("dataset_version")]:
        try:
            found += [store.resolve(v)] if v else []
        except datasets.DatasetNotFound:
            log.warning("dataset version %s is gone from %s: its examples are not recorded as learned by v%s, and a "
                        "later version of an interval sharing time with its is trained on whole", v, store.uri, version)
    spec = Path(cand.get("run_dir") or ".") / SPEC_FILE
    if cand.get("run_dir") and spec.is_file():
        left_out = JobSpec.read(spec).left_out
    else:
        left_out = []
        log.warning("the job spec of v%s's run is gone (%s): each version's rows are recorded as learned whole, "
                    "those left out as learned of another interval too", version, spec)
    keys = learned(left_out)
    try:
        parts = training_parts(found, table, EXAMPLE_COLUMNS[table], keys)
    except FileNotFoundError:  # a part removed by hand since the job read it: that version is left out, said
        found = [m for m in found if _readable(m, table, version)]
        parts = training_parts(found, table, EXAMPLE_COLUMNS[table], keys)
    for m, rows in zip(found, parts):
        store.mark_learned(s.model_name, table, m.version, version, result["mlflow_run_id"], example_keys(rows, table))
    return version
