"""Reward signals and labels: math answers compared as math, bad signal values never leak into a label."""

from __future__ import annotations

import pytest

from ctpipe.rewards import combine, feedback_reward, judge_reward, math_reward


@pytest.mark.parametrize("completion, reference, expected", [
    ("The answer is $\\boxed{\\frac{3}{4}}$", "0.75", 1.0),
    ("x = 2", "2", 1.0),
    ("It is 12.", "13", 0.0),
    ("I can't answer that.", "13", 0.0),
])
def test_math_answers_are_compared_as_math(completion, reference, expected):
    assert math_reward(completion, reference) == expected


def test_non_finite_or_out_of_range_signals_count_as_absent():
    assert feedback_reward(None, float("nan")) is None and feedback_reward(None, 7) is None
    assert judge_reward([{"name": "judge", "value": float("inf")}, {"name": "judge", "value": True}], "judge") is None
    assert combine({"verifiable": None, "feedback": feedback_reward(None, float("nan"))},
                   {"verifiable": 0.8, "feedback": 0.2}, "renormalize") is None


def test_labels_are_deterministic_and_weights_of_zero_are_ignored():
    signals = {"verifiable": 1.0, "feedback": 0.0, "judge": 0.5}
    weights = {"verifiable": 0.6, "feedback": 0.2, "judge": 0.0}
    assert {combine(signals, weights, "renormalize") for _ in range(3)} == {0.75}
