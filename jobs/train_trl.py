"""Train one round of GRPO or DPO with TRL on a published dataset version.

Usage (as a Ray job entrypoint, or by hand):

    python jobs/train_trl.py --spec <run_dir>/job.json

The spec (``ctpipe.jobspec.JobSpec``) names the algorithm, the base checkpoint,
the dataset version and the run directory. The job:

* resumes from the newest complete Trainer checkpoint in ``<run_dir>/trainer``
  when one exists (a retry of the same run), instead of starting over;
* on SIGTERM (a spot reclaim notice, ``ray job stop``), finishes the current step,
  saves a checkpoint and exits with code 143, so a resubmission loses at most one step;
* prints ``CTPIPE_PROGRESS {...}`` lines (step, loss, reward) for Airflow;
* writes the final model to ``<run_dir>/checkpoint`` atomically (temporary
  directory, then rename) and a summary to ``<run_dir>/metrics.json``.

GRPO rewards an answer 1.0 when it equals the reference answer, else 0.0.
DPO uses the base checkpoint as its fixed reference model.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

PREEMPTED_EXIT = 128 + signal.SIGTERM


def latest_complete_checkpoint(trainer_dir: Path) -> Path | None:
    """Newest ``checkpoint-N`` whose ``trainer_state.json`` (written last by transformers) exists."""
    done = [p for p in trainer_dir.glob("checkpoint-*") if (p / "trainer_state.json").exists()]
    return max(done, key=lambda p: int(p.name.split("-")[-1]), default=None)


def correctness_reward(completions, answer, **_) -> list[float]:
    """GRPO reward: 1.0 for a completion whose answer is the reference, else 0.0."""
    from ctpipe.arith import correctness

    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [correctness(t, a) for t, a in zip(texts, answer)]


def main(spec_path: str) -> int:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback

    from ctpipe.atomic import atomic_dir
    from ctpipe.datasets import Manifest
    from ctpipe.jobspec import METRICS_FILE, JobSpec, progress_line
    from ctpipe.preemption import young_daly_interval

    spec = JobSpec.read(spec_path)
    cfg = spec.train
    torch.set_num_threads(cfg.torch_threads)
    run_dir = Path(spec.run_dir)
    manifest = Manifest.load(Path(spec.dataset_uri))
    table = "grpo" if spec.algorithm == "grpo" else "dpo"
    rows = manifest.files[table]["rows"]
    if rows == 0:
        print(f"dataset {spec.dataset_version} has no {table} rows; nothing to train on", file=sys.stderr)
        return 2
    data = Dataset.from_parquet(str(Path(spec.dataset_uri) / manifest.files[table]["path"]))
    tokenizer = AutoTokenizer.from_pretrained(spec.base_checkpoint)
    history: list[dict] = []

    class SaveOnSigterm(TrainerCallback):
        """Turn SIGTERM into "save at the end of this step, then stop" (the handler itself only sets a flag)."""

        def __init__(self):
            self.requested = False
            signal.signal(signal.SIGTERM, self._request)

        def _request(self, signum, frame):
            self.requested = True
            print("SIGTERM received: saving a checkpoint at the end of this step", flush=True)

        def on_step_end(self, args, state, control, **kwargs):
            if self.requested:
                control.should_save = True
                control.should_training_stop = True

    preemption = SaveOnSigterm()

    class SavePeriodAdvice(TrainerCallback):
        """Time each checkpoint and log the goodput-optimal save period for the configured preemption rate."""

        def __init__(self):
            self.step_end: float | None = None
            self.step_s: float | None = None

        def on_step_end(self, args, state, control, **kwargs):
            now = time.monotonic()
            if self.step_end is not None:
                self.step_s = now - self.step_end
            self.step_end = now

        def on_save(self, args, state, control, **kwargs):
            cost = time.monotonic() - (self.step_end or time.monotonic())
            period = young_daly_interval(max(cost, 1e-3), cfg.mean_time_between_preemptions_s)
            steps = f" (about {period / self.step_s:.0f} steps)" if self.step_s else ""
            print(
                f"checkpoint at step {state.global_step} took {cost:.2f}s; with a preemption every "
                f"{cfg.mean_time_between_preemptions_s:.0f}s the goodput-optimal save period is {period:.0f}s{steps}, "
                f"configured: every {cfg.save_steps} steps",
                flush=True,
            )

    class Progress(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs:
                return
            rec = {"step": state.global_step, "max_steps": state.max_steps, "loss": logs.get("loss")}
            # GRPO logs the mean reward of its samples; DPO the implicit reward margin and pair accuracy.
            for ours, theirs in (("reward", "reward"), ("margin", "rewards/margins"), ("pair_accuracy", "rewards/accuracies")):
                if theirs in logs:
                    rec[ours] = logs[theirs]
            history.append(rec)
            print(progress_line(rec), flush=True)

    callbacks = [Progress(), preemption, SavePeriodAdvice()]
    common = dict(
        output_dir=str(run_dir / "trainer"),
        max_steps=spec.max_steps,
        learning_rate=spec.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=0,
        seed=spec.seed,
        data_seed=spec.seed,
        logging_steps=1,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=2,
        use_cpu=True,
        bf16=False,
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    model = AutoModelForCausalLM.from_pretrained(spec.base_checkpoint)
    if spec.algorithm == "grpo":
        from trl import GRPOConfig, GRPOTrainer

        args = GRPOConfig(
            **common,
            per_device_train_batch_size=cfg.grpo_batch_size,
            num_generations=cfg.grpo_num_generations,
            max_completion_length=cfg.max_completion_length,
            temperature=cfg.grpo_temperature,
            beta=cfg.grpo_beta,
            log_completions=False,
        )
        trainer = GRPOTrainer(
            model=model, reward_funcs=correctness_reward, args=args,
            train_dataset=data, processing_class=tokenizer, callbacks=callbacks,
        )
    else:
        from trl import DPOConfig, DPOTrainer

        args = DPOConfig(**common, per_device_train_batch_size=cfg.dpo_batch_size, beta=cfg.dpo_beta, max_length=cfg.dpo_max_length)
        ref = AutoModelForCausalLM.from_pretrained(spec.base_checkpoint)
        trainer = DPOTrainer(
            model=model, ref_model=ref, args=args,
            train_dataset=data, processing_class=tokenizer, callbacks=callbacks,
        )

    trainer.remove_callback(PrinterCallback)  # our Progress lines replace its raw dicts
    resume = latest_complete_checkpoint(run_dir / "trainer")
    if resume:
        print(f"resuming from {resume}", flush=True)
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    if preemption.requested:
        saved = latest_complete_checkpoint(run_dir / "trainer")
        print(f"preempted at step {trainer.state.global_step}; checkpoint {saved}", flush=True)
        return PREEMPTED_EXIT

    final = spec.checkpoint_dir
    with atomic_dir(final, replace=True) as tmp:  # replace: a retried run overwrites its own output
        trainer.save_model(str(tmp))
        tokenizer.save_pretrained(str(tmp))

    losses = [h for h in history if h.get("loss") is not None]
    metrics = {
        "algorithm": spec.algorithm,
        "steps": trainer.state.global_step,
        "resumed_from": str(resume) if resume else None,
        "first": losses[0] if losses else None,
        "last": losses[-1] if losses else None,
        "history": history,
        "checkpoint": str(final),
    }
    (run_dir / METRICS_FILE).write_text(json.dumps(metrics, indent=2))
    print(progress_line({"done": True, "steps": metrics["steps"], "checkpoint": str(final)}), flush=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="path to the run's job.json")
    sys.exit(main(parser.parse_args().spec))
