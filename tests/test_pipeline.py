"""User-caused failures of the DAG tasks end with a message naming the field and value."""

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ctpipe.errors import PipelineError
from ctpipe.pipeline import longest_training, prepare_training
from tests.conftest import trace, write_traces

PARAMS = {"algorithm": "grpo", "base_checkpoint": "", "dataset_version": "", "max_steps": 5, "learning_rate": 1e-3, "seed": 0}


def test_unknown_algorithm_is_named(settings):
    with pytest.raises(PipelineError, match="algorithm=.ppo. is not supported; choose one of grpo, dpo, sft"):
        prepare_training(settings, PARAMS | {"algorithm": "ppo"}, None, "manual__1")


def test_missing_dataset_version_is_named(settings):
    with pytest.raises(PipelineError, match="dataset_version='v-missing'"):
        prepare_training(settings, PARAMS | {"dataset_version": "v-missing"}, None, "manual__1")


def test_no_dataset_at_all(settings):
    with pytest.raises(PipelineError, match="no dataset has been published"):
        prepare_training(settings, PARAMS, None, "manual__1")


def test_dataset_without_pairs_cannot_train_dpo(settings):
    from ctpipe.pipeline import materialize_interval
    from tests.conftest import T0
    from datetime import timedelta

    write_traces(settings.traces_dir, [trace(1)])
    extra = materialize_interval(settings, T0, T0 + timedelta(hours=1))
    with pytest.raises(PipelineError, match="has no dpo rows"):
        prepare_training(settings, PARAMS | {"algorithm": "dpo"}, [extra], "manual__1")


@pytest.mark.parametrize("params, start, end, said", [
    ({}, None, None, "the run has no data interval (it was triggered without a logical date): give start and end"),
    ({}, "2026-11-22T10:00:00+00:00", "2026-11-22T10:00:00+00:00",
     "data_interval_end=2026-11-22T10:00:00+00:00 is not after data_interval_start=2026-11-22T10:00:00+00:00: a run "
     "of a manual-only trace_to_dataset"),
    ({"start": "2026-11-22T10:00:00+00:00", "end": None}, None, None, "end is empty: give both start and end, or neither"),
    ({"start": "yesterday", "end": "2026-11-22T10:00:00+00:00"}, None, None, "start='yesterday' is not an ISO 8601 time"),
    ({"start": "2026-11-22T10:00:00", "end": "2026-11-22T11:00:00Z"}, None, None, "start='2026-11-22T10:00:00' has no timezone"),
    ({"start": "2026-11-22T11:00:00Z", "end": "2026-11-22T10:00:00Z"}, None, None,
     "end=2026-11-22T10:00:00+00:00 is not after start=2026-11-22T11:00:00+00:00"),
    ({"start": "2026-11-22T10:00:00Z", "end": "2026-11-22T11:00:00Z", "source": "s3://b/x", "format": "xml"}, None, None,
     "format='xml', source='s3://b/x': trace_to_dataset's run conf takes start and end alone"),
])
def test_an_interval_to_build_that_is_none_is_named(params, start, end, said):
    from datetime import datetime

    from ctpipe.pipeline import interval_to_build

    with pytest.raises(PipelineError) as e:
        interval_to_build(params, start and datetime.fromisoformat(start), end and datetime.fromisoformat(end))
    assert str(e.value).startswith(said)


def test_a_scheduled_run_s_pendulum_interval_is_built_after_the_hour_before(settings):
    """Airflow gives a scheduled run's data interval as pendulum's DateTime, whose arithmetic loses the
    zone: the check of the hours before (their late files) compared a naive time with an aware one,
    and every scheduled run after a built hour failed with a TypeError."""
    import pendulum

    from ctpipe.pipeline import interval_to_build, materialize_interval
    from tests.conftest import T0

    hours = [pendulum.instance(T0) + timedelta(hours=h) for h in range(3)]
    for h in range(2):
        write_traces(settings.traces_dir, [trace(h, at=hours[h] + timedelta(seconds=1))], at=hours[h])
        start, end = interval_to_build({}, hours[h], hours[h + 1])
        assert type(start) is type(end) is datetime and (start, end) == (hours[h], hours[h + 1])
        assert materialize_interval(settings, start, end, f"scheduled__{h}")["traces_in"] == 1
    # Given pendulum's times itself, as a caller other than the DAG may.
    write_traces(settings.traces_dir, [trace(2, at=hours[2] + timedelta(seconds=1))], at=hours[2])
    assert materialize_interval(settings, hours[2], hours[2] + timedelta(hours=1), "scheduled__2")["traces_in"] == 1


def test_the_form_s_interval_comes_before_the_run_s():
    from datetime import datetime, timezone

    from ctpipe.errors import PipelineError
    from ctpipe.pipeline import interval_to_build

    run = (datetime(2026, 11, 22, 10, tzinfo=timezone.utc), datetime(2026, 11, 22, 11, tzinfo=timezone.utc))
    assert interval_to_build({"start": None, "end": ""}, *run) == run
    assert interval_to_build({"start": "2026-11-20T00:00:00Z", "end": "2026-11-21T00:00:00+01:00"}, *run) == (
        datetime(2026, 11, 20, tzinfo=timezone.utc), datetime.fromisoformat("2026-11-21T00:00:00+01:00"))
    with pytest.raises(PipelineError, match="start='2026-11-22T10:00:00.1234567\\+00:00' is more precise than a micro"):
        interval_to_build({"start": "2026-11-22T10:00:00.1234567+00:00", "end": "2026-11-22T11:00:00+00:00"}, *run)
    # RFC 3339's lower case "t" and "z", which the form's date-time check takes
    assert interval_to_build({"start": "2026-11-20t00:00:00z", "end": "2026-11-20t01:00:00z"}, *run) == (
        datetime(2026, 11, 20, tzinfo=timezone.utc), datetime(2026, 11, 20, 1, tzinfo=timezone.utc))


def test_an_interval_that_has_not_ended_is_not_built(settings):
    """Its traces are still coming: a version of part of them, announced, would be the interval's for good."""
    from datetime import datetime, timedelta, timezone

    from ctpipe.cli import main
    from ctpipe.errors import PipelineError
    from ctpipe.pipeline import interval_to_build

    now = datetime.now(timezone.utc)
    with pytest.raises(PipelineError, match="end=.* has not come yet .*: the interval's traces are not all in"):
        interval_to_build({"start": (now - timedelta(hours=1)).isoformat(), "end": (now + timedelta(minutes=5)).isoformat()},
                          None, None)
    assert main(["materialize", "--start", now.isoformat(), "--end", (now + timedelta(hours=1)).isoformat()]) == 2


def test_a_version_a_run_announced_is_not_announced_again(settings):
    """A cleared run, or a backfill that reprocesses, finds the version again: its asset event would
    start another training on the same data. A run that published and died before announcing
    (no mark) announces it on its retry; the command line announces nothing."""
    from datetime import timedelta

    from ctpipe.errors import NothingToPublish
    from ctpipe.pipeline import materialize_interval
    from tests.conftest import T0

    write_traces(settings.traces_dir, [trace(1)])
    hour = (T0, T0 + timedelta(hours=1))
    first = materialize_interval(settings, *hour)  # as ctpipe materialize: no run, no mark
    assert materialize_interval(settings, *hour, "scheduled__1") == first
    with pytest.raises(NothingToPublish, match=f"version {first['version']} was published and announced before, by "
                                               "run scheduled__1"):
        materialize_interval(settings, *hour, "backfill__1")

    # The same run again: cleared (Airflow holds its event), or a retry of a try that died after the
    # mark, before Airflow recorded its event: announced again, or train would never hear of it.
    with pytest.raises(NothingToPublish, match="announced before, by this run \\(cleared since\\)"):
        materialize_interval(settings, *hour, "scheduled__1", lambda version, by, at: version == first["version"])
    assert materialize_interval(settings, *hour, "scheduled__1", lambda version, by, at: False) == first


def test_of_two_runs_of_one_interval_at_once_one_announces(settings, monkeypatch):
    """A backfill's run and a manual one: both looked, found no mark, and both announced; the mark is
    now written only where none is, and the other run is skipped naming the first."""
    from datetime import timedelta

    from ctpipe import datasets
    from ctpipe.errors import NothingToPublish
    from ctpipe.pipeline import materialize_interval
    from tests.conftest import T0

    write_traces(settings.traces_dir, [trace(1)])
    hour = (T0, T0 + timedelta(hours=1))
    mark = datasets.Output.mark_announced

    def after_the_other(self, version, run_id, again=False):  # the backfill's run marks it first
        mark(self, version, "backfill__1")
        return mark(self, version, run_id, again)

    monkeypatch.setattr(datasets.Output, "mark_announced", after_the_other)
    with pytest.raises(NothingToPublish, match=r"version \S+ was announced meanwhile, by run backfill__1"):
        materialize_interval(settings, *hour, "manual__1")
    version = next(p.name for p in (settings.datasets_dir / "_announced").iterdir())
    assert datasets.Output(settings.datasets_uri).announced_by(version)[0] == "backfill__1"
    assert not [p for p in (settings.datasets_dir / "_announced").iterdir() if p.name.startswith(".")]


def test_a_mark_of_another_run_that_airflow_holds_no_event_of_is_announced_once_it_is_old(settings, monkeypatch):
    """A run marked the version, then died before Airflow recorded its event: a later run (a backfill,
    a manual one) announces it, once the run that marked it can no longer be on its way to Airflow."""
    from datetime import timedelta

    from ctpipe import pipeline
    from ctpipe.errors import NothingToPublish
    from ctpipe.pipeline import materialize_interval
    from tests.conftest import T0

    write_traces(settings.traces_dir, [trace(1)])
    hour = (T0, T0 + timedelta(hours=1))
    first = materialize_interval(settings, *hour, "manual__killed")
    asked = []

    def no_event(version, by, at):
        asked.append((version, by))
        return False

    # The mark is fresh: its run may be on its way to Airflow, or was marked failed as it finished.
    with pytest.raises(NothingToPublish, match=r"announced before, by run manual__killed, at \d\d:\d\d:\d\d UTC, whose "
                       r"asset event Airflow does not hold yet: if that run failed, a run of this interval from "
                       r"\d\d:\d\d:\d\d UTC on announces it"):
        materialize_interval(settings, *hour, "backfill__1", no_event)
    with pytest.raises(NothingToPublish, match="announced before, by run manual__killed: nothing new to train on"):
        materialize_interval(settings, *hour, "backfill__1", lambda version, by, at: by == "manual__killed")
    monkeypatch.setattr(pipeline, "_EVENT_RECORDED", timedelta(0))
    with pytest.raises(NothingToPublish, match="announced before, by run manual__killed: nothing new to train on"):
        materialize_interval(settings, *hour, "backfill__1", lambda version, by, at: by == "manual__killed")
    assert materialize_interval(settings, *hour, "backfill__1", no_event) == first
    assert asked == [(first["version"], "manual__killed")] * 2
    with pytest.raises(NothingToPublish, match="announced before, by this run \\(cleared since\\)"):
        materialize_interval(settings, *hour, "backfill__1", lambda version, by, at: by == "backfill__1")


def test_a_new_code_version_that_changes_no_table_announces_nothing_new(settings, monkeypatch):
    """Upgraded, a run builds the interval again as another version (its name holds the code's
    version): its event would start another training on the same bytes."""
    from datetime import timedelta

    from ctpipe import datasets
    from ctpipe import materialize as mat
    from ctpipe.errors import NothingToPublish
    from ctpipe.pipeline import materialize_interval
    from tests.conftest import T0

    write_traces(settings.traces_dir, [trace(1)])
    hour = (T0, T0 + timedelta(hours=1))
    first = materialize_interval(settings, *hour, "scheduled__1")
    for module in (mat, datasets):
        monkeypatch.setattr(module, "CODE_VERSION", "upgraded")
    with pytest.raises(NothingToPublish, match=f"holds the same tables as version {first['version']}, announced by "
                                               "run scheduled__1"):
        materialize_interval(settings, *hour, "backfill__1")
    write_traces(settings.traces_dir, [trace(2)])  # a late trace: other tables
    assert materialize_interval(settings, *hour, "backfill__2")["version"] != first["version"]


def test_a_version_with_no_rows_of_trains_algorithm_is_not_announced(settings):
    """Rows, but not one DPO pair (one answer to each prompt): train, on its event, failed in prepare."""
    from datetime import timedelta

    from ctpipe.errors import NothingToPublish
    from ctpipe.pipeline import materialize_interval
    from tests.conftest import T0

    write_traces(settings.traces_dir, [trace(1)])
    dpo = settings.model_copy(update={"train": settings.train.model_copy(update={"algorithm": "dpo"})})
    with pytest.raises(NothingToPublish, match=r"holds 1 rows but no dpo rows \(train.algorithm='dpo': 1 GRPO prompts, "
                                               r"0 DPO pairs\): published, not announced"):
        materialize_interval(dpo, T0, T0 + timedelta(hours=1), "scheduled__1")
    assert materialize_interval(settings, T0, T0 + timedelta(hours=1), "scheduled__2")["version"]  # grpo: its prompt


def test_a_version_of_its_quarantine_alone_is_not_announced_nor_the_latest(settings):
    """An hour of bad lines alone: its version is published (the quarantine is kept), but its event
    would start a training that can only fail, and readers of the latest would find no rows."""
    from datetime import timedelta

    from ctpipe import datasets
    from ctpipe.errors import NothingToPublish
    from ctpipe.pipeline import materialize_interval
    from tests.conftest import T0

    write_traces(settings.traces_dir, [trace(1)])
    first = materialize_interval(settings, T0, T0 + timedelta(hours=1), "scheduled__1")
    write_traces(settings.traces_dir, ["garbage line one", '{"foo": 1}'], at=T0 + timedelta(hours=1))
    with pytest.raises(NothingToPublish, match=r"holds no rows, only its quarantine \(2 items: .*published, not announced"):
        materialize_interval(settings, T0 + timedelta(hours=1), T0 + timedelta(hours=2), "scheduled__2")
    assert datasets.resolve(settings.datasets_uri, "").version == first["version"]


def test_versions_announced_while_train_ran_are_all_trained_on(settings, base_model, caplog):
    """Airflow gives one run of train every event queued while its run before went on (a backfill's
    hours): it trains on all of them that have rows, named after the newest interval's whatever order
    the events came in, and names those it leaves out and why."""
    from ctpipe.jobspec import JobSpec, load_job, training_data
    from tests.conftest import published_hour

    caplog.set_level("INFO", "ctpipe.pipeline")
    hours = []
    for h in range(4):  # the third hour holds one answer: no DPO pairs
        hours.append(published_hour(settings, h, 1 if h == 2 else 48 // (h + 1)))
    gone = {"version": "v-deleted", "interval": ["2026-11-22T09:00:00+00:00", "2026-11-22T10:00:00+00:00"]}
    events = [hours[1], gone, hours[3], hours[0], hours[2], hours[3]]  # hour 3 twice: a cleared run's event

    job = prepare_training(settings, PARAMS | {"algorithm": "dpo", "base_checkpoint": str(base_model)}, events, "r1")
    spec = JobSpec.read(job["spec_path"])
    assert job["dataset_version"] == spec.dataset_version == hours[3]["version"]
    assert [d.version for d in spec.datasets] == [hours[h]["version"] for h in (0, 1, 3)]  # the earliest first
    pairs = [hours[h]["rows"]["dpo_pairs"] for h in (0, 1, 3)]
    assert training_data(load_job(job["spec_path"])[1], spec.table).num_rows == sum(pairs) and pairs == [24, 12, 6] and hours[2]["rows"]["dpo_pairs"] == 0
    assert "3 dataset versions were announced while train's run before this one went on: this run trains on them all" \
        in caplog.text
    assert "not trained on: v-deleted (dataset version 'v-deleted' does not exist" in caplog.text
    assert f"{hours[2]['version']} (no dpo rows)" in caplog.text

    # GRPO's prompts of hour 2 count; the form's version is trained on alone
    job = prepare_training(settings, PARAMS | {"base_checkpoint": str(base_model)}, events, "r2")
    spec = JobSpec.read(job["spec_path"])
    assert [d.version for d in spec.datasets] == [hours[h]["version"] for h in range(4)]
    params = PARAMS | {"base_checkpoint": str(base_model), "dataset_version": hours[1]["version"]}
    job = prepare_training(settings, params, events, "r3")
    assert [d.version for d in JobSpec.read(job["spec_path"]).datasets] == [hours[1]["version"]]


def test_a_backfills_thousands_of_versions_are_counted_in_the_log_not_all_named(settings, caplog):
    """A year's backfill announces thousands of versions to one run of train: the log names 20 of
    those it trains on and of those it leaves out, and counts the rest (it was one line of tens of KB)."""
    from ctpipe.pipeline import _to_train_on
    from tests.conftest import published_hour

    caplog.set_level("INFO", "ctpipe.pipeline")
    hours = [published_hour(settings, h, 8) for h in range(22)]
    gone = [{"version": f"v-deleted-{i}"} for i in range(1000)]
    chosen = _to_train_on(settings, {}, [*hours, *gone], "grpo")
    assert len(chosen) == 22
    said = {r.getMessage().partition(":")[0]: r.getMessage() for r in caplog.records}
    trained, left = said["22 dataset versions were announced while train's run before this one went on"], \
        said["announced, not trained on"]
    assert trained.count("2026") == 2 * 20 and trained.endswith("and 2 more versions (the job spec names them all)")
    assert left.count("does not exist") == 20 and "; and 980 more versions left out; give one as the trigger form's" in left


def _learned(settings, version: str, model: str, base: str, table: str = "grpo") -> None:
    """Model version ``model``, trained from ``base``, registered as having learned ``version``'s examples."""
    from ctpipe import datasets
    from ctpipe.jobspec import EXAMPLE_COLUMNS, example_keys
    from ctpipe.registry import Registry

    registry = Registry(settings)
    champion = registry.champion()
    run = registry.start_run(f"eval {model}")
    assert registry.register(run.info.run_id, champion.path, tags={"base_version": base}) == model
    store = datasets.Output(settings.datasets_uri)
    rows = store.resolve(version).read(table, EXAMPLE_COLUMNS[table])
    store.mark_learned(settings.model_name, table, version, model, run.info.run_id, example_keys(rows, table))


def test_a_rerun_with_late_traces_is_trained_on_without_the_examples_its_base_learned(settings, base_model, caplog):
    """A re-run of an hour with late traces publishes its rows and the late ones: a run from the model
    that learned the first version trains on the late rows alone; a run from a model that did not (a
    candidate refused or rolled back learned them) on all of them; the form's version whole; a
    version with no other row leaves the run nothing to do."""
    from ctpipe.config import DatasetConfig
    from ctpipe.errors import NothingToPublish
    from ctpipe.jobspec import JobSpec, learned, load_job, training_data
    from ctpipe.materialize import materialize
    from ctpipe.pipeline import materialize_interval
    from ctpipe.registry import Registry
    from tests.conftest import T0, published_hour, training_traces

    caplog.set_level("INFO", "ctpipe.pipeline")
    Registry(settings).ensure_champion(base_model)  # v1
    first = published_hour(settings, 0, 16)
    _learned(settings, first["version"], "2", "1")
    _learned(settings, first["version"], "3", "2", table="dpo")  # another table: no GRPO row of it is learned
    Registry(settings).set_champion("3")
    late = [trace(900 + i, t["messages"][0]["content"], t["completion"], at=T0 + timedelta(seconds=900 + i),
                  feedback=t["feedback"]) for i, t in enumerate(training_traces()[16:24])]
    write_traces(settings.traces_dir, late, name="part-late.jsonl")
    second = materialize_interval(settings, T0, T0 + timedelta(hours=1), "manual__rerun")
    assert (first["rows"]["grpo_prompts"], second["rows"]["grpo_prompts"]) == (8, 12)
    spec_path = prepare_training(settings, PARAMS, [second], "r1")["spec_path"]  # from the champion, v3
    spec, manifests = load_job(spec_path)
    assert [Path(uri).name.rpartition(".")[0] for uri in spec.left_out] == [f"{first['version']}.v2"]
    assert training_data(manifests, "grpo", leave_out=learned(spec.left_out)).num_rows == 4
    assert "8 of the 12 grpo rows of 1 versions are left out: examples model v2 learned (base v3" in caplog.text
    # What the job reads, after each preemption too, retention keeps until the gate releases it.
    held = {p.name: json.loads(p.read_text()) for p in (Path(settings.datasets_uri) / "_in_use").iterdir()}
    assert held.keys() == {"r1"} and held["r1"]["versions"] == [second["version"]]
    assert datetime.fromisoformat(held["r1"]["until"]) - datetime.now(timezone.utc) > longest_training(settings)
    # From v1, which learned none of them (v2 refused, or rolled back): all of them.
    assert JobSpec.read(prepare_training(settings, PARAMS | {"base_checkpoint": "1"}, [second], "r2")["spec_path"]).left_out == []
    # From a model directory, whose lineage the registry does not hold: all of them.
    assert JobSpec.read(prepare_training(settings, PARAMS | {"base_checkpoint": str(base_model)}, [second],
                                         "r3")["spec_path"]).left_out == []
    # The form's version: whole.
    whole = JobSpec.read(prepare_training(settings, PARAMS | {"dataset_version": second["version"]}, [], "r4")["spec_path"])
    assert whole.left_out == []
    # Another config, the same GRPO prompts and answers as the first version: nothing new.
    (settings.traces_dir / "date=2026-11-22" / "hour=10" / "part-late.jsonl").unlink()
    third = materialize(str(settings.traces_dir), settings.datasets_uri, T0, T0 + timedelta(hours=1), task=settings.task,
                        reward=settings.reward, dataset=DatasetConfig(dpo_min_margin=0.3)).asset_extra()
    with pytest.raises(NothingToPublish, match=f"every grpo row of {third['version']} is an example model v2 learned "
                                               "\\(base v3 or a model it descends from\\): nothing new to train on"):
        prepare_training(settings, PARAMS, [third], "r5")
    assert not (Path(settings.datasets_uri) / "_in_use" / "r5").exists()


def test_examples_learned_of_one_interval_leave_out_no_row_of_another(settings, base_model, caplog):
    """Hours ask the same questions again: what a model learned of one hour's version leaves out the
    rows of a later version of that hour alone, not those of the next hour, trained on with it."""
    from ctpipe.jobspec import learned, load_job, training_data
    from ctpipe.pipeline import materialize_interval
    from ctpipe.registry import Registry
    from tests.conftest import T0, published_hour, training_traces

    caplog.set_level("INFO", "ctpipe.pipeline")
    Registry(settings).ensure_champion(base_model)
    first = published_hour(settings, 0, 16)
    _learned(settings, first["version"], "2", "1")
    Registry(settings).set_champion("2")
    late = [trace(900 + i, t["messages"][0]["content"], t["completion"], at=T0 + timedelta(seconds=900 + i),
                  feedback=t["feedback"]) for i, t in enumerate(training_traces()[16:24])]
    write_traces(settings.traces_dir, late, name="part-late.jsonl")
    again = materialize_interval(settings, T0, T0 + timedelta(hours=1), "manual__rerun")
    other = published_hour(settings, 1, 16)  # the first's questions and answers, an hour on
    spec, manifests = load_job(prepare_training(settings, PARAMS, [again, other], "r1")["spec_path"])
    assert training_data(manifests, "grpo", leave_out=learned(spec.left_out)).num_rows == 4 + 8
    assert "8 of the 12 grpo rows of 1 versions are left out" in caplog.text


def test_versions_of_intervals_sharing_time_train_their_shared_examples_once(settings, base_model, capsys):
    """A form's run of 10:00:08-11:00:04 holds traces of the hours 10:00-11:00 and 11:00-12:00: a run
    of train on the three trains each example the hours hold once, where it trained those of the
    form's version twice; the hours themselves share no time, and ask the same questions again."""
    from ctpipe.jobspec import learned, load_job, training_data
    from ctpipe.pipeline import materialize_interval
    from tests.conftest import T0, published_hour

    hours = [published_hour(settings, h, 16) for h in range(2)]
    form = materialize_interval(settings, T0 + timedelta(seconds=8), T0 + timedelta(hours=1, seconds=4), "manual__1")
    assert [v["rows"]["grpo_prompts"] for v in (*hours, form)] == [8, 8, 6]  # 4 of the first hour's, 2 of the next's
    params = PARAMS | {"base_checkpoint": str(base_model)}
    spec, manifests = load_job(prepare_training(settings, params, [hours[0], form, hours[1]], "r1")["spec_path"])
    assert [m.version for m in manifests] == [hours[0]["version"], form["version"], hours[1]["version"]]
    capsys.readouterr()
    assert training_data(manifests, "grpo", leave_out=learned(spec.left_out)).num_rows == 8 + 8
    assert "6 grpo rows are left out: a version before theirs, of an interval sharing time with theirs, gives the " \
        "same examples" in capsys.readouterr().out
    # Asked for, as the count of what was learned before is: all of them.
    assert training_data(manifests, "grpo", repeats=True).num_rows == 8 + 6 + 8
    spec, manifests = load_job(prepare_training(settings, params | {"algorithm": "dpo"}, [hours[0], form, hours[1]],
                                                "r2")["spec_path"])
    assert training_data(manifests, "dpo").num_rows == 8 + 8


def test_examples_learned_of_an_interval_leave_out_the_rows_of_one_sharing_time_with_it(settings, base_model, caplog):
    """What a model learned of the hour 10:00-11:00 leaves out the rows of a form's run of
    10:00:08-11:00:04 that are the same examples; its traces written late, new questions, are
    trained on. Retention keeps those records while a run holds the form's version."""
    from ctpipe.jobspec import learned, load_job, training_data
    from ctpipe.pipeline import materialize_interval
    from ctpipe.registry import Registry
    from tests.conftest import T0, published_hour, training_traces

    caplog.set_level("INFO", "ctpipe.pipeline")
    Registry(settings).ensure_champion(base_model)
    first = published_hour(settings, 0, 16)
    _learned(settings, first["version"], "2", "1")
    Registry(settings).set_champion("2")
    late = [trace(900 + i, t["messages"][0]["content"], t["completion"], at=T0 + timedelta(minutes=30, seconds=i),
                  feedback=t["feedback"]) for i, t in enumerate(training_traces()[16:24])]
    write_traces(settings.traces_dir, late, name="part-late.jsonl")
    form = materialize_interval(settings, T0 + timedelta(seconds=8), T0 + timedelta(hours=1, seconds=4), "manual__1")
    assert form["rows"]["grpo_prompts"] == 4 + 4
    spec, manifests = load_job(prepare_training(settings, PARAMS, [form], "r1")["spec_path"])
    assert [Path(uri).name.rpartition(".")[0] for uri in spec.left_out] == [f"{first['version']}.v2"]
    assert training_data(manifests, "grpo", leave_out=learned(spec.left_out)).num_rows == 4
    assert "4 of the 8 grpo rows of 1 versions are left out: examples model v2 learned" in caplog.text


def test_a_record_holds_the_examples_its_version_gave_the_run_not_those_learned_of_another_interval(
    settings, base_model
):
    """v2 learned the hour 10:00-11:00. A form's run of 10:59-11:00:04 holds a question asked late in
    that hour, new, and two asked again at 11:00, which v2 learned of 10:00: v3, trained on it from v2,
    learned the new one alone, and a run from v3 on the hour 11:00-12:00, which shares time with the
    form's and not with 10:00's, trains on those two again."""
    from ctpipe.jobspec import learned, load_job, training_data
    from ctpipe.pipeline import materialize_interval, register_candidate
    from ctpipe.registry import Registry
    from tests.conftest import T0, published_hour, training_traces

    registry = Registry(settings)
    registry.ensure_champion(base_model)
    first = published_hour(settings, 0, 16)
    _learned(settings, first["version"], "2", "1")
    registry.set_champion("2")
    late = [trace(900 + i, t["messages"][0]["content"], t["completion"], at=T0 + timedelta(minutes=59, seconds=30 + i),
                  feedback=t["feedback"]) for i, t in enumerate(training_traces()[16:18])]
    write_traces(settings.traces_dir, late, name="part-late.jsonl")
    next_hour = published_hour(settings, 1, 16)
    form = materialize_interval(settings, T0 + timedelta(minutes=59), T0 + timedelta(hours=1, seconds=4), "manual__1")
    assert form["rows"]["grpo_prompts"] == 1 + 2
    job = prepare_training(settings, PARAMS, [form], "r1")
    spec, manifests = load_job(job["spec_path"])
    assert training_data(manifests, "grpo", leave_out=learned(spec.left_out)).num_rows == 1
    run = registry.start_run("eval 3")
    candidate = {"checkpoint": str(base_model), "algorithm": "grpo", "base_version": "2", "dataset_uri": form["uri"],
                 "dataset_version": form["version"], "more_datasets": [], "run_dir": job["run_dir"], "epochs": 1.0,
                 "passes": 1}
    assert register_candidate(settings, {"mlflow_run_id": run.info.run_id, "candidate": candidate,
                                         "champion_version": "2", "comparison": {"candidate_accuracy": 0.5}}) == "3"
    registry.set_champion("3")
    spec, manifests = load_job(prepare_training(settings, PARAMS, [next_hour], "r2")["spec_path"])
    assert [Path(uri).name.rpartition(".")[0] for uri in spec.left_out] == [f"{form['version']}.v3"]
    assert training_data(manifests, "grpo", leave_out=learned(spec.left_out)).num_rows == 8


def test_a_registered_candidate_records_the_examples_it_learned_and_its_lineage(settings, base_model):
    import shutil

    from ctpipe import datasets
    from ctpipe.jobspec import EXAMPLE_COLUMNS, example_keys
    from ctpipe.pipeline import register_candidate
    from ctpipe.registry import Registry
    from tests.conftest import published_hour

    registry = Registry(settings)
    registry.ensure_champion(base_model)
    hours = [published_hour(settings, h, 8) for h in range(3)]
    shutil.rmtree(hours[0]["uri"])  # pruned meanwhile: said, and the others recorded
    for part in Path(hours[2]["uri"]).glob("grpo/*.parquet"):  # a part removed by hand: that version alone left out
        part.unlink()
    candidate = {"checkpoint": str(base_model), "algorithm": "grpo", "base_version": "1", "dataset_uri": hours[1]["uri"],
                 "dataset_version": hours[1]["version"],
                 "more_datasets": [{"uri": hours[h]["uri"], "version": hours[h]["version"]} for h in (0, 2)]}
    store = datasets.Output(settings.datasets_uri)
    for passes, model in ((0, "2"), (None, "3")):  # no pass over every row, or not said: which rows it saw is unknown
        run = registry.start_run(f"eval {model}")
        result = {"mlflow_run_id": run.info.run_id, "candidate": candidate | {"epochs": 1.5, "passes": passes},
                  "champion_version": "1", "comparison": {"candidate_accuracy": 0.5}}
        assert register_candidate(settings, result) == model and store.learned(settings.model_name, "grpo") == {}
    run = registry.start_run("eval r1")
    result = {"mlflow_run_id": run.info.run_id, "candidate": candidate | {"epochs": 2.0, "passes": 2},
              "champion_version": "1", "comparison": {"candidate_accuracy": 0.5}}
    assert register_candidate(settings, result) == "4" == register_candidate(settings, result)  # a retry: the same
    assert registry.lineage("4") == {"1": registry.client.get_model_version(settings.model_name, "1").run_id,
                                     "4": run.info.run_id}
    assert registry.lineage("7") == {} == registry.lineage("path")
    assert registry.lineage("4", since=2).keys() == {"4"}  # what is older than the models asked about is not walked
    marks = store.learned(settings.model_name, "grpo")
    assert list(marks) == [datasets.interval_part(hours[1]["version"])] and store.learned(settings.model_name, "dpo") == {}
    assert store.learned("another model", "grpo") == {}  # its v4 learned none of them
    ((uri, model, run_id),) = marks[datasets.interval_part(hours[1]["version"])]
    keys, version = datasets.read_keys(uri)
    assert (model, run_id, version) == ("4", run.info.run_id, hours[1]["version"])
    rows = store.resolve(version).read("grpo", EXAMPLE_COLUMNS["grpo"])
    assert sorted(keys.tolist()) == sorted(example_keys(rows, "grpo").tolist()) and len(set(keys.tolist())) == hours[1]["rows"]["grpo_prompts"] == 4


def test_a_registry_begun_again_leaves_out_nothing_its_own_versions_did_not_learn(settings, base_model, tmp_path):
    """A registry whose database was lost numbers its versions from 1 again: its v2 is not the v2 that
    learned the first version's examples, and leaves none out. A record written before records named
    their run is taken by its number, as it was."""
    from ctpipe.jobspec import JobSpec
    from ctpipe.pipeline import materialize_interval
    from ctpipe.registry import Registry
    from tests.conftest import T0, published_hour, training_traces

    Registry(settings).ensure_champion(base_model)
    first = published_hour(settings, 0, 16)
    _learned(settings, first["version"], "2", "1")
    # Its own registry under another home (a SQLite store and its artifacts), the same traces and store.
    again = settings.model_copy(update={"home": tmp_path / "again", "dataset_store": settings.datasets_uri,
                                        "trace_source": str(settings.traces_dir)})
    registry = Registry(again)
    registry.ensure_champion(base_model)
    champion = registry.champion()
    assert registry.register(registry.start_run("eval").info.run_id, champion.path, tags={"base_version": "1"}) == "2"
    registry.set_champion("2")
    late = [trace(900 + i, t["messages"][0]["content"], t["completion"], at=T0 + timedelta(seconds=900 + i),
                  feedback=t["feedback"]) for i, t in enumerate(training_traces()[16:24])]
    write_traces(settings.traces_dir, late, name="part-late.jsonl")
    second = materialize_interval(again, T0, T0 + timedelta(hours=1), "manual__rerun")
    assert JobSpec.read(prepare_training(again, PARAMS, [second], "r1")["spec_path"]).left_out == []
    (record,) = (Path(settings.datasets_uri) / "_learned" / settings.model_name / "grpo").iterdir()
    record.rename(record.with_name(f"{first['version']}.v2"))
    assert [Path(uri).name for uri in JobSpec.read(prepare_training(again, PARAMS, [second], "r2")["spec_path"]).left_out] \
        == [f"{first['version']}.v2"]


def test_a_registry_that_fails_fails_the_lineage_rather_than_cutting_it_short(settings, base_model, monkeypatch):
    from mlflow.exceptions import MlflowException

    from ctpipe.registry import Registry

    registry = Registry(settings)
    registry.ensure_champion(base_model)

    def down(*args, **kwargs):
        raise MlflowException("API request failed with error code 503", error_code="TEMPORARILY_UNAVAILABLE")

    monkeypatch.setattr(type(registry.client), "get_model_version", down)
    with pytest.raises(MlflowException, match="503"):
        registry.lineage("1")


def test_a_spec_written_before_left_out_is_read_without_what_it_named_trained_before(settings, base_model):
    from ctpipe.jobspec import JobSpec
    from tests.conftest import job_spec, published_hour

    spec = job_spec(settings, base_model, published_hour(settings, 0, 8), "grpo", "r1", steps=1)
    path = Path(spec.run_dir) / "job.json"
    old = json.loads(path.read_text()) | {"trained_before": [{"uri": "/elsewhere/v", "version": "v"}]}
    old.pop("left_out")
    path.write_text(json.dumps(old))
    assert JobSpec.read(str(path)) == spec


def test_only_rows_that_fill_whole_batches_pass_whole():
    from ctpipe.jobspec import whole_passes

    assert [whole_passes(2.0, 32, 16), whole_passes(2.9, 32, 16), whole_passes(0.5, 32, 16)] == [2, 2, 0]
    assert [whole_passes(3.0, 33, 16), whole_passes(None, 32, 16), whole_passes(1.0, 0, 1), whole_passes(1.0, 7, 1)] == [0, 0, 0, 1]


def test_example_keys_tell_examples_apart_by_every_column_and_message(settings):
    import pyarrow as pa

    from ctpipe.jobspec import example_keys

    def chat(*texts: str) -> list[dict]:
        return [{"role": r, "content": t} for r, t in zip(["system", "user", "assistant"], texts)]

    x, y = chat("", "", "x")[2:], chat("", "", "y")[2:]
    rows = pa.table({"prompt": [chat("a", "b"), chat("a", "b"), chat("ab"), chat("b", "a"), chat("a", "b"), chat("a", "b")],
                     "chosen": [x, x, x, x, y, x], "rejected": [y, y, y, y, x, None]})
    keys = example_keys(rows, "dpo").tolist()
    assert keys[0] == keys[1] and len(set(keys)) == 5  # a pair swapped is another example
    assert example_keys(rows.slice(3), "dpo").tolist() == keys[3:]  # a slice: its own rows
    answers = pa.table({"prompt": [chat("a"), chat("a"), chat("a")], "answer": ["1", "1", "2"]})
    assert len(set(example_keys(answers, "grpo").tolist())) == 2


def test_versions_labeled_otherwise_are_not_trained_on_together(settings, base_model, caplog):
    """A version labeled with another reward config means other things by its rewards: it is left out,
    named, and the newest interval's config wins."""
    from ctpipe.jobspec import JobSpec
    from tests.conftest import published_hour

    first = published_hour(settings, 0, 48)
    exact = settings.model_copy(update={"reward": settings.reward.model_copy(update={"verifier": "exact"}),
                                        "train": settings.train.model_copy(update={"algorithm": "dpo"})})
    second = published_hour(exact, 1, 48)  # no reference, no GRPO row: announced for DPO
    params = PARAMS | {"algorithm": "dpo", "base_checkpoint": str(base_model)}
    job = prepare_training(settings, params, [first, second], "r1")
    assert [d.version for d in JobSpec.read(job["spec_path"]).datasets] == [second["version"]]
    assert f"{first['version']} (labeled with another reward config than {second['version']})" in caplog.text


def test_bad_base_checkpoint_is_named(settings):
    from ctpipe.pipeline import materialize_interval
    from tests.conftest import T0
    from datetime import timedelta

    write_traces(settings.traces_dir, [trace(1)])
    extra = materialize_interval(settings, T0, T0 + timedelta(hours=1))
    with pytest.raises(PipelineError, match="base_checkpoint='/nowhere'"):
        prepare_training(settings, PARAMS | {"base_checkpoint": "/nowhere"}, [extra], "manual__1")


@pytest.mark.parametrize(
    "trainer, algorithm, script",
    [("trl", "grpo", "train_trl.py"), ("nemo_rl", "grpo", "train_nemo_rl.py"), ("nemo_rl", "dpo", "train_trl.py")],
)
def test_the_configured_trainer_picks_the_job_entrypoint(settings, training_dataset, base_model, trainer, algorithm, script):
    s = settings.model_copy(update={"train": settings.train.model_copy(update={"grpo_trainer": trainer})})
    params = PARAMS | {"algorithm": algorithm, "base_checkpoint": str(base_model)}
    job = prepare_training(s, params, [training_dataset], "manual__1")
    assert job["entrypoint"].split()[1].endswith(f"jobs/{script}")
    assert job["entrypoint"].endswith(f"--spec {job['spec_path']}")


def test_an_empty_learning_rate_takes_the_algorithms_own(settings, training_dataset, base_model):
    from ctpipe.jobspec import JobSpec

    for algorithm in ("grpo", "dpo"):
        params = PARAMS | {"algorithm": algorithm, "base_checkpoint": str(base_model), "learning_rate": None}
        job = prepare_training(settings, params, [training_dataset], f"manual__{algorithm}")
        spec = JobSpec.model_validate_json(open(job["spec_path"]).read())
        assert spec.learning_rate == settings.train.learning_rates[algorithm]


def test_the_gate_checks_every_version_a_candidate_trained_on_against_the_test_questions(settings, base_model):
    """The materializer leaves test questions out of every version; the gate checks again, in each
    version the candidate trained on, not only the one it is named after."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ctpipe import arith, datasets
    from ctpipe.pipeline import evaluate_candidate
    from tests.conftest import published_hour

    clean, other = published_hour(settings, 0, 48), published_hour(settings, 1, 48)
    leaked = f"{other['uri']}-leaked"
    shutil.copytree(other["uri"], leaked)
    part = datasets.Manifest.load(leaked).part_paths("traces")[0]
    rows = pq.read_table(part)
    question = rows.slice(0, 1).set_column(rows.schema.get_field_index("prompt"), "prompt",
                                           pa.array([arith.splits(settings.task).test[0].prompt]))
    pq.write_table(pa.concat_tables([rows, question]), part)
    candidate = {"checkpoint": str(base_model), "dataset_uri": clean["uri"],
                 "more_datasets": [{"uri": other["uri"], "version": other["version"]}, {"uri": leaked, "version": "x"}]}
    with pytest.raises(PipelineError, match="1 evaluation questions appear in the training data"):
        evaluate_candidate(settings, candidate, "eval r1", 0.05, 0.0)
    candidate["more_datasets"][-1] = {"uri": f"{leaked}-deleted", "version": "y"}
    with pytest.raises(PipelineError, match="dataset_version='y', which the candidate trained on, is gone from "):
        evaluate_candidate(settings, candidate, "eval r1", 0.05, 0.0)
    candidate["more_datasets"].pop()
    with pytest.raises(PipelineError, match="has no champion"):  # past the check
        evaluate_candidate(settings, candidate, "eval r1", 0.05, 0.0)


def test_of_the_versions_announced_each_interval_counts_once_and_in_its_own_order(settings, base_model, caplog):
    """Late traces reprocessed make a second version of an interval: the one announced last is
    trained on, not both (their rows overlap). An event posted by hand may name no version, or no
    interval: the first is left out, named; the second is ordered by its manifest's interval."""
    from datetime import timedelta

    from ctpipe.jobspec import JobSpec
    from ctpipe.pipeline import materialize_interval
    from tests.conftest import T0, published_hour, training_traces

    caplog.set_level("INFO", "ctpipe.pipeline")
    first = published_hour(settings, 0, 24)
    late = [trace(1000 + i, t["messages"][0]["content"], t["completion"], at=T0 + timedelta(seconds=30 + i),
                  feedback=t["feedback"]) for i, t in enumerate(training_traces()[24:48])]
    write_traces(settings.traces_dir, late, name="part-late.jsonl", at=T0)
    again = materialize_interval(settings, T0, T0 + timedelta(hours=1), "backfill__0")
    later = published_hour(settings, 1, 8)
    params = PARAMS | {"algorithm": "dpo", "base_checkpoint": str(base_model)}
    events = [first, {"version": later["version"]}, again, {"note": "posted by hand"}]
    spec = JobSpec.read(prepare_training(settings, params, events, "r1")["spec_path"])
    assert [d.version for d in spec.datasets] == [again["version"], later["version"]]  # the newest interval last
    assert f"{first['version']} (of the interval of {again['version']}, announced after it)" in caplog.text
    assert "events naming no version: 1" in caplog.text


def test_a_version_laid_out_otherwise_is_left_out_before_the_job_starts(settings, base_model, caplog):
    """Tables that do not combine would fail the whole run in its job, the newest version's rows with it."""
    import json
    from pathlib import Path

    from ctpipe.jobspec import JobSpec
    from tests.conftest import published_hour

    first, second = published_hour(settings, 0, 48), published_hour(settings, 1, 48)
    manifest = Path(first["uri"]) / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["schemas"]["dpo"] = doc["schemas"]["dpo"].replace("chosen_reward: double", "chosen_reward: string")
    manifest.write_text(json.dumps(doc))
    params = PARAMS | {"algorithm": "dpo", "base_checkpoint": str(base_model)}
    spec = JobSpec.read(prepare_training(settings, params, [first, second], "r1")["spec_path"])
    assert [d.version for d in spec.datasets] == [second["version"]]
    assert f"{first['version']} (its dpo table is laid out otherwise than {second['version']}'s)" in caplog.text
