"""trace_to_dataset with an arrival lag, in a real Airflow: the run waits, deferred to the triggerer,
until the lag after its interval's end has passed, then materializes what arrived meanwhile."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest

from tests.conftest import free_port, trace

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
LAG = timedelta(seconds=30)
# The run is triggered this long before its interval ends, so that it is already waiting when a trace
# arrives after the end, however slowly a loaded machine starts its first task.
AHEAD = timedelta(seconds=20)


def test_a_run_waits_for_traces_arriving_after_its_interval(tmp_path, monkeypatch):
    from ctpipe.airflow_local import LocalAirflow
    from ctpipe.config import Settings
    from ctpipe.traces import partition_dir

    for name, value in {"CTPIPE_HOME": str(tmp_path / "home"), "CTPIPE_AIRFLOW_PORT": str(free_port()),
                        "CTPIPE_TRACE_SCHEDULE": "", "CTPIPE_DATASET__ARRIVAL_LAG": f"PT{LAG.seconds}S"}.items():
        monkeypatch.setenv(name, value)
    s = Settings()
    af = LocalAirflow(s)
    af.start()
    try:
        af.wait_ready()
        end = datetime.now(timezone.utc).replace(microsecond=0) + AHEAD
        start = end - timedelta(hours=1)
        af.client.call("POST", "/dags/trace_to_dataset/dagRuns", json={
            "dag_run_id": "late", "logical_date": start.isoformat(), "data_interval_start": start.isoformat(),
            "data_interval_end": end.isoformat(), "conf": {}})
        waited, arrived = [], None
        while af.client.dag_run("trace_to_dataset", "late")["state"] not in ("success", "failed"):
            states = {t["task_id"]: t["state"] for t in af.client.task_instances("trace_to_dataset", "late")}
            waited.append(states.get("wait_for_late_traces"))
            if waited[-1] == "deferred" and not s.traces_dir.exists() and datetime.now(timezone.utc) >= end:
                # A trace of the interval's last second reaches the source after it, while the run waits.
                folder = partition_dir(s.traces_dir, end - timedelta(seconds=1))
                folder.mkdir(parents=True)
                (folder / "part-a.jsonl").write_text(json.dumps(trace(1, at=end - timedelta(seconds=1))) + "\n")
                arrived = datetime.now(timezone.utc)
            time.sleep(0.5)
        assert af.client.dag_run("trace_to_dataset", "late")["state"] == "success"
        assert arrived is not None and end <= arrived < end + LAG
        done = {t["task_id"]: t for t in af.client.task_instances("trace_to_dataset", "late")}
        assert datetime.fromisoformat(done["materialize"]["start_date"]) >= end + LAG
        assert af.client.xcom("trace_to_dataset", "late", "materialize")["traces_in"] == 1
    finally:
        af.stop()
