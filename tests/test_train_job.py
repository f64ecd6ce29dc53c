"""The TRL training job, run as the Ray job would run it (a subprocess), on the tiny model."""

import json
from pathlib import Path

import pytest

from tests.conftest import run_job

pytestmark = pytest.mark.timeout(600)


def weights(path):
    from safetensors.torch import load_file

    return load_file(str(Path(path) / "model.safetensors"))


@pytest.mark.parametrize("algorithm", ["dpo", "grpo"])
def test_training_changes_the_weights_and_reports_progress(settings, base_model, training_dataset, algorithm):
    import torch

    spec, progress = run_job(settings, base_model, training_dataset, algorithm, algorithm, steps=4)
    steps = [p["step"] for p in progress if "step" in p and not p.get("done")]
    assert steps == [1, 2, 3, 4]
    assert progress[-1]["done"] is True
    after, before = weights(spec.checkpoint_dir), weights(base_model)
    assert any(not torch.equal(after[k], before[k]) for k in before)
    metrics = json.loads((Path(spec.run_dir) / "metrics.json").read_text())
    assert metrics["steps"] == 4 and metrics["first"]["loss"] is not None
    assert not list(Path(spec.run_dir).glob(".tmp-*"))


def test_a_retry_resumes_from_the_latest_complete_checkpoint(settings, base_model, training_dataset):
    spec, _ = run_job(settings, base_model, training_dataset, "dpo", "resume", steps=4, save_steps=2)
    # Simulate a half-written newer checkpoint: no trainer_state.json, so it must be ignored.
    (Path(spec.run_dir) / "trainer" / "checkpoint-6").mkdir()
    again, progress = run_job(settings, base_model, training_dataset, "dpo", "resume", steps=6, save_steps=2)
    metrics = json.loads((Path(again.run_dir) / "metrics.json").read_text())
    assert metrics["resumed_from"].endswith("checkpoint-4")
    assert [p["step"] for p in progress if "loss" in p] == [5, 6]
