"""Duplicates and evaluation contamination, decided on normalized words.

* Exact duplicates share the same raw text; normalized duplicates the same :func:`squash` text
  (case, whitespace and punctuation ignored). :func:`fingerprint` is that key, hashed.
* A prompt is contaminated when it shares a word n-gram (13 words, as common practice) with an
  evaluation item, words being those of :func:`normalize`. Items shorter than n words count as one
  n-gram of their own length, so a short eval question can never slip through by being short: the
  prompt must then contain it whole.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

import xxhash

# What normalization ignores: ASCII punctuation and whitespace (letters of any script are kept).
# bytes.translate handles it at memory speed, where a Unicode-class regex costs ten times more on 2 KB texts.
_IGNORED = (string.punctuation + string.whitespace).encode()
_SEPARATORS = bytes.maketrans(_IGNORED, b" " * len(_IGNORED))


_RUNS = re.compile(rb"  +")


def _normal_bytes(text: str) -> bytes:
    # A regex collapsing runs of spaces is twice as fast as bytes.split() and join on 1 KB texts.
    return _RUNS.sub(b" ", text.lower().encode("utf-8", "surrogatepass").translate(_SEPARATORS)).strip(b" ")


def normalize(text: str) -> str:
    """
    >>> normalize("What is 57 plus 38?  (Answer: 95)")
    'what is 57 plus 38 answer 95'
    """
    return _normal_bytes(text).decode("utf-8", "replace")


def squash(text: str) -> bytes:
    """The normalized-duplicate form: lower case with ASCII punctuation and whitespace removed.

    >>> squash("What is 57 plus 38?") == squash("what is 57plus 38 !")
    True
    """
    return text.lower().encode("utf-8", "surrogatepass").translate(None, _IGNORED)


def words(text: str) -> list[str]:
    return normalize(text).split()


def key(text: str | bytes) -> int:
    """A 64-bit key, stable across processes and runs (unlike ``hash``)."""
    return xxhash.xxh3_64_intdigest(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)


def fingerprint(text: str) -> int:
    """The normalized-duplicate key: equal for texts that differ only in case, spacing or punctuation."""
    return key(squash(text))


class NgramIndex:
    """Word n-grams of the evaluation items, for asking whether a prompt overlaps any of them.

    The n-grams, space-delimited, go into one Aho-Corasick automaton: a prompt is checked in a single
    pass over its normalized bytes, whatever the number of eval items (a regex alternation of
    thousands of n-grams falls off RE2's fast path and costs ten times more).
    """

    def __init__(self, items: Iterable[str], n: int = 13):
        import ahocorasick_rs

        self.n = n
        grams = set()
        for ws in map(words, items):
            size = min(n, len(ws))
            grams.update(" ".join(ws[i:i + size]) for i in range(len(ws) - size + 1) if ws)
        self._automaton = ahocorasick_rs.BytesAhoCorasick([f" {g} ".encode() for g in sorted(grams)]) if grams else None

    def overlaps(self, text: str) -> bool:
        return self.overlaps_many([text])[0]

    def overlaps_many(self, texts: list[str]) -> list[bool]:
        if self._automaton is None:
            return [False] * len(texts)
        find = self._automaton.find_matches_as_indexes
        return [bool(find(b" " + _normal_bytes(t) + b" ")) for t in texts]
