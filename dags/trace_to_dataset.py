"""
### trace_to_dataset

Turns the production traces of one data interval into a versioned training dataset.

Every trace of the interval is validated: invalid ones (bad JSON, missing or
mistyped fields, empty completions, non-finite numbers, duplicate ids,
evaluation questions) go to the version's quarantine table with a reason.
Valid ones get a `final_reward` (verifiable correctness and user feedback,
weighted by config) and feed a GRPO prompt set and DPO preference pairs,
published atomically as Parquet. An asset event on `ctpipe_training_dataset`
names the version; the `train` DAG runs on it.

Re-running an interval finds the same version instead of writing a new one.
"""

from __future__ import annotations

from airflow.sdk import DAG, CronDataIntervalTimetable, task
from airflow.sdk.exceptions import AirflowSkipException

from ctpipe.airflow.dag_args import common
from ctpipe.assets import TRAINING_DATASET
from ctpipe.config import settings

with DAG(
    dag_id="trace_to_dataset",
    # A data-interval timetable: each run covers [previous tick, this tick), not a zero-length instant.
    schedule=CronDataIntervalTimetable(settings().trace_schedule, timezone="UTC") if settings().trace_schedule else None,
    **common("data", retries=2, doc_md=__doc__),
):

    @task(outlets=[TRAINING_DATASET])
    def materialize(data_interval_start=None, data_interval_end=None, outlet_events=None) -> dict:
        from ctpipe.pipeline import materialize_interval

        extra = materialize_interval(settings(), data_interval_start, data_interval_end)
        if extra is None:
            raise AirflowSkipException("no traces arrived in this interval; nothing to publish")
        outlet_events[TRAINING_DATASET].extra = extra
        return extra

    materialize()
