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
import string
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc
import xxhash

# ASCII punctuation and whitespace become spaces; bytes.translate does it at memory speed, where a
# Unicode-class regex costs ten times more on 2 KB texts. Letters of any script are kept.
_SEPARATORS = bytes.maketrans((string.punctuation + string.whitespace).encode(),
                              b" " * len(string.punctuation + string.whitespace))


def normalize(text: str) -> str:
    """
    >>> normalize("What is 57 plus 38?  (Answer: 95)")
    'what is 57 plus 38 answer 95'
    """
    return b" ".join(text.lower().encode("utf-8", "surrogatepass").translate(_SEPARATORS).split()).decode("utf-8", "replace")


_SQUASHED = (string.punctuation + string.whitespace).encode()


def squash(text: str) -> bytes:
    """The normalized-duplicate form: lower case with ASCII punctuation and whitespace removed.

    >>> squash("What is 57 plus 38?") == squash("what is 57plus 38 !")
    True
    """
    return text.lower().encode("utf-8", "surrogatepass").translate(None, _SQUASHED)


def words(text: str) -> list[str]:
    return normalize(text).split()


def key(text: str | bytes) -> int:
    """A 64-bit key, stable across processes and runs (unlike ``hash``)."""
    return xxhash.xxh3_64_intdigest(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)


def fingerprint(text: str) -> int:
    """The normalized-duplicate key: equal for texts that differ only in case, spacing or punctuation."""
    return key(squash(text))


def _grams(ws: list[str], n: int) -> Iterable[bytes]:
    for i in range(len(ws) - n + 1):
        yield hashlib.blake2b(" ".join(ws[i:i + n]).encode(), digest_size=12).digest()


class NgramIndex:
    """Word n-grams of the evaluation items, for asking whether a prompt overlaps any of them."""

    def __init__(self, items: Iterable[str], n: int = 13):
        self.n = n
        self.grams: dict[int, set[bytes]] = {}  # n-gram length -> hashes
        self._pattern: str | None = None
        items_list = list(items)
        for item in items_list:
            ws = words(item)
            if ws:
                size = min(n, len(ws))
                self.grams.setdefault(size, set()).update(_grams(ws, size))

        self._texts = sorted({" ".join(ws[i:i + min(n, len(ws))]) for ws in map(words, items_list)
                              for i in range(max(1, len(ws) - n + 1)) if ws})

    def overlaps(self, text: str) -> bool:
        ws = words(text)
        return any(g in hashes for size, hashes in self.grams.items() for g in _grams(ws, size))

    def overlaps_many(self, normalized: list[str]) -> list[bool]:
        """:meth:`overlaps` for many already-normalized texts, as one RE2 scan: the n-grams as whole words."""
        if not self._texts or not normalized:
            return [False] * len(normalized)
        if self._pattern is None:
            self._pattern = "(?:^| )(?:" + "|".join(re.escape(t) for t in self._texts) + ")(?: |$)"
        return pc.match_substring_regex(pa.array(normalized, pa.large_string()), self._pattern).to_pylist()
