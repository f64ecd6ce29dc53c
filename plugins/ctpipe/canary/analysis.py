"""Is the canary worse than the champion over one bake window? Checks on the figures both served.

Latency comes from vLLM's Prometheus histograms (``vllm:e2e_request_latency_seconds``,
``vllm:time_to_first_token_seconds``), read as the difference of two scrapes around the window
and summarised like PromQL's ``histogram_quantile``. Errors come from what clients saw (an HTTP
200 is not the only failure, and vLLM does not count requests it refused). Quality comes from the
traces each server produced in the window: reward, refusals, output length. Each check either
passes, fails (naming its figures), or is skipped when the window holds too little to judge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families
from scipy import stats

from ctpipe.config import CanaryConfig

E2E = "vllm:e2e_request_latency_seconds"
TTFT = "vllm:time_to_first_token_seconds"


@dataclass(frozen=True)
class Scrape:
    """Cumulative histogram buckets of one vLLM ``/metrics`` page, summed over label sets."""

    buckets: dict[str, dict[float, float]]

    @classmethod
    def parse(cls, text: str) -> Scrape:
        buckets: dict[str, dict[float, float]] = {}
        for family in text_string_to_metric_families(text):
            if family.type != "histogram":
                continue
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    le = float(sample.labels["le"])
                    series = buckets.setdefault(family.name, {})
                    series[le] = series.get(le, 0.0) + sample.value
        return cls(buckets)

    def since(self, before: Scrape, name: str) -> list[tuple[float, float]]:
        """(upper bound, cumulative count) of the observations made between the two scrapes.

        A counter that went down means the server restarted: its whole history is this window.
        """
        now, then = self.buckets.get(name, {}), before.buckets.get(name, {})
        reset = any(now.get(le, 0.0) < count for le, count in then.items())
        return sorted((le, count - (0.0 if reset else then.get(le, 0.0))) for le, count in now.items())


def quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """PromQL's ``histogram_quantile``: linear within the bucket the rank falls in; None without data.

    >>> round(quantile(0.5, [(0.1, 2), (0.2, 6), (float("inf"), 8)]), 6)
    0.15
    """
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_le, lower_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):  # the open bucket: the best statement is its lower bound
                return lower_le
            width = count - lower_count
            return lower_le + (le - lower_le) * ((rank - lower_count) / width if width else 1.0)
        lower_le, lower_count = le, count
    return lower_le


@dataclass
class Window:
    """What one server did during a bake window."""

    requests: int
    errors: int
    e2e: list[tuple[float, float]] = field(default_factory=list)  # Scrape.since(...) of E2E
    ttft: list[tuple[float, float]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)  # one per answered request that has a signal
    refusals: int = 0
    output_tokens: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool | None  # None: too little data to judge in this window
    detail: str


@dataclass(frozen=True)
class Verdict:
    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        return all(c.passed is not False for c in self.checks)

    @property
    def judged(self) -> bool:
        """Every check had enough data: a step is only promoted past on a judged verdict."""
        return all(c.passed is not None for c in self.checks)

    @property
    def reason(self) -> str:
        failed = [f"{c.name}: {c.detail}" for c in self.checks if c.passed is False]
        return "; ".join(failed) if failed else "all checks passed"


def _worse_proportion(bad_canary: int, n_canary: int, bad_champion: int, n_champion: int) -> float:
    """One-sided Fisher exact p-value that the canary's rate of bad outcomes is higher."""
    table = [[bad_canary, n_canary - bad_canary], [bad_champion, n_champion - bad_champion]]
    return float(stats.fisher_exact(table, alternative="greater").pvalue)


def _latency_check(name: str, canary: float | None, champion: float | None, limit: float, slack_s: float) -> Check:
    """Fails when the canary is over ``limit`` times slower and more than ``slack_s`` slower: a few ms of
    jitter on a fast model is not a regression, however large the ratio."""
    if canary is None or champion is None:
        return Check(name, None, "no observations in this window")
    ratio = canary / champion if champion > 0 else (math.inf if canary > 0 else 1.0)
    detail = f"canary {canary:.3g} s vs champion {champion:.3g} s (x{ratio:.2f}, limit x{limit:g} and +{slack_s:g} s)"
    return Check(name, ratio <= limit or canary - champion <= slack_s, detail)


def analyze(canary: Window, champion: Window, cfg: CanaryConfig) -> Verdict:
    """The checks of one step; ``passed`` is False as soon as one of them finds the canary worse."""
    checks: list[Check] = []
    if canary.requests < cfg.min_requests:
        checks.append(Check("requests", None, f"{canary.requests} canary requests, {cfg.min_requests} needed"))
    else:
        checks.append(Check("requests", True, f"{canary.requests} canary, {champion.requests} champion"))

    rate = canary.errors / canary.requests if canary.requests else 0.0
    p = _worse_proportion(canary.errors, canary.requests, champion.errors, champion.requests) if canary.requests else 1.0
    checks.append(Check(
        "error rate", rate <= cfg.max_error_rate and p >= cfg.alpha,
        f"canary {canary.errors}/{canary.requests} ({rate:.1%}, limit {cfg.max_error_rate:.1%}) vs champion "
        f"{champion.errors}/{champion.requests}, one-sided Fisher p={p:.3g}",
    ))
    checks.append(_latency_check("p95 latency", quantile(0.95, canary.e2e), quantile(0.95, champion.e2e),
                                 cfg.max_latency_ratio, cfg.latency_slack_s))
    checks.append(_latency_check("p95 time to first token", quantile(0.95, canary.ttft), quantile(0.95, champion.ttft),
                                 cfg.max_ttft_ratio, cfg.latency_slack_s))

    if len(canary.rewards) < 2 or len(champion.rewards) < 2:
        checks.append(Check("online reward", None, f"{len(canary.rewards)} canary rewards, {len(champion.rewards)} champion"))
    else:
        p = float(stats.mannwhitneyu(canary.rewards, champion.rewards, alternative="less").pvalue)
        mean_c, mean_h = sum(canary.rewards) / len(canary.rewards), sum(champion.rewards) / len(champion.rewards)
        checks.append(Check("online reward", p >= cfg.alpha,
                            f"canary mean {mean_c:.3f} (n={len(canary.rewards)}) vs champion {mean_h:.3f} "
                            f"(n={len(champion.rewards)}), one-sided Mann-Whitney p={p:.3g}"))

    answered_c, answered_h = canary.requests - canary.errors, champion.requests - champion.errors
    if answered_c and answered_h:
        p = _worse_proportion(canary.refusals, answered_c, champion.refusals, answered_h)
        checks.append(Check("refusal rate", p >= cfg.alpha,
                            f"canary {canary.refusals}/{answered_c} vs champion {champion.refusals}/{answered_h}, "
                            f"one-sided Fisher p={p:.3g}"))
    else:
        checks.append(Check("refusal rate", None, "no answers in this window"))

    if canary.output_tokens and champion.output_tokens:
        mean_c = sum(canary.output_tokens) / len(canary.output_tokens)
        mean_h = sum(champion.output_tokens) / len(champion.output_tokens)
        ratio = mean_c / mean_h if mean_h else math.inf
        checks.append(Check("output length", 1 / cfg.max_length_ratio <= ratio <= cfg.max_length_ratio,
                            f"canary mean {mean_c:.1f} tokens vs champion {mean_h:.1f} (x{ratio:.2f}, "
                            f"allowed x{1 / cfg.max_length_ratio:.2f}..x{cfg.max_length_ratio:g})"))
    else:
        checks.append(Check("output length", None, "no answers in this window"))
    return Verdict(tuple(checks))
