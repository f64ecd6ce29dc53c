"""Airflow plugin: the "Continuous training" page (navigation and DAG-run tab) and the train task's links."""

from airflow.plugins_manager import AirflowPlugin

from ctpipe.airflow.links import MlflowRunLink, RayJobLink
from ctpipe.ui.app import MOUNT, create_app


class CtpipeUiPlugin(AirflowPlugin):
    name = "ctpipe_ui"
    fastapi_apps = [{"app": create_app(), "url_prefix": MOUNT, "name": "Continuous training"}]
    external_views = [
        {"name": "Continuous training", "href": MOUNT.lstrip("/") + "/", "destination": "nav",
         "url_route": "continuous-training", "category": "browse"},
        {"name": "Continuous training", "href": MOUNT.lstrip("/") + "/runs/{DAG_ID}/{RUN_ID}", "destination": "dag_run",
         "url_route": "continuous-training-run"},
    ]
    operator_extra_links = [RayJobLink(), MlflowRunLink()]
