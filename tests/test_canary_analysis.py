"""Canary analysis on recorded metric series: promote, roll back on latency, roll back on quality."""

from __future__ import annotations

import random

import pytest

from ctpipe.canary.analysis import E2E, TTFT, Scrape, Window, analyze, quantile
from ctpipe.config import CanaryConfig

LE = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, float("inf")]


def metrics(latencies: list[float], ttfts: list[float], model="m") -> str:
    """A vLLM /metrics page (the part the analysis reads) after these observations."""
    lines = []
    for name, values in ((E2E, latencies), (TTFT, ttfts)):
        lines += [f"# HELP {name} histogram", f"# TYPE {name} histogram"]
        for le in LE:
            label = "+Inf" if le == float("inf") else repr(le)
            lines.append(f'{name}_bucket{{le="{label}",model_name="{model}"}} {sum(v <= le for v in values)}.0')
        lines.append(f'{name}_count{{model_name="{model}"}} {len(values)}.0')
        lines.append(f'{name}_sum{{model_name="{model}"}} {sum(values)}')
    lines += ["# TYPE vllm:request_success_total counter",
              f'vllm:request_success_total{{finished_reason="stop",model_name="{model}"}} {len(latencies)}.0']
    return "\n".join(lines) + "\n"


def window(rng, n, *, latency=0.08, ttft=0.02, reward=0.6, refuse=0.02, tokens=12, errors=0, warm=50) -> Window:
    """n requests recorded between two scrapes of a server that had already served ``warm``."""
    before_lat = [latency * rng.uniform(0.5, 1.5) for _ in range(warm)]
    lat = [latency * rng.uniform(0.5, 1.5) for _ in range(n)]
    ttf = [ttft * rng.uniform(0.5, 1.5) for _ in range(n)]
    before, after = Scrape.parse(metrics(before_lat, before_lat)), Scrape.parse(metrics(before_lat + lat, before_lat + ttf))
    return Window(
        requests=n, errors=errors, e2e=after.since(before, E2E), ttft=after.since(before, TTFT),
        rewards=[float(rng.random() < reward) for _ in range(n - errors)],
        refusals=sum(rng.random() < refuse for _ in range(n - errors)),
        output_tokens=[max(1, int(rng.gauss(tokens, 2))) for _ in range(n - errors)],
    )


@pytest.fixture
def rng():
    return random.Random(7)


def test_a_canary_as_good_as_the_champion_passes_every_check(rng):
    verdict = analyze(window(rng, 120), window(rng, 480), CanaryConfig())
    assert verdict.passed and verdict.judged, verdict.reason
    assert [c.name for c in verdict.checks] == [
        "requests", "error rate", "p95 latency", "p95 time to first token", "online reward", "refusal rate", "output length"]


def test_a_slow_canary_is_rolled_back_naming_its_latency(rng):
    verdict = analyze(window(rng, 120, latency=0.6, ttft=0.3), window(rng, 480), CanaryConfig())
    assert not verdict.passed
    assert verdict.reason.startswith("p95 latency: canary ") and "limit x1.5" in verdict.reason
    assert "p95 time to first token" in verdict.reason


def test_a_canary_that_answers_worse_is_rolled_back_though_every_request_returned_200(rng):
    verdict = analyze(window(rng, 200, reward=0.35), window(rng, 600, reward=0.6), CanaryConfig())
    (failed,) = [c for c in verdict.checks if c.passed is False]
    assert failed.name == "online reward" and "one-sided Mann-Whitney p=" in failed.detail


def test_refusals_errors_and_runaway_outputs_each_fail_their_check(rng):
    cfg = CanaryConfig()
    assert "refusal rate" in analyze(window(rng, 200, refuse=0.3), window(rng, 600), cfg).reason
    assert "error rate" in analyze(window(rng, 200, errors=12), window(rng, 600), cfg).reason
    assert "output length" in analyze(window(rng, 200, tokens=40), window(rng, 600), cfg).reason


def test_a_window_with_too_little_traffic_is_not_judged(rng):
    verdict = analyze(window(rng, 5), window(rng, 100), CanaryConfig())
    assert verdict.passed and not verdict.judged  # no rollback on noise, and no promotion either
    assert next(c for c in verdict.checks if c.name == "requests").detail == "5 canary requests, 30 needed"


def test_histograms_are_read_like_promql():
    before = Scrape.parse(metrics([0.07] * 10, [0.01] * 10))
    after = Scrape.parse(metrics([0.07] * 10 + [0.3] * 10, [0.01] * 20))
    delta = after.since(before, E2E)
    assert delta[-1] == (float("inf"), 10.0) and dict(delta)[0.25] == 0.0  # only the window's observations
    assert 0.25 < quantile(0.95, delta) <= 0.5
    restarted = Scrape.parse(metrics([0.3] * 3, [0.01] * 3))  # a counter went down: the server restarted
    assert restarted.since(after, E2E)[-1] == (float("inf"), 3.0)
    assert quantile(0.95, []) is None


def test_steps_must_climb_to_full_traffic():
    with pytest.raises(ValueError, match=r"steps=\[10, 5, 100\] must be increasing"):
        CanaryConfig(steps=[10, 5, 100])
    with pytest.raises(ValueError, match="ending at 100"):
        CanaryConfig(steps=[10, 50])


def test_a_real_vllm_metrics_page_is_read():
    """Scraped from vLLM 0.32 (CPU build) serving the tiny model, after 20 chat completions."""
    from pathlib import Path

    page = (Path(__file__).parent / "data" / "vllm-0.32-cpu-metrics.txt").read_text()
    scrape = Scrape.parse(page)
    e2e, ttft = scrape.since(Scrape({}), E2E), scrape.since(Scrape({}), TTFT)
    assert e2e[-1] == (float("inf"), 20.0) and ttft[-1] == (float("inf"), 20.0)
    assert 0 < quantile(0.95, ttft) <= quantile(0.95, e2e) < 1.0
