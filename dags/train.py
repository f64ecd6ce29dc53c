"""
### train

Trains a candidate from the champion (or a chosen base) with GRPO or DPO as a
Ray job, when a new training dataset is published or when triggered by hand.

The `train` task is deferrable: it submits the job to the Ray cluster's Jobs
API (a local head is started when none is configured), or with
`CTPIPE_LAUNCHER=kuberay` creates a KubeRay RayJob on Kubernetes, and frees its
worker slot while a trigger follows the job; the task log shows step, loss and
reward as training goes. Marking the task failed stops the Ray job. Each DAG
run trains in its own run directory, and a retry resumes from its latest
complete checkpoint. The finished checkpoint is announced on the
`ctpipe_checkpoint` asset for `eval_and_deploy`. A later version of an
interval (a re-run with late traces) is trained on without the examples the
base model learned of it, or a model it descends from (recorded when the gate
registers a candidate), and a run with none left is skipped, saying so.
Retention keeps every version the job reads until `eval_and_deploy` has
judged the candidate (and registered it, passing).
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param, task

from ctpipe.airflow.errors import fail_fast, skip
from ctpipe.airflow.operators.ray_jobs import RayJobOperator
from ctpipe.airflow.dag_args import common
from ctpipe.assets import CHECKPOINT, TRAINING_DATASET
from ctpipe.config import ALGORITHMS, settings

_train = settings().train

with DAG(
    dag_id="train",
    schedule=[TRAINING_DATASET],
    **common("training", retries=1, doc_md=__doc__),
    params={
        "algorithm": Param(_train.algorithm, type="string", enum=list(ALGORITHMS), title="Algorithm"),
        "base_checkpoint": Param(
            "", type="string", title="Base checkpoint",
            description="Registry version number or model directory; empty: the current champion.",
        ),
        "dataset_version": Param(
            "", type="string", title="Dataset version",
            description="Empty: the versions that triggered this run (a backfill's, all), else the latest published.",
        ),
        "max_steps": Param(_train.max_steps, type="integer", minimum=1, maximum=100_000, title="Max steps"),
        "learning_rate": Param(
            _train.learning_rate, type=["null", "number"], exclusiveMinimum=0, maximum=1, title="Learning rate",
            description="Empty: the algorithm's own ("
            + ", ".join(f"{a} {r:g}" for a, r in _train.learning_rates.items()) + ").",
        ),
        "seed": Param(_train.seed, type="integer", minimum=0, title="Seed"),
    },
):

    @task(multiple_outputs=False)  # one XCom of the dict, not one more a key
    def prepare(params=None, triggering_asset_events=None, run_id=None) -> dict:
        from ctpipe.errors import NothingToPublish
        from ctpipe.pipeline import prepare_training

        events = sorted((triggering_asset_events or {}).get(TRAINING_DATASET) or [], key=lambda e: e.timestamp)
        try:
            with fail_fast():  # in the order announced: Airflow gives them in none
                return prepare_training(settings(), dict(params), [dict(e.extra) for e in events], run_id)
        except NothingToPublish as e:  # all of it learned before: the run has nothing to do
            skip(str(e))

    @task(outlets=[CHECKPOINT], multiple_outputs=False)
    def publish(job: dict, outlet_events=None, run_id=None) -> dict:
        from ctpipe.pipeline import publish_checkpoint, record_training

        with fail_fast():
            extra = publish_checkpoint(job["spec_path"]) | {"train_run_id": run_id}
            record_training(settings(), run_id, job["spec_path"])
        outlet_events[CHECKPOINT].extra = extra
        return extra

    job = prepare()
    if settings().launcher == "kuberay":
        from ctpipe.airflow.operators.kuberay import KubeRayJobOperator

        run = KubeRayJobOperator(
            task_id="train",
            spec_path="{{ ti.xcom_pull(task_ids='prepare')['spec_path'] }}",
            kubernetes_conn_id=settings().kubernetes.kubernetes_conn_id,
            poll_interval=_train.poll_interval_s,
            job_timeout=timedelta(seconds=_train.timeout_s),
            max_preemptions=_train.max_preemptions,
            preemption_backoff=timedelta(seconds=_train.preemption_backoff_s),
        )
    else:
        run = RayJobOperator(
            task_id="train",
            entrypoint="{{ ti.xcom_pull(task_ids='prepare')['entrypoint'] }}",
            runtime_env={"env_vars": {"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}},
            poll_interval=_train.poll_interval_s,
            job_timeout=timedelta(seconds=_train.timeout_s),
            max_preemptions=_train.max_preemptions,
            preemption_backoff=timedelta(seconds=_train.preemption_backoff_s),
        )
    job >> run >> publish(job)
