"""Train one round of GRPO, DPO or plain SFT with TRL on a published dataset version.

Usage (as a Ray job entrypoint, or by hand):

    python jobs/train_trl.py --spec <run_dir>/job.json

The spec (``ctpipe.jobspec.JobSpec``) names the algorithm, the base checkpoint,
the dataset version and the run directory. The job:

* saves a checkpoint every ``train.save_steps`` steps into ``<run_dir>/trainer``,
  each complete or invisible (``ctpipe.checkpoints``);
* resumes from the newest readable checkpoint there (a retry or resubmission of the
  same run): weights, optimizer, scheduler, RNG state and data position, so the
  resumed run ends with the same weights as an uninterrupted one;
* on SIGTERM (a spot reclaim notice, ``ray job stop``), finishes the current step,
  saves a checkpoint and exits with code 143, so a resubmission loses at most one step;
* prints ``CTPIPE_PROGRESS {...}`` lines (step, loss, reward) for Airflow, and
  stops with an error on a non-finite loss (a genuine failure, not retried);
* writes the final model to ``<run_dir>/checkpoint`` atomically (temporary
  directory, then rename) and a summary to ``<run_dir>/metrics.json``.

GRPO rewards a right answer 1.0, else 0.0, by the verifier that labeled the dataset (``reward_for``).
DPO uses the base checkpoint as its fixed reference model, so chained runs do not drift.
SFT imitates the GRPO table's reference answers: the same prompts, for the control that
tells a reward signal's gain from more training.
Exit codes: 0 done, 143 preempted (checkpoint saved), 2 bad input, 1 anything else.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path

from ctpipe.atomic import atomic_dir
from ctpipe.checkpoints import STATE_FILE, AtomicCheckpoints, check_same_model, latest_resumable, step_of
from ctpipe.errors import PipelineError
from ctpipe.jobspec import JobSpec, finish, learned, load_job, progress_line, run_entrypoint, training_data, whole_passes
from ctpipe.preemption import PREEMPTED_EXIT, young_daly_interval

# The trainer reports to no tracker (the registry records runs), and TRL imports MLflow whenever
# it is installed: skipping that import shortens every restart after a preemption.
os.environ.setdefault("DISABLE_MLFLOW_INTEGRATION", "TRUE")
ROWS_FILE = "rows.json"  # in the run directory: the rows trained on, and what a pass over them takes


def reward_for(reward: dict):
    """GRPO's reward function for a dataset labeled with the reward config ``reward`` (its manifest's):
    1.0 for a right answer, else 0.0, by the verifier that labeled it (math-verify, exact, regex)
    against the prompt's reference answer. With the task's own verifier (or none), the task's questions
    are verified from the question (one with many right answers has no single reference), and any
    other prompt against its reference: its integer, or its text."""
    from ctpipe import rewards
    from ctpipe.arith import correctness, integer, verify

    check = rewards.verifier(reward.get("verifier", "arith"), reward.get("answer_regex", ""))

    def text(message, role: str) -> str:
        if isinstance(message, str):
            return message
        return next((m["content"] for m in reversed(message) if m["role"] == role), "")

    def right(prompt, said: str, reference: str) -> float | None:
        if check is not None:
            return check(said, reference)
        verified = verify(text(prompt, "user"), said)
        if verified is not None:
            return verified
        return correctness(said, reference) if integer(reference) is not None else rewards.exact_reward(said, reference)

    def correctness_reward(prompts, completions, answer, **_) -> list[float]:
        return [right(prompt, text(completion, "assistant"), reference or "") or 0.0
                for prompt, completion, reference in zip(prompts, completions, answer)]

    return correctness_reward


def main(spec_path: str) -> int:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback

    spec, manifests = load_job(spec_path)
    cfg = spec.train
    torch.set_num_threads(cfg.torch_threads)
    run_dir = Path(spec.run_dir)
    trainer_dir = run_dir / "trainer"
    resume = latest_resumable(trainer_dir, log=lambda m: print(m, flush=True))
    if resume:
        check_same_model(resume, Path(spec.base_checkpoint))
    tokenizer = AutoTokenizer.from_pretrained(spec.base_checkpoint)

    if resume and step_of(resume) >= spec.max_steps:
        # Trained to the end before an interruption during publishing: publish, don't train on.
        print(f"{resume} is already at step {spec.max_steps}; publishing it", flush=True)
        model = AutoModelForCausalLM.from_pretrained(str(resume))
        log_history = json.loads((resume / STATE_FILE).read_text())["log_history"]
        return publish(spec, model, tokenizer, step_of(resume), resume, log_history)

    data = Dataset(training_data(manifests, spec.table, leave_out=learned(spec.left_out)))  # paths or fsspec URIs (s3://...)
    versions = " + ".join(d.version for d in spec.datasets)
    print(f"{spec.table}: {len(data)} rows of dataset version {versions}", flush=True)

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
        def on_train_begin(self, args, state, control, **kwargs):
            # Resuming has restored the step by now; the time to here is the restart cost.
            print(f"training from step {state.global_step} of {state.max_steps}", flush=True)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs:
                return
            if not math.isfinite(logs["loss"]):
                # Diverged: resuming would diverge again, so fail instead of looking preempted.
                raise FloatingPointError(f"loss is {logs['loss']} at step {state.global_step}; training diverged")
            print(progress_line(progress_record(state.global_step, state.max_steps, logs)), flush=True)

    callbacks = [Progress(), preemption, SavePeriodAdvice()]
    on_gpu = torch.cuda.is_available()  # the same job runs on CPU here and on GPU nodes
    if cfg.grpo_use_vllm and not on_gpu and spec.algorithm == "grpo":
        raise PipelineError("train.grpo_use_vllm=true needs a GPU; this node has none")
    common = dict(
        output_dir=str(trainer_dir),
        max_steps=spec.max_steps,
        learning_rate=spec.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=0,
        seed=spec.seed,
        data_seed=spec.seed,
        logging_steps=1,
        logging_nan_inf_filter=False,  # the default hides a NaN loss from the divergence check
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=2,  # two, so a damaged newest checkpoint has one to fall back to
        use_cpu=not on_gpu,
        bf16=on_gpu and torch.cuda.is_bf16_supported(),
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
            use_vllm=cfg.grpo_use_vllm,
            **({"vllm_mode": "colocate"} if cfg.grpo_use_vllm else {}),
        )
        trainer = type("Trainer", (AtomicCheckpoints, GRPOTrainer), {})(
            model=model, reward_funcs=reward_for(manifests[-1].config.get("reward", {})), args=args,
            train_dataset=data, processing_class=tokenizer, callbacks=callbacks,
        )
    elif spec.algorithm == "sft":
        from trl import SFTConfig, SFTTrainer

        data = data.filter(lambda row: row["answer"] is not None)
        if len(data) == 0:
            raise PipelineError(f"dataset version {versions} has no reference answers to imitate")
        data = data.map(
            lambda row: {"completion": [{"role": "assistant", "content": row["answer"]}]},
            remove_columns=[c for c in data.column_names if c != "prompt"],
        )
        args = SFTConfig(**common, per_device_train_batch_size=cfg.sft_batch_size, max_length=cfg.dpo_max_length)
        trainer = type("Trainer", (AtomicCheckpoints, SFTTrainer), {})(
            model=model, args=args, train_dataset=data, processing_class=tokenizer, callbacks=callbacks,
        )
    else:
        from trl import DPOConfig, DPOTrainer

        args = DPOConfig(**common, per_device_train_batch_size=cfg.dpo_batch_size, beta=cfg.dpo_beta, max_length=cfg.dpo_max_length)
        ref = AutoModelForCausalLM.from_pretrained(spec.base_checkpoint)
        trainer = type("Trainer", (AtomicCheckpoints, DPOTrainer), {})(
            model=model, ref_model=ref, args=args,
            train_dataset=data, processing_class=tokenizer, callbacks=callbacks,
        )

    trainer.remove_callback(PrinterCallback)  # our Progress lines replace its raw dicts
    # What a pass over the rows takes, for publish (a republish after an interruption reads it here).
    per_batch = args.generation_batch_size // args.num_generations if spec.algorithm == "grpo" else 1
    (run_dir / ROWS_FILE).write_text(json.dumps({"rows": len(data), "per_batch": per_batch}))
    if resume:
        print(f"resuming from {resume}", flush=True)
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    if preemption.requested:
        saved = latest_resumable(trainer_dir)
        print(f"preempted at step {trainer.state.global_step}; checkpoint {saved}", flush=True)
        sys.stderr.flush()
        # The checkpoint is on disk; skip the interpreter's teardown (1-2 s of freeing torch) and leave
        # well inside the grace period.
        os._exit(PREEMPTED_EXIT)
    return publish(spec, trainer.model, tokenizer, trainer.state.global_step, resume, trainer.state.log_history)


def progress_record(step: int, max_steps: int, logs: dict) -> dict:
    rec = {"step": step, "max_steps": max_steps, "loss": logs.get("loss")}
    # GRPO logs the mean reward of its samples; DPO the implicit reward margin and pair accuracy.
    for ours, theirs in (("reward", "reward"), ("margin", "rewards/margins"), ("pair_accuracy", "rewards/accuracies")):
        if theirs in logs:
            rec[ours] = logs[theirs]
    return rec


def publish(spec: JobSpec, model, tokenizer, steps: int, resumed_from: Path | None, log_history: list[dict]) -> int:
    """Write the final model atomically and the run's metrics (history across all resumed attempts)."""
    final = spec.checkpoint_dir
    with atomic_dir(final, replace=True) as tmp:  # replace: a retried run overwrites its own output
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
    history = [progress_record(h["step"], spec.max_steps, h) for h in log_history if "loss" in h]
    epochs = next((h["epoch"] for h in reversed(log_history) if "epoch" in h), None)
    rows = json.loads(p.read_text()) if (p := Path(spec.run_dir) / ROWS_FILE).exists() else None
    metrics = {
        "algorithm": spec.algorithm,
        "steps": steps,
        # The trainer's epochs, and the passes over every row, which register_candidate records as learned.
        "epochs": epochs,
        "passes": whole_passes(epochs, **rows) if rows else 0,
        "resumed_from": str(resumed_from) if resumed_from else None,
        "first": history[0] if history else None,
        "last": history[-1] if history else None,
        "history": history,
        "checkpoint": str(final),
    }
    return finish(spec, metrics)


if __name__ == "__main__":
    run_entrypoint(main, __doc__.splitlines()[0])
