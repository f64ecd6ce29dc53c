"""Reward signals of one trace, each a pure function returning a value in [0, 1] or None when absent.

* verifiable: :func:`math_reward` (math-verify: ``1/2`` equals ``0.5``, LaTeX or plain),
  :func:`exact_reward`, :func:`regex_reward`;
* user feedback: :func:`feedback_reward` (thumbs, 1-5 ratings), else a score named as feedback's;
* judge scores carried in the trace: :func:`judge_reward`.

:func:`combine` makes the label: a weighted mean over the signals present, with a policy for
missing ones. Every function is deterministic, so a re-run labels every trace the same.

The feedback, judge and label rules are written once, over whole columns (:func:`feedback_rewards`,
:func:`score_rewards`, :func:`combine_columns`, NaN standing for an absent signal), as the
materializer applies them to a million traces; the one-trace functions call them.
"""

from __future__ import annotations

import logging
import math
import re
import signal
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MissingPolicy = Literal["renormalize", "zero", "drop"]
# Labels are rounded to this many places, and so are the gaps between them that DPO's margin is held
# to: 0.7 - 0.2 is 0.49999999999999994 in binary, and a margin of 0.5 would refuse that pair.
DECIMALS = 6
SIGNALS = ("verifiable", "feedback", "judge")  # what a label combines (see RewardConfig.weights)


def reward_gap(high, low):
    """``high - low`` rounded as labels are, of two rewards or of two columns of them (numpy arrays).

    >>> float(reward_gap(0.7, 0.2))
    0.5
    """
    return np.round(np.subtract(high, low), DECIMALS)


# An answer written alone as bare LaTeX or an expression (2\pi, \frac{\sqrt{3}}{2}, 2x+1, 5!, as
# MATH-style sets keep their references) or as numbers in brackets or a list ((1, 2), [0, 1), 3, 2,
# -1,2): math-verify reads such math only between delimiters, and read bare, 2\pi is 2, 2x+1 is 2,
# (1, 2) is 2, -1,2 is -1.2 (where \boxed{-1,2} is the list) and \sqrt{2} is nothing. A number of
# thousands (1,234) is read bare, as before a unit (1,000 dollars, which between delimiters is a list
# of products). It must hold a number or a command of math (not \text): between delimiters
# "{Paris}" is the product of five variables. Not a sentence: a worked answer ("So x = \frac{1}{2}.")
# is math-verify's to read as text, which finds its answer in it, where between delimiters the whole
# of it would be one expression. A sentence has a word of two letters or more outside the braces of
# commands (2\sqrt{ab} is math) and what \text{...}, \mathrm{...} or \begin{...} hold (2\pi \text{ cm}^2
# is too). An expression without marks is a variable's coefficient (2x, 3b, 2k+1), a variable beside an
# operator (x+1, n-3, x<3), a factorial (5!) or a ratio (3:4, 16:9): not a unit (5 m/s, 5 L), a
# choice's letter ((B) 5), a time (4:30) or a chain of equations (2x = 10, x = 5), whose answer text
# finds. (A unit glued to its number, 5m, reads as a coefficient: MATH's answers hold far more.)
_LATEX_MARK = re.compile(r"[\\{}^]")
_EXPRESSION = re.compile(r"\d(?![eE][+-]?\d)[A-Za-z](?![A-Za-z])|[A-Za-z]\s*[-+*<>]\s*[\w(]|[\w)]\s*[-+*<>]\s*[A-Za-z](?![A-Za-z])"
                         r"|\d\s*!|\d\s*:\s*\d(?!\d)")
_NUMBERS_LISTED = re.compile(r"[\s\d.,()\[\]+-]*(?:[()\[\]]|,\s|,(?!\d{3}(?!\d)))[\s\d.,()\[\]+-]*")
# An answer alone that may be a European decimal (1,5) as well as a list: either reading of it counts
# against the reference, whose own reading (a list) decides which it holds.
_DECIMAL_COMMA = re.compile(r"[+-]?\d+,\d+")
_MATH = re.compile(r"\d|\\(?!(?:text|mathrm|textbf|mbox)\b)[A-Za-z]+")
_DELIMITED = re.compile(r"\$|\\[(\[]|\\boxed")
_WORDING = re.compile(r"\\(?:text\w*|mathrm|mbox|operatorname|begin|end)\s*\{[^{}]*\}")  # what such a command holds
_BRACED = re.compile(r"\{[^{}]*\}")
_COMMAND = re.compile(r"\\[A-Za-z]+")
_WORD = re.compile(r"[A-Za-z]{2,}")


def _sentence(text: str) -> bool:
    """Whether ``text`` has a word outside its math (see above)."""
    text = _WORDING.sub(" ", text)
    while (outside := _BRACED.sub(" ", text)) != text:  # braces within braces, innermost first
        text = outside
    return bool(_WORD.search(_COMMAND.sub(" ", text)))


# A unit after a number and a space, a power in it too (9.8 m/s^2, 12 m^2): no LaTeX of the answer's.
_UNIT = re.compile(r"(?<=\d)\s+[A-Za-z]+(?:\s*[/*^]\s*\{?-?[A-Za-z\d]+\}?)*\.?\s*$")


def _bare_latex(text: str) -> bool:
    """Whether ``text`` is an answer alone, written as bare LaTeX or an expression (see above), which
    math-verify reads only between delimiters."""
    text = _UNIT.sub("", text)
    return (not _DELIMITED.search(text) and bool(_MATH.search(text)) and not _sentence(text) and text.count("=") < 2
            and bool(_LATEX_MARK.search(text) or _NUMBERS_LISTED.fullmatch(text) or _EXPRESSION.search(text)))


# Forms math-verify reads wrong or not at all, written as it reads them, in the reference and the
# answer alike: a minus sign (U+2212) as "-"; code's backticks (The output is `3`.) and LaTeX's
# escaped dollar (\$32) dropped, and its thin space between thousands (10\,000); π and √ as LaTeX;
# a vulgar fraction (½) and a mixed number (2 3/4, 1½, read as 3 and 1) as one fraction; a repeating
# decimal (0.\overline{3}, read as 0) as its fraction; a number in e-notation (1.5e-3) in full. A
# number of either rewritten form has at most a hundred digits a part: int() refuses a text past 4,300.
# A decimal's digits past the hundredth after its point are written as one 1 if any is not 0: math-verify
# takes time quadratic in their count to read them (a model looping "0.3333..." to its token limit,
# 30,000 digits, took five seconds a trace), and compares a decimal to six places, or, against an
# integer, exactly: 10.000...0007 is still not 10.
_SIGNS = str.maketrans({"\u2212": "-", "`": None, "π": "\\pi "})
_VULGAR = re.compile("[" + "".join(c for c in map(chr, range(0xBC, 0x2190))
                                  if re.fullmatch(r"\d+\u2044\d+", unicodedata.normalize("NFKC", c))) + "]")
_THIN_THOUSANDS = re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))")
_ROOT = re.compile(r"√\s*(?:\(([^()]*)\)|\{([^{}]*)\}|(\d+(?:\.\d+)?|[A-Za-z]))")
_MIXED = re.compile(r"(?<![\d./])(\d{1,100})\s+(\d{1,100})\s*/\s*(\d{1,100})(?![\d/]|\.\d)")
_REPEATING = re.compile(r"(?<![\d.])(\d{0,100})\.(\d{0,100})\\overline\s*\{(\d{1,100})\}")
_E_NOTATION = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[eE]([+-]?\d{1,2})(?!\w|\.\d)")
_LONG_DECIMAL = re.compile(r"(\.\d{100})(\d+)")


def _proper(m: re.Match) -> str:
    whole, num, den = (int(g) for g in m.groups())
    return f"{whole * den + num}/{den}" if 0 < num < den else m[0]


def _repeating(m: re.Match) -> str:
    whole, once, again = m.groups()
    value = Fraction(int(whole or 0)) + Fraction(int(once or 0), 10 ** len(once)) \
        + Fraction(int(again), (10 ** len(again) - 1) * 10 ** len(once))
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _plain(text: str) -> str:
    r"""``text`` with the forms above written as math-verify reads them.

    >>> _plain(r"It is 2 3/4 cups, 1½ or −0.\overline{3}, `1.5e-3` and 10\,000 = \$√2")
    'It is 11/4 cups, 3/2 or -\\frac{1}{3}, 0.0015 and 10000 = \\sqrt{2}'
    """
    text = _VULGAR.sub(lambda m: " " + unicodedata.normalize("NFKC", m[0]).replace("\u2044", "/"), text)
    text = text.translate(_SIGNS).replace("\\$", "")
    text = _ROOT.sub(lambda m: "\\sqrt{%s}" % next(g for g in m.groups() if g is not None), text)
    text = _REPEATING.sub(_repeating, _THIN_THOUSANDS.sub("", text))
    text = _E_NOTATION.sub(lambda m: format(Decimal(m[0]), "f"), text)
    text = _LONG_DECIMAL.sub(lambda m: m[1] + ("1" if m[2].strip("0") else ""), text)
    return _MIXED.sub(_proper, text)


# A time (4:30, 4:30 p.m.) or a ratio (3:4, 16:9): math-verify reads such a pair in text as its first
# number, so 4:45 was right against 4:30 and "The ratio is 3:4" wrong against 3:4. A reference that is
# one is compared with the last pair the answer states (in its last box, or after "####", if it has
# one): a time's minutes are two digits under 60, and a time of a 12-hour clock is the same on a
# 24-hour one (4:30 pm is 16:30); ratios are equal in lowest terms. An answer that states no pair is
# wrong against a time, and against a ratio is math-verify's to read (\frac34 is 3:4).
_PAIR = r"(?<![\d:.,])(\d{1,4})\s*:\s*(\d{1,4})(?![\d:]|[.,]\d)(?:\s*([ap])\.?\s*m\b\.?)?"
_PAIR_REFERENCE = re.compile(rf"\$?\s*{_PAIR}\s*\$?", re.IGNORECASE)
_PAIR_STATED = re.compile(_PAIR, re.IGNORECASE)
_LAST_BOX = re.compile(r"\\boxed\s*\{([^{}]*)\}(?!.*\\boxed)", re.DOTALL)


def _pair_reward(completion: str, reference: re.Match) -> float | None:
    """:func:`math_reward` of an answer against a reference that is a time or a ratio (see above)."""
    box = _LAST_BOX.search(completion)
    said = box[1] if box else completion.rpartition("####")[2]
    stated = list(_PAIR_STATED.finditer(said))
    (h, m, half), time = reference.groups(), len(reference[2]) == 2 and int(reference[2]) < 60
    if not stated:
        return 0.0 if time else None
    h2, m2, half2 = stated[-1].groups()
    (h, m), (h2, m2) = (int(h), int(m)), (int(h2), int(m2))
    if not time:
        return 1.0 if h * m2 == h2 * m and (h and m or (h, m) == (h2, m2)) else 0.0
    half, half2 = (x and x.lower() for x in (half, half2))
    if m != m2:
        return 0.0
    if half and half2:
        return float(half == half2 and h % 12 == h2 % 12)
    if half or half2:  # one on a 12-hour clock: the other's hour past 12, or 0, must be that time's
        (hour, which), other = ((h, half), h2) if half else ((h2, half2), h)
        return float(hour % 12 + 12 * (which == "p") == other if other > 12 or other == 0 else hour % 12 == other % 12)
    return float(h % 12 == h2 % 12)


# What says that an answer follows (####, =, a colon, "is", "are", "at"), and what may be around it.
_STATED = re.compile(r"####|=|:|\b(?:is|are|at)\b")
_AROUND = " \t\n*_."


# How much of its thread's CPU time (user and system) labeling one answer with math-verify may take.
# math-verify's own limits are wall-clock alarms (five seconds to read a text, five to compare): a
# hard answer ((x+1)^200 written out) that took them on a loaded machine was wrong there and right on
# an idle one, under one version name. CPU time does not pass while the thread waits for a core, nor
# while other threads of its process run (a training's).
MATH_CPU_S = 10.0
_TICK_S = 0.1  # how often, in the process's CPU time, the thread's is looked at
# math-verify's own limits are off (it warns once that they are, and its timeouts' warnings quoted
# the whole text, 30 KB a line): the CPU limit's warning says what it stopped.
for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).setLevel(logging.ERROR)
log = logging.getLogger(__name__)


class _OutOfTime(BaseException):
    """The CPU limit's, a BaseException: math-verify's code catches every Exception and goes on."""


@contextmanager
def _cpu_limited(seconds: float) -> Iterator[None]:
    """Raise :class:`_OutOfTime` once this thread has spent ``seconds`` of CPU time in the block. The
    process's CPU-time timer ticks, and its signal's handler, run by the main thread (in it only),
    looks at the thread's own time; a timer set before is set again after."""
    end = time.thread_time() + seconds

    def tick(signum, frame):
        if time.thread_time() > end:
            raise _OutOfTime

    previous = signal.signal(signal.SIGPROF, tick)
    timer = signal.setitimer(signal.ITIMER_PROF, _TICK_S, _TICK_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, *timer)
        signal.signal(signal.SIGPROF, previous)


def math_reward(completion: str, reference: str) -> float | None:
    """1.0 when the completion's final answer equals ``reference`` mathematically, else 0.0; None without a
    reference, or with one math-verify reads no answer from ("Paris", "B"): that is no math to verify, and
    0.0 would call even the same text wrong; None too for an answer whose comparison takes more than
    :data:`MATH_CPU_S` of CPU time. A reference, or a completion that is an answer alone, of bare LaTeX
    is read as LaTeX.

    >>> math_reward("so the result is 0.5", "$\\\\frac{1}{2}$"), math_reward("I think 96", "95"), math_reward("x", "")
    (1.0, 0.0, None)
    >>> math_reward("$2\\\\pi$", "2\\\\pi"), math_reward("2", "2\\\\pi"), math_reward("(1, 2)", "(1, 2)")
    (1.0, 0.0, 1.0)
    >>> math_reward("Paris", "Paris") is None, math_reward("{Paris}", "{Paris}") is None
    (True, True)
    """
    if not reference.strip():
        return None
    pair = _PAIR_REFERENCE.fullmatch(reference.strip())
    said = pair and _pair_reward(completion, pair)
    if said is not None:
        return said
    return _limited(reference, _math_reward, completion, reference)


def _limited(reference: str, work: Callable[..., Any], *args: str) -> Any:
    """``work(*args)``, math-verify's with ``reference``, or None past :data:`MATH_CPU_S` of CPU time.
    The limit is a signal's timer, which only the main thread may set: elsewhere (a caller's thread)
    math-verify runs without one. Past it, the answer gives no verifiable signal: it was not found wrong."""
    if threading.current_thread() is not threading.main_thread():
        return work(*args)
    try:
        with _cpu_limited(MATH_CPU_S):
            return work(*args)
    except _OutOfTime:
        log.warning("math-verify took more than %g s of CPU time to compare an answer with the reference %.200r: "
                    "no verifiable signal", MATH_CPU_S, reference)
        return None


def _read(text: str) -> list:
    """What math-verify reads from ``text``, bare LaTeX read as LaTeX (see above), without a unit after
    it or a full stop: between delimiters they are part of the expression (2\\pi. was 2)."""
    from math_verify import parse

    bare = _bare_latex(text) and _UNIT.sub("", text).strip().removesuffix(".")
    return (bare and parse(f"${bare}$", parsing_timeout=None)) or parse(text, parsing_timeout=None)


def boxed_reference(reference: str) -> str | None:
    r"""``reference`` as NeMo-RL's math environment is to be given it, or None where it cannot score
    answers as :func:`math_reward` does. It reads ``\boxed{<reference>}`` as LaTeX, and the forms
    math-verify misreads (see :func:`_plain`) scored every right answer 0 (``1½`` against
    ``\frac{3}{2}``, ``1e-05`` against ``0.00001``): the reference is written as math-verify reads
    them, and kept where boxed answers stating it score there as math_reward scores them. Not kept:
    a time or a ratio (math_reward's own rule), a unit after a space (``5 m/s`` is a product there),
    a percent of a decimal (``12.5%``: \boxed{12.5} is wrong there), text ("Rome").

    >>> boxed_reference("1½"), boxed_reference("`42`"), boxed_reference("4:30"), boxed_reference("Rome")
    ('3/2', '42', None, None)
    """
    return None if _PAIR_REFERENCE.fullmatch(reference.strip()) else _limited(reference, _boxed_reference, reference)


def _boxed_reference(reference: str) -> str | None:
    import sympy
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    plain = _plain(reference.strip())
    gold, plain = _read(plain), plain.strip()
    if not gold or isinstance(gold[0], str):
        return None
    # Scored as NeMo-RL's math environment scores (HFVerifyWorker: math_metric with the reference
    # boxed, read as LaTeX, and the answer read as an expression or LaTeX; here without its wall-clock
    # alarms), against boxed answers stating the reference, the text the labels read of it and the
    # expression (an answer in a box is read alike; how each reads a bare one is its own): kept where
    # each scores as it is labeled. Equal expressions are not enough: verify compares the texts read
    # too, and the labels take 12.5 as 12.5%, which NeMo-RL, whose boxed reading keeps "12.5%", does not.
    boxed = parse(f"\\boxed{{{plain}}}", [LatexExtractionConfig()], parsing_timeout=None)
    if len(boxed) == 2 and boxed[1] == gold[1] and verify(boxed[:1], gold[:1], timeout_seconds=None) \
            and verify(gold[:1], boxed[:1], timeout_seconds=None):
        return plain  # one reading, of one text: every answer scores alike (the answers take three times longer)
    scored = []
    for answer in sorted({f"\\boxed{{{text}}}" for text in (plain, str(gold[-1]), sympy.latex(gold[0]))}):
        read = parse(answer, [ExprExtractionConfig(), LatexExtractionConfig()], parsing_timeout=None)
        theirs = bool(boxed and read) and verify(boxed, read, timeout_seconds=None)
        if theirs != (_scored(answer, gold) == 1.0):
            return None
        scored.append(theirs)
    return plain if any(scored) else None


def _math_reward(completion: str, reference: str) -> float | None:
    gold = _read(_plain(reference.strip()))
    return _scored(completion, gold) if gold else None


def _scored(completion: str, gold: list) -> float:
    """1.0 when ``completion`` states the answer math-verify read as ``gold`` (of a reference), else 0.0."""
    from math_verify import parse, verify

    def same(answer: list) -> bool:
        return bool(answer) and verify(gold, answer, timeout_seconds=None)

    completion = _plain(completion.strip())
    if same(_read(completion)) or (_DECIMAL_COMMA.fullmatch(_UNIT.sub("", completion).strip())
                                   and same(parse(completion, parsing_timeout=None))):
        return 1.0
    # Read as text, a sentence gives its last number: a tuple, an expression or LaTeX it ends in
    # ("The answer is (1, 2).", "So x = \frac{\sqrt{3}}{2}.") is read as the answer alone would be.
    stated = _STATED.split(completion)[-1].strip(_AROUND)
    return 1.0 if stated != completion and not _DELIMITED.search(completion) and _bare_latex(stated) \
        and same(parse(f"${stated}$", parsing_timeout=None)) else 0.0


def verifier(name: str, answer_regex: str) -> Callable[[str, str], float | None] | None:
    """The verifiable reward of a (completion, reference) that :class:`~ctpipe.config.RewardConfig`'s
    ``verifier`` names, for labeling and for GRPO's reward in training alike; None for ``arith``, which
    verifies from the question (:mod:`ctpipe.arith`), and ``none``."""
    if name == "regex":
        pattern = re.compile(answer_regex)
        return lambda completion, reference: extracted_reward(completion, reference, pattern)
    return {"math": math_reward, "exact": exact_reward}.get(name)


def exact_reward(completion: str, reference: str) -> float | None:
    """1.0 when the texts are equal, trimmed, case-folded and in one Unicode form, with the marks a
    chat wraps an answer in (**Paris**, `3`, "Paris", a full stop) dropped; or when both are the same
    number, however written (18.00 and 18, 1,234 and 1234, 1/2 and 0.5, −5 and -5, ＄18 and 18).

    >>> exact_reward(" Paris ", "paris"), exact_reward("**Paris**.", "Paris"), exact_reward("Lyon", "Paris")
    (1.0, 1.0, 0.0)
    >>> exact_reward("$1,234.00", "1234"), exact_reward("−5", "-5"), exact_reward("1/2", "0.5"), exact_reward("18", "180")
    (1.0, 1.0, 1.0, 0.0)
    """
    if not reference.strip():
        return None
    if completion == reference:
        return 1.0
    said, meant = _as_written(completion), _as_written(reference)
    if said == meant:
        return 1.0
    number = _number(said)
    return 1.0 if number is not None and number == _number(meant) else 0.0


_WRAPPING = " \t\n*_`\"'"
_NUMERAL = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|[-+]?\.\d+")


def _as_written(text: str) -> str:
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text).replace("\u2212", "-")
    text = text.strip(_WRAPPING)
    return (text[:-1] if text.endswith(".") else text).strip(_WRAPPING).casefold()


def _number(text: str) -> int | Decimal | Fraction | None:
    """The number a text is alone (a currency sign before it), or None. A label a trace: the plain
    integer, the common case, is read as one, and only a fraction as a Fraction (ten times slower).
    A text past a thousand characters is no number: compared as written, not converted (int() refuses
    one past 4,300 digits, and converting costs the square of its length)."""
    text = text.lstrip("$€£¥")
    if len(text) > 1000:
        return None
    if text.isascii() and text.isdigit():
        return int(text)
    if not _NUMERAL.fullmatch(text):
        return None
    text = text.replace(",", "")
    if "/" not in text:
        return Decimal(text)
    numerator, denominator = text.split("/")
    return Fraction(Decimal(numerator)) / int(denominator) if int(denominator) else None


def extracted_reward(completion: str, reference: str, pattern: re.Pattern) -> float | None:
    """:func:`exact_reward` of the first group of ``pattern``'s last match that holds it (a final
    answer after a first try) against ``reference``.

    >>> extracted_reward("so 40 + 2 = 42 #### 42", "42", re.compile(r"####\\s*(\\S+)"))
    1.0
    >>> extracted_reward("#### 20. Oops, 18.\\n#### 18.", "18", re.compile(r"####\\s*(\\S+)"))
    1.0

    Matches whose group took no part (``(\\d+)|FINAL``) state no answer, as no match does:

    >>> extracted_reward("FINAL", "42", re.compile(r"#### (\\d+)|FINAL"))
    0.0
    """
    stated = None
    for m in pattern.finditer(completion):
        stated = m.group(1) if m.group(1) is not None else stated
    return exact_reward(stated, reference) if stated is not None else (None if not reference.strip() else 0.0)


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
    return _scalar(feedback_rewards(pa.array([thumb], pa.string()), pa.array([rating], pa.float64())))


def feedback_rewards(thumbs: pa.Array, ratings: pa.Array) -> np.ndarray:
    """:func:`feedback_reward` of each (thumb, rating), NaN where there is neither."""
    up, down = (pc.fill_null(pc.equal(thumbs, t), False).to_numpy(zero_copy_only=False) for t in ("up", "down"))
    r = pc.fill_null(ratings.cast(pa.float64()), math.nan).to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        scaled = np.where(np.isfinite(r) & (r >= 1) & (r <= 5), (r - 1) / 4, math.nan)
    return np.where(up, 1.0, np.where(down, 0.0, scaled))


def judge_reward(scores: list[dict], name: str, low: float = 0.0, high: float = 1.0) -> float | None:
    """The trace's score called ``name`` scaled from [low, high] to [0, 1]; the mean if several; None if none.

    >>> judge_reward([{"name": "judge", "value": 8}, {"name": "tone", "value": 1}], "judge", 0, 10)
    0.8
    """
    numbers = [{"name": s.get("name"), "value": s.get("value")} for s in scores
               if isinstance(s.get("value"), (int, float)) and not isinstance(s.get("value"), bool)]
    column = pa.array([numbers], pa.list_(pa.struct([("name", pa.string()), ("value", pa.float64())])))
    return _scalar(score_rewards(column, name, low, high))


def score_rewards(scores: pa.Array, name: str, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    """:func:`judge_reward` of each trace's scores (a list of structs with a name and a value), NaN where none counts."""
    flat = scores.flatten()
    parents = pc.list_parent_indices(scores).to_numpy(zero_copy_only=False)
    values = pc.fill_null(pc.struct_field(flat, "value"), math.nan).to_numpy(zero_copy_only=False)
    counted = pc.fill_null(pc.equal(pc.struct_field(flat, "name"), name), False).to_numpy(zero_copy_only=False)
    counted &= np.isfinite(values)
    n = len(scores)
    scaled = np.clip((values[counted] - low) / (high - low), 0.0, 1.0)  # each score outside counts as its nearer end
    owner = parents[counted]
    order = np.lexsort((scaled, owner))  # a trace's scores summed smallest first: their order in it changes no label
    count = np.bincount(owner, minlength=n)
    total = np.bincount(owner[order], weights=scaled[order], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / count


def scores_outside(scores: pa.Array | pa.ChunkedArray, name: str, low: float, high: float) -> int:
    """How many of the scores called ``name`` lie outside [low, high], which :func:`score_rewards` counts
    as the nearer end: a judge (or feedback) of another scale than the configured one.

    >>> scores_outside(pa.array([[{"name": "judge", "value": 8.0}, {"name": "tone", "value": 3.0}], []]), "judge", 0, 1)
    1
    """
    flat = (scores.combine_chunks() if isinstance(scores, pa.ChunkedArray) else scores).flatten()
    if not len(flat):
        return 0
    value = pc.struct_field(flat, "value")
    outside = pc.or_kleene(pc.less(value, low), pc.greater(value, high))
    return int(pc.sum(pc.and_kleene(pc.equal(pc.struct_field(flat, "name"), name), outside)).as_py() or 0)


def _scalar(column: np.ndarray) -> float | None:
    value = float(column[0])
    return None if math.isnan(value) else value


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
    columns = {k: np.array([math.nan if v is None else v], float) for k, v in signals.items()}
    return _scalar(combine_columns(columns, weights, missing, 1))


def combine_columns(signals: Mapping[str, np.ndarray], weights: Mapping[str, float], missing: MissingPolicy,
                    n: int) -> np.ndarray:
    """:func:`combine` of ``n`` traces, each signal a column with NaN where it is absent. Rounded to
    :data:`DECIMALS` places, as Python's round does, so labels do not depend on how the sums were vectorized."""
    total, weight = np.zeros(n), np.zeros(n)
    dropped = np.zeros(n, bool)
    for name, w in weights.items():
        if w <= 0:
            continue
        value = signals.get(name, np.full(n, math.nan))
        present = ~np.isnan(value)
        if missing == "drop":
            dropped |= ~present
        total += np.where(present, w * value, 0.0)
        weight += w if missing == "zero" else np.where(present, w, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        label = np.where((weight > 0) & ~dropped, total / weight, math.nan)
    distinct, at = np.unique(label, return_inverse=True)  # labels repeat: each value is rounded once
    return np.array([round(x, DECIMALS) for x in distinct.tolist()], float)[at]
