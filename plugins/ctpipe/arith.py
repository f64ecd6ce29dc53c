"""The verifiable tasks of the embedded default.

``addition`` asks "What is A plus B?", which has one right answer; ``between`` asks "Name a number
between A and B.", which every integer strictly between answers. A prompt of either form is verified
whatever task is configured, so traces label the same way after the task changes. The configured
task's questions are split once, deterministically, into training questions and two held-out splits
(``dev`` for choosing settings, ``test`` for the gate) that no training data may contain.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from ctpipe.config import TaskConfig, TaskKind

# Operands of up to a hundred digits, far past any question of ours: int() refuses a text past
# 4,300 digits (a question or an answer of a model repeating a digit stopped the whole interval).
_ADDITION = re.compile(r"^What is (\d{1,100}) plus (\d{1,100})\?$")
_BETWEEN = re.compile(r"^Name a number between (\d{1,100}) and (\d{1,100})\.$")
# A number as written, its decimals, fraction or exponent included: 5.5 does not answer with 5. An
# integer, written with zero decimals or not (5.0 is 5), as its sign and digits.
_FIRST_NUMBER = re.compile(r"-?\d+(?:\.\d+|/\d+|[eE][+-]?\d+)?")
_INTEGER = re.compile(r"\s*(?P<sign>[+-]?)0*(?P<digits>\d+?)(?:\.0+)?\s*")


@dataclass(frozen=True)
class Question:
    a: int
    b: int
    kind: TaskKind = "addition"

    @property
    def prompt(self) -> str:
        if self.kind == "between":
            return f"Name a number between {self.a} and {self.b}."
        return f"What is {self.a} plus {self.b}?"

    @property
    def answer(self) -> str:
        """The reference answer. For ``between``, one of the right answers, drawn with the question as
        seed (as a labeller picks one): the same every time, and spread like the base model's data.

        >>> Question(3, 4).answer, Question(10, 20, "between").answer == Question(10, 20, "between").answer
        ('7', True)
        """
        if self.kind == "between":
            return self.sample_answer(random.Random(self.prompt))
        return str(self.a + self.b)

    def sample_answer(self, rng: random.Random) -> str:
        """A right answer, uniformly at random among all of them (the base model trains on these)."""
        if self.kind == "between":
            return str(rng.randint(self.a + 1, self.b - 1))
        return str(self.a + self.b)

    def check(self, completion: str) -> bool:
        """Whether the completion's answer (its first number, an integer) is right.

        >>> q = Question(10, 13, "between")
        >>> q.check("11"), q.check(" 12 maybe"), q.check("13"), q.check("ten"), q.check("11.5")
        (True, True, False, False, False)
        """
        got = extract_answer(completion)
        if got is None or len(got) > 101:  # past any answer of ours
            return False
        if self.kind == "between":
            return self.a < int(got) < self.b
        return int(got) == self.a + self.b


def parse(prompt: str) -> Question | None:
    """The question a prompt asks, of either kind, or None if it is not one of ours.

    >>> parse("What is 3 plus 4?")
    Question(a=3, b=4, kind='addition')
    >>> parse("Name a number between 5 and 9.")
    Question(a=5, b=9, kind='between')
    >>> parse("hello") is None
    True
    """
    prompt = prompt.strip()
    for kind, pattern in (("addition", _ADDITION), ("between", _BETWEEN)):
        m = pattern.match(prompt)
        if m:
            return Question(int(m.group(1)), int(m.group(2)), kind)
    return None


def reference_answer(prompt: str) -> str | None:
    """The reference answer to a prompt, when the task can verify it.

    >>> reference_answer("What is 12 plus 30?")
    '42'
    """
    q = parse(prompt)
    return q.answer if q else None


def verify(prompt: str, completion: str) -> float | None:
    """1.0 when the completion answers the prompt's question right, 0.0 when not; None for a prompt
    that is not one of ours.

    >>> verify("Name a number between 5 and 9.", "7"), verify("What is 1 plus 1?", "3"), verify("hi", "2")
    (1.0, 0.0, None)
    """
    q = parse(prompt)
    return None if q is None else float(q.check(completion))


def extract_answer(completion: str) -> str | None:
    """The first number in a completion (the model's answer), if it is an integer, as its sign and digits.

    >>> extract_answer(" 42"), extract_answer("42.5"), extract_answer("5/2 of it"), extract_answer("5e3")
    ('42', None, None, None)
    >>> extract_answer("no idea") is None, extract_answer("042.00"), extract_answer("-0")
    (True, '42', '0')
    """
    m = _FIRST_NUMBER.search(completion)
    return integer(m.group(0)) if m else None


def integer(text: str) -> str | None:
    """An integer's text as its sign and digits, without leading zeros, a plus sign or zero decimals;
    None for a text that is no integer. Compared so, not by int(): a reference of any length is read."""
    m = _INTEGER.fullmatch(text)
    if not m:
        return None
    return m["digits"] if m["sign"] != "-" or m["digits"] == "0" else "-" + m["digits"]


def correctness(completion: str, reference: str) -> float:
    """1.0 when the completion's answer equals the reference, else 0.0.

    >>> correctness("42", "42"), correctness("41", "42"), correctness("", "42"), correctness("42.0", " +042 ")
    (1.0, 0.0, 0.0, 1.0)
    """
    got = extract_answer(completion)
    return 1.0 if got is not None and got == integer(str(reference)) else 0.0


@dataclass(frozen=True)
class Splits:
    train: tuple[Question, ...]
    dev: tuple[Question, ...]
    test: tuple[Question, ...]

    def held_out_prompts(self) -> frozenset[str]:
        return frozenset(q.prompt for q in (*self.dev, *self.test))


@cache
def splits(cfg: TaskConfig) -> Splits:
    """Partition all the configured task's questions into train / dev / test, the same way every time."""
    span = range(cfg.operand_max + 1)
    if cfg.kind == "between":
        everything = [Question(a, a + gap, "between") for a in span for gap in range(2, cfg.gap_max + 1)]
    else:
        everything = [Question(a, b) for a in span for b in span]
    if cfg.dev_size + cfg.test_size >= len(everything):
        raise ValueError(
            f"task.dev_size + task.test_size ({cfg.dev_size + cfg.test_size}) must be below the "
            f"{len(everything)} {cfg.kind} questions of operand_max={cfg.operand_max}"
        )
    random.Random(cfg.split_seed).shuffle(everything)
    dev = tuple(everything[: cfg.dev_size])
    test = tuple(everything[cfg.dev_size : cfg.dev_size + cfg.test_size])
    train = tuple(everything[cfg.dev_size + cfg.test_size :])
    return Splits(train=train, dev=dev, test=test)


def sample_train(cfg: TaskConfig, n: int, rng: random.Random) -> Iterator[Question]:
    """``n`` training questions drawn with replacement."""
    pool = splits(cfg).train
    for _ in range(n):
        yield pool[rng.randrange(len(pool))]
