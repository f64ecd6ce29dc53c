"""
### trace_to_dataset

Turns the production traces of one data interval into a versioned training dataset.

Reads the interval's traces (our schema, OpenAI chat logs, OTel GenAI spans,
Langfuse or Helicone exports, detected per record) from `CTPIPE_TRACE_SOURCE` (any fsspec
URI; default: the local trace store). Every trace read ends up in the version's
trace table or in its quarantine table with a reason (bad JSON or UTF-8,
missing or mistyped fields, non-finite numbers, oversized records, truncated
files, unknown formats, evaluation contamination, duplicates); the task log
says `traces in = rows + quarantined`. PII is scrubbed, rewards are labeled
(verifiable, feedback, judge; weights in config), and a GRPO prompt set and DPO
preference pairs are built, published atomically as Parquet with a manifest
under `CTPIPE_DATASET_STORE` (any fsspec URI; default: the local dataset store).
An asset event on `ctpipe_training_dataset` names the version; the `train` DAG
runs on it.

Re-running an interval finds the same version instead of writing a new one, and
does not announce it again (the run is skipped, saying so): `train` does not
train twice on the same data. Backfills work like any data-interval DAG's; with
`CTPIPE_TRACE_CATCH_UP_FROM` set, hours missed while the scheduler was down are
built when it comes back, oldest first. A
manual run builds its data interval, or the interval given as `start` and `end`
in the trigger form (both, with a timezone), which a manual-only schedule needs.
With `dataset.arrival_lag` set (traces reach the source late: a log shipper
buffers them), a run first waits that long after the end of the interval it
builds (the trigger form's too), deferred to the triggerer. An interval that
has not ended is not built: its traces are not all in. Marking the task failed,
or stopping its run, stops the materializer where it is: nothing more is
published.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.standard.sensors.date_time import DateTimeSensorAsync
from airflow.sdk import DAG, CronDataIntervalTimetable, Param, task

from ctpipe.airflow.dag_args import common
from ctpipe.airflow.errors import fail_fast, skip
from ctpipe.assets import TRAINING_DATASET
from ctpipe.config import settings


def _ready_at(params, data_interval_end) -> str:
    """The time the wait for late traces ends at: the end of the interval the run builds (the trigger
    form's, when given, not the run's) and the arrival lag."""
    from ctpipe.pipeline import ready_at

    return ready_at(params, data_interval_end, settings().dataset.arrival_lag)


def _bound(name: str) -> Param:
    return Param(None, type=["null", "string"], format="date-time", title=name.capitalize(),
                 description=f"The {name} of the interval to build (with a timezone); empty, with the other: the "
                 "run's data interval.")


with DAG(
    dag_id="trace_to_dataset",
    # A data-interval timetable: each run covers [previous tick, this tick), not a zero-length instant.
    schedule=CronDataIntervalTimetable(settings().trace_schedule, timezone="UTC") if settings().trace_schedule else None,
    params={"start": _bound("start"), "end": _bound("end")},
    user_defined_macros={"ready_at": _ready_at},
    **common("data", retries=2, doc_md=__doc__, catch_up_from=settings().trace_catch_up_from),
):

    # An inlet too: a run reads the asset's events to tell whether the run that marked a version
    # announced it. One XCom of the dict it returns, not one more a key.
    @task(inlets=[TRAINING_DATASET], outlets=[TRAINING_DATASET], multiple_outputs=False)
    def materialize(params=None, data_interval_start=None, data_interval_end=None, run_id=None, dag_run=None,
                    inlet_events=None, outlet_events=None) -> dict:
        from ctpipe.errors import NothingToPublish, sigterm_interrupts
        from ctpipe.pipeline import interval_to_build, materialize_interval

        def in_airflow(version: str, by: str, marked_at: datetime | None) -> bool:
            # Its event comes after the mark (a minute's leeway for clocks), not the asset's whole history.
            since = marked_at - timedelta(minutes=1) if marked_at else dag_run.run_after
            return any(e.source_run_id == by and (e.extra or {}).get("version") == version
                       for e in inlet_events[TRAINING_DATASET].after(since))

        with fail_fast():  # a bad interval will not mend on retry
            start, end = interval_to_build(dict(params or {}), data_interval_start, data_interval_end)
        try:  # marked failed, or its run stopped: nothing published; a missing source fails at once
            with sigterm_interrupts(), fail_fast():
                extra = materialize_interval(settings(), start, end, run_id, in_airflow)
        except NothingToPublish as e:  # the skip's reason, in the task's log and the run's tab
            skip(f"nothing to publish: {e}")
        outlet_events[TRAINING_DATASET].extra = extra
        return extra

    made = materialize()
    if settings().dataset.arrival_lag:  # the interval's traces are still arriving until its end and the lag
        wait = DateTimeSensorAsync(task_id="wait_for_late_traces", target_time="{{ ready_at(params, data_interval_end) }}")
        wait >> made
