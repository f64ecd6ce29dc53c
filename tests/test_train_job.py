"""The TRL training job, run as the Ray job would run it (a subprocess), on the tiny model."""

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest

from ctpipe.jobspec import parse_progress
from tests.conftest import job_command, job_spec, run_job

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


def test_sigterm_saves_at_the_current_step_and_the_resubmission_finishes(settings, base_model, training_dataset):
    spec = job_spec(  # save_steps 1000: no periodic saves, only the one SIGTERM asks for
        settings, base_model, training_dataset, "dpo", "preempted", steps=60, save_steps=1000, learning_rate=1e-4
    )
    cmd = job_command(spec)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        rec = parse_progress(line)
        if rec and rec.get("step", 0) >= 5:
            proc.send_signal(signal.SIGTERM)
            break
    lines += proc.stdout.readlines()
    assert proc.wait(timeout=300) == 128 + signal.SIGTERM
    done = re.search(r"preempted at step (\d+); checkpoint .*checkpoint-(\d+)", "".join(lines))
    assert done, lines[-5:]
    stopped_at, saved = int(done.group(1)), int(done.group(2))
    assert saved == stopped_at >= 5  # nothing trained was lost
    assert "goodput-optimal save period" in "".join(lines)
    assert (Path(spec.run_dir) / "trainer" / f"checkpoint-{saved}" / "trainer_state.json").exists()
    assert not spec.checkpoint_dir.exists()  # an interrupted run publishes no final model

    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    metrics = json.loads((Path(spec.run_dir) / "metrics.json").read_text())
    assert metrics["resumed_from"].endswith(f"checkpoint-{saved}") and metrics["steps"] == 60
    assert (spec.checkpoint_dir / "config.json").exists()
