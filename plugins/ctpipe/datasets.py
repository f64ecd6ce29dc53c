"""Trace-to-dataset materialization: validate, quarantine, label rewards, build GRPO and DPO sets.

Each input line of the interval ends up in exactly one place: the trace table
or the quarantine table (with a reason). A version is a directory::

    <datasets_dir>/<version>/
        traces.parquet       canonical traces with rewards
        grpo.parquet         prompt (chat messages) + answer: TRL GRPOTrainer's conversational layout
        dpo.parquet          prompt / chosen / rejected chat messages: TRL DPOTrainer's conversational layout
        quarantine.parquet   source file, line, reason, detail, raw line
        manifest.json        written last; the version exists only once it is renamed into place

The version name is derived from the inputs, the interval and the config, so
re-running an interval yields the same version (and does not rewrite it).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ctpipe import arith
from ctpipe.atomic import atomic_dir, atomic_write_text
from ctpipe.config import DatasetConfig, RewardConfig, TaskConfig
from ctpipe.rewards import combine, feedback_reward
from ctpipe.traces import InvalidTrace, TraceRecord, files_for_interval, iter_lines, parse_line, partition_hour

CODE_VERSION = "1"
LATEST = "LATEST"

_MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
TRACES_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("start_time", pa.timestamp("us", tz="UTC")),
        ("model_name", pa.string()),
        ("model_version", pa.string()),
        ("prompt", pa.string()),
        ("completion", pa.string()),
        ("reference_answer", pa.string()),
        ("verifiable_reward", pa.float64()),
        ("feedback_reward", pa.float64()),
        ("final_reward", pa.float64()),
        ("source_file", pa.string()),
        ("source_line", pa.int64()),
    ]
)
GRPO_SCHEMA = pa.schema([("prompt", _MESSAGES), ("answer", pa.string())])
DPO_SCHEMA = pa.schema(
    [
        ("prompt", _MESSAGES),
        ("chosen", _MESSAGES),
        ("rejected", _MESSAGES),
        ("chosen_reward", pa.float64()),
        ("rejected_reward", pa.float64()),
    ]
)
QUARANTINE_SCHEMA = pa.schema(
    [
        ("source_file", pa.string()),
        ("source_line", pa.int64()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("raw", pa.string()),
    ]
)


class DatasetNotFound(LookupError):
    pass


def label(verifiable: float | None, feedback: float | None, cfg: RewardConfig) -> float | None:
    """Weighted mean of the signals present; None when the trace carries none.

    >>> label(1.0, 0.0, RewardConfig(verifiable_weight=0.8, feedback_weight=0.2))
    0.8
    >>> label(None, 1.0, RewardConfig()), label(None, None, RewardConfig())
    (1.0, None)
    """
    return combine({"verifiable": verifiable, "feedback": feedback},
                   {"verifiable": cfg.verifiable_weight, "feedback": cfg.feedback_weight}, "renormalize")


def dpo_pairs(group: list[dict], cfg: DatasetConfig) -> list[tuple[dict, dict]]:
    """(chosen, rejected) pairs within one prompt's answers, at least ``dpo_min_margin`` apart.

    Answers are ranked by reward (ties broken by trace id, so the result is deterministic).
    ``best_vs_worst`` pairs the i-th best with the i-th worst while the gap holds; ``all_pairs``
    takes every pair wide enough, widest first. Either way at most ``dpo_max_pairs_per_prompt``;
    identical texts never pair, so ties and single-answer groups give none.
    """
    ranked = sorted((r for r in group if r["final_reward"] is not None), key=lambda r: (-r["final_reward"], r["trace_id"]))
    if cfg.dpo_strategy == "all_pairs":
        wide = [
            (a, b) for i, a in enumerate(ranked) for b in ranked[i + 1:]
            if a["final_reward"] - b["final_reward"] >= cfg.dpo_min_margin
            and a["completion"].strip() != b["completion"].strip()
        ]
        wide.sort(key=lambda p: (p[1]["final_reward"] - p[0]["final_reward"], p[0]["trace_id"], p[1]["trace_id"]))
        return wide[: cfg.dpo_max_pairs_per_prompt]
    pairs = []
    for i in range(min(cfg.dpo_max_pairs_per_prompt, len(ranked) // 2)):
        best, worst = ranked[i], ranked[-1 - i]
        if best["final_reward"] - worst["final_reward"] < cfg.dpo_min_margin:
            break
        if best["completion"].strip() != worst["completion"].strip():
            pairs.append((best, worst))
    return pairs


@dataclass(frozen=True)
class Manifest:
    version: str
    uri: str
    interval: tuple[str, str]
    counts: dict
    quarantine_reasons: dict
    reward_stats: dict
    files: dict
    code_version: str
    config: dict

    @property
    def path(self) -> Path:
        return Path(self.uri)

    def asset_extra(self) -> dict:
        return {
            "version": self.version,
            "uri": self.uri,
            "interval": list(self.interval),
            "rows": {k: self.counts[k] for k in ("traces", "grpo_prompts", "dpo_pairs")},
            "traces_in": self.counts["traces_in"],
            "quarantined": self.counts["quarantined"],
            "reward": self.reward_stats,
        }

    @classmethod
    def load(cls, version_dir: Path) -> Manifest:
        return cls(**json.loads((version_dir / "manifest.json").read_text()))


def _hash_inputs(lines: list, extra: dict) -> str:
    h = hashlib.sha256(json.dumps(extra, sort_keys=True).encode())
    for src, n, text, _ in lines:
        h.update(f"{src}:{n}:".encode())
        h.update(text.encode("utf-8", "surrogatepass"))
        h.update(b"\n")
    return h.hexdigest()


def _collect(traces_dir: Path, start: datetime, end: datetime) -> list[tuple[str, int, str, TraceRecord | InvalidTrace]]:
    """The interval's lines, parsed. A line whose time cannot be read belongs with the line before it."""
    picked = []
    for path in files_for_interval(traces_dir, start, end):
        when = partition_hour(path)
        src = str(path.relative_to(traces_dir))
        for n, text in iter_lines(path):
            try:
                parsed: TraceRecord | InvalidTrace = parse_line(text)
                when = parsed.start_time
            except InvalidTrace as e:
                parsed = e
            if start <= when < end:
                picked.append((src, n, text, parsed))
    return picked


def materialize(
    traces_dir: Path,
    datasets_dir: Path,
    start: datetime,
    end: datetime,
    *,
    task: TaskConfig,
    reward: RewardConfig,
    dataset: DatasetConfig,
) -> Manifest | None:
    """Build (or find) the dataset version of ``[start, end)``; None when the interval has no traces."""
    start, end = start.astimezone(timezone.utc), end.astimezone(timezone.utc)
    if end <= start:
        raise ValueError(f"interval end {end.isoformat()} is not after start {start.isoformat()}")
    lines = _collect(traces_dir, start, end)
    if not lines:
        return None
    config = {"task": task.model_dump(), "reward": reward.model_dump(), "dataset": dataset.model_dump()}
    digest = _hash_inputs(lines, {"interval": [start.isoformat(), end.isoformat()], "config": config, "code": CODE_VERSION})
    version = f"{start:%Y%m%dT%H%M%S}-{end:%Y%m%dT%H%M%S}-{digest[:10]}"
    final = datasets_dir / version
    if (final / "manifest.json").exists():
        _point_latest(datasets_dir, version)
        return Manifest.load(final)

    held_out = arith.splits(task).held_out_prompts()
    rows: list[dict] = []
    quarantine: list[dict] = []
    seen: dict[str, str] = {}

    def reject(src: str, n: int, reason: str, detail: str, raw: str) -> None:
        quarantine.append({"source_file": src, "source_line": n, "reason": reason, "detail": detail, "raw": raw})

    for src, n, text, rec in lines:
        if isinstance(rec, InvalidTrace):
            reject(src, n, rec.reason, rec.detail, text)
            continue
        if rec.trace_id in seen:
            first = seen[rec.trace_id]
            reject(src, n, "duplicate_trace_id", f"trace_id {rec.trace_id!r} already read at {first}", text)
            continue
        seen[rec.trace_id] = f"{src}:{n}"
        prompt = rec.prompt
        if prompt.strip() in held_out:
            reject(src, n, "held_out_prompt", "prompt is an evaluation question; excluded from training data", text)
            continue
        reference = arith.reference_answer(prompt)
        verifiable = arith.correctness(rec.completion, reference) if reference is not None else None
        fb = feedback_reward(rec.feedback.thumb, rec.feedback.rating)
        rows.append(
            {
                "trace_id": rec.trace_id,
                "start_time": rec.start_time,
                "model_name": rec.model.name,
                "model_version": rec.model.version,
                "prompt": prompt,
                "completion": rec.completion,
                "reference_answer": reference,
                "verifiable_reward": verifiable,
                "feedback_reward": fb,
                "final_reward": label(verifiable, fb, reward),
                "source_file": src,
                "source_line": n,
            }
        )

    by_prompt: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_prompt[r["prompt"]].append(r)
    grpo = [
        {"prompt": [{"role": "user", "content": p}], "answer": g[0]["reference_answer"]}
        for p, g in sorted(by_prompt.items())
        if g[0]["reference_answer"] is not None
    ]
    dpo = [
        {
            "prompt": [{"role": "user", "content": p}],
            "chosen": [{"role": "assistant", "content": c["completion"]}],
            "rejected": [{"role": "assistant", "content": r["completion"]}],
            "chosen_reward": c["final_reward"],
            "rejected_reward": r["final_reward"],
        }
        for p, g in sorted(by_prompt.items())
        for c, r in dpo_pairs(g, dataset)
    ]

    rewards = [r["final_reward"] for r in rows if r["final_reward"] is not None]
    reasons: dict[str, int] = defaultdict(int)
    for q in quarantine:
        reasons[q["reason"]] += 1
    counts = {
        "traces_in": len(lines),
        "traces": len(rows),
        "quarantined": len(quarantine),
        "grpo_prompts": len(grpo),
        "dpo_pairs": len(dpo),
    }
    assert counts["traces_in"] == counts["traces"] + counts["quarantined"], counts

    with atomic_dir(final) as tmp:  # a concurrent run of the same version publishes first and wins
        files = {}
        for name, data, schema in (
            ("traces", rows, TRACES_SCHEMA),
            ("grpo", grpo, GRPO_SCHEMA),
            ("dpo", dpo, DPO_SCHEMA),
            ("quarantine", quarantine, QUARANTINE_SCHEMA),
        ):
            path = tmp / f"{name}.parquet"
            pq.write_table(pa.Table.from_pylist(data, schema=schema), path, compression="zstd")
            files[name] = {"path": path.name, "rows": len(data), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
        manifest = Manifest(
            version=version,
            uri=str(final),
            interval=(start.isoformat(), end.isoformat()),
            counts=counts,
            quarantine_reasons=dict(sorted(reasons.items())),
            reward_stats={
                "labeled": len(rewards),
                "mean": round(sum(rewards) / len(rewards), 6) if rewards else None,
                "min": min(rewards, default=None),
                "max": max(rewards, default=None),
            },
            files=files,
            code_version=CODE_VERSION,
            config=config,
        )
        (tmp / "manifest.json").write_text(json.dumps(manifest.__dict__, indent=2, default=str))
    _point_latest(datasets_dir, version)
    return Manifest.load(final)


def _point_latest(datasets_dir: Path, version: str) -> None:
    atomic_write_text(datasets_dir / LATEST, version + "\n")


def resolve(datasets_dir: Path, version: str | None) -> Manifest:
    """The manifest of ``version``, or of the latest version when it is empty."""
    if not version:
        pointer = datasets_dir / LATEST
        if not pointer.exists():
            raise DatasetNotFound(f"no dataset has been published under {datasets_dir} yet")
        version = pointer.read_text().strip()
    path = datasets_dir / version
    if not (path / "manifest.json").exists():
        raise DatasetNotFound(f"dataset version {version!r} does not exist under {datasets_dir}")
    return Manifest.load(path)
