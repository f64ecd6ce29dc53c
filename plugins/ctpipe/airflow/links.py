"""Task links computed from the task instance's identity alone, so they work while the task runs."""

from __future__ import annotations

from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

from ctpipe.airflow.operators.kuberay import KubeRayJobOperator
from ctpipe.airflow.operators.ray_jobs import RayJobOperator, submission_id_for


class RayJobLink(BaseOperatorLink):
    """The Ray dashboard's page of the job this task try submitted (its submission id is deterministic)."""

    name = "Ray job"
    operators = [RayJobOperator]

    def get_link(self, operator, *, ti_key) -> str:
        from ctpipe.config import settings

        dashboard = (getattr(operator, "dashboard_url", None) or settings().ray_dashboard_url).rstrip("/")
        return f"{dashboard}/#/jobs/{submission_id_for(ti_key.dag_id, ti_key.task_id, ti_key.run_id, ti_key.try_number)}"


class MlflowRunLink(BaseOperatorLink):
    """The training's MLflow run (opened before the job starts), through the Continuous training view."""

    name = "MLflow run"
    operators = [RayJobOperator, KubeRayJobOperator]

    def get_link(self, operator, *, ti_key) -> str:
        from airflow.configuration import conf

        base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
        return f"{base}/ctpipe/mlflow/{quote(ti_key.dag_id, safe='')}/{quote(ti_key.run_id, safe='')}"
