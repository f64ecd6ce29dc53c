"""One row per cycle, assembled from the three assets' events as the REST API v2 returns them.

A cycle is: the dataset version a ``trace_to_dataset`` run published, each ``train`` run that
used it (its state while it runs, from the event's ``created_dagruns``), the checkpoint it
announced, and the ``eval_and_deploy`` outcome for that checkpoint. Links go through the
events' ``extra`` (``dataset_version``, ``train_run_id``), so events posted through the API
by hand line up too. Parts from DAGs the user may not read are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DATASET_DAG, TRAIN_DAG, EVAL_DAG = "trace_to_dataset", "train", "eval_and_deploy"


@dataclass
class Cycle:
    dataset: dict[str, Any] | None = None  # the event; its extra under "extra"
    train_run: dict[str, Any] | None = None  # {"run_id", "state"}
    checkpoint: dict[str, Any] | None = None
    evaluation: dict[str, Any] | None = None
    hidden: list[str] = field(default_factory=list)  # DAGs whose part the user may not see

    @property
    def timestamp(self) -> str:
        return max((e["timestamp"] for e in self.parts), default="")

    @property
    def parts(self) -> list[dict[str, Any]]:
        return [e for e in (self.dataset, self.checkpoint, self.evaluation) if e]

    def involves(self, dag_id: str, run_id: str) -> bool:
        runs = {
            (DATASET_DAG, (self.dataset or {}).get("source_run_id")),
            (TRAIN_DAG, (self.train_run or {}).get("run_id")),
            (EVAL_DAG, (self.evaluation or {}).get("source_run_id")),
        }
        return (dag_id, run_id) in runs


def _trained_on(extra: dict[str, Any]) -> list[str]:
    return [extra.get("dataset_version"), *(d.get("version") for d in extra.get("more_datasets") or [])]


def _train_run_id(checkpoint: dict[str, Any]) -> str | None:
    return (checkpoint.get("extra") or {}).get("train_run_id") or checkpoint.get("source_run_id")


def assemble(
    datasets: list[dict[str, Any]],
    checkpoints: list[dict[str, Any]],
    evaluations: list[dict[str, Any]],
    readable: set[str] | None = None,
    active: dict[str, str] | None = None,
) -> list[Cycle]:
    """Cycles, newest first.

    ``readable``: DAG ids the user may read (None: all). ``active``: train runs queued or running
    now; an event's ``created_dagruns`` holds the state its run had when the event was read.
    """
    by_run = {_train_run_id(c): c for c in sorted(checkpoints, key=lambda e: e["timestamp"])}
    evals = {(e.get("extra") or {}).get("train_run_id"): e for e in sorted(evaluations, key=lambda e: e["timestamp"])}
    cycles: list[Cycle] = []
    used: set[str | None] = set()
    for ds in datasets:
        version = (ds.get("extra") or {}).get("version")
        runs = {r["run_id"]: r.get("state") for r in ds.get("created_dagruns") or [] if r.get("dag_id") == TRAIN_DAG}
        for run_id, c in by_run.items():
            if version and version in _trained_on(c.get("extra") or {}):
                runs.setdefault(run_id, "success")
        if not runs:
            cycles.append(Cycle(dataset=ds))
        for run_id, state in runs.items():
            used.add(run_id)
            if run_id in by_run:
                state = "success"
            elif active is not None:
                state = active.get(run_id) or ("ended without a checkpoint" if state in ("queued", "running") else state)
            cycles.append(Cycle(ds, {"run_id": run_id, "state": state}, by_run.get(run_id), evals.get(run_id)))
    for run_id, c in by_run.items():  # trained on a dataset whose event is not in the window
        if run_id not in used:
            cycles.append(Cycle(None, {"run_id": run_id, "state": "success"}, c, evals.get(run_id)))
    if readable is not None:
        cycles = [v for v in (_visible(c, readable) for c in cycles) if v.parts or v.train_run]
    return sorted(cycles, key=lambda c: c.timestamp, reverse=True)


def _visible(c: Cycle, readable: set[str]) -> Cycle:
    hidden = [d for d in (DATASET_DAG, TRAIN_DAG, EVAL_DAG) if d not in readable]
    return Cycle(
        dataset=c.dataset if DATASET_DAG in readable else None,
        train_run=c.train_run if TRAIN_DAG in readable else None,
        checkpoint=c.checkpoint if TRAIN_DAG in readable else None,
        evaluation=c.evaluation if EVAL_DAG in readable else None,
        hidden=hidden,
    )
