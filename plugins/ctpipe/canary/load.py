"""Simulated users for the local canary: questions sent through the proxy at a steady rate.

On a real deployment users make the traffic; on one machine nobody does, so during each bake
window these users ask the task's training questions through the proxy (open loop: a slow
server does not slow the arrivals) and keep what a trace would: which upstream answered
(nginx's ``X-Ctpipe-Upstream`` header), the status, the verifiable reward, whether the answer
was a refusal, and how many tokens it took.
"""

from __future__ import annotations

import random
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import requests

from ctpipe import arith
from ctpipe.config import TaskConfig

UPSTREAM_HEADER = "X-Ctpipe-Upstream"
_REFUSAL = re.compile(r"\b(I can(no|')t|I'm sorry|I am sorry|I am unable|I'm unable|as an AI)\b", re.IGNORECASE)


def is_refusal(text: str) -> bool:
    """An answer that declines instead of answering (an empty answer declines too).

    >>> is_refusal("I'm sorry, I can't help with that."), is_refusal(""), is_refusal("42")
    (True, True, False)
    """
    return not text.strip() or bool(_REFUSAL.search(text))


@dataclass(frozen=True)
class Answer:
    upstream: str  # host:port that answered; "" when the proxy itself did not answer
    ok: bool
    latency_s: float
    reward: float | None = None
    refusal: bool = False
    completion_tokens: int | None = None
    error: str | None = None


def _ask(session: requests.Session, url: str, model: str, q: arith.Question, max_tokens: int) -> Answer:
    t0 = time.monotonic()
    try:
        r = session.post(url, json={"model": model, "messages": [{"role": "user", "content": q.prompt}],
                                    "max_tokens": max_tokens, "temperature": 0}, timeout=60)
    except requests.RequestException as e:
        return Answer("", False, time.monotonic() - t0, error=f"{type(e).__name__}: {e}")
    upstream = r.headers.get(UPSTREAM_HEADER, "")
    latency = time.monotonic() - t0
    if r.status_code != 200:
        return Answer(upstream, False, latency, error=f"HTTP {r.status_code}: {r.text[:200]}")
    try:
        body = r.json()
        text = body["choices"][0]["message"]["content"] or ""
        tokens = body.get("usage", {}).get("completion_tokens")
    except (ValueError, KeyError, IndexError, TypeError) as e:
        return Answer(upstream, False, latency, error=f"malformed response: {e}")
    return Answer(upstream, True, latency, float(q.check(text)), is_refusal(text), tokens)


def ask(proxy_url: str, model: str, task: TaskConfig, *, rps: float, duration_s: float, seed: int,
        max_tokens: int = 8, concurrency: int = 8) -> list[Answer]:
    """Send ``rps`` requests per second for ``duration_s`` seconds; every answer, in arrival order."""
    rng = random.Random(seed)
    questions = list(arith.sample_train(task, max(1, int(rps * duration_s)), rng))
    url = f"{proxy_url}/v1/chat/completions"
    t0 = time.monotonic()
    with requests.Session() as session, ThreadPoolExecutor(concurrency) as pool:
        session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=concurrency))
        futures = []
        for i, q in enumerate(questions):
            delay = t0 + i / rps - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(_ask, session, url, model, q, max_tokens))
        return [f.result() for f in futures]
