"""
### dataset_retention

Removes the dataset versions the store keeps no longer, once a day.

A version goes once its interval ended more than `dataset.keep_for` ago
(`CTPIPE_DATASET__KEEP_FOR`, say `P30D`), and, with
`dataset.keep_superseded_for` (say `P1D`), once another version of its interval
has been its current one that long (the one its last run built or found: a
re-run with late traces, another config). The version `LATEST` names is always
kept, and so is one published within a day, and one a training run holds (its
job reads it again after a preemption, and its gate after that) until the
candidate is judged. With neither set, it has no schedule, and a manual run is
skipped, saying so, as is a run before anything is published. `ctpipe prune`
does the same from a shell, with `--dry-run` to see what would go.
"""

from __future__ import annotations

from airflow.sdk import DAG, task

from ctpipe.airflow.dag_args import common
from ctpipe.airflow.errors import fail_fast, skip
from ctpipe.config import settings

_kept = settings().dataset

with DAG(
    dag_id="dataset_retention",
    schedule="@daily" if _kept.keep_for or _kept.keep_superseded_for else None,
    **common("data", doc_md=__doc__),
):

    @task(multiple_outputs=False)  # one XCom of the dict, not one more a key
    def prune() -> dict:
        from dataclasses import asdict

        from ctpipe.errors import EmptyStore, NothingToPublish
        from ctpipe.pipeline import prune_datasets

        with fail_fast():
            try:
                done = prune_datasets(settings())
            except (NothingToPublish, EmptyStore) as e:  # no retention set; nothing published yet
                skip(str(e))
        if done.failed:  # the rest went; these are tried again tomorrow, or by a retry
            raise RuntimeError(f"{len(done.failed)} versions or records could not be removed (the log names each, "
                               "and why); the rest went")
        return asdict(done)

    prune()
