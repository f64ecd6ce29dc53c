"""The Continuous training page in a real browser, served by a real Airflow API server.

Airflow runs standalone; a cycle history is posted through the REST API as asset events
(one dataset name is an HTML payload); headless Chromium (Debian's package, driven by
Playwright) loads the page directly and inside the Airflow UI, and a screenshot of each is
kept under test-artifacts/.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import requests

from tests.conftest import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
XSS = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    from ctpipe.airflow_local import LocalAirflow
    from ctpipe.config import Settings

    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("Chromium is not installed (Debian package chromium); .ci/run installs it")
        pytest.skip("Chromium is not installed (Debian package chromium)")
    home = tmp_path_factory.mktemp("ui")
    env = {"CTPIPE_HOME": str(home), "CTPIPE_AIRFLOW_PORT": str(free_port()), "CTPIPE_TRACE_SCHEDULE": ""}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    af = LocalAirflow(Settings())
    af.start()
    try:
        af.wait_ready()
        yield af
    finally:
        af.stop()
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run"],
        )
        yield b
        b.close()


def logged_in(browser, af):
    """A browser session carrying the JWT cookie the Airflow UI itself sets after login."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_cookies([{"name": "_token", "value": af.client.token(), "url": af.url}])
    return context


def test_the_page_shows_the_cycles_and_refuses_strangers(airflow, browser):
    from ctpipe.ui.sample import post_history

    post_history(airflow.client, 3, dataset_name=lambda i: XSS if i == 1 else f"sample-{i:04d}")

    r = requests.get(f"{airflow.url}/ctpipe/", timeout=30)
    assert r.status_code == 401 and "Continuous training" not in r.text
    r = requests.get(f"{airflow.url}/ctpipe/", headers={"Authorization": "Bearer not-a-token"}, timeout=30)
    assert r.status_code in (401, 403)
    r = requests.get(f"{airflow.url}/ctpipe/runs/train/no-such-run", cookies={"_token": airflow.client.token()}, timeout=30)
    assert r.status_code in (401, 404)

    ARTIFACTS.mkdir(exist_ok=True)
    context = logged_in(browser, airflow)
    page = context.new_page()
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{airflow.url}/ctpipe/")
    rows = page.locator("tr.cycle")
    assert rows.count() == 3
    assert page.locator(".dataset").nth(1).inner_text() == XSS  # shown as text, never run
    assert page.locator(".decision").count() == 3
    decisions = {page.locator(".decision").nth(i).inner_text() for i in range(3)}
    assert decisions <= {"PASS", "FAIL"} and decisions
    assert page.locator("svg[aria-label='held-out accuracy per evaluation'] polyline").count() == 2
    assert page.locator("svg[aria-label='loss'] polyline").count() == 3
    page.screenshot(path=str(ARTIFACTS / "continuous-training.png"), full_page=True)
    assert dialogs == []

    # The same page inside the Airflow UI, from its navigation entry.
    page.goto(f"{airflow.url}/plugin/continuous-training")
    frame = page.frame_locator("iframe")
    frame.locator("tr.cycle").first.wait_for(timeout=60_000)
    assert frame.locator("tr.cycle").count() == 3
    page.screenshot(path=str(ARTIFACTS / "continuous-training-in-airflow.png"), full_page=True)
    assert dialogs == []
    context.close()


def test_a_train_run_has_its_tab_and_its_links_while_it_runs(airflow, browser):
    from ctpipe.config import Settings
    from ctpipe.registry import Registry
    from ctpipe.ui.sample import post_history

    post_history(airflow.client, 1, dataset_name=lambda i: "tab-dataset")
    run_id = "sample__0000"  # the run the posted checkpoint names; the train DAG is paused, so it stays queued
    airflow.client.call("POST", "/dags/train/dagRuns", json={"dag_run_id": run_id, "logical_date": None})
    registry = Registry(Settings())
    mlflow_run = registry.training_run("train", run_id, {"algorithm": "grpo", "max_steps": 3})
    assert registry.training_run("train", run_id, {}) == mlflow_run  # idempotent: a retried prepare finds it
    registry.log_history(mlflow_run, [{"step": i, "max_steps": 3, "loss": 1 / i, "reward": i / 3} for i in (1, 2, 3)])

    links = airflow.client.call("GET", f"/dags/train/dagRuns/{run_id}/taskInstances/train/links")["extra_links"]
    print(links)
    assert links["Ray job"].startswith("http://127.0.0.1:") and f"/#/jobs/train-train-{run_id}-try" in links["Ray job"]
    assert links["MLflow run"].endswith(f"/ctpipe/mlflow/train/{run_id}")

    context = logged_in(browser, airflow)
    page = context.new_page()
    page.goto(f"{airflow.url}/ctpipe/mlflow/train/{run_id}")
    assert page.locator(".run-id").inner_text() == mlflow_run
    assert page.locator("svg[aria-label='loss'] polyline").count() == 1
    page.goto(f"{airflow.url}/dags/train/runs/{run_id}/plugin/continuous-training-run")
    frame = page.frame_locator("iframe")
    frame.locator("tr.cycle").first.wait_for(timeout=60_000)
    assert frame.locator("tr.cycle").count() == 1 and frame.locator(".dataset").inner_text() == "tab-dataset"
    page.screenshot(path=str(ARTIFACTS / "continuous-training-run-tab.png"), full_page=True)
    context.close()


def test_a_run_that_announced_nothing_has_its_tab_say_why(airflow, browser):
    """An hour with no traces: trace_to_dataset's run is skipped, in no cycle; its tab says why,
    rather than that there are no cycles yet."""
    import time

    from ctpipe.config import Settings

    def ended(run_id: str, start: str, end: str | None) -> list[str]:
        airflow.client.call("POST", "/dags/trace_to_dataset/dagRuns", json={
            "dag_run_id": run_id, "logical_date": None, "conf": {"start": start, "end": end}})
        deadline = time.monotonic() + 300
        while airflow.client.dag_run("trace_to_dataset", run_id)["state"] not in ("success", "failed"):
            assert time.monotonic() < deadline, airflow.client.task_instances("trace_to_dataset", run_id)
            time.sleep(2)
        return [t["state"] for t in airflow.client.task_instances("trace_to_dataset", run_id)]

    Settings().traces_dir.mkdir(parents=True, exist_ok=True)
    airflow.client.call("PATCH", "/dags/trace_to_dataset", json={"is_paused": False})  # post_history paused it
    try:
        run_id = "manual__an-empty-hour"
        assert ended(run_id, "2026-01-01T00:00:00+00:00", "2026-01-01T01:00:00+00:00") == ["skipped"]
        assert ended("manual__no-end", "2026-01-01T00:00:00+00:00", None) == ["failed"]
    finally:
        airflow.client.call("PATCH", "/dags/trace_to_dataset", json={"is_paused": True})

    context = logged_in(browser, airflow)
    page = context.new_page()
    page.goto(f"{airflow.url}/dags/trace_to_dataset/runs/{run_id}/plugin/continuous-training-run")
    row = page.frame_locator("iframe").locator("tr.no-cycle")
    row.wait_for(timeout=60_000)
    assert "No cycles yet" not in row.inner_text()
    assert ("materialize skipped: nothing to publish: no trace started in [2026-01-01T00:00:00+00:00, "
            "2026-01-01T01:00:00+00:00) in ") in " ".join(row.inner_text().split())
    assert ": 0 files read" in row.inner_text()
    page.screenshot(path=str(ARTIFACTS / "continuous-training-run-tab-no-cycle.png"), full_page=True)
    page.goto(f"{airflow.url}/ctpipe/runs/trace_to_dataset/manual__no-end")
    assert "materialize failed: end is empty: give both start and end, or neither" in " ".join(
        page.locator("tr.no-cycle").inner_text().split())
    context.close()


def test_a_run_whose_event_airflow_never_recorded_announces_on_its_next_try(airflow):
    """A try that died after marking its version announced, before Airflow recorded its event, left
    train nothing to run on: the run's next try finds its own mark but no event of it in Airflow, and
    announces the version. Cleared after that, the run finds the event and is skipped."""
    import time
    from datetime import datetime, timedelta, timezone

    from ctpipe.airflow.errors import WHY
    from ctpipe.config import Settings
    from ctpipe.pipeline import materialize_interval
    from tests.conftest import trace, write_traces

    s, run_id = Settings(), "manual__lost-event"
    start = datetime(2026, 1, 2, tzinfo=timezone.utc)
    write_traces(s.traces_dir, [trace(i, at=start + timedelta(seconds=i)) for i in range(3)], at=start)
    version = materialize_interval(s, start, start + timedelta(hours=1), run_id)["version"]  # marked, no event

    def materialized() -> str:
        # The run's end, not its task's: cleared between the two, a run the scheduler then marks done
        # (it read the task's success before the clear; SQLite locks no rows) never runs its task again.
        deadline = time.monotonic() + 300
        while (run := airflow.client.dag_run("trace_to_dataset", run_id)["state"]) not in ("success", "failed"):
            assert time.monotonic() < deadline, (run, airflow.client.task_instances("trace_to_dataset", run_id))
            time.sleep(2)
        return airflow.client.task_instances("trace_to_dataset", run_id)[0]["state"]

    def events() -> list[dict]:
        asset = airflow.client.call("GET", "/assets", params={"name_pattern": "ctpipe_training_dataset"})["assets"][0]
        found = airflow.client.call("GET", "/assets/events", params={"asset_id": asset["id"], "source_run_id": run_id})
        return [e["extra"]["version"] for e in found["asset_events"]]

    airflow.client.call("PATCH", "/dags/trace_to_dataset", json={"is_paused": False})
    try:
        airflow.client.call("POST", "/dags/trace_to_dataset/dagRuns", json={
            "dag_run_id": run_id, "logical_date": None,
            "conf": {"start": start.isoformat(), "end": (start + timedelta(hours=1)).isoformat()}})
        assert materialized() == "success" and events() == [version]
        airflow.client.call("POST", "/dags/trace_to_dataset/clearTaskInstances", json={
            "dry_run": False, "dag_run_id": run_id, "only_failed": False, "reset_dag_runs": True})
        assert materialized() == "skipped" and events() == [version]
        why = airflow.client.call("GET", f"/dags/trace_to_dataset/dagRuns/{run_id}/taskInstances/materialize/"
                                         f"xcomEntries/{WHY}")["value"]
        assert why.endswith(f"version {version} was published and announced before, by this run (cleared since): "
                            "nothing new to train on")
    finally:
        airflow.client.call("PATCH", "/dags/trace_to_dataset", json={"is_paused": True})
