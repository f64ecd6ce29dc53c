"""GRPO with NeMo-RL: its config, its dataset format and its checkpoint layout, from our job spec.

NeMo-RL runs from its container (``train.nemo_rl.image``), not from this package's
environment, so this side stays thin: it writes a YAML that inherits NeMo-RL's own
``examples/configs/grpo_math_1B.yaml`` (its ``defaults:`` mechanism) and overrides
the keys we own, converts our GRPO table into the JSONL its ``ResponseDataset``
reads for the ``math`` environment, and knows the ``step_N`` checkpoint layout and
the DCP-to-Hugging-Face converter.

The models below mirror, key for key and type for type, the sections of NeMo-RL's
typed config (v0.7.0: ``GRPOConfig``, ``ClippedPGLossConfig``, ``PolicyConfig``,
``GenerationConfig``, ``DataConfig``/``ResponseDatasetConfig``, ``MathEnvConfig``,
``CheckpointingConfig``, ``GRPOLoggerConfig``, ``ClusterConfig``), restricted to
the keys we set. ``extra="forbid"``: a key NeMo-RL does not document fails here,
at build time, instead of being silently carried by NeMo-RL's permissive loader.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, model_serializer

from ctpipe.errors import PipelineError
from ctpipe.jobspec import JobSpec

if TYPE_CHECKING:
    import pyarrow as pa

BASE_CONFIG = "examples/configs/grpo_math_1B.yaml"
ENTRYPOINT = "examples/run_grpo.py"
CONVERTER = "examples/converters/convert_dcp_to_hf.py"
STEP_DIR = re.compile(r"step_(\d+)")  # NeMo-RL writes tmp_step_N, renames it to step_N when complete
# Our JSONL columns, named for ResponseDataset's input_key/output_key.
INPUT_KEY, OUTPUT_KEY = "problem", "expected_answer"
Number = StrictInt | StrictFloat
_PLAIN_NUMBER = re.compile(r"-?\d{1,100}(?:\.\d{1,100})?")
log = logging.getLogger(__name__)


class _Upstream(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class GRPOConfig(_Upstream):
    num_prompts_per_step: StrictInt = Field(ge=1)
    num_generations_per_prompt: StrictInt = Field(ge=2)
    max_num_epochs: StrictInt = Field(ge=1)
    max_num_steps: StrictInt = Field(ge=1)
    val_period: StrictInt = Field(ge=0)
    val_at_start: StrictBool
    val_at_end: StrictBool
    seed: StrictInt
    use_dynamic_sampling: StrictBool


class ClippedPGLossConfig(_Upstream):
    reference_policy_kl_penalty: Number = Field(ge=0)


class TokenizerConfig(_Upstream):
    name: StrictStr


class PytorchOptimizerConfig(_Upstream):
    name: StrictStr
    kwargs: dict[str, Any]


class SinglePytorchSchedulerConfig(_Upstream):
    name: StrictStr
    kwargs: dict[str, Any]


class GenerationConfig(_Upstream):
    max_new_tokens: StrictInt = Field(ge=1)
    temperature: Number = Field(gt=0)


class PolicyConfig(_Upstream):
    model_name: StrictStr
    tokenizer: TokenizerConfig
    train_global_batch_size: StrictInt = Field(ge=1)
    train_micro_batch_size: StrictInt = Field(ge=1)
    precision: StrictStr
    max_total_sequence_length: StrictInt = Field(ge=1)
    optimizer: PytorchOptimizerConfig
    scheduler: list[SinglePytorchSchedulerConfig]
    generation: GenerationConfig


class ResponseDatasetConfig(_Upstream):
    """Every key ``NotRequired``: left out or given, never null. NeMo-RL's pydantic check refuses a
    null, and fills ``train``'s keys from ``default`` only where they are left out, so a null in
    ``train`` would hide ``default``'s value. A key not given here is not written."""

    dataset_name: StrictStr = None
    data_path: StrictStr = None
    input_key: StrictStr = None
    output_key: StrictStr = None
    split_validation_size: Number = None
    seed: StrictInt = None
    prompt_file: StrictStr = None
    system_prompt_file: StrictStr = None
    processor: StrictStr = None
    env_name: StrictStr = None

    @model_serializer(mode="wrap")
    def _given(self, handler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if k in self.model_fields_set}


class DataConfig(_Upstream):
    override: Literal[True] = Field(True, alias="_override_")  # replace the parent's OpenMathInstruct-2 section
    max_input_seq_length: StrictInt | None
    shuffle: StrictBool
    num_workers: StrictInt = Field(ge=0)
    train: ResponseDatasetConfig
    validation: ResponseDatasetConfig | None
    default: ResponseDatasetConfig


class MathEnvConfig(_Upstream):
    num_workers: StrictInt = Field(ge=1)
    math_verify_impl: Literal["hf_math_verify", "dapo_math_verify"]


class EnvConfig(_Upstream):
    math: MathEnvConfig


class CheckpointingConfig(_Upstream):
    enabled: StrictBool
    checkpoint_dir: StrictStr
    metric_name: StrictStr | None
    higher_is_better: StrictBool
    save_period: StrictInt = Field(ge=1)
    keep_top_k: StrictInt = Field(ge=1)
    checkpoint_must_save_by: StrictStr | None
    model_save_format: Literal["torch_save", "safetensors"]
    save_consolidated: StrictBool
    save_optimizer: StrictBool


class GRPOLoggerConfig(_Upstream):
    log_dir: StrictStr
    num_val_samples_to_print: StrictInt
    wandb_enabled: StrictBool
    tensorboard_enabled: StrictBool
    mlflow_enabled: StrictBool
    swanlab_enabled: StrictBool
    monitor_gpus: StrictBool


class ClusterConfig(_Upstream):
    gpus_per_node: StrictInt = Field(ge=1)
    num_nodes: StrictInt = Field(ge=1)


class MasterConfig(_Upstream):
    defaults: StrictStr
    grpo: GRPOConfig
    loss_fn: ClippedPGLossConfig
    policy: PolicyConfig
    data: DataConfig
    env: EnvConfig
    checkpointing: CheckpointingConfig
    logger: GRPOLoggerConfig
    cluster: ClusterConfig


def _scheduler(kind: str, steps: int) -> list[dict[str, Any]]:
    """Our learning-rate schedule as NeMo-RL's list of torch schedulers."""
    if kind == "linear":
        return [{"name": "torch.optim.lr_scheduler.LinearLR",
                 "kwargs": {"start_factor": 1.0, "end_factor": 0.0, "total_iters": steps}}]
    if kind == "cosine":
        return [{"name": "torch.optim.lr_scheduler.CosineAnnealingLR", "kwargs": {"T_max": steps}}]
    return [{"name": "torch.optim.lr_scheduler.ConstantLR", "kwargs": {"factor": 1.0, "total_iters": steps}}]


def paths(spec: JobSpec) -> dict[str, Path]:
    root = Path(spec.run_dir) / "nemo_rl"
    return {
        "root": root,
        "config": root / "grpo.yaml",
        "train_data": root / "train.jsonl",
        "checkpoints": root / "checkpoints",
        "logs": root / "logs",
    }


def build_config(spec: JobSpec, prompts: int) -> MasterConfig:
    """NeMo-RL's GRPO config for ``spec``; ``prompts`` is the number of rows in the train JSONL."""
    cfg, nemo = spec.train, spec.train.nemo_rl
    if cfg.grpo_batch_size % cfg.grpo_num_generations:
        raise ValueError(
            f"train.grpo_batch_size={cfg.grpo_batch_size} must be a multiple of "
            f"train.grpo_num_generations={cfg.grpo_num_generations} (prompts x generations per step)"
        )
    per_step = cfg.grpo_batch_size // cfg.grpo_num_generations
    p = paths(spec)
    return MasterConfig(
        defaults=f"{nemo.home}/{BASE_CONFIG}",
        grpo=GRPOConfig(
            num_prompts_per_step=per_step,
            num_generations_per_prompt=cfg.grpo_num_generations,
            # Steps bound the run, as in TRL: allow as many passes over the prompts as they need.
            max_num_epochs=max(1, math.ceil(spec.max_steps * per_step / max(prompts, 1))),
            max_num_steps=spec.max_steps,
            val_period=0,  # the eval gate scores candidates on held-out questions; no validation set here
            val_at_start=False,
            val_at_end=False,
            seed=spec.seed,
            use_dynamic_sampling=False,
        ),
        loss_fn=ClippedPGLossConfig(reference_policy_kl_penalty=cfg.grpo_beta),
        policy=PolicyConfig(
            model_name=spec.base_checkpoint,
            tokenizer=TokenizerConfig(name=spec.base_checkpoint),
            train_global_batch_size=cfg.grpo_batch_size,  # one optimizer step per rollout batch, as TRL does
            train_micro_batch_size=nemo.train_micro_batch_size,
            precision=nemo.precision,
            max_total_sequence_length=nemo.max_total_sequence_length,
            optimizer=PytorchOptimizerConfig(name="torch.optim.AdamW", kwargs={"lr": spec.learning_rate}),
            scheduler=[SinglePytorchSchedulerConfig(**s) for s in _scheduler(cfg.lr_scheduler, spec.max_steps)],
            generation=GenerationConfig(max_new_tokens=cfg.max_completion_length, temperature=cfg.grpo_temperature),
        ),
        data=DataConfig(
            max_input_seq_length=nemo.max_total_sequence_length,
            shuffle=True,
            num_workers=1,
            train=ResponseDatasetConfig(
                dataset_name="ResponseDataset", data_path=str(p["train_data"]),
                split_validation_size=0, seed=spec.seed,
            ),
            validation=None,
            default=ResponseDatasetConfig(
                # No prompt_file or system_prompt_file: the model's own chat template frames the question.
                input_key=INPUT_KEY, output_key=OUTPUT_KEY, processor="math_hf_data_processor", env_name="math",
            ),
        ),
        env=EnvConfig(math=MathEnvConfig(num_workers=nemo.math_verify_workers, math_verify_impl="hf_math_verify")),
        checkpointing=CheckpointingConfig(
            enabled=True,
            checkpoint_dir=str(p["checkpoints"]),
            metric_name=None,  # no validation metric: keep the newest checkpoints
            higher_is_better=True,
            save_period=cfg.save_steps,
            keep_top_k=2,
            checkpoint_must_save_by=nemo.checkpoint_must_save_by,
            # torch_save writes DCP with its .metadata, which the DCP-to-HF converter needs.
            model_save_format="torch_save",
            save_consolidated=False,
            save_optimizer=True,
        ),
        logger=GRPOLoggerConfig(
            log_dir=str(p["logs"]), num_val_samples_to_print=0, wandb_enabled=False, tensorboard_enabled=False,
            mlflow_enabled=False, swanlab_enabled=False, monitor_gpus=True,
        ),
        cluster=ClusterConfig(gpus_per_node=nemo.gpus_per_node, num_nodes=nemo.num_nodes),
    )


def config_yaml(config: MasterConfig) -> str:
    import yaml

    return yaml.safe_dump(config.model_dump(by_alias=True), sort_keys=False)


def write_train_data(grpo: pa.Table, out: Path) -> int:
    r"""Our GRPO table (its ``prompt`` and ``answer`` columns) as ResponseDataset JSONL: the user's question
    and the reference answer, as a string; the number of rows written.

    ResponseDataset holds one question a row, which its processor frames with one system prompt for
    all: a prompt of our table that holds more (a system message of its own, earlier turns) would be
    trained as another prompt than the one served, and two differing only in their system messages
    as one. The math environment scores an answer with math-verify alone, against
    ``\boxed{<reference>}``: against a reference it reads no math from ("Rome"), every answer scores 0,
    and GRPO learns nothing from the prompt; one it reads otherwise than the labels do (a time, a
    unit after a space, a percent of a decimal; see :func:`ctpipe.rewards.boxed_reference`) scores
    right answers 0. Both
    kinds are left out and counted in a warning, and a reference math-verify misreads (``1½``) is
    written as it reads it (``3/2``); PipelineError when none is left (TRL's GRPO,
    train.grpo_trainer=trl, takes whole chats and the verifier that labeled the version)."""
    from ctpipe.rewards import boxed_reference

    @functools.cache
    def math(answer: str) -> str | None:  # a plain number without asking math-verify, half a millisecond an answer
        return answer if _PLAIN_NUMBER.fullmatch(answer) else boxed_reference(answer)

    rows = grpo.to_pylist()
    lines, chats, texts = [], 0, 0
    for r in rows:
        # The math environment wraps the answer in \boxed{...}: a number that is not a string scores 0 silently.
        answer = math(str(r["answer"]))
        if [m["role"] for m in r["prompt"]] != ["user"]:
            chats += 1
        elif answer is None:
            texts += 1
        else:
            lines.append(json.dumps({INPUT_KEY: r["prompt"][0]["content"], OUTPUT_KEY: answer}))
    if chats:
        log.warning("%d of the %d GRPO prompts hold more than a question (a system message of their own, earlier "
                    "turns), which NeMo-RL's ResponseDataset cannot: left out", chats, len(rows))
    if texts:
        log.warning("%d of the %d GRPO prompts have a reference answer that is no math (as 'Rome'), or one NeMo-RL's "
                    "math environment reads otherwise than the labels do (a time, a unit after a space, a percent "
                    "of a decimal): left out",
                    texts, len(rows))
    if rows and not lines:
        raise PipelineError(f"none of the {len(rows)} GRPO prompts is a question alone with an answer of math, which "
                            f"NeMo-RL's ResponseDataset and math environment take ({chats} hold more than a question, "
                            f"{texts} have answers of text); train.grpo_trainer='trl' takes them")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    return len(lines)


def latest_step(checkpoint_dir: Path) -> Path | None:
    """NeMo-RL's newest complete checkpoint (``step_N``; ``tmp_step_N`` and ``old_step_N`` are not)."""
    steps = [p for p in checkpoint_dir.glob("step_*") if p.is_dir() and STEP_DIR.fullmatch(p.name)]
    return max(steps, key=lambda p: int(STEP_DIR.fullmatch(p.name).group(1)), default=None)


def step_number(step_dir: Path) -> int:
    return int(STEP_DIR.fullmatch(step_dir.name).group(1))


def train_command(spec: JobSpec, python: str) -> list[str]:
    return [python, ENTRYPOINT, "--config", str(paths(spec)["config"])]


def convert_command(step_dir: Path, out: Path, python: str) -> list[str]:
    return [
        python, CONVERTER,
        "--config", str(step_dir / "config.yaml"),
        "--dcp-ckpt-path", str(step_dir / "policy" / "weights"),
        "--hf-ckpt-path", str(out),
    ]
