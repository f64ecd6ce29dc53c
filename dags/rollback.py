"""
### rollback

Puts an earlier model version back in service, in one step.

Trigger it from the form with the version to restore (empty: the version the
last promotion replaced, MLflow alias `previous-champion`). The version's
server is started if none runs, takes all traffic at once (a canary in
progress is removed), and becomes `champion` in MLflow; the version it
replaces becomes `previous-champion`, so triggering again undoes the rollback.
A version missing from the registry fails the run before anything changes.
"""

from __future__ import annotations

from airflow.sdk import DAG, Param, task

from ctpipe.airflow.dag_args import common
from ctpipe.airflow.errors import fail_fast
from ctpipe.config import settings

with DAG(
    dag_id="rollback",
    schedule=None,
    **common("deploy", doc_md=__doc__),
    params={
        "version": Param(
            "", type="string", pattern=r"^[0-9]*$", title="Version to restore",
            description="A registered version number; empty: the previous champion.",
        ),
        "reason": Param("manual rollback", type="string", minLength=1, title="Reason", description="Recorded in MLflow."),
    },
):

    @task(multiple_outputs=False)  # one XCom of the dict, not one more a key
    def restore(params=None) -> dict:
        from dataclasses import asdict

        from ctpipe.deploy import deployer_for

        with fail_fast():
            return asdict(deployer_for(settings()).restore(params["version"] or None, params["reason"]))

    restore()
