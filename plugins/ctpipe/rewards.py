"""Reward signals of one trace, each a pure function returning a value in [0, 1] or None when absent.

* verifiable: :func:`math_reward` (math-verify: ``1/2`` equals ``0.5``, LaTeX or plain),
  :func:`exact_reward`, :func:`regex_reward`;
* user feedback: :func:`feedback_reward` (thumbs, 1-5 ratings);
* judge scores carried in the trace: :func:`judge_reward`.

:func:`combine` makes the label: a weighted mean over the signals present, with a policy for
missing ones. Every function is deterministic, so a re-run labels every trace the same.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Literal

MissingPolicy = Literal["renormalize", "zero", "drop"]


def math_reward(completion: str, reference: str) -> float | None:
    """1.0 when the completion's final answer equals ``reference`` mathematically, else 0.0; None without a reference.

    >>> math_reward("so the result is 0.5", "$\\\\frac{1}{2}$"), math_reward("I think 96", "95"), math_reward("x", "")
    (1.0, 0.0, None)
    """
    if not reference.strip():
        return None
    from math_verify import parse, verify

    gold, answer = parse(reference), parse(completion)
    return 1.0 if gold and answer and verify(gold, answer) else 0.0


def exact_reward(completion: str, reference: str) -> float | None:
    """1.0 when the trimmed, case-folded texts are equal.

    >>> exact_reward(" Paris ", "paris"), exact_reward("Lyon", "Paris")
    (1.0, 0.0)
    """
    if not reference.strip():
        return None
    return 1.0 if completion.strip().casefold() == reference.strip().casefold() else 0.0


def extracted_reward(completion: str, reference: str, pattern: re.Pattern) -> float | None:
    """1.0 when the first group of ``pattern``'s first match equals ``reference`` (trimmed, case-insensitive).

    >>> extracted_reward("so 40 + 2 = 42 #### 42", "42", re.compile(r"####\\s*(\\S+)"))
    1.0
    """
    m = pattern.search(completion)
    return exact_reward(m.group(1), reference) if m else (None if not reference.strip() else 0.0)


def regex_reward(completion: str, pattern: str) -> float:
    """1.0 when ``pattern`` matches anywhere in the completion.

    >>> regex_reward("Answer: 42", r"Answer: \\d+$"), regex_reward("no", r"\\d")
    (1.0, 0.0)
    """
    return 1.0 if re.search(pattern, completion) else 0.0


def feedback_reward(thumb: str | None, rating: float | None) -> float | None:
    """A thumb (up 1, down 0), else a 1-5 rating scaled to [0, 1]; None without either.

    >>> feedback_reward("up", None), feedback_reward(None, 4), feedback_reward(None, None)
    (1.0, 0.75, None)
    """
    if thumb in ("up", "down"):
        return 1.0 if thumb == "up" else 0.0
    if rating is not None and math.isfinite(rating) and 1 <= rating <= 5:
        return (rating - 1) / 4
    return None


def judge_reward(scores: list[dict], name: str, low: float = 0.0, high: float = 1.0) -> float | None:
    """The trace's score called ``name`` scaled from [low, high] to [0, 1]; the mean if several; None if none.

    >>> judge_reward([{"name": "judge", "value": 8}, {"name": "tone", "value": 1}], "judge", 0, 10)
    0.8
    """
    values = [s["value"] for s in scores if s.get("name") == name and isinstance(s.get("value"), (int, float))
              and not isinstance(s.get("value"), bool) and math.isfinite(s["value"])]
    if not values:
        return None
    mean = sum(values) / len(values)
    return min(1.0, max(0.0, (mean - low) / (high - low)))


def combine(signals: Mapping[str, float | None], weights: Mapping[str, float], missing: MissingPolicy) -> float | None:
    """The label of one trace from its signals.

    ``renormalize``: the weighted mean over the signals present (None when none is);
    ``zero``: an absent signal counts 0; ``drop``: None unless every weighted signal is present.

    >>> w = {"verifiable": 0.8, "feedback": 0.2}
    >>> combine({"verifiable": 1.0, "feedback": None}, w, "renormalize"), combine({"verifiable": 1.0}, w, "zero")
    (1.0, 0.8)
    >>> combine({"verifiable": 1.0, "feedback": None}, w, "drop") is None
    True
    """
    total = weight = 0.0
    for name, w in weights.items():  # a plain loop: this runs once per trace, a million times an interval
        if w <= 0:
            continue
        value = signals.get(name)
        if value is None:
            if missing == "drop":
                return None
            if missing == "zero":
                weight += w
            continue
        total += w * value
        weight += w
    return round(total / weight, 6) if weight else None
