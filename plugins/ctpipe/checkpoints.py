"""Training checkpoints that are complete or invisible, and finding the one to resume from.

A Trainer checkpoint is written under a hidden staging name and renamed into
``<trainer_dir>/checkpoint-<step>`` once everything (weights, optimizer,
scheduler, RNG state, trainer state) is on disk, so a process killed mid-save
leaves only a hidden directory that the next start removes. Should a visible
checkpoint still be unreadable (a copy cut short by some other tool, a damaged
disk), resuming falls back to the previous one and says so.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from ctpipe.errors import PipelineError

PREFIX = "checkpoint-"
STATE_FILE = "trainer_state.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"  # large models save their weights in shards
# Shape-defining fields: a checkpoint whose values differ belongs to another model.
_SHAPE_KEYS = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def step_of(checkpoint: Path) -> int:
    return int(checkpoint.name.removeprefix(PREFIX))


def problem_with(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be resumed from, or None when it can."""
    try:
        state = json.loads((checkpoint / STATE_FILE).read_text())
        step = int(state["global_step"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"unreadable {STATE_FILE} ({type(e).__name__}: {e})"
    if step != step_of(checkpoint):
        return f"{STATE_FILE} says step {step}, the directory name says {step_of(checkpoint)}"
    why = _weights_problem(checkpoint)
    if why:
        return why
    if not (checkpoint / "optimizer.pt").is_file():
        return "no optimizer.pt"
    return None


def _weights_problem(checkpoint: Path) -> str | None:
    """Whether every safetensors file of the checkpoint (one, or the shards its index names) is whole."""
    index = checkpoint / INDEX_FILE
    try:
        names = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else [WEIGHTS_FILE]
    except (OSError, ValueError, KeyError, AttributeError) as e:
        return f"unreadable {INDEX_FILE} ({type(e).__name__}: {e})"
    for name in names:
        try:
            # A safetensors file opens with an 8-byte header length, then the JSON header, then the tensors.
            with (checkpoint / name).open("rb") as f:
                header_len = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(header_len))
            size = (checkpoint / name).stat().st_size
        except (OSError, ValueError) as e:
            return f"unreadable {name} ({type(e).__name__}: {e})"
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
        if size < 8 + header_len + end:
            return f"{name} is truncated ({size} bytes, the header promises {8 + header_len + end})"
    return None


def latest_resumable(trainer_dir: Path, log: Callable[[str], None] = print) -> Path | None:
    """The newest checkpoint that can be resumed from; logs each newer one it had to skip and why.

    Also removes staging directories left by a process killed while saving.
    """
    for leftover in trainer_dir.glob(f".tmp-{PREFIX}*"):
        log(f"removing {leftover.name}: a checkpoint whose save was interrupted")
        shutil.rmtree(leftover, ignore_errors=True)
    found = sorted(
        (p for p in trainer_dir.glob(f"{PREFIX}*") if p.is_dir() and p.name.removeprefix(PREFIX).isdigit()),
        key=step_of, reverse=True,
    )
    for ckpt in found:
        why = problem_with(ckpt)
        if why is None:
            return ckpt
        log(f"skipping {ckpt}: {why}; falling back to the previous checkpoint")
    return None


def check_same_model(checkpoint: Path, base: Path) -> None:
    """Fail when ``checkpoint`` was not trained from a model shaped like ``base``."""
    def shape(d: Path) -> dict:
        cfg = json.loads((d / "config.json").read_text())
        return {k: cfg.get(k) for k in _SHAPE_KEYS}

    ours, theirs = shape(base), shape(checkpoint)
    diff = {k: (theirs[k], ours[k]) for k in _SHAPE_KEYS if theirs[k] != ours[k]}
    if diff:
        detail = ", ".join(f"{k}={a!r} (base has {b!r})" for k, (a, b) in diff.items())
        raise PipelineError(f"checkpoint {checkpoint} belongs to a different model than base {base}: {detail}")


class AtomicCheckpoints:
    """Trainer mixin: each checkpoint is saved into a hidden directory, then renamed into place.

    Put it before the Trainer class: ``type("T", (AtomicCheckpoints, DPOTrainer), {})``.
    """

    _staging: Path | None = None

    def _get_output_dir(self, trial):
        return str(self._staging) if self._staging is not None else super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial):
        from transformers.trainer_utils import rotate_checkpoints

        run_dir = Path(super()._get_output_dir(trial))
        name = f"{PREFIX}{self.state.global_step}"
        # The Trainer writes <staging>/<name>; only the finished directory is renamed into run_dir.
        staging = run_dir / f".tmp-{name}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        self._staging = staging
        try:
            super()._save_checkpoint(model, trial)
            shutil.rmtree(run_dir / name, ignore_errors=True)  # a rerun of a step replaces its checkpoint
            os.rename(staging / name, run_dir / name)
        finally:
            self._staging = None
            shutil.rmtree(staging, ignore_errors=True)
        if self.args.should_save:
            rotate_checkpoints(
                output_dir=str(run_dir),
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
            )
