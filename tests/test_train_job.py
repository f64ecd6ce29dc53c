"""The TRL training job, run as the Ray job would run it (a subprocess), on the tiny model."""

import json
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from ctpipe.jobspec import parse_progress
from tests.conftest import ROOT, job_command, job_spec, run_job

pytestmark = pytest.mark.timeout(600)


def weights(path):
    from safetensors.torch import load_file

    return load_file(str(Path(path) / "model.safetensors"))


@pytest.mark.parametrize("algorithm", ["dpo", "grpo", "sft"])
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
    assert metrics["epochs"] > 0  # the trainer's; and the passes over every row, which the gate records as learned
    rows = json.loads((Path(spec.run_dir) / "rows.json").read_text())
    assert rows["per_batch"] == (spec.train.grpo_batch_size // spec.train.grpo_num_generations if algorithm == "grpo" else 1)
    assert metrics["passes"] == (int(metrics["epochs"]) if rows["rows"] % rows["per_batch"] == 0 else 0)
    assert not list(Path(spec.run_dir).glob(".tmp-*"))


def test_a_retry_resumes_from_the_latest_complete_checkpoint(settings, base_model, training_dataset):
    spec, _ = run_job(settings, base_model, training_dataset, "dpo", "resume", steps=4, save_steps=2)
    # Simulate a half-written newer checkpoint: no trainer_state.json, so it must be ignored.
    (Path(spec.run_dir) / "trainer" / "checkpoint-6").mkdir()
    again, progress = run_job(settings, base_model, training_dataset, "dpo", "resume", steps=6, save_steps=2)
    metrics = json.loads((Path(again.run_dir) / "metrics.json").read_text())
    assert metrics["resumed_from"].endswith("checkpoint-4")
    assert [p["step"] for p in progress if "loss" in p] == [5, 6]


def start_and_signal(spec, at_step: int, sig: int) -> tuple[int, str]:
    """Run the job and send ``sig`` once it reports step ``at_step``; its exit code and output."""
    proc = subprocess.Popen(job_command(spec), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        rec = parse_progress(line)
        if rec and rec.get("step", 0) >= at_step:
            proc.send_signal(sig)
            break
    lines += proc.stdout.readlines()
    return proc.wait(timeout=300), "".join(lines)


def resume_and_finish(spec) -> dict:
    again = subprocess.run(job_command(spec), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    return json.loads((Path(spec.run_dir) / "metrics.json").read_text())


def assert_same_weights(a, b):
    import torch

    wa, wb = weights(a), weights(b)
    different = [k for k in wa if not torch.equal(wa[k], wb[k])]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"


@pytest.mark.parametrize("algorithm, steps", [("dpo", 24), ("grpo", 10)])
def test_sigterm_loses_no_step_and_the_resumed_run_ends_with_the_uninterrupted_weights(
    settings, base_model, training_dataset, algorithm, steps
):
    uninterrupted, _ = run_job(settings, base_model, training_dataset, algorithm, "whole", steps=steps, save_steps=1000)
    spec = job_spec(settings, base_model, training_dataset, algorithm, "preempted", steps=steps, save_steps=1000)
    code, out = start_and_signal(spec, at_step=5, sig=signal.SIGTERM)
    assert code == 128 + signal.SIGTERM, out[-2000:]
    done = re.search(r"preempted at step (\d+); checkpoint .*checkpoint-(\d+)", out)
    assert done, out[-2000:]
    stopped_at, saved = int(done.group(1)), int(done.group(2))
    assert saved == stopped_at >= 5  # the step running at SIGTERM finished and was saved: nothing lost
    assert "goodput-optimal save period" in out
    assert not spec.checkpoint_dir.exists()  # an interrupted run publishes no final model

    metrics = resume_and_finish(spec)
    assert metrics["resumed_from"].endswith(f"checkpoint-{saved}") and metrics["steps"] == steps
    assert [h["step"] for h in metrics["history"]] == list(range(1, steps + 1))  # history spans both attempts
    assert_same_weights(spec.checkpoint_dir, uninterrupted.checkpoint_dir)


def test_sigkill_loses_at_most_the_save_period_and_resumes_to_the_same_weights(settings, base_model, training_dataset):
    uninterrupted, _ = run_job(settings, base_model, training_dataset, "dpo", "whole", steps=20, save_steps=4)
    spec = job_spec(settings, base_model, training_dataset, "dpo", "killed", steps=20, save_steps=4)
    code, out = start_and_signal(spec, at_step=10, sig=signal.SIGKILL)
    assert code == -signal.SIGKILL
    reached = max(p["step"] for p in map(parse_progress, out.splitlines()) if p and "step" in p)
    metrics = resume_and_finish(spec)
    resumed = int(metrics["resumed_from"].rsplit("-", 1)[1])
    assert 0 <= reached - resumed <= 4
    assert not list((Path(spec.run_dir) / "trainer").glob(".tmp-*"))
    assert_same_weights(spec.checkpoint_dir, uninterrupted.checkpoint_dir)


def test_a_run_trained_to_the_end_but_not_published_is_published_without_more_training(
    settings, base_model, training_dataset
):
    spec, _ = run_job(settings, base_model, training_dataset, "dpo", "republish", steps=4, save_steps=2)
    published = weights(spec.checkpoint_dir)
    first = json.loads((Path(spec.run_dir) / "metrics.json").read_text())
    shutil.rmtree(spec.checkpoint_dir)  # as if the job died between its last save and publishing
    again, progress = run_job(settings, base_model, training_dataset, "dpo", "republish", steps=4, save_steps=2)
    assert [p for p in progress if "loss" in p] == [] and progress[-1]["done"]
    metrics = json.loads((Path(spec.run_dir) / "metrics.json").read_text())
    assert metrics["steps"] == 4 and len(metrics["history"]) == 4
    assert (metrics["epochs"], metrics["passes"]) == (first["epochs"], first["passes"]) and first["epochs"] > 0
    import torch

    assert all(torch.equal(published[k], v) for k, v in weights(again.checkpoint_dir).items())


def failing_run(spec) -> subprocess.CompletedProcess:
    out = subprocess.run(job_command(spec), capture_output=True, text=True)
    assert out.returncode != 0
    return out


def test_bad_input_fails_fast_naming_what_is_wrong(settings, base_model, training_dataset, tmp_path):
    spec = job_spec(settings, base_model, training_dataset, "dpo", "bad", steps=2)
    spec_file = Path(spec.run_dir) / "job.json"

    raw = json.loads(spec_file.read_text())
    raw["train"]["save_step"] = 5  # a typo of save_steps
    spec_file.write_text(json.dumps(raw))
    out = failing_run(spec)
    assert out.returncode == 2 and "train.save_step" in out.stderr and "Extra inputs are not permitted" in out.stderr

    spec.model_copy(update={"dataset_uri": str(tmp_path / "nope"), "dataset_version": "nope"}).write()
    out = failing_run(spec)
    assert out.returncode == 2 and "dataset version 'nope' does not exist" in out.stderr

    empty = Path(training_dataset["uri"])
    manifest = json.loads((empty / "manifest.json").read_text())
    manifest["files"]["dpo"]["rows"] = 0
    (empty / "manifest.json").write_text(json.dumps(manifest))
    spec.write()
    out = failing_run(spec)
    assert out.returncode == 2 and "has no dpo rows" in out.stderr


def test_a_run_trains_on_every_version_of_its_spec(settings, base_model, training_dataset, tmp_path):
    """A backfill's hours, announced while train's run before went on, are trained on in one run."""
    from ctpipe.jobspec import DatasetRef
    from tests.conftest import published_hour

    later = published_hour(settings, 1, 8)
    earlier = DatasetRef(uri=training_dataset["uri"], version=training_dataset["version"])
    spec = job_spec(settings, base_model, later, "dpo", "two", steps=1).model_copy(update={"more_datasets": [earlier]})
    spec.write()
    out = subprocess.run(job_command(spec), capture_output=True, text=True)
    rows = training_dataset["rows"]["dpo_pairs"] + later["rows"]["dpo_pairs"]
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"dpo: {rows} rows of dataset version {earlier.version} + {later['version']}" in out.stdout
    assert rows == 24 + 4

    spec.model_copy(update={"more_datasets": [DatasetRef(uri=str(tmp_path / "gone"), version="gone")]}).write()
    out = failing_run(spec)
    assert out.returncode == 2 and "dataset version 'gone' does not exist" in out.stderr


def test_a_checkpoint_of_another_model_is_refused(settings, base_model, training_dataset, tmp_path):
    spec, _ = run_job(settings, base_model, training_dataset, "dpo", "other", steps=2, save_steps=2)
    ckpt = Path(spec.run_dir) / "trainer" / "checkpoint-2"
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["hidden_size"] *= 2
    (ckpt / "config.json").write_text(json.dumps(cfg))
    spec = job_spec(settings, base_model, training_dataset, "dpo", "other", steps=4, save_steps=2)
    out = failing_run(spec)
    assert out.returncode == 2 and "checkpoint-2 belongs to a different model" in out.stderr and "hidden_size" in out.stderr


def test_a_diverging_loss_is_a_genuine_failure_not_a_preemption(settings, base_model, training_dataset, tmp_path):
    import torch
    from safetensors.torch import save_file

    from ctpipe.preemption import is_preemption

    broken = tmp_path / "nan-base"
    shutil.copytree(base_model, broken)
    w = weights(broken)
    w["model.norm.weight"] = torch.full_like(w["model.norm.weight"], float("nan"))
    save_file(w, str(broken / "model.safetensors"), metadata={"format": "pt"})
    spec = job_spec(settings, broken, training_dataset, "dpo", "nan", steps=3)
    out = failing_run(spec)
    assert "training diverged" in out.stderr and "loss is nan at step 1" in out.stderr
    assert not is_preemption({"status": "FAILED", "driver_exit_code": out.returncode})


def test_grpo_reward_verifies_as_the_dataset_was_labeled():
    import runpy

    from ctpipe.config import RewardConfig

    reward_for = runpy.run_path(str(ROOT / "jobs" / "train_trl.py"), run_name="not_main")["reward_for"]

    def chat(text):
        return [{"role": "user", "content": text}]

    def said(*texts):
        return [[{"role": "assistant", "content": t}] for t in texts]

    # The task's own verifier: its questions from the question (the between question's reference, here
    # 11, is one right answer among three: 12 is rewarded too); another prompt against its reference.
    reward = reward_for(RewardConfig().model_dump())
    prompts = [chat("Name a number between 10 and 14."), chat("Name a number between 10 and 14."),
               chat("What is 2 plus 3?"), chat("Spell five as digits."), chat("Capital of France?")]
    assert reward(prompts, said("12", "14", "5", "5", "paris "), answer=["11", "11", "5", "5", "Paris"]) == [
        1.0, 0.0, 1.0, 1.0, 1.0]
    assert reward.__name__ == "correctness_reward"  # the name TRL logs its mean under
    signed = [chat("Spell five as digits.")] * 4
    assert reward(signed, said("5", "-5", "5", "--5"), answer=["+5", "-5", "--5", "--5"]) == [1.0, 1.0, 0.0, 1.0]
    # Another verifier: the one the dataset was labeled with, whatever the answer's form.
    question = [chat("Half of one?")] * 4
    math = reward_for(RewardConfig(verifier="math").model_dump())
    assert math(question, said("0.5", "$\\frac{1}{2}$", "0.25", "no idea"), answer=["$\\frac{1}{2}$"] * 4) == [
        1.0, 1.0, 0.0, 0.0]
    assert math([chat("Which set?")] * 2, said("$\\{2, 3\\}$", "2"), answer=["3, 2"] * 2) == [1.0, 0.0]
    regex = reward_for(RewardConfig(verifier="regex").model_dump())
    assert regex(question[:2], said("so #### 0.5", "0.5"), answer=["0.5", "0.5"]) == [1.0, 0.0]
    exact = reward_for(RewardConfig(verifier="exact", verifiable_weight=1).model_dump())
    assert exact([chat("Capital of France?")] * 2, said("Paris", "Lyon"), answer=["paris", "paris"]) == [1.0, 0.0]
