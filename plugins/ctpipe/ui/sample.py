"""A synthetic cycle history posted through the REST API, for the page's browser test and benchmark.

The DAGs are paused first: an event posted on their assets would otherwise start real runs.
"""

from __future__ import annotations

import math
import random

from ctpipe.airflow_local import AirflowClient
from ctpipe.ui.app import ASSETS
from ctpipe.ui.lineage import DATASET_DAG, EVAL_DAG, TRAIN_DAG


def asset_ids(client: AirflowClient) -> dict[str, int]:
    found = client.call("GET", "/assets", params={"name_pattern": "ctpipe_", "limit": 100})["assets"]
    by_name = {a["name"]: a["id"] for a in found}
    return {kind: by_name[name] for kind, name in ASSETS.items()}


def post_history(client: AirflowClient, cycles: int, *, seed: int = 0, dataset_name=lambda i: f"sample-{i:04d}") -> None:
    for dag_id in (DATASET_DAG, TRAIN_DAG, EVAL_DAG):
        client.call("PATCH", f"/dags/{dag_id}", json={"is_paused": True})
    ids = asset_ids(client)
    rng = random.Random(seed)
    champion, version = 0.25, 1
    for i in range(cycles):
        run = f"sample__{i:04d}"
        dataset = dataset_name(i)
        steps = list(range(1, 41))
        client.call("POST", "/assets/events", json={"asset_id": ids["dataset"], "extra": {
            "version": dataset, "interval": [f"2026-11-{1 + i % 28:02d}T00:00:00", f"2026-11-{1 + i % 28:02d}T00:59:59"],
            "rows": {"traces": 760, "grpo_prompts": 190, "dpo_pairs": 99}, "traces_in": 768, "quarantined": 8,
        }})
        client.call("POST", "/assets/events", json={"asset_id": ids["checkpoint"], "extra": {
            "dataset_version": dataset, "train_run_id": run, "algorithm": "grpo", "steps": 40, "base_version": str(version),
            "checkpoint": f"/home/runs/{run}/checkpoint",
            "curve": {"step": steps, "loss": [math.exp(-s / 15) + rng.random() * 0.05 for s in steps],
                      "reward": [min(1.0, 0.1 + s / 60 + rng.random() * 0.1) for s in steps]},
        }})
        candidate = max(0.0, min(1.0, champion + rng.uniform(-0.03, 0.06)))
        passed = candidate - champion > 0.03
        gain = candidate - champion
        client.call("POST", "/assets/events", json={"asset_id": ids["evaluation"], "extra": {
            "train_run_id": run, "dataset_version": dataset, "algorithm": "grpo", "passed": passed,
            "reason": f"gain {gain:+.3f}, McNemar p={'0.001' if passed else '0.4'}" + ("" if passed else " is not significant"),
            "comparison": {"n": 500, "champion_accuracy": champion, "candidate_accuracy": candidate,
                           "champion_ci": [champion - 0.04, champion + 0.04], "candidate_ci": [candidate - 0.04, candidate + 0.04],
                           "gain": gain, "p_value": 0.001 if passed else 0.4},
            "champion_version": str(version), "registered_version": str(version + 1) if passed else None,
            "rollout": {"promoted": True, "previous_champion": str(version), "detail": "champion alias moved"} if passed else None,
        }})
        if passed:
            champion, version = candidate, version + 1
