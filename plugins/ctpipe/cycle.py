"""One continuous-training cycle on the embedded default, driven through the real Airflow scheduler.

1. start Airflow (standalone, SQLite) and a local Ray head, unless running;
2. build the base model once and make it the champion of an empty registry;
3. simulate an interval of production traffic answered by the champion;
4. trigger ``trace_to_dataset`` for that interval; the asset events then run
   ``train`` and ``eval_and_deploy`` on their own, and this command follows them;
5. print a summary and append it to ``<home>/cycles.jsonl``.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import requests

from ctpipe import raycluster, tinymodel, traffic
from ctpipe.canary import servers
from ctpipe.airflow_local import LocalAirflow, ServerError
from ctpipe.config import Settings
from ctpipe.registry import Registry

log = logging.getLogger(__name__)

FINISHED = {"success", "failed"}


class CycleFailed(RuntimeError):
    pass


def _say(msg: str) -> None:
    print(f"[ctpipe] {msg}", flush=True)


def _wait_run(af: LocalAirflow, dag_id: str, run_id: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        run = af.client.dag_run(dag_id, run_id)
        if run["state"] in FINISHED:
            if run["state"] == "failed":
                tis = af.client.task_instances(dag_id, run_id)
                failed = [t["task_id"] for t in tis if t["state"] == "failed"]
                raise CycleFailed(
                    f"{dag_id} run {run_id} failed (tasks {failed}); logs: {af.url}/dags/{dag_id}/runs/{run_id}"
                )
            return run
        if time.monotonic() > deadline:
            raise CycleFailed(f"{dag_id} run {run_id} still {run['state']} after {timeout_s:.0f}s")
        time.sleep(3)


def _find_run(af: LocalAirflow, dag_id: str, match, timeout_s: float) -> dict:
    """The run of ``dag_id`` whose triggering asset event satisfies ``match(extra)``."""
    deadline = time.monotonic() + timeout_s
    checked: set[str] = set()
    while time.monotonic() < deadline:
        for run in af.client.dag_runs(dag_id):
            rid = run["dag_run_id"]
            if rid in checked or run["run_type"] != "asset_triggered":
                continue
            try:
                events = af.client.upstream_events(dag_id, rid)
            except (ServerError, requests.ConnectionError):
                # Airflow 3.3 answers 500 for a run that has not started yet (start_date is None), and a busy
                # API server may drop the connection: ask again on the next poll.
                continue
            if any(match(e.get("extra") or {}) for e in events):
                return run
            checked.add(rid)
        time.sleep(3)
    raise CycleFailed(f"no {dag_id} run was triggered within {timeout_s:.0f}s")


def run_cycle(s: Settings, timeout_s: float = 1800) -> dict[str, Any]:
    t0 = time.monotonic()
    af = LocalAirflow(s)
    _say(f"home {s.home}")
    af.start()
    with ThreadPoolExecutor(3) as pool:
        ray_url = pool.submit(raycluster.ensure_local_head, s)
        if s.canary.enabled and s.launcher == "ray_jobs":
            # The canary's vLLM environment (first cycle only, a few minutes) builds while the rest starts.
            pool.submit(servers.engine_python, s.home, s.serving)
        base = pool.submit(tinymodel.ensure_base_model, s.base_model, s.task, s.models_dir)
        _say("building or loading the base model; starting Airflow and Ray")
        base_dir = base.result()
        registry = Registry(s)
        champion = registry.ensure_champion(base_dir)
        _say(f"champion: {s.model_name} v{champion.version}")

        history = s.home / "cycles.jsonl"
        cycle_no = (sum(1 for _ in history.open()) if history.exists() else 0) + 1
        report = traffic.simulate(
            champion.path, s.model_name, champion.version, s.traces_dir, s.traffic, s.task, seed=cycle_no
        )
        _say(
            f"cycle {cycle_no}: {report.traces} traces of simulated traffic "
            f"({report.faulty} malformed), champion sampled accuracy {report.accuracy:.1%}"
        )
        ray_url.result()
        af.wait_ready()
    _say(f"Airflow ready at {af.url}, Ray at {s.ray_dashboard_url}")

    start, end = report.start, report.end + timedelta(milliseconds=1)
    run_id = f"cycle{cycle_no}__{start:%Y%m%dT%H%M%S}"
    try:
        af.client.call(
            "POST", "/dags/trace_to_dataset/dagRuns",
            json={
                "dag_run_id": run_id,
                "logical_date": start.isoformat(),
                "data_interval_start": start.isoformat(),
                "data_interval_end": end.isoformat(),
                "conf": {},
                "note": f"ctpipe cycle {cycle_no}",
            },
        )
    except RuntimeError as e:
        if "HTTP 409" not in str(e):  # 409: a retried request that had already gone through
            raise
    _say(f"triggered trace_to_dataset {run_id}")
    t2d = _wait_run(af, "trace_to_dataset", run_id, timeout_s)
    data = af.client.xcom("trace_to_dataset", run_id, "materialize")
    _say(f"dataset {data['version']}: {data['rows']}")

    train = _find_run(af, "train", lambda x: x.get("version") == data["version"], timeout_s)
    _say(f"train run {train['dag_run_id']} (follow it at {af.url}/dags/train/runs/{train['dag_run_id']})")
    train = _wait_run(af, "train", train["dag_run_id"], timeout_s)
    ckpt = af.client.xcom("train", train["dag_run_id"], "publish")
    job = af.client.xcom("train", train["dag_run_id"], "train")

    ev = _find_run(af, "eval_and_deploy", lambda x: x.get("run_dir") == ckpt["run_dir"], timeout_s)
    _say(f"eval_and_deploy run {ev['dag_run_id']}")
    ev = _wait_run(af, "eval_and_deploy", ev["dag_run_id"], timeout_s)
    result = af.client.xcom("eval_and_deploy", ev["dag_run_id"], "evaluate")
    rollout = af.client.xcom("eval_and_deploy", ev["dag_run_id"], "deploy") if result["passed"] else None
    new_champion = Registry(s).champion()

    summary = {
        "cycle": cycle_no,
        "wall_s": round(time.monotonic() - t0, 1),
        "stages": {r["dag_id"]: _seconds(r) for r in (t2d, train, ev)},
        "traffic": {"traces": report.traces, "malformed": report.faulty, "sampled_accuracy": report.accuracy},
        "dataset": data,
        "training": {
            "dag_run_id": train["dag_run_id"],
            "ray_job": job,
            "algorithm": ckpt["algorithm"],
            "steps": ckpt["steps"],
            "first": ckpt["first"],
            "last": ckpt["last"],
        },
        "eval": {k: result[k] for k in ("passed", "reason", "comparison", "champion_version", "mlflow_run_id")},
        "rollout": rollout,
        "champion_after": new_champion.version if new_champion else None,
        "ui": af.url,
        "password_file": str(af.client.password_file),
    }
    with history.open("a") as f:
        f.write(json.dumps(summary) + "\n")
    return summary


def _seconds(run: dict) -> float:
    start, end = (datetime.fromisoformat(run[k]) for k in ("start_date", "end_date"))
    return round((end - start).total_seconds(), 1)


def format_summary(x: dict) -> str:
    d, t, e = x["dataset"], x["training"], x["eval"]
    c = e["comparison"]

    def pair(key: str) -> str:
        a, b = (t["first"] or {}).get(key), (t["last"] or {}).get(key)
        return f"{a:.4f} -> {b:.4f}" if a is not None and b is not None else "n/a"

    signal = "reward" if t["algorithm"] == "grpo" else "margin"
    lines = [
        "",
        f"=== ctpipe cycle {x['cycle']} finished in {x['wall_s']:.0f} s ===",
        "stages           " + ", ".join(f"{dag} {sec:.0f} s" for dag, sec in x["stages"].items()),
        f"traces in        {d['traces_in']}  (simulated malformed: {x['traffic']['malformed']})",
        f"rows out         {d['rows']['traces']} traces, {d['rows']['grpo_prompts']} GRPO prompts, {d['rows']['dpo_pairs']} DPO pairs",
        f"quarantined      {d['quarantined']}",
        f"dataset          {d['version']}",
        f"training         {t['algorithm']} {t['steps']} steps, loss {pair('loss')}, {signal} {pair(signal)}",
        f"ray job          {t['ray_job']['submission_id']}",
        f"champion v{e['champion_version']:<6} accuracy {c['champion_accuracy']:.3f} (95% CI {c['champion_ci'][0]:.3f}-{c['champion_ci'][1]:.3f})",
        f"candidate        accuracy {c['candidate_accuracy']:.3f} (95% CI {c['candidate_ci'][0]:.3f}-{c['candidate_ci'][1]:.3f})"
        f" on {c['n']} held-out questions",
        f"gain             {c['gain']:+.3f} (95% CI {c['gain_ci'][0]:+.3f}..{c['gain_ci'][1]:+.3f}), McNemar p = {c['p_value']:.3g}",
        f"gate             {'PASS' if e['passed'] else 'FAIL'}: {e['reason']}",
        *_canary_lines(x.get("rollout")),
        f"champion now     v{x['champion_after']}",
        f"Airflow UI       {x['ui']}  (user admin, password in {x['password_file']})",
        f"lineage, curves  {x['ui']}/plugin/continuous-training",
    ]
    return "\n".join(lines)


def _canary_lines(r: dict | None) -> list[str]:
    if not r:
        return []
    where = r.get("serving") or {}
    lines = [f"deploy           {'promoted' if r['promoted'] else 'not promoted'}: {r['detail']}"]
    if where:
        lines.append(f"canary           {where['canary']} beside champion {where['champion']}, "
                     f"nginx {where['proxy']}, {where['engine']}")
    lines += [f"  step           {step}" for step in r.get("steps") or ()]
    return lines
