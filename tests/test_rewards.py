"""Reward signals and labels: math answers compared as math, bad signal values never leak into a label."""

from __future__ import annotations

import pytest

import re

from ctpipe.rewards import combine, exact_reward, extracted_reward, feedback_reward, judge_reward, math_reward
from tests.conftest import fastest


@pytest.mark.parametrize("completion, reference, expected", [
    ("The answer is $\\boxed{\\frac{3}{4}}$", "0.75", 1.0),
    ("x = 2", "2", 1.0),
    ("It is 12.", "13", 0.0),
    ("I can't answer that.", "13", 0.0),
])
def test_math_answers_are_compared_as_math(completion, reference, expected):
    assert math_reward(completion, reference) == expected


@pytest.mark.parametrize("completion, reference, expected", [
    ("$2\\pi$", "2\\pi", 1.0), ("The answer is \\boxed{2\\pi}", "2\\pi", 1.0), ("2", "2\\pi", 0.0),
    ("$(1,2)$", "(1, 2)", 1.0), ("2", "(1, 2)", 0.0), ("\\boxed{2,3}", "3, 2", 1.0), ("2", "3, 2", 0.0),
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}", 1.0), ("$x^2+2x+1$", "x^2+2x+1", 1.0),
    ("It is 1000.", "1,000", 1.0), ("\\boxed{[0, 1)}", "[0, 1)", 1.0), ("$\\frac{1}{2}$", "$\\frac{1}{2}$", 1.0),
    ("\\boxed{-1,2}", "-1,2", 1.0), ("The roots are -1.2", "-1,2", 0.0), ("-1,2", "-1,2", 1.0),
    ("The roots are -1,2", "-1,2", 1.0), ("\\boxed{2,3}", "2,3", 1.0), ("\\boxed{1,2,3}", "1,2,3", 1.0),
    ("The answer is 2.3", "2,3", 0.0), ("1234", "1,234", 1.0), ("\\boxed{1,234}", "1234", 1.0),
    ("1,234,567", "1234567", 1.0), ("1,5", "1.5", 1.0), ("\\boxed{1,5}", "1.5", 0.0),
    # A number of thousands, or any, before a unit: read bare, as before (between delimiters, a list of products).
    ("\\boxed{1000}", "1,000 dollars", 1.0), ("1,000 dollars", "1000", 1.0), ("\\boxed{2500}", "2,500 J", 1.0),
    ("\\boxed{2000}", "2,000 cm^2", 1.0), ("2500 J", "2,500 J", 1.0), ("0,5 kg", "0.5", 1.0),
    # A full stop after bare LaTeX: not part of it (2\\pi. read as 2).
    ("\\boxed{2}", "2\\pi.", 0.0), ("\\boxed{2\\pi}", "2\\pi.", 1.0), ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}.", 1.0),
])
def test_a_reference_of_bare_latex_or_bracketed_numbers_is_read_as_latex(completion, reference, expected):
    """As MATH-style sets keep their answers: read bare, math-verify took 2\\pi for 2, (1, 2) and 3, 2
    for 2, -1,2 for -1.2, and \\sqrt{3}/2 for nothing, so right answers were labeled 0 and wrong ones 1
    (a DPO pair chose "-1.2" over "\\boxed{-1,2}"). An answer alone of one comma may be a European
    decimal: it is read both ways against a reference of one number."""
    assert math_reward(completion, reference) == expected


@pytest.mark.parametrize("completion, reference, expected", [
    ("The answer is $\\boxed{2x+1}$", "2x+1", 1.0), ("The answer is $\\boxed{2}$", "2x+1", 0.0), ("2x+1", "2x+1", 1.0),
    ("$\\boxed{4x}$", "4x", 1.0), ("$\\boxed{4}$", "4x", 0.0), ("$\\boxed{120}$", "5!", 1.0), ("\\boxed{7!}", "7!", 1.0),
    ("\\boxed{y=2x+3}", "y = 2x + 3", 1.0), ("3", "x = 3", 1.0), ("1,5", "1.5", 1.0),
    ("$\\boxed{3b}$", "3b", 1.0), ("$\\boxed{3}$", "3b", 0.0), ("$\\boxed{2k+1}$", "2k+1", 1.0),
    ("$\\boxed{x+1}$", "x+1", 1.0), ("$\\boxed{x}$", "x+1", 0.0), ("$\\boxed{x<3}$", "x<3", 1.0),
    ("\\boxed{3:4}", "3:4", 1.0), ("\\boxed{\\frac34}", "3:4", 1.0), ("\\boxed{3}", "3:4", 0.0),
    ("2x = 10, x = 5", "5", 1.0), ("2y + 6 = 10, 2y = 4, y = 2", "2", 1.0), ("3n = 15, n = 5", "6", 0.0),
])
def test_a_reference_or_an_answer_alone_written_as_an_expression_is_read_whole(completion, reference, expected):
    """Read bare, as text, math-verify takes an expression's first number: 2x+1 was 2, so the right
    answer was labeled 0 and 2 labeled 1, and DPO preferred the wrong one."""
    assert math_reward(completion, reference) == expected


@pytest.mark.parametrize("completion, reference, expected", [
    ("$\\boxed{2\\pi}$", "2\\pi \\text{ cm}^2", 1.0), ("$\\boxed{2}$", "2\\pi \\text{ cm}^2", 0.0),
    ("$\\boxed{5\\sqrt{2}}$", "5\\sqrt{2}\\text{ units}", 1.0), ("$\\boxed{5}$", "5\\sqrt{2}\\text{ units}", 0.0),
    ("$\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}$", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", 1.0),
    ("2", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", 0.0), ("$\\boxed{2\\sqrt{ab}}$", "2\\sqrt{ab}", 1.0),
    ("5 L", "5", 1.0), ("v = 5 m/s", "5", 1.0), ("5", "5 m/s", 1.0), ("(B) 5", "5", 1.0), ("2:15", "4:30", 0.0),
    ("The meeting ends at 4:30.", "4:30", 1.0),
])
def test_latex_words_units_choices_and_times_are_read_as_they_mean(completion, reference, expected):
    """What a command of text holds (\\text{ cm}), an environment's name and a product of letters
    inside a command's braces are no sentence; a unit, a choice's letter and a time are no expression."""
    assert math_reward(completion, reference) == expected


@pytest.mark.parametrize("completion, reference, expected", [
    ("The train arrives at 4:30.", "4:30", 1.0), ("The train arrives at 4:45.", "4:30", 0.0), ("4", "4:30", 0.0),
    ("\\boxed{4:45}", "4:30", 0.0), ("It is 16:30", "4:30 PM", 1.0), ("It is 16:30", "4:30 a.m.", 0.0),
    ("left at 2:15, arrived at 4:30pm", "4:30 p.m.", 1.0), ("at 04:30", "4:30", 1.0), ("at 4:30:15", "4:30", 0.0),
    ("\\boxed{12:30 am}", "0:30", 1.0), ("It is 4:30 pm", "4:30 am", 0.0),
    ("The meeting is at 0:15", "12:15 pm", 0.0), ("12:15 pm", "00:15", 0.0), ("It is 0:15", "12:15 am", 1.0),
    ("It is 12:15", "12:15 pm", 1.0),
    ("The ratio is 3:4.", "3:4", 1.0), ("The ratio is 3:5", "3:4", 0.0), ("so 6:8, in lowest terms", "3:4", 1.0),
    ("3:4 at first, then 1:2 #### 3:4", "3:4", 1.0), ("boys to girls: 16:9. Then 2:1", "$16:9$", 0.0),
    ("\\boxed{\\frac34}", "3:4", 1.0), ("\\boxed{3}", "3:4", 0.0),
])
def test_a_reference_that_is_a_time_or_a_ratio_is_compared_with_the_pair_stated_last(completion, reference, expected):
    """math-verify reads a pair in text as its first number: 4:45 was right against 4:30, and "The
    ratio is 3:4" wrong against 3:4."""
    assert math_reward(completion, reference) == expected


@pytest.mark.parametrize("completion, reference", [
    ("We compute 3^2 = 9 and then 9 + 1 = 10", "10"), ("So x = \\frac{1}{2}.", "0.5"),
    ("x^2 - 1 = 0 gives x = 1 or x = -1, so the sum of the roots is 0", "0"),
])
def test_a_worked_answer_holding_latex_is_read_as_text_not_as_one_expression(completion, reference):
    """A sentence with a power or a fraction in it was read whole as LaTeX, and its right answer labeled 0."""
    assert math_reward(completion, reference) == 1.0


def test_math_answers_are_verified_off_the_main_thread():
    """math-verify's timeouts are signal alarms, which only the main thread may set: a caller's thread
    (materialize run from a thread of its own) verifies without them, not failing the run."""
    import threading

    got = []
    thread = threading.Thread(target=lambda: got.append([math_reward("so 0.5", "1/2"), math_reward("$2\\pi$", "2\\pi")]))
    thread.start()
    thread.join()
    assert got == [[1.0, 1.0]]


def test_a_judge_score_outside_its_range_counts_as_its_nearer_end_before_the_mean():
    assert judge_reward([{"name": "judge", "value": 15}, {"name": "judge", "value": 5}], "judge", 0, 10) == 0.75
    assert judge_reward([{"name": "judge", "value": -5}, {"name": "judge", "value": 10}], "judge", 0, 10) == 0.5


@pytest.mark.parametrize("reference", ["Paris", "B", "yes", "(A)"])
def test_a_reference_math_verify_reads_no_answer_from_gives_no_math_signal(reference):
    """Not 0.0, which would call even the same text wrong: the policy for missing signals decides."""
    assert math_reward(reference, reference) is None and math_reward("42", reference) is None


@pytest.mark.parametrize("pattern", [r"####\s*(\S+)|FINAL ANSWER", r"(?:Answer:\s*(\d+))?"])
def test_a_match_whose_group_took_no_part_states_no_answer(pattern):
    """Such a regex is valid (it has a group); a match without it is a completion that states no answer."""
    compiled = re.compile(pattern)
    assert extracted_reward("FINAL ANSWER", "42", compiled) == 0.0 and extracted_reward("nothing", "", compiled) is None
    assert extracted_reward("#### 42" if "#" in pattern else "Answer: 42", "42", compiled) == 1.0


def test_non_finite_or_out_of_range_signals_count_as_absent():
    assert feedback_reward(None, float("nan")) is None and feedback_reward(None, 7) is None
    assert judge_reward([{"name": "judge", "value": float("inf")}, {"name": "judge", "value": True}], "judge") is None
    assert combine({"verifiable": None, "feedback": feedback_reward(None, float("nan"))},
                   {"verifiable": 0.8, "feedback": 0.2}, "renormalize") is None


def test_labels_are_deterministic_and_weights_of_zero_are_ignored():
    signals = {"verifiable": 1.0, "feedback": 0.0, "judge": 0.5}
    weights = {"verifiable": 0.6, "feedback": 0.2, "judge": 0.0}
    assert {combine(signals, weights, "renormalize") for _ in range(3)} == {0.75}


@pytest.mark.parametrize("completion, reference, expected", [
    # mixed numbers and vulgar fractions (math-verify read 2 3/4 as 3, 1 1/2 as 1)
    ("She needs 2 3/4 cups of flour.", "2 3/4", 1.0), ("She needs 3 cups of flour.", "2 3/4", 0.0),
    ("The answer is 2.75.", "2 3/4", 1.0), ("The answer is 1.", "1 1/2", 0.0), ("#### 1 1/2", "1.5", 1.0),
    ("The answer is 1½.", "1.5", 1.0), ("The answer is 1½.", "1", 0.0), ("$\\boxed{6\\frac{1}{4}}$", "6.25", 1.0),
    # e-notation (1e-05 was 1·E − 5 as a reference)
    ("The output is 1e-05", "1e-05", 1.0), ("0.00001", "1e-05", 1.0), ("The answer is 1.5e-3", "0.0015", 1.0),
    ("The answer is 1e2.", "100", 1.0), ("The answer is 2000.", "2e3", 1.0), ("The output is 1e-04", "1e-05", 0.0),
    # a sentence ending in a tuple, an expression or LaTeX
    ("The answer is (1, 2).", "(1, 2)", 1.0), ("The vertex is at (1, 2)", "(1, 2)", 1.0), ("**Answer:** (1, 2)", "(1, 2)", 1.0),
    ("The answer is (2, 1).", "(1, 2)", 0.0), ("The solutions are 1, 2, 3.", "1, 2, 3", 1.0),
    ("The answer is 2x+1.", "2x+1", 1.0), ("The answer is 2x+2.", "2x+1", 0.0), ("The answer is 5!.", "5!", 1.0),
    ("So x = \\frac{\\sqrt{3}}{2}.", "\\frac{\\sqrt{3}}{2}", 1.0), ("The answer is 2π.", "2\\pi", 1.0),
    ("The answer is √3.", "\\sqrt{3}", 1.0), ("The answer is √2.", "\\sqrt{3}", 0.0), ("The line is y = 2x + 3.", "2x+3", 1.0),
    # code's backticks, a minus sign, an escaped dollar, LaTeX thousands, repeating decimals, units with powers
    ("The output is `3`.", "3.0", 1.0), ("The answer is −5.", "-5", 1.0), ("−5", "−5", 1.0), ("−4", "-5", 0.0),
    ("$\\boxed{\\$32}$", "\\$32", 1.0), ("$\\boxed{\\$33}$", "\\$32", 0.0), ("$\\boxed{10000}$", "10\\,000", 1.0),
    ("$\\boxed{0}$", "10\\,000", 0.0), ("$\\boxed{\\frac{1}{3}}$", "0.\\overline{3}", 1.0),
    ("$\\boxed{0}$", "0.\\overline{3}", 0.0), ("$\\boxed{\\frac{5}{3}}$", "1.\\overline{6}", 1.0),
    ("It is about 9.8 m/s^2.", "9.8 m/s^2", 1.0), ("9.8", "9.8 m/s^2", 1.0), ("The area is 12 m².", "12 m^2", 1.0),
])
def test_forms_math_verify_misreads_are_written_as_it_reads_them(completion, reference, expected):
    """Each was labeled the other way: a right answer 0 (or a wrong one 1), so DPO preferred the wrong one."""
    assert math_reward(completion, reference) == expected


@pytest.mark.parametrize("completion, reference, expected", [
    ("so 9*2 = 18\n#### 18.", "18", 1.0), ("#### $18", "18", 1.0), ("#### 18.00", "18", 1.0), ("#### 1,234", "1234", 1.0),
    ("#### 1234", "1,234", 1.0), ("#### **18**", "18", 1.0), ("#### −5", "-5", 1.0), ("#### 1/2", "0.5", 1.0),
    ("#### １８", "18", 1.0), ("first try #### 20. Oops, recompute.\n#### 18", "18", 1.0), ("#### 18\n#### 20", "18", 0.0),
    ("#### 180", "18", 0.0), ("#### 18", "180", 0.0), ("#### 1,2345", "12345", 0.0),
])
def test_the_regex_verifier_takes_the_last_answer_stated_and_compares_numbers_as_numbers(completion, reference, expected):
    assert extracted_reward(completion, reference, re.compile(r"####\s*(\S+)")) == expected


@pytest.mark.parametrize("completion, reference, expected", [
    ("**Paris**", "Paris", 1.0), ("Paris.", "Paris", 1.0), ('"Paris"', "Paris", 1.0), ("`42`", "42", 1.0),
    ("cafe\u0301", "café", 1.0), ("18.0", "18", 1.0), ("Lyon.", "Paris", 0.0), ("The capital is Paris.", "Paris", 0.0),
])
def test_the_exact_verifier_ignores_the_marks_an_answer_is_wrapped_in(completion, reference, expected):
    assert exact_reward(completion, reference) == expected


def test_a_judges_scores_give_the_same_label_in_any_order_and_tiny_weights_keep_their_precision():
    """Summed in the order given, 0.0376434, 0.2205511 and 0.95 made 0.402731 one way and 0.402732 the other."""
    from ctpipe.config import RewardConfig

    values = [0.0376434, 0.2205511, 0.95]
    scores = [{"name": "judge", "value": v} for v in values]
    assert judge_reward(scores, "judge") == judge_reward(scores[::-1], "judge")
    cfg = RewardConfig(verifier="none", verifiable_weight=0, feedback_weight=1e-323, judge_weight=1e-320)
    assert combine({"feedback": 0.7, "judge": None}, cfg.weights(), "renormalize") == 0.7


@pytest.mark.parametrize("verify", [
    lambda text: exact_reward(text, "42"), lambda text: exact_reward("42", text), lambda text: exact_reward(text, text),
    lambda text: exact_reward("1/" + text, "0.5"), lambda text: extracted_reward("#### " + text, "42", re.compile(r"####\s*(\S+)")),
    lambda text: math_reward(f"2 3/{text}", "42"), lambda text: math_reward("0.\\overline{" + text + "}", "42"),
    lambda text: math_reward(f"2 {text}/3", "42"), lambda text: math_reward(f"{text}.\\overline{{3}}", "42"),
])
def test_a_number_of_thousands_of_digits_is_labeled_not_raised(verify):
    """int() refuses a text past 4,300 digits: a model repeating a digit stopped the whole interval."""
    assert verify("9" * 5000) in (0.0, 1.0, None)


def test_a_decimal_looping_to_the_token_limit_is_labeled_as_its_value_in_linear_time():
    """math-verify reads a decimal in time quadratic in its digits: a model's "0.3333..." of 30,000
    digits took its five-second timeout and was wrong against 1/3 (a label the machine's load decided).
    Past the hundredth digit after the point they are written as one 1, math-verify comparing to six places."""
    def took(n: int) -> float:
        return fastest(lambda: math_reward("The answer is 0." + "3" * n, "42"))

    assert math_reward("The answer is 0." + "3" * 30_000, "\\frac{1}{3}") == 1.0
    assert math_reward("\\boxed{0." + "3" * 30_000 + "4}", "0.33") == 0.0
    assert took(25_600) / took(1_600) < 64  # 16 times the digits; quadratic took 256 times


def test_a_math_label_does_not_hang_on_the_wall_clock(monkeypatch):
    """math-verify's own limits were wall-clock alarms: an answer whose comparison waited past five
    seconds for a core (a loaded machine) was wrong, and right on an idle one."""
    import time

    import math_verify.grader

    compare = math_verify.grader.sympy_expr_eq

    def waited(*args, **kwargs):
        time.sleep(5.5)  # a process waiting, its CPU time not passing
        return compare(*args, **kwargs)

    monkeypatch.setattr(math_verify.grader, "sympy_expr_eq", waited)
    assert math_reward("The answer is \\frac{1}{2}.", "0.5") == 1.0


def test_an_answer_past_the_cpu_limit_gives_no_math_signal_and_says_so(monkeypatch, caplog):
    import time

    import math_verify.grader

    import ctpipe.rewards

    def spun(*args, **kwargs):  # math-verify catches every Exception around this: the limit must pass through
        end = time.process_time() + 3
        while time.process_time() < end:
            pass
        return True

    monkeypatch.setattr(ctpipe.rewards, "MATH_CPU_S", 0.3)
    monkeypatch.setattr(math_verify.grader, "sympy_expr_eq", spun)
    started = time.process_time()
    assert math_reward("So x = 7.", "x = " + "7" * 500) is None
    assert time.process_time() - started < 2
    assert "more than 0.3 s of CPU time" in caplog.messages[-1] and len(caplog.messages[-1]) < 400  # the reference cut
    monkeypatch.undo()
    assert math_reward("So x = 7.", "7") == 1.0  # and the next answer is compared as before


def test_the_cpu_limit_counts_the_labeling_thread_alone_and_keeps_a_timer_set_before(monkeypatch):
    """It counted the process's time: a comparison of a right answer beside threads hashing (a
    training's) was cut short, and a timer the process had set was left off."""
    import signal
    import threading
    import time

    import math_verify.grader

    import ctpipe.rewards

    compare = math_verify.grader.sympy_expr_eq

    def waited(*args, **kwargs):
        time.sleep(1.0)  # the labeling thread's CPU time not passing, the process's passing (below)
        return compare(*args, **kwargs)

    def hash_for(seconds: float) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    monkeypatch.setattr(ctpipe.rewards, "MATH_CPU_S", 0.3)
    monkeypatch.setattr(math_verify.grader, "sympy_expr_eq", waited)
    other = threading.Thread(target=hash_for, args=(1.0,))
    other.start()
    assert math_reward("The answer is \\\\frac{1}{2}.", "0.5") == 1.0
    other.join()

    previous = signal.signal(signal.SIGPROF, lambda *_: None)
    try:
        signal.setitimer(signal.ITIMER_PROF, 30.0, 1.0)
        monkeypatch.undo()
        math_reward("7", "7")
        left, interval = signal.getitimer(signal.ITIMER_PROF)
        assert 29.0 < left < 30.1 and interval == 1.0
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def test_a_decimal_cut_after_its_hundredth_digit_is_still_not_an_integer_it_is_not():
    """Against an integer math-verify compares exactly: 10.000...0007 cut to its hundredth digit was 10."""
    assert math_reward("\\boxed{10." + "0" * 100 + "7}", "10") == 0.0
    assert math_reward("\\boxed{10." + "0" * 150 + "}", "10") == 1.0
    assert math_reward("The answer is 0." + "3" * 30_000, "\\frac{1}{3}") == 1.0
