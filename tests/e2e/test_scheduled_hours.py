"""trace_to_dataset on its own schedule, in a real Airflow: the hours missed while the scheduler was
down are built when it comes back, oldest first, each by a scheduled run from the interval Airflow
gives it (pendulum's datetimes, where the trigger form and the CLI give the standard library's), each
after the hour before it was built, whose late files it checks."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from tests.conftest import free_port, trace, write_traces

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
HOURS = 3


def test_scheduled_runs_build_the_hours_missed_oldest_first(tmp_path, monkeypatch):
    from ctpipe import datasets
    from ctpipe.airflow_local import LocalAirflow
    from ctpipe.config import Settings

    first = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) - HOURS * timedelta(hours=1)
    for name, value in {"CTPIPE_HOME": str(tmp_path / "home"), "CTPIPE_AIRFLOW_PORT": str(free_port()),
                        "CTPIPE_TRACE_SCHEDULE": "@hourly", "CTPIPE_TRACE_CATCH_UP_FROM": first.isoformat()}.items():
        monkeypatch.setenv(name, value)
    s = Settings()
    hours = [first + h * timedelta(hours=1) for h in range(HOURS)]
    for h, at in enumerate(hours):  # h + 1 traces in hour h
        write_traces(s.traces_dir, [trace(10 * h + i, f"What is {h} plus {i}?", str(h + i), at=at + timedelta(minutes=i))
                                    for i in range(h + 1)], at=at)
    af = LocalAirflow(s)
    af.start()
    try:
        af.wait_ready()
        af.client.call("PATCH", "/dags/train", json={"is_paused": True})  # no champion to train from here
        deadline = time.monotonic() + 600
        while True:
            runs = sorted((r for r in af.client.dag_runs("trace_to_dataset") if r["run_type"] == "scheduled"),
                          key=lambda r: r["data_interval_start"])
            if len(runs) >= HOURS and all(r["state"] in ("success", "failed") for r in runs[:HOURS]):
                break
            assert time.monotonic() < deadline, f"the scheduled runs did not end: {runs}"
            time.sleep(2)
        runs = runs[:HOURS]  # a run of the hour begun meanwhile, if the clock passed one, is another's
        assert [datetime.fromisoformat(r["data_interval_start"]) for r in runs] == hours
        assert [r["state"] for r in runs] == ["success"] * HOURS, [
            (r["dag_run_id"], t["task_id"], t["state"], t["try_number"])
            for r in runs for t in af.client.task_instances("trace_to_dataset", r["dag_run_id"])]
        made = [af.client.xcom("trace_to_dataset", r["dag_run_id"], "materialize") for r in runs]
        assert [m["traces_in"] for m in made] == [h + 1 for h in range(HOURS)]
        assert [datasets.interval_named(m["version"]) for m in made] == [(at, at + timedelta(hours=1)) for at in hours]
        # The number of tries is not asked: on two loaded cores Airflow's execution API may time out
        # under a first try, retried as in production. A run failing for the interval fails all three.
    finally:
        af.stop()
