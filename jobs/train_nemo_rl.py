"""Train one round of GRPO with NeMo-RL on a published dataset version, inside NeMo-RL's container.

Usage (as a Ray job entrypoint on a cluster running ``train.nemo_rl.image``):

    python jobs/train_nemo_rl.py --spec <run_dir>/job.json

The spec (``ctpipe.jobspec.JobSpec``, with ``train.grpo_trainer = "nemo_rl"``) is the
same one the TRL job reads. The job:

* converts the dataset's GRPO table into ``<run_dir>/nemo_rl/train.jsonl`` (question,
  reference answer) for NeMo-RL's ``ResponseDataset`` and ``math`` environment;
* writes ``<run_dir>/nemo_rl/grpo.yaml`` (``ctpipe.nemo_rl.build_config``), checked
  against NeMo-RL's documented keys and types;
* runs ``examples/run_grpo.py --config grpo.yaml`` from ``train.nemo_rl.home``. NeMo-RL
  resumes by itself from the newest ``step_N`` in the run's checkpoint directory:
  weights, optimizer, scheduler, step counters and the dataloader position;
* forwards SIGTERM to NeMo-RL and exits 143 (a preemption, resubmitted by Airflow).
  NeMo-RL saves every ``train.save_steps`` steps and at ``checkpoint_must_save_by``,
  not on a signal, so a preemption loses up to one save period;
* converts the newest checkpoint to Hugging Face format with NeMo-RL's
  ``convert_dcp_to_hf.py`` into ``<run_dir>/checkpoint`` (atomically) for the eval gate,
  and writes ``<run_dir>/metrics.json``.

A resumed NeMo-RL run does not end with the same weights as an uninterrupted one:
NeMo-RL re-seeds its random generators from ``grpo.seed`` at every start instead of
restoring them, vLLM's sampling state is not saved, and its KL reference model after
a resume is the resumed weights rather than the base checkpoint.
Exit codes: 0 done, 143 preempted, 2 bad input, 1 NeMo-RL or the converter failed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from ctpipe.atomic import atomic_dir
from ctpipe.errors import PipelineError
from ctpipe.jobspec import finish, learned, load_job, run_entrypoint, training_data, whole_passes
from ctpipe.nemo_rl import (
    build_config, config_yaml, convert_command, latest_step, paths, step_number, train_command, write_train_data,
)
from ctpipe.preemption import PREEMPTED_EXIT



def run_forwarding_sigterm(cmd: list[str], cwd: str) -> tuple[int, bool]:
    """Run ``cmd``; a SIGTERM to us goes to its whole process group. Its exit code, and whether we were signalled."""
    child = subprocess.Popen(cmd, cwd=cwd, start_new_session=True)
    signalled = False

    def forward(signum, frame):
        nonlocal signalled
        signalled = True
        print("SIGTERM received: passing it to NeMo-RL", flush=True)
        os.killpg(child.pid, signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        return child.wait(), signalled
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(spec_path: str) -> int:
    spec, manifests = load_job(spec_path)
    if spec.algorithm != "grpo":
        raise PipelineError(f"algorithm={spec.algorithm!r}: NeMo-RL runs GRPO here; DPO runs with jobs/train_trl.py")
    nemo = spec.train.nemo_rl
    if not (Path(nemo.home) / "examples").is_dir():
        raise PipelineError(f"train.nemo_rl.home={nemo.home!r} holds no NeMo-RL examples/: run inside {nemo.image}")
    p = paths(spec)
    prompts = write_train_data(training_data(manifests, "grpo", ["prompt", "answer"], learned(spec.left_out)), p["train_data"])
    config = build_config(spec, prompts)
    p["config"].write_text(config_yaml(config))
    resumed = latest_step(p["checkpoints"])
    print(f"NeMo-RL GRPO: {prompts} prompts, {spec.max_steps} steps, config {p['config']}"
          + (f", resuming from {resumed}" if resumed else ""), flush=True)

    code, signalled = run_forwarding_sigterm(train_command(spec, sys.executable), cwd=nemo.home)
    if signalled:
        print(f"preempted; newest checkpoint {latest_step(p['checkpoints'])}", flush=True)
        return PREEMPTED_EXIT
    if code != 0:
        print(f"NeMo-RL exited with code {code}", file=sys.stderr)
        return code if code > 0 else 128 - code

    last = latest_step(p["checkpoints"])
    if last is not None and step_number(last) < spec.max_steps and nemo.checkpoint_must_save_by:
        # NeMo-RL saved and stopped at its deadline: a planned preemption, resubmitted to resume.
        print(f"NeMo-RL stopped at {last.name} of {spec.max_steps} (checkpoint_must_save_by)", flush=True)
        return PREEMPTED_EXIT
    if last is None or step_number(last) < spec.max_steps:
        raise PipelineError(f"NeMo-RL finished but {p['checkpoints']} has no step_{spec.max_steps} checkpoint (newest: {last})")
    with atomic_dir(spec.checkpoint_dir, replace=True) as tmp:
        tmp.rmdir()  # the converter refuses an existing output directory
        subprocess.run(convert_command(last, tmp, sys.executable), cwd=nemo.home, check=True)
    info = json.loads((last / "training_info.json").read_text())
    per_batch = spec.train.grpo_batch_size // spec.train.grpo_num_generations
    metrics = {
        "algorithm": "grpo",
        "trainer": "nemo_rl",
        "steps": step_number(last),
        "epochs": (epochs := step_number(last) * per_batch / max(prompts, 1)),
        "passes": whole_passes(epochs, prompts, per_batch),  # what register_candidate records as learned
        "resumed_from": str(resumed) if resumed else None,
        "first": None,
        "last": None,
        "history": [],
        "training_info": info,
        "checkpoint": str(spec.checkpoint_dir),
    }
    return finish(spec, metrics)


if __name__ == "__main__":
    run_entrypoint(main, __doc__.splitlines()[0])
