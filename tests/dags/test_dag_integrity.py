import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "trl", "ray", "vllm", "transformers", "mlflow", "datasets", "nemo_rl")


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(str(ROOT / "dags"))


def test_dags_import_without_errors(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dags) == {"trace_to_dataset", "train", "eval_and_deploy", "rollback", "dataset_retention"}


def test_parsing_dags_imports_nothing_heavy():
    code = (
        "import sys, runpy, json, glob\n"
        f"for f in sorted(glob.glob({str(ROOT / 'dags' / '*.py')!r})): runpy.run_path(f)\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_every_dag_has_tags_retries_and_docs(dagbag):
    for dag in dagbag.dags.values():
        assert "ctpipe" in dag.tags, dag.dag_id
        assert dag.doc_md and dag.dag_id in dag.doc_md
        for t in dag.tasks:
            if (dag.dag_id, t.task_id) == ("eval_and_deploy", "deploy"):
                assert t.retries == 0  # a rolled-back canary is not retried behind a person's back
            else:
                assert t.retries >= 1, f"{dag.dag_id}.{t.task_id} has no retries"


def test_the_versions_a_training_read_are_released_once_judged_whatever_the_deploy_does(dagbag):
    release = dagbag.dags["eval_and_deploy"].get_task("release")
    assert release.upstream_task_ids == {"evaluate", "register", "keep_champion"}  # not the deploy: it may fail
    assert release.trigger_rule == "none_failed_min_one_success"  # a branch skipped; a register failed: kept


def test_assets_chain_the_dags(dagbag):
    from ctpipe.assets import CHECKPOINT, TRAINING_DATASET

    produced = {dag_id: {o for t in d.tasks for o in t.outlets} for dag_id, d in dagbag.dags.items()}
    assert TRAINING_DATASET in produced["trace_to_dataset"]
    assert CHECKPOINT in produced["train"]
    assert list(dagbag.dags["train"].timetable.asset_condition.objects) == [TRAINING_DATASET]
    assert list(dagbag.dags["eval_and_deploy"].timetable.asset_condition.objects) == [CHECKPOINT]


def test_trace_to_dataset_runs_over_real_intervals(dagbag):
    # A plain cron schedule gives zero-length intervals in Airflow 3; each run must cover a span.
    from airflow.sdk import CronDataIntervalTimetable

    assert isinstance(dagbag.dags["trace_to_dataset"].timetable, CronDataIntervalTimetable)
    # A manual run may name its own interval instead (a manual-only schedule's runs have none of any length).
    params = dagbag.dags["trace_to_dataset"].params
    assert {name: (params.get_param(name).value, params.get_param(name).schema["format"]) for name in ("start", "end")} == {
        "start": (None, "date-time"), "end": (None, "date-time")}


@pytest.mark.parametrize(
    "name, value",
    [("algorithm", "ppo"), ("max_steps", 0), ("max_steps", 10**9), ("learning_rate", 0), ("learning_rate", 5), ("seed", -1)],
)
def test_trigger_form_refuses_out_of_range_params(dagbag, name, value):
    from airflow.sdk.exceptions import ParamValidationError

    param = dagbag.dags["train"].params.get_param(name)
    with pytest.raises(ParamValidationError):
        param.resolve(value)


def test_trigger_form_defaults_come_from_config(dagbag):
    from ctpipe.config import Settings

    params = dagbag.dags["train"].params
    train = Settings().train
    assert params["algorithm"] == train.algorithm and params["max_steps"] == train.max_steps
    # An empty learning rate is valid: the run takes its algorithm's own.
    assert params["learning_rate"] is None and params.get_param("learning_rate").resolve(None) is None
    assert "grpo 0.001" in params.get_param("learning_rate").description
    assert dagbag.dags["eval_and_deploy"].params["alpha"] == Settings().gate.alpha


def _in_other_settings(code: str, **env: str) -> str:
    """The last line ``code`` prints, run with ``env`` added to the environment (settings are read
    once per process, so in a process of its own)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def _task_in_other_settings(dag_id: str, task_id: str, printed: str, **env: str) -> str:
    """What ``print(printed)`` shows of a task of the DAGs parsed with ``env`` added to the environment."""
    return _in_other_settings(
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"t = DagBag({str(ROOT / 'dags')!r}).dags[{dag_id!r}].get_task({task_id!r})\n"
        f"print({printed})\n", **env)


def test_the_train_dag_launches_kuberay_jobs_when_configured(tmp_path):
    printed = _task_in_other_settings("train", "train", "type(t).__name__, t.kubernetes_conn_id, t.max_preemptions",
                                      CTPIPE_LAUNCHER="kuberay", CTPIPE_KUBERNETES__KUBERNETES_CONN_ID="k8s_prod")
    assert printed.split()[-3:] == ["KubeRayJobOperator", "k8s_prod", "3"]


def test_the_rollback_form_asks_for_a_version_number(dagbag):
    params = dagbag.dags["rollback"].params
    assert params["version"] == "" and params.get_param("version").schema["pattern"] == "^[0-9]*$"
    assert type(dagbag.dags["rollback"].timetable).__name__ == "NullTimetable"  # by hand only


def test_trace_to_dataset_waits_for_late_partitions_when_told(dagbag):
    assert [t.task_id for t in dagbag.dags["trace_to_dataset"].tasks] == ["materialize"]  # no lag: no wait
    # It waits past the end of the interval the run builds: the trigger form's, when it gives one.
    ready_at = "t.dag.user_defined_macros['ready_at']"
    printed = _task_in_other_settings(
        "trace_to_dataset", "wait_for_late_traces",
        f"type(t).__name__, t.target_time, t.retries, sorted(t.downstream_task_ids), "
        f"{ready_at}({{'end': '2026-11-22T11:00:00+00:00'}}, None), "
        f"{ready_at}({{}}, __import__('datetime').datetime.fromisoformat('2026-11-29T21:00:00+00:00'))",
        CTPIPE_DATASET__ARRIVAL_LAG="PT15M")
    assert printed == ("DateTimeSensorAsync {{ ready_at(params, data_interval_end) }} 2 ['materialize'] "
                       "2026-11-22T11:15:00+00:00 2026-11-29T21:15:00+00:00")


def _next_run_after(last_start: str, last_end: str, **env: str) -> str:
    """The interval the scheduler's own reckoning (the serialized DAG's) gives trace_to_dataset's next
    scheduled run after one over [last_start, last_end), with the DAGs parsed with ``env``."""
    return _in_other_settings(
        "import pendulum\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        "from airflow.serialization.serialized_objects import DagSerialization\n"
        "from airflow.timetables.base import DagRunInfo\n"
        f"dag = DagBag({str(ROOT / 'dags')!r}).dags['trace_to_dataset']\n"
        "dag = DagSerialization.from_dict(DagSerialization.to_dict(dag))\n"
        f"last = DagRunInfo.interval(pendulum.parse({last_start!r}), pendulum.parse({last_end!r}))\n"
        "i = dag.next_dagrun_info(last_automated_run_info=last).data_interval\n"
        "print(dag.catchup, dag.start_date.isoformat(), i.start.isoformat(), i.end.isoformat())\n", **env)


def test_trace_to_dataset_catches_up_on_missed_hours_only_when_told():
    import datetime as dt

    # The scheduler was down since the run of 09:00-10:00 two days ago. By default the next run is the
    # latest hour's, and the hours between are left to a backfill; told to catch up, the next is 10:00-11:00.
    now = dt.datetime.now(dt.timezone.utc).replace(minute=0, second=0, microsecond=0)
    last_start, last_end = now - dt.timedelta(days=2, hours=1), now - dt.timedelta(days=2)
    iso = lambda t: t.isoformat()  # noqa: E731
    default = _next_run_after(iso(last_start), iso(last_end)).split()
    assert default[0] == "False" and default[3] in (iso(now), iso(now + dt.timedelta(hours=1)))  # the hour turning
    since = iso(last_start - dt.timedelta(days=1))
    told = _next_run_after(iso(last_start), iso(last_end), CTPIPE_TRACE_CATCH_UP_FROM=since)
    assert told.split() == ["True", since, iso(last_end), iso(last_end + dt.timedelta(hours=1))]


def test_a_catch_up_time_without_a_zone_is_refused_naming_the_variable(monkeypatch):
    from pydantic import ValidationError

    from ctpipe.config import Settings

    monkeypatch.setenv("CTPIPE_TRACE_CATCH_UP_FROM", "2026-11-29T00:00:00")
    with pytest.raises(ValidationError, match="trace_catch_up_from"):
        Settings()


def test_an_interval_with_no_trace_is_skipped_saying_what_was_read(dagbag, tmp_path, monkeypatch):
    from datetime import datetime, timedelta, timezone

    from airflow.sdk.exceptions import AirflowSkipException

    from ctpipe.config import settings
    from tests.conftest import trace

    src = tmp_path / "src"
    src.mkdir()
    (src / "late.jsonl").write_text(json.dumps(trace(1, at=datetime(2026, 11, 22, 12, tzinfo=timezone.utc))) + "\n")
    monkeypatch.setenv("CTPIPE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CTPIPE_TRACE_SOURCE", str(src))
    settings.cache_clear()
    try:
        start = datetime(2026, 11, 22, 10, tzinfo=timezone.utc)
        task = dagbag.dags["trace_to_dataset"].get_task("materialize")
        with pytest.raises(AirflowSkipException, match=r"nothing to publish: no trace started in .*: 1 file read; "
                                                       r"1 records of other times read \(ctpipe\), started from "
                                                       r"2026-11-22T12:00:00\+00:00"):
            task.python_callable(data_interval_start=start, data_interval_end=start + timedelta(hours=1),
                                 outlet_events={})
    finally:
        settings.cache_clear()
