"""Simulated production traffic: the serving champion answers users' questions.

Each answer becomes a trace record (see :mod:`ctpipe.traces`) in the hourly
partitioned store. Users give noisy thumbs, and a small share of records is
written malformed, as real log pipelines do, so quarantine has work to do.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ctpipe import arith
from ctpipe.atomic import atomic_write_text
from ctpipe.config import TaskConfig, TrafficConfig
from ctpipe.traces import partition_dir

FAULTS = ("invalid_json", "missing_field", "wrong_type", "empty_completion", "non_finite")


@dataclass(frozen=True)
class TrafficReport:
    traces: int
    faulty: int
    correct: int
    start: datetime
    end: datetime
    files: tuple[str, ...]

    @property
    def accuracy(self) -> float:
        valid = self.traces - self.faulty
        return self.correct / valid if valid else 0.0


def _corrupt(record: dict, fault: str) -> str:
    rec = json.loads(json.dumps(record))
    if fault == "invalid_json":
        return json.dumps(rec)[:-7]
    if fault == "missing_field":
        del rec["trace_id"]
    elif fault == "wrong_type":
        rec["usage"]["prompt_tokens"] = str(rec["usage"]["prompt_tokens"])
    elif fault == "empty_completion":
        rec["completion"] = ""
    elif fault == "non_finite":
        return json.dumps(rec | {"latency_ms": float("nan")})  # json writes NaN, which is not JSON
    return json.dumps(rec)


def simulate(
    checkpoint: Path,
    model_name: str,
    model_version: str,
    traces_dir: Path,
    traffic: TrafficConfig,
    task: TaskConfig,
    *,
    seed: int,
    now: datetime | None = None,
) -> TrafficReport:
    """Have ``checkpoint`` answer ``traffic.prompts`` questions, each asked several times."""
    from ctpipe import generation

    rng = random.Random(seed)
    questions = list(arith.sample_train(task, traffic.prompts, rng))
    asked = [q for q in questions for _ in range(traffic.answers_per_prompt)]
    rng.shuffle(asked)

    model, tokenizer = generation.load(checkpoint)
    completions = generation.generate(
        model, tokenizer, [q.prompt for q in asked],
        max_new_tokens=traffic.max_new_tokens, temperature=traffic.temperature, seed=seed,
    )
    by_partition: dict[Path, list[str]] = {}
    correct = faulty = 0
    # Spread arrivals over one second per 100 requests, in order, like a log shipper writes them,
    # ending now: no trace starts after it is written (and an interval that has not ended is not built).
    step = timedelta(milliseconds=10)
    t0 = now or datetime.now(timezone.utc) - len(asked) * step
    for i, (q, completion) in enumerate(zip(asked, completions)):
        start = t0 + i * step
        latency = rng.uniform(20, 80)
        ok = q.check(completion)
        thumb = None
        if rng.random() < traffic.feedback_rate:
            liked = ok if rng.random() >= traffic.feedback_noise else not ok
            thumb = "up" if liked else "down"
        prompt_tokens = len(q.prompt) + 2
        completion_tokens = len(completion) + 1
        record = {
            "trace_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "start_time": start.isoformat(),
            "end_time": (start + timedelta(milliseconds=latency)).isoformat(),
            "model": {"name": model_name, "version": model_version},
            "messages": [{"role": "user", "content": q.prompt}],
            "completion": completion,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
            "feedback": {"thumb": thumb, "rating": None},
            "latency_ms": round(latency, 3),
        }
        if rng.random() < traffic.fault_rate:
            line, faulty = _corrupt(record, rng.choice(FAULTS)), faulty + 1
        else:
            line, correct = json.dumps(record), correct + ok
        by_partition.setdefault(partition_dir(traces_dir, start), []).append(line)

    files = []
    for part, lines in by_partition.items():
        part.mkdir(parents=True, exist_ok=True)
        final = part / f"part-{t0:%Y%m%dT%H%M%S}-{seed}.jsonl"
        atomic_write_text(final, "\n".join(lines) + "\n")  # readers list *.jsonl, never the hidden temporary
        files.append(str(final))
    return TrafficReport(
        traces=len(asked), faulty=faulty, correct=correct,
        start=t0, end=t0 + len(asked) * step, files=tuple(files),
    )
