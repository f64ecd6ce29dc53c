"""The Continuous training page's data assembly and rendering, from asset events as the REST API v2 returns them."""

from __future__ import annotations

import re

import pytest

from ctpipe.ui import app, lineage
from ctpipe.ui.charts import line_chart


@pytest.fixture(autouse=True)
def no_registry(monkeypatch):
    """Rendering asks MLflow for the aliases; these tests give them (the browser test uses the real one)."""
    monkeypatch.setattr(app, "registry_aliases", lambda: {"2": ["champion"]})


def ev(ts: str, extra: dict, *, dag: str, run: str, created=()) -> dict:
    return {
        "id": hash((ts, run)) % 10**6, "timestamp": ts, "extra": extra, "source_dag_id": dag, "source_run_id": run,
        "source_task_id": "t", "created_dagruns": [{"dag_id": d, "run_id": r, "state": s} for d, r, s in created],
    }


def history():
    """Two finished cycles (one promoted, one refused) and a third still training."""
    comparison = {"n": 500, "champion_accuracy": 0.25, "candidate_accuracy": 0.34, "champion_ci": [0.21, 0.29],
                  "candidate_ci": [0.30, 0.38], "gain": 0.09, "p_value": 2e-5}
    datasets = [
        ev(f"2026-11-22T0{i}:00:00Z", {"version": f"v{i}", "interval": [f"2026-11-22T0{i}:00:00", f"2026-11-22T0{i}:59:59"],
                                       "rows": {"traces": 700 + i}, "traces_in": 710, "quarantined": 10 - i,
                                       "reward": {"labeled": 700, "mean": 0.4, "min": 0.0, "max": 1.0}},
           dag="trace_to_dataset", run=f"scheduled_{i}", created=[("train", f"asset_{i}", "success" if i < 3 else "running")])
        for i in (1, 2, 3)
    ]
    checkpoints = [
        ev(f"2026-11-22T0{i}:10:00Z", {"dataset_version": f"v{i}", "train_run_id": f"asset_{i}", "algorithm": "grpo",
                                       "steps": 40, "checkpoint": f"/h/runs/asset_{i}/checkpoint", "base_version": "1",
                                       "curve": {"step": [1, 2, 3], "loss": [0.3, 0.2, 0.1], "reward": [0.1, None, 0.3]}},
           dag="train", run=f"asset_{i}", created=[("eval_and_deploy", f"eval_{i}", "success")])
        for i in (1, 2)
    ]
    evaluations = [
        ev("2026-11-22T01:20:00Z", {"train_run_id": "asset_1", "passed": True, "reason": "gain +0.090, p=2e-05",
                                    "comparison": comparison, "champion_version": "1", "registered_version": "2",
                                    "rollout": {"promoted": True, "previous_champion": "1", "detail": "champion alias moved"}},
           dag="eval_and_deploy", run="eval_1"),
        ev("2026-11-22T02:20:00Z", {"train_run_id": "asset_2", "passed": False, "reason": "gain +0.006 is not significant",
                                    "comparison": comparison | {"gain": 0.006, "p_value": 0.81}, "champion_version": "2",
                                    "registered_version": None, "rollout": None},
           dag="eval_and_deploy", run="eval_2"),
    ]
    return datasets, checkpoints, evaluations


def test_cycles_link_dataset_training_checkpoint_and_evaluation_newest_first():
    cycles = lineage.assemble(*history())
    assert [c.dataset["extra"]["version"] for c in cycles] == ["v3", "v2", "v1"]
    running, refused, promoted = cycles
    assert running.train_run == {"run_id": "asset_3", "state": "running"} and running.checkpoint is None
    assert refused.evaluation["extra"]["passed"] is False and refused.checkpoint["extra"]["train_run_id"] == "asset_2"
    assert promoted.evaluation["extra"]["registered_version"] == "2"
    assert promoted.involves("eval_and_deploy", "eval_1") and promoted.involves("train", "asset_1")
    assert not promoted.involves("train", "asset_2")


def test_a_run_that_trained_on_several_versions_is_in_each_of_their_cycles():
    """The versions a backfill announced while train ran are trained on in one run: its checkpoint
    event names the others under more_datasets."""
    datasets, checkpoints, evaluations = history()
    for e in datasets + checkpoints:
        e["created_dagruns"] = []
    checkpoints[1]["extra"] |= {"dataset_version": "v3", "more_datasets": [{"uri": "/h/datasets/v2", "version": "v2"}]}
    cycles = lineage.assemble(datasets, checkpoints, evaluations)
    assert [(c.dataset["extra"]["version"], c.train_run["run_id"]) for c in cycles] == [
        ("v3", "asset_2"), ("v2", "asset_2"), ("v1", "asset_1")]
    lines = re.findall(r'points="([^"]*)"', str(app.accuracy_chart(cycles)))  # champion's and candidate's
    assert [len(points.split()) for points in lines] == [2, 2]  # an evaluation once, though in two cycles


def test_a_run_state_read_with_an_old_event_is_corrected_by_the_runs_active_now():
    assert lineage.assemble(*history(), active={"asset_3": "running"})[0].train_run["state"] == "running"
    assert lineage.assemble(*history(), active={})[0].train_run["state"] == "ended without a checkpoint"


def test_events_posted_by_hand_line_up_through_their_extra():
    datasets, checkpoints, evaluations = history()
    for e in datasets + checkpoints:
        e["created_dagruns"] = []  # an event posted through the API triggers nothing we can see
    cycles = lineage.assemble(datasets, checkpoints, evaluations)
    assert [(c.dataset["extra"]["version"], (c.train_run or {}).get("run_id")) for c in cycles] == [
        ("v3", None), ("v2", "asset_2"), ("v1", "asset_1")]


def test_parts_from_dags_the_user_may_not_read_are_left_out():
    cycles = lineage.assemble(*history(), readable={"train"})
    assert all(c.dataset is None and c.evaluation is None for c in cycles)
    assert {c.train_run["run_id"] for c in cycles} == {"asset_1", "asset_2", "asset_3"}
    assert cycles[0].hidden == ["trace_to_dataset", "eval_and_deploy"]
    html = app.render(cycles, title="t", limit=50)
    assert "PASS" not in html and "champion alias moved" not in html and html.count(">hidden<") >= 6
    assert lineage.assemble(*history(), readable=set()) == []


def test_the_page_shows_the_lineage_and_escapes_what_comes_from_data():
    datasets, checkpoints, evaluations = history()
    datasets[0]["extra"]["version"] = "<script>alert(1)</script>"
    evaluations[1]["extra"]["reason"] = "<img src=x onerror=alert(2)>"
    datasets[1]["extra"] |= {"files_in_no_format": 2, "files_not_read": 1, "unjoined": {"otel_log_records": 12}}
    html = app.render(lineage.assemble(datasets, checkpoints, evaluations), title="Continuous training", limit=50,
                      root="/airflow")
    assert html.count("files in no known format") == 1 and html.count("1 file not read") == 1
    assert html.count("12 otel log records attached to nothing") == 1
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(2)&gt;" in html
    assert html.count('<tr class="cycle">') == 3
    assert "reward mean 0.400\n        [0.00, 1.00] over 700" in html and "9 of 710 quarantined" in html
    assert "candidate 0.340 [0.300, 0.380]" in html and "gain +0.090, p=2e-05, n=500" in html
    assert re.search(r'class="decision pass">PASS</span> <span class="reason">gain \+0.090', html)
    assert "champion v2 kept" in html and "promoted: champion alias moved" in html
    assert 'href="/airflow/dags/train/runs/asset_1/tasks/train"' in html
    assert '<span class="tag">champion</span>' in html
    assert html.count("<svg") == 1 + 2 + 2 + 1  # accuracy; loss and reward of two runs; the running one's placeholder
    assert "training: no data yet" in html  # the running cycle has no curve yet


def test_a_run_in_no_cycle_has_its_tab_say_why_by_task():
    run = {"dag_id": "trace_to_dataset", "run_id": "manual__2026-11-22T10:00:00+00:00", "tasks": [
        {"task_id": "wait_for_late_traces", "state": "success", "why": None},
        {"task_id": "materialize", "state": "skipped", "why": "nothing to publish: <b>0 files</b> read"}]}
    html = app.render([], title="t", limit=10, detail=True, root="/airflow", run=run)
    assert "No cycles yet" not in html and "No cycle of the newest events involves this run." in html
    assert ('href="/airflow/dags/trace_to_dataset/runs/manual__2026-11-22T10%3A00%3A00%2B00%3A00/tasks/materialize"'
            in html)
    assert '<span class="state">skipped</span>: <span class="reason">nothing to publish: &lt;b&gt;0 files&lt;/b&gt; read' in html
    assert 'wait_for_late_traces</a>\n    <span class="state">success</span><br>' in html
    assert "No cycles yet" in app.render([], title="t", limit=10)


def test_run_ids_with_url_characters_are_quoted_in_links():
    datasets, checkpoints, evaluations = history()
    checkpoints[0]["extra"]["train_run_id"] = checkpoints[0]["source_run_id"] = "manual__2026-11-22T10:00:00+00:00"
    html = app.render(lineage.assemble(datasets, checkpoints, evaluations), title="t", limit=50)
    assert "/dags/train/runs/manual__2026-11-22T10%3A00%3A00%2B00%3A00/tasks/train" in html


def test_charts_draw_lines_with_gaps_interval_bars_and_escaped_labels():
    svg = line_chart("acc <b>", [1, 2, 3, 4], {"loss": [1.0, float("nan"), 0.5, 0.4]}, bands={"loss": [(0.9, 1.1), None, None, None]})
    assert "acc &lt;b&gt;" in svg and "<b>" not in svg
    assert svg.count("<circle") == 1 and svg.count("<polyline") == 1  # a point, a gap, then a line
    assert svg.count('stroke-opacity="0.45"') == 1
    assert "no data yet" in line_chart("empty", [], {"loss": []})


@pytest.mark.parametrize("limit", [1, 2])
def test_the_page_says_how_many_cycles_it_shows(limit):
    html = app.render(lineage.assemble(*history()), title="t", limit=limit)
    assert html.count('<tr class="cycle">') == limit and f"newest {limit} shown" in html


def test_the_event_log_keeps_what_it_read_and_merges_newer_events():
    log = app._EventLog()
    old = [{"id": i, "timestamp": f"2026-11-22T0{i}:00:00Z"} for i in (1, 2)]
    assert [e["id"] for e in log.merge(old)] == [2, 1] and log.newest == "2026-11-22T02:00:00Z"
    again = [old[1], {"id": 3, "timestamp": "2026-11-22T03:00:00Z"}]  # timestamp_gte returns the boundary again
    assert [e["id"] for e in log.merge(again)] == [3, 2, 1]
