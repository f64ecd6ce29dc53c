"""Preempt a TRL training run at random points and measure what is lost.

Usage:
    python bench/preemption.py [--algorithm dpo] [--kills 3] [--preempt-every 60] [--grace 30] [--seed 0]
                               [--python /path/to/train-venv/bin/python]

On CPU with the tiny model, on a dataset of simulated traffic, it runs the same
job (``jobs/train_trl.py``, as a Ray job would: a fresh process per attempt):

* once uninterrupted: the reference for useful training time and final weights;
* ``sigterm``: preempted ``--kills`` times with SIGTERM and a grace period
  (SIGKILL if the job outlives it), periodic checkpoints on;
* ``periodic-only``: the same preemptions as SIGKILL with no notice, so only the
  periodic checkpoints help;
* ``no-ckpt``: the same SIGKILLs with no checkpoints at all.

Each attempt is preempted after a random 0.75-1.25 x ``--preempt-every`` seconds of
training (the same draws for every mode), and the next attempt resumes. The save
period is the Young/Daly optimum for the checkpoint cost measured in a short
calibration run and the preemption interval.

goodput = useful training time / wall time of all attempts (process start to exit,
restarts included; resubmission backoff excluded), where useful time is the
training time of the steps the final model keeps, measured in the same run (an
attempt's time from its first step to the last step the next attempt resumes
after). Lost steps of a preemption = steps the attempt
reached minus the step the next attempt resumed from.

Last line:
``lost_steps_sigterm_max=<n> lost_steps_sigkill_max=<n> goodput=<x> goodput_periodic_only=<x> goodput_no_ckpt=<x> weights_equal=<true|false>``
"""

from __future__ import annotations

import argparse
import math
import queue
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ctpipe import traffic
from ctpipe.checkpoints import WEIGHTS_FILE
from ctpipe.config import PROJECT_ROOT, Settings
from ctpipe.jobspec import JobSpec, parse_progress
from ctpipe.pipeline import materialize_interval
from ctpipe.preemption import young_daly_interval
from ctpipe.tinymodel import ensure_base_model

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
NEVER = 10**9  # a save period no run reaches


@dataclass
class Attempt:
    wall_s: float
    exit_code: int
    start_step: int | None = None
    reached: int = 0
    train_begin_s: float | None = None  # since process start
    step_done_s: dict[int, float] = field(default_factory=dict)  # step -> when it was reported
    checkpoint_costs: list[float] = field(default_factory=list)
    preempted: bool = False


def run_attempt(cmd: list[str], preempt_after_s: float | None, sig: int, grace_s: float) -> Attempt:
    """One process of the job; ``sig`` is sent after ``preempt_after_s`` seconds of training."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue = queue.Queue()

    def read():
        for line in proc.stdout:
            lines.put((time.monotonic() - t0, line))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    a = Attempt(wall_s=0.0, exit_code=0)
    signalled_at = None
    while True:
        if a.train_begin_s is not None and preempt_after_s is not None and signalled_at is None:
            timeout = max(0.0, a.train_begin_s + preempt_after_s - (time.monotonic() - t0))
        elif signalled_at is not None and sig == signal.SIGTERM:
            timeout = max(0.0, signalled_at + grace_s - (time.monotonic() - t0))
        else:
            timeout = None
        try:
            item = lines.get(timeout=timeout)
        except queue.Empty:
            if signalled_at is None:
                proc.send_signal(sig)
                signalled_at, a.preempted = time.monotonic() - t0, True
            else:  # the grace period ended before the job did: the node goes away
                proc.kill()
            continue
        if item is None:
            break
        at, line = item
        rec = parse_progress(line)
        if m := re.match(r"training from step (\d+)", line):
            a.start_step, a.train_begin_s = int(m.group(1)), at
        elif m := re.match(r"checkpoint at step \d+ took ([\d.]+)s", line):
            a.checkpoint_costs.append(float(m.group(1)))
        elif rec and "loss" in rec:
            a.reached = rec["step"]  # after a SIGTERM: the step that was running when it came
            a.step_done_s[rec["step"]] = at
    a.exit_code = proc.wait()
    a.wall_s = time.monotonic() - t0
    return a


def run_mode(spec: JobSpec, draws: list[float], sig: int, grace_s: float, python: str) -> list[Attempt]:
    spec.write()
    cmd = spec.command(python, PROJECT_ROOT / "jobs")
    attempts = []
    for i in range(len(draws) + 1):
        a = run_attempt(cmd, draws[i] if i < len(draws) else None, sig, grace_s)
        attempts.append(a)
        if a.exit_code == 0:
            return attempts
        if not a.preempted:
            raise SystemExit(f"{spec.run_dir}: attempt {i + 1} failed with exit code {a.exit_code}")
    raise SystemExit(f"{spec.run_dir}: not finished after {len(attempts)} attempts")


def lost_steps(attempts: list[Attempt]) -> list[int]:
    return [a.reached - nxt.start_step for a, nxt in zip(attempts, attempts[1:]) if a.preempted]


def useful_s(attempts: list[Attempt]) -> float:
    """Training time spent on steps the final model keeps (those before the step the next attempt resumed from)."""
    total = 0.0
    for i, a in enumerate(attempts):
        kept_until = attempts[i + 1].start_step if i + 1 < len(attempts) else a.reached
        kept = [t for step, t in a.step_done_s.items() if step <= kept_until]
        if kept:
            total += max(kept) - a.train_begin_s
    return total


def same_weights(a: Path, b: Path) -> bool:
    import torch
    from safetensors.torch import load_file

    wa, wb = load_file(str(a / WEIGHTS_FILE)), load_file(str(b / WEIGHTS_FILE))
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def main(
    algorithm: str, kills: int, every_s: float, grace_s: float, seed: int, train_s: float | None, python: str
) -> None:
    user = Settings()
    base = ensure_base_model(user.base_model, user.task, user.models_dir)
    s = Settings(home=Path(tempfile.mkdtemp(prefix="ctpipe-bench-preemption-")))
    report = traffic.simulate(base, s.model_name, "1", s.traces_dir, s.traffic, s.task, seed=seed, now=T0)
    data = materialize_interval(s, T0, report.end + timedelta(milliseconds=1))
    print(f"dataset {data['version']}: {data['rows']}; base {base}; job interpreter {python}")

    def spec(run: str, steps: int, save_steps: int) -> JobSpec:
        return JobSpec(
            algorithm=algorithm, base_checkpoint=str(base), base_version="1",
            dataset_uri=data["uri"], dataset_version=data["version"], run_dir=str(s.runs_dir / run),
            max_steps=steps, learning_rate=s.train.rate_for(algorithm), seed=seed,
            train=s.train.model_copy(update={"save_steps": save_steps, "mean_time_between_preemptions_s": every_s}),
        )

    (cal,) = run_mode(spec("calibrate", 30, 10), [], signal.SIGTERM, grace_s, python)
    step_s = useful_s([cal]) / 30
    cost = max(cal.checkpoint_costs)
    period_s = young_daly_interval(cost, every_s)
    save_steps = max(1, round(period_s / step_s))
    steps = math.ceil((train_s or (kills + 0.5) * every_s) / step_s)
    print(
        f"calibration: {step_s * 1000:.0f} ms/step, checkpoint {cost * 1000:.0f} ms, restart "
        f"{cal.train_begin_s:.1f}s -> save every {save_steps} steps ({period_s:.1f}s, Young/Daly); "
        f"{steps} steps per run"
    )

    (ref,) = run_mode(spec("uninterrupted", steps, save_steps), [], signal.SIGTERM, grace_s, python)
    rng = random.Random(seed)
    draws = [every_s * rng.uniform(0.75, 1.25) for _ in range(kills)]
    print(f"uninterrupted: {useful_s([ref]):.1f}s training, {ref.wall_s:.1f}s wall (goodput {useful_s([ref]) / ref.wall_s:.3f})")
    print(f"preemptions after {', '.join(f'{d:.0f}' for d in draws)}s of training; grace {grace_s:.0f}s")
    print(f"{'mode':<14}{'attempts':>9}{'wall_s':>9}{'restart_s':>10}{'lost_steps':>16}{'goodput':>9}  weights")

    modes = {
        "sigterm": (save_steps, signal.SIGTERM),
        "periodic-only": (save_steps, signal.SIGKILL),
        "no-ckpt": (NEVER, signal.SIGKILL),
    }
    ref_dir = s.runs_dir / "uninterrupted" / "checkpoint"
    results = {}
    for name, (period, sig) in modes.items():
        sp = spec(name, steps, period)
        attempts = run_mode(sp, draws, sig, grace_s, python)
        wall = sum(a.wall_s for a in attempts)
        goodput = useful_s(attempts) / wall
        equal = same_weights(sp.checkpoint_dir, ref_dir)
        lost = lost_steps(attempts)
        results[name] = (goodput, lost, equal)
        restart = sum(a.train_begin_s for a in attempts) / len(attempts)
        print(
            f"{name:<14}{len(attempts):>9}{wall:>9.1f}{restart:>10.1f}{str(lost):>16}"
            f"{goodput:>9.3f}  {'equal' if equal else 'DIFFERENT'}"
        )

    print(
        f"lost_steps_sigterm_max={max(results['sigterm'][1], default=0)} "
        f"lost_steps_sigkill_max={max(results['periodic-only'][1], default=0)} "
        f"goodput={results['sigterm'][0]:.3f} goodput_periodic_only={results['periodic-only'][0]:.3f} "
        f"goodput_no_ckpt={results['no-ckpt'][0]:.3f} "
        f"weights_equal={str(all(r[2] for r in results.values())).lower()}"
    )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algorithm", choices=["dpo", "grpo"], default="dpo")
    p.add_argument("--kills", type=int, default=3, help="preemptions per run")
    p.add_argument("--preempt-every", type=float, default=60.0, help="mean seconds of training between preemptions")
    p.add_argument("--grace", type=float, default=30.0, help="seconds between SIGTERM and SIGKILL")
    p.add_argument("--train-s", type=float, default=None, help="training seconds per run; default (kills + 0.5) x preempt-every")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--python", default=sys.executable,
        help="interpreter of the training job (what CTPIPE_RAY_PYTHON sets for Ray jobs), e.g. a train-only venv",
    )
    a = p.parse_args()
    main(a.algorithm, a.kills, a.preempt_every, a.grace, a.seed, a.train_s, a.python)
