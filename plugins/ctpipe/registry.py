"""The model registry: MLflow model versions, the ``champion`` alias, and eval records.

A local SQLite store under ``<home>/mlflow`` by default; ``CTPIPE_MLFLOW_TRACKING_URI``
points it at a tracking server. Checkpoints are logged as run artifacts and a
model version points at them, so the registry alone can restore any version.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ctpipe.atomic import atomic_dir
from ctpipe.config import Settings

log = logging.getLogger(__name__)

CHAMPION = "champion"
PREVIOUS = "previous-champion"  # what a manual rollback restores by default
ARTIFACT = "checkpoint"  # the run artifact a model version points at
EXPERIMENT = "ctpipe"


@dataclass(frozen=True)
class Version:
    version: str
    path: Path
    tags: dict


class Registry:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.name = settings.model_name

    @cached_property
    def client(self):
        import mlflow
        from mlflow import MlflowClient

        # mlflow.* helpers read the process-wide URI; set it so they agree with the client.
        mlflow.set_tracking_uri(self.settings.tracking_uri)
        mlflow.set_registry_uri(self.settings.tracking_uri)
        if self.settings.mlflow_tracking_uri is None:
            (self.settings.home / "mlflow").mkdir(parents=True, exist_ok=True)
        return MlflowClient(self.settings.tracking_uri, self.settings.tracking_uri)

    def experiment_id(self) -> str:
        exp = self.client.get_experiment_by_name(EXPERIMENT)
        if exp is not None:
            return exp.experiment_id
        location = None
        if self.settings.mlflow_tracking_uri is None:
            location = self.settings.artifact_root.as_uri()
        try:
            return self.client.create_experiment(EXPERIMENT, artifact_location=location)
        except Exception:  # a concurrent task created it first
            return self.client.get_experiment_by_name(EXPERIMENT).experiment_id

    def start_run(self, run_name: str, tags: dict | None = None):
        return self.client.create_run(self.experiment_id(), run_name=run_name, tags=tags or {})

    def run_for(self, dag_id: str, dag_run_id: str, kind: str):
        """The MLflow run of one DAG run's step (``kind``: train, eval), or None."""
        found = self.client.search_runs(
            [self.experiment_id()],
            f"tags.`ctpipe.dag_id` = '{dag_id}' and tags.`ctpipe.dag_run_id` = '{dag_run_id}' and tags.`ctpipe.kind` = '{kind}'",
            max_results=1,
        )
        return found[0] if found else None

    def training_run(self, dag_id: str, dag_run_id: str, params: dict) -> str:
        """The training's MLflow run, created before the job starts so links to it work at once; idempotent."""
        run = self.run_for(dag_id, dag_run_id, "train")
        if run is None:
            tags = {"ctpipe.kind": "train", "ctpipe.dag_id": dag_id, "ctpipe.dag_run_id": dag_run_id}
            run = self.start_run(f"train {dag_run_id}", tags=tags)
            for k, v in params.items():
                self.client.log_param(run.info.run_id, k, v)
        return run.info.run_id

    def log_history(self, run_id: str, history: list[dict]) -> None:
        """Every numeric metric of the training history, by step; ends the run."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [
            Metric(k, float(v), now, int(h["step"]))
            for h in history for k, v in h.items()
            if k not in ("step", "max_steps") and isinstance(v, (int, float)) and math.isfinite(v)
        ]
        for i in range(0, len(metrics), 1000):  # MLflow's batch limit
            self.client.log_batch(run_id, metrics=metrics[i:i + 1000])
        self.client.set_terminated(run_id)

    def register(self, run_id: str, checkpoint: Path, tags: dict[str, str]) -> str:
        """Log ``checkpoint`` under ``run_id`` and register it as a new model version.

        Idempotent per run: a retried task finds the version it registered before.
        """
        from mlflow.exceptions import MlflowException

        for mv in self.client.search_model_versions(f"name='{self.name}' and run_id='{run_id}'"):
            log.info("run %s already registered %s version %s", run_id, self.name, mv.version)
            return str(mv.version)
        self.client.log_artifacts(run_id, str(checkpoint), artifact_path=ARTIFACT)
        try:
            self.client.create_registered_model(self.name)
        except MlflowException as e:
            if "RESOURCE_ALREADY_EXISTS" not in str(e.error_code):
                raise
        source = f"{self.client.get_run(run_id).info.artifact_uri}/{ARTIFACT}"
        mv = self.client.create_model_version(self.name, source=source, run_id=run_id, tags=tags)
        log.info("registered %s version %s from %s", self.name, mv.version, source)
        return str(mv.version)

    def lineage(self, version: str, since: int = 0) -> dict[str, str]:
        """``version`` and those it was trained from (each registered candidate's ``base_version`` tag),
        back to the first, or to the first before version ``since``, each with the MLflow run that
        logged it: a model is registered after the one it was trained from, and each step back is a
        request to the registry, thousands of them after a year of hourly promotions. None for a
        version the registry does not hold (a model directory)."""
        from mlflow.exceptions import MlflowException

        found: dict[str, str] = {}
        while version and version not in found and not (version.isdigit() and int(version) < since):
            try:
                mv = self.client.get_model_version(self.name, version)
            except MlflowException as e:  # another error (the server down) fails the task, and its retry asks again
                if e.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):  # no such version, "path"
                    break
                raise
            found[str(mv.version)] = mv.run_id or ""
            version = mv.tags.get("base_version")
        return found

    def alias(self, alias: str) -> str | None:
        """The version an alias points at, or None."""
        from mlflow.exceptions import MlflowException

        try:
            return str(self.client.get_model_version_by_alias(self.name, alias).version)
        except MlflowException:
            return None

    def champion(self) -> Version | None:
        version = self.alias(CHAMPION)
        return None if version is None else self.get(version)

    def set_champion(self, version: str) -> str | None:
        """Move ``champion`` to ``version``; the version it leaves gets ``previous-champion``. Returns that one."""
        current = self.alias(CHAMPION)
        self.client.set_registered_model_alias(self.name, CHAMPION, version)
        if current is not None and current != str(version):
            self.client.set_registered_model_alias(self.name, PREVIOUS, current)
            return current
        return None

    def get(self, version: str) -> Version:
        """A version with a local copy of its checkpoint (downloaded once, atomically)."""
        from mlflow.artifacts import download_artifacts
        from mlflow.exceptions import MlflowException

        try:
            mv = self.client.get_model_version(self.name, version)
        except MlflowException as e:
            raise LookupError(f"model {self.name!r} has no version {version!r}") from e
        local = self.settings.models_dir / "registry" / self.name / str(version)
        if not (local / ARTIFACT / "config.json").exists():
            with atomic_dir(local, replace=True) as tmp:  # replace: a directory left by an older layout
                download_artifacts(artifact_uri=mv.source, dst_path=str(tmp), tracking_uri=self.settings.tracking_uri)
        return Version(version=str(mv.version), path=local / ARTIFACT, tags=dict(mv.tags))

    def ensure_champion(self, base_checkpoint: Path) -> Version:
        """The champion; on a fresh registry, the base model becomes version 1 and champion."""
        current = self.champion()
        if current is not None:
            return current
        run = self.start_run("bootstrap-base-model", tags={"ctpipe.kind": "bootstrap"})
        version = self.register(run.info.run_id, base_checkpoint, tags={"origin": "base", "checkpoint": str(base_checkpoint)})
        self.client.set_terminated(run.info.run_id)
        self.set_champion(version)
        return self.get(version)
