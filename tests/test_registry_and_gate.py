"""The registry and the eval gate: refusing a collapsed candidate, registering once per eval run."""

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ctpipe import datasets
from ctpipe.pipeline import evaluate_candidate, release_datasets
from ctpipe.registry import Registry
from tests.conftest import run_job

pytestmark = pytest.mark.timeout(600)


def test_an_over_optimized_candidate_is_refused(settings, base_model, training_dataset):
    registry = Registry(settings)
    champion = registry.ensure_champion(base_model)
    spec, _ = run_job(settings, base_model, training_dataset, "dpo", "collapse", steps=30, learning_rate=3e-2)
    candidate = {
        "checkpoint": str(spec.checkpoint_dir), "dataset_uri": training_dataset["uri"],
        "dataset_version": training_dataset["version"], "algorithm": "dpo", "base_version": champion.version,
        "run_dir": spec.run_dir,
    }
    # Judged (and, passing, registered: the release task's), the candidate's training holds its versions
    # from retention no more; another run's still does.
    store, until = datasets.Output(Path(training_dataset["uri"]).parent), datetime.now(timezone.utc) + timedelta(days=1)
    for run in (Path(spec.run_dir).name, "manual__another"):
        store.hold(run, [training_dataset["version"]], until)
    result = evaluate_candidate(settings, candidate, "eval collapse", alpha=0.05, min_gain=0.0)
    assert len(list((Path(training_dataset["uri"]).parent / "_in_use").iterdir())) == 2
    release_datasets(settings, result["candidate"])
    assert store.held(datetime.now(timezone.utc)) == ({training_dataset["version"]}, [])
    assert [p.name for p in (Path(training_dataset["uri"]).parent / "_in_use").iterdir()] == ["manual__another"]
    cmp = result["comparison"]
    assert cmp["candidate_accuracy"] < cmp["champion_accuracy"]
    assert result["passed"] is False and "not above" in result["reason"]
    assert registry.champion().version == champion.version
    run = registry.client.get_run(result["mlflow_run_id"])
    assert run.data.tags["ctpipe.decision"] == "fail" and run.data.tags["ctpipe.reason"] == result["reason"]


def test_registering_is_idempotent_per_run(settings, base_model):
    registry = Registry(settings)
    first = registry.ensure_champion(base_model)
    run = registry.start_run("eval retry")
    v = registry.register(run.info.run_id, base_model, tags={"origin": "test"})
    assert registry.register(run.info.run_id, base_model, tags={"origin": "test"}) == v
    assert v != first.version
    assert len(registry.client.search_model_versions(f"name='{settings.model_name}'")) == 2
