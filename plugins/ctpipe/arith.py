"""The verifiable task of the embedded default: integer addition questions.

Every question has exactly one correct answer, so rewards can be checked, and
the question space is split once, deterministically, into training questions
and two held-out splits (``dev`` for choosing settings, ``test`` for the gate)
that no training data may contain.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from ctpipe.config import TaskConfig

_QUESTION = re.compile(r"^What is (\d+) plus (\d+)\?$")
_FIRST_INT = re.compile(r"-?\d+")


@dataclass(frozen=True)
class Question:
    a: int
    b: int

    @property
    def prompt(self) -> str:
        return f"What is {self.a} plus {self.b}?"

    @property
    def answer(self) -> str:
        return str(self.a + self.b)


def parse(prompt: str) -> Question | None:
    """The question a prompt asks, or None if it is not one of ours.

    >>> parse("What is 3 plus 4?")
    Question(a=3, b=4)
    >>> parse("hello") is None
    True
    """
    m = _QUESTION.match(prompt.strip())
    return Question(int(m.group(1)), int(m.group(2))) if m else None


def reference_answer(prompt: str) -> str | None:
    """The correct answer to a prompt, when the task can verify it.

    >>> reference_answer("What is 12 plus 30?")
    '42'
    """
    q = parse(prompt)
    return q.answer if q else None


def extract_answer(completion: str) -> str | None:
    """The first integer in a completion (the model's answer), if any.

    >>> extract_answer(" 42")
    '42'
    >>> extract_answer("no idea") is None
    True
    """
    m = _FIRST_INT.search(completion)
    return m.group(0) if m else None


def correctness(completion: str, reference: str) -> float:
    """1.0 when the completion's answer equals the reference, else 0.0.

    >>> correctness("42", "42"), correctness("41", "42"), correctness("", "42")
    (1.0, 0.0, 0.0)
    """
    got = extract_answer(completion)
    return 1.0 if got is not None and int(got) == int(reference) else 0.0


@dataclass(frozen=True)
class Splits:
    train: tuple[Question, ...]
    dev: tuple[Question, ...]
    test: tuple[Question, ...]

    def held_out_prompts(self) -> frozenset[str]:
        return frozenset(q.prompt for q in (*self.dev, *self.test))


@cache
def splits(cfg: TaskConfig) -> Splits:
    """Partition all questions into train / dev / test, the same way every time."""
    everything = [Question(a, b) for a in range(cfg.operand_max + 1) for b in range(cfg.operand_max + 1)]
    if cfg.dev_size + cfg.test_size >= len(everything):
        raise ValueError(
            f"task.dev_size + task.test_size ({cfg.dev_size + cfg.test_size}) must be below the "
            f"{len(everything)} questions of operand_max={cfg.operand_max}"
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
