"""Held-out evaluation and the gate: is the candidate significantly better than the champion?

Both models answer the same test questions greedily; the paired outcomes are
compared with McNemar's exact test (a binomial test on the discordant pairs),
which is what a paired yes/no comparison calls for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import pyarrow.compute as pc

from ctpipe.config import GateConfig
from ctpipe.datasets import Manifest


class ContaminationError(RuntimeError):
    """Training data holds evaluation questions: the gate's numbers would be meaningless."""


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion.

    >>> [round(x, 3) for x in wilson(50, 100)]
    [0.404, 0.596]
    """
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts.

    ``b``: champion right, candidate wrong; ``c``: champion wrong, candidate right.

    >>> mcnemar_exact(0, 0)
    1.0
    >>> round(mcnemar_exact(5, 25), 5)
    0.00032
    """
    from scipy.stats import binomtest

    return 1.0 if b + c == 0 else float(binomtest(c, b + c, 0.5).pvalue)


@dataclass(frozen=True)
class Comparison:
    n: int
    champion_accuracy: float
    candidate_accuracy: float
    champion_ci: tuple[float, float]
    candidate_ci: tuple[float, float]
    gain: float
    gain_ci: tuple[float, float]
    champion_only: int
    candidate_only: int
    p_value: float

    def as_dict(self) -> dict:
        # Lists, not tuples: the dict travels through XCom and JSON.
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def compare(champion: Sequence[bool], candidate: Sequence[bool]) -> Comparison:
    """Paired comparison of per-question correctness."""
    if len(champion) != len(candidate) or not champion:
        raise ValueError(f"need equal, non-empty outcome lists, got {len(champion)} and {len(candidate)}")
    n = len(champion)
    b = sum(1 for x, y in zip(champion, candidate) if x and not y)
    c = sum(1 for x, y in zip(champion, candidate) if y and not x)
    k_champ, k_cand = sum(champion), sum(candidate)
    gain = (c - b) / n
    # Paired difference of proportions: its variance comes from the discordant pairs only.
    se = math.sqrt(max((b + c) / n - gain * gain, 0.0) / n)
    return Comparison(
        n=n,
        champion_accuracy=k_champ / n,
        candidate_accuracy=k_cand / n,
        champion_ci=wilson(k_champ, n),
        candidate_ci=wilson(k_cand, n),
        gain=gain,
        gain_ci=(gain - 1.96 * se, gain + 1.96 * se),
        champion_only=b,
        candidate_only=c,
        p_value=mcnemar_exact(b, c),
    )


@dataclass(frozen=True)
class Decision:
    passed: bool
    reason: str


def gate(cmp: Comparison, cfg: GateConfig) -> Decision:
    """Pass only a candidate that is better, by at least ``min_gain``, with McNemar p below ``alpha``."""
    if cmp.gain <= 0 or cmp.gain < cfg.min_gain:
        return Decision(False, f"gain {cmp.gain:+.3f} is not above the required {max(cfg.min_gain, 0):+.3f}")
    if cmp.p_value >= cfg.alpha:
        return Decision(False, f"gain {cmp.gain:+.3f} is not significant (p={cmp.p_value:.3g} >= alpha={cfg.alpha})")
    return Decision(True, f"gain {cmp.gain:+.3f} with p={cmp.p_value:.3g} < alpha={cfg.alpha}")


def training_prompts(manifest: Manifest) -> set[str]:
    """Every user prompt a dataset version could teach."""
    prompts: set[str] = set()
    for name in ("traces", "grpo", "dpo"):
        table = manifest.read(name, columns=["prompt"])
        col = table.column("prompt")
        if name != "traces":  # chat messages: take each message's content
            col = pc.struct_field(pc.list_flatten(col), "content")
        prompts.update(s.strip() for s in col.to_pylist())
    return prompts


def check_disjoint(train_prompts: Iterable[str], eval_prompts: Iterable[str]) -> None:
    overlap = set(train_prompts) & {p.strip() for p in eval_prompts}
    if overlap:
        sample = sorted(overlap)[:3]
        raise ContaminationError(f"{len(overlap)} evaluation questions appear in the training data, e.g. {sample}")
