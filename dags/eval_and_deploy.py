"""
### eval_and_deploy

Decides whether a new checkpoint replaces the champion.

Candidate and champion answer the held-out test questions (never in training
data: checked against the dataset before scoring). The gate passes only a
candidate whose accuracy gain is at least `min_gain` with McNemar's exact
p-value below `alpha`. Metrics and the decision go to MLflow. A passing
candidate is registered as a new model version and handed to the deployer:
the embedded default serves it as a canary beside the champion (vLLM behind
nginx), shifts traffic in steps (`CTPIPE_CANARY__STEPS`), compares errors,
latency, time to first token, online reward, refusals and output length
after each bake, and promotes it (moves the `champion` alias) or rolls it
back with the reason. A failing candidate leaves the champion in place, with
the reason recorded. The `rollback` DAG restores an earlier version. Either way the outcome is
announced on the `ctpipe_evaluation` asset (the Continuous training page's
lineage).
"""

from __future__ import annotations

from airflow.sdk import DAG, Param, task

from ctpipe.airflow.errors import fail_fast
from ctpipe.airflow.dag_args import common
from ctpipe.assets import CHECKPOINT, EVALUATION
from ctpipe.config import settings

_gate = settings().gate

with DAG(
    dag_id="eval_and_deploy",
    schedule=[CHECKPOINT],
    **common("eval", "deploy", retries=1, doc_md=__doc__),
    params={
        "checkpoint": Param(
            "", type="string", title="Checkpoint run directory",
            description="Empty: the checkpoint that triggered this run.",
        ),
        "alpha": Param(_gate.alpha, type="number", exclusiveMinimum=0, exclusiveMaximum=1, title="Significance level"),
        "min_gain": Param(_gate.min_gain, type="number", minimum=-1, maximum=1, title="Minimum accuracy gain"),
    },
):

    @task(multiple_outputs=False)  # one XCom of the dict, not one more a key
    def evaluate(params=None, triggering_asset_events=None, run_id=None) -> dict:
        from pathlib import Path

        from ctpipe.errors import PipelineError
        from ctpipe.jobspec import SPEC_FILE
        from ctpipe.pipeline import evaluate_candidate, publish_checkpoint

        with fail_fast():
            if params["checkpoint"]:
                candidate = publish_checkpoint(str(Path(params["checkpoint"]) / SPEC_FILE))
            else:
                events = (triggering_asset_events or {}).get(CHECKPOINT) or []
                if not events:
                    raise PipelineError("no checkpoint: set the `checkpoint` param or trigger from a checkpoint event")
                candidate = dict(events[-1].extra)
            return evaluate_candidate(settings(), candidate, f"eval {run_id}", params["alpha"], params["min_gain"])

    @task.branch
    def gate(result: dict) -> str:
        return "register" if result["passed"] else "keep_champion"

    @task
    def register(result: dict) -> str:
        from ctpipe.pipeline import register_candidate

        return register_candidate(settings(), result)

    @task(retries=0, multiple_outputs=False)  # a canary that failed has been rolled back; rerunning it is a decision for a person
    def deploy(version: str) -> dict:
        # The deployer decides whether the version reaches full traffic (locally: a canary through nginx).
        from dataclasses import asdict

        from ctpipe.deploy import deployer_for

        with fail_fast():
            return asdict(deployer_for(settings()).roll_out(version))

    @task(multiple_outputs=False)
    def keep_champion(result: dict) -> dict:
        from ctpipe.registry import Registry

        print(f"champion v{result['champion_version']} stays: {result['reason']}")
        Registry(settings()).client.set_tag(result["mlflow_run_id"], "ctpipe.outcome", "champion kept")
        return {"champion_version": result["champion_version"], "reason": result["reason"]}

    @task(outlets=[EVALUATION], trigger_rule="none_failed_min_one_success", multiple_outputs=False)
    def record(result: dict, ti=None, outlet_events=None) -> dict:
        # One event per evaluation, whichever branch ran: the lineage the UI shows.
        from ctpipe.pipeline import evaluation_record

        extra = evaluation_record(result, ti.xcom_pull(task_ids="register"), ti.xcom_pull(task_ids="deploy"))
        outlet_events[EVALUATION].extra = extra
        return extra

    @task(trigger_rule="none_failed_min_one_success")
    def release(result: dict) -> None:
        # Judged, and registered (what it learned recorded) or kept out: retention may take the versions
        # its training read, whatever the deploy does. A register that failed keeps them for its retry.
        from ctpipe.pipeline import release_datasets

        release_datasets(settings(), result["candidate"])

    result = evaluate()
    registered = register(result)
    kept = keep_champion(result)
    gate(result) >> [registered, kept]
    [registered, kept] >> release(result)
    [deploy(registered), kept] >> record(result)
