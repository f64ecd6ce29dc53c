"""The TRL training job, run as the Ray job would run it (a subprocess), on the tiny model."""

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from ctpipe.config import Settings
from ctpipe.jobspec import JobSpec, parse_progress
from ctpipe.pipeline import materialize_interval
from tests.conftest import T0, trace, write_traces

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def dataset(settings):
    lines = []
    for i in range(24):
        a, b = i, 30 + i
        lines += [
            trace(2 * i, f"What is {a} plus {b}?", str(a + b), feedback={"thumb": "up", "rating": None}),
            trace(2 * i + 1, f"What is {a} plus {b}?", str(a + b + 1), feedback={"thumb": "down", "rating": None}),
        ]
    write_traces(settings.traces_dir, lines)
    return materialize_interval(settings, T0, T0 + timedelta(hours=1))


def run_job(settings: Settings, base_model, dataset, algorithm: str, run: str, steps: int, save_steps: int = 50):
    spec = JobSpec(
        algorithm=algorithm, base_checkpoint=str(base_model), base_version="1",
        dataset_uri=dataset["uri"], dataset_version=dataset["version"], run_dir=str(settings.runs_dir / run),
        max_steps=steps, learning_rate=1e-3, seed=0,
        train=settings.train.model_copy(update={"grpo_batch_size": 8, "dpo_batch_size": 8, "grpo_num_generations": 4, "save_steps": save_steps}),
    )
    out = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "train_trl.py"), "--spec", str(spec.write())],
        capture_output=True, text=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return spec, [p for p in map(parse_progress, out.stdout.splitlines()) if p]


def weights(path):
    from safetensors.torch import load_file

    return load_file(str(Path(path) / "model.safetensors"))


@pytest.mark.parametrize("algorithm", ["dpo", "grpo"])
def test_training_changes_the_weights_and_reports_progress(settings, base_model, dataset, algorithm):
    import torch

    spec, progress = run_job(settings, base_model, dataset, algorithm, algorithm, steps=4)
    steps = [p["step"] for p in progress if "step" in p and not p.get("done")]
    assert steps == [1, 2, 3, 4]
    assert progress[-1]["done"] is True
    after, before = weights(spec.checkpoint_dir), weights(base_model)
    assert any(not torch.equal(after[k], before[k]) for k in before)
    metrics = json.loads((Path(spec.run_dir) / "metrics.json").read_text())
    assert metrics["steps"] == 4 and metrics["first"]["loss"] is not None
    assert not list(Path(spec.run_dir).glob(".tmp-*"))


def test_a_retry_resumes_from_the_latest_complete_checkpoint(settings, base_model, dataset):
    spec, _ = run_job(settings, base_model, dataset, "dpo", "resume", steps=4, save_steps=2)
    # Simulate a half-written newer checkpoint: no trainer_state.json, so it must be ignored.
    (Path(spec.run_dir) / "trainer" / "checkpoint-6").mkdir()
    again, progress = run_job(settings, base_model, dataset, "dpo", "resume", steps=6, save_steps=2)
    metrics = json.loads((Path(again.run_dir) / "metrics.json").read_text())
    assert metrics["resumed_from"].endswith("checkpoint-4")
    assert [p["step"] for p in progress if "loss" in p] == [5, 6]
