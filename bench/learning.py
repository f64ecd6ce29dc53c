"""Does the loop learn? Reward and preference rounds against the champion and a same-budget SFT control.

Usage:
    python bench/learning.py [--cycles 3] [--split test|dev] [--home DIR] [--lr ALGO=RATE ...]

Each cycle runs the pipeline's own parts, outside Airflow: the champion answers a batch of
simulated traffic (``ctpipe.traffic``), the materializer publishes the dataset, and the training
job (``jobs/train_trl.py``, as the Ray job runs it) trains, from the champion, one GRPO and one DPO
candidate and the control: plain SFT on the same prompts with their reference answers, with the
same steps, prompts per step and schedule. All answer the held-out split greedily; each candidate
is compared (McNemar, paired) with the champion and with the control, and the gate decides as
the pipeline's gate does. The best passing candidate becomes the next cycle's champion.

Settings come from the environment like every ctpipe process (``CTPIPE_TRAIN__MAX_STEPS=...``);
``--lr`` sets one algorithm's learning rate (default: ``train.rate_for``, each algorithm's own). Choose
settings with ``--split dev``; report the untouched ``--split test`` (the default, the gate's).

Last line: ``cycles=<n> promoted=<n> refused=<n> mean_gain_vs_control=<x> min_p_vs_control=<x>
champion_regressions=<n>``; the mean is over every candidate, the smallest p over those that beat
the control (1 when none did).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from ctpipe import arith, evaluation, generation, tinymodel, traffic
from ctpipe.config import Settings
from ctpipe.jobspec import JobSpec
from ctpipe.pipeline import materialize_interval

CANDIDATES = ("grpo", "dpo")
CONTROL = "sft"
MODEL_CACHE = Path.home() / ".cache" / "ctpipe-bench" / "models"


def train(s: Settings, algorithm: str, champion: Path, dataset: dict, run_dir: Path, lr: float) -> tuple[Path, float]:
    spec = JobSpec(
        algorithm=algorithm, base_checkpoint=str(champion), base_version="champion",
        dataset_uri=dataset["uri"], dataset_version=dataset["version"], run_dir=str(run_dir),
        max_steps=s.train.max_steps, learning_rate=lr, seed=s.train.seed, train=s.train,
    )
    spec.write()
    t0 = time.monotonic()
    done = subprocess.run(spec.command(sys.executable, s.jobs_dir), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{algorithm} training failed ({done.returncode}): {done.stderr[-2000:]}")
    return spec.checkpoint_dir, time.monotonic() - t0


def answers(checkpoint: Path, questions, max_new_tokens: int) -> list[bool]:
    model, tok = generation.load(checkpoint)
    return generation.correct_flags(model, tok, questions, max_new_tokens)


def pct(k_of_n: float, ci: tuple[float, float]) -> str:
    return f"{k_of_n:6.1%} [{ci[0]:.1%}, {ci[1]:.1%}]"


def main(cycles: int, split: str, home: Path, lrs: dict[str, float]) -> None:
    s = Settings(home=home)
    if not s.models_dir.exists():  # every run starts from fresh traces and runs, but builds the base only once
        MODEL_CACHE.mkdir(parents=True, exist_ok=True)
        s.home.mkdir(parents=True, exist_ok=True)
        s.models_dir.symlink_to(MODEL_CACHE, target_is_directory=True)
    questions = getattr(arith.splits(s.task), split)
    mnt = s.gate.max_new_tokens
    t0 = time.monotonic()
    champion = tinymodel.ensure_base_model(s.base_model, s.task, s.models_dir)
    build = json.loads((champion / "build.json").read_text())
    print(f"base {champion.name}: dev accuracy {build['dev_accuracy']:.3f}, plateau {build['plateau']} "
          f"over the last {s.base_model.plateau_fraction:.0%} of {build['steps']} steps ({time.monotonic() - t0:.0f}s)")
    rates = {a: lrs.get(a, s.train.rate_for(a)) for a in (*CANDIDATES, CONTROL)}
    print(f"split={split} ({len(questions)} questions); train: steps={s.train.max_steps} lr={rates} "
          f"grpo {s.train.grpo_batch_size // s.train.grpo_num_generations}x{s.train.grpo_num_generations} beta={s.train.grpo_beta} "
          f"dpo batch={s.train.dpo_batch_size} beta={s.train.dpo_beta} sft batch={s.train.sft_batch_size}")
    champ_flags = answers(champion, questions, mnt)
    promoted = refused = regressions = 0
    gains, ps = [], []
    header = f"{'cycle':>5} {'algo':>4} {'champion':>22} {'candidate':>22} {'control':>22} {'p(champ)':>9} {'p(ctrl)':>9} {'train_s':>7}  gate"
    for cycle in range(1, cycles + 1):
        report = traffic.simulate(champion, s.model_name, f"cycle{cycle}", s.traces_dir, s.traffic, s.task, seed=cycle)
        dataset = materialize_interval(s, report.start, report.end + timedelta(milliseconds=1))
        runs = s.runs_dir / f"cycle{cycle}"
        trained = {a: train(s, a, champion, dataset, runs / a, rate) for a, rate in rates.items()}
        flags = {a: answers(ckpt, questions, mnt) for a, (ckpt, _) in trained.items()}
        control = flags[CONTROL]
        print(f"\ncycle {cycle}: {report.traces} traces, champion sampled accuracy {report.accuracy:.1%}; "
              f"dataset {dataset['version']}: {dataset['rows']['grpo_prompts']} GRPO prompts, "
              f"{dataset['rows']['dpo_pairs']} DPO pairs")
        print(header)
        passing = []
        for a in CANDIDATES:
            vs_champ = evaluation.compare(champ_flags, flags[a])
            vs_ctrl = evaluation.compare(control, flags[a])
            decision = evaluation.gate(vs_champ, s.gate)
            gains.append(vs_ctrl.gain)
            ps.append(vs_ctrl.p_value if vs_ctrl.gain > 0 else 1.0)  # a significant loss is no evidence of a gain
            if decision.passed:
                passing.append((vs_champ.candidate_accuracy, a))
            print(f"{cycle:>5} {a:>4} {pct(vs_champ.champion_accuracy, vs_champ.champion_ci)} "
                  f"{pct(vs_champ.candidate_accuracy, vs_champ.candidate_ci)} {pct(vs_ctrl.champion_accuracy, vs_ctrl.champion_ci)} "
                  f"{vs_champ.p_value:9.3g} {vs_ctrl.p_value:9.3g} {trained[a][1]:7.0f}  "
                  f"{'PASS' if decision.passed else 'FAIL'}: {decision.reason}")
        control_vs_champ = evaluation.compare(champ_flags, control)
        print(f"{cycle:>5} {CONTROL:>4} control vs champion: gain {control_vs_champ.gain:+.3f} "
              f"p={control_vs_champ.p_value:.3g}, {trained[CONTROL][1]:.0f}s")
        if passing:
            best = max(passing)[1]
            before = sum(champ_flags) / len(champ_flags)
            champion, champ_flags = trained[best][0], flags[best]
            regressions += sum(champ_flags) / len(champ_flags) < before
            promoted += 1
            print(f"cycle {cycle}: promoted the {best} candidate")
        else:
            refused += 1
            print(f"cycle {cycle}: refused; the champion stays")
    print(f"\nwall {time.monotonic() - t0:.0f}s")
    print(f"cycles={cycles} promoted={promoted} refused={refused} mean_gain_vs_control={sum(gains) / len(gains):.4f} "
          f"min_p_vs_control={min(ps):.3g} champion_regressions={regressions}")


def _lr(arg: str) -> tuple[str, float]:
    algo, _, rate = arg.partition("=")
    if algo not in (*CANDIDATES, CONTROL):
        raise argparse.ArgumentTypeError(f"--lr {arg!r}: algorithm must be one of {', '.join((*CANDIDATES, CONTROL))}")
    return algo, float(rate)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cycles", type=int, default=3)
    p.add_argument("--split", choices=("test", "dev"), default="test")
    p.add_argument("--home", type=Path, default=None,
                   help=f"default: a new temporary directory; base models are cached in {MODEL_CACHE}")
    p.add_argument("--lr", type=_lr, action="append", default=[], metavar="ALGO=RATE")
    a = p.parse_args()
    os.environ.setdefault("DISABLE_MLFLOW_INTEGRATION", "TRUE")
    main(a.cycles, a.split, a.home or Path(tempfile.mkdtemp(prefix="ctpipe-learning-")), dict(a.lr))
