"""Duplicates and evaluation contamination, decided on normalized words.

* Exact duplicates share the same raw text; normalized duplicates the same :func:`normalize`
  text (case, whitespace and punctuation ignored). :func:`fingerprint` is that key, hashed.
* A prompt is contaminated when it shares a word n-gram (13 words, as common practice) with an
  evaluation item. Items shorter than n words count as one n-gram of their own length, so a
  short eval question can never slip through by being short: the prompt must then contain it whole.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def words(text: str) -> list[str]:
    """
    >>> words("What is 57 plus 38?  (Answer: 95)")
    ['what', 'is', '57', 'plus', '38', 'answer', '95']
    """
    return _WORD.findall(text.casefold())


def normalize(text: str) -> str:
    return " ".join(words(text))


def fingerprint(text: str) -> bytes:
    """The normalized-duplicate key: equal for texts that differ only in case, spacing or punctuation."""
    return hashlib.blake2b(normalize(text).encode(), digest_size=16).digest()


def _grams(ws: list[str], n: int) -> Iterable[bytes]:
    for i in range(len(ws) - n + 1):
        yield hashlib.blake2b(" ".join(ws[i:i + n]).encode(), digest_size=12).digest()


class NgramIndex:
    """Word n-grams of the evaluation items, for asking whether a prompt overlaps any of them."""

    def __init__(self, items: Iterable[str], n: int = 13):
        self.n = n
        self.grams: dict[int, set[bytes]] = {}  # n-gram length -> hashes
        for item in items:
            ws = words(item)
            if ws:
                size = min(n, len(ws))
                self.grams.setdefault(size, set()).update(_grams(ws, size))

    def overlaps(self, text: str) -> bool:
        ws = words(text)
        return any(g in hashes for size, hashes in self.grams.items() for g in _grams(ws, size))
