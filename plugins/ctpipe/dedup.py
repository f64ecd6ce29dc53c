"""Duplicates and evaluation contamination, decided on normalized words.

* Exact duplicates share the same raw text; normalized duplicates the same :func:`squash` text
  (case, whitespace and punctuation ignored). :func:`fingerprint` is that key, hashed;
  :func:`keys` and :func:`chat_keys` give either key of a whole column of texts or chats.
* A prompt is contaminated when it shares a word n-gram (13 words, as common practice) with an
  evaluation item, words being those of :func:`normalize`. Items shorter than n words count as one
  n-gram of their own length, so a short eval question can never slip through by being short: the
  prompt must then contain it whole.
"""

from __future__ import annotations

import functools
import re
import string
import unicodedata
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

# What normalization ignores: punctuation and whitespace (letters of any script are kept), ASCII's here.
# bytes.translate handles it at memory speed, where a Unicode-class regex costs ten times more on 2 KB texts.
_IGNORED = (string.punctuation + string.whitespace).encode()
_SEPARATORS = bytes.maketrans(_IGNORED, b" " * len(_IGNORED))
_ASCII_LOWER = bytes.maketrans(string.ascii_uppercase.encode(), string.ascii_lowercase.encode())


_RUNS = re.compile(rb"  +")
# normalize() of ASCII text as one translation: upper case lowered, ignored characters made spaces.
_ASCII_NORMAL = bytes.maketrans(string.ascii_uppercase.encode() + _IGNORED,
                                string.ascii_lowercase.encode() + b" " * len(_IGNORED))


@functools.cache
def _unicode_ignored(to: str | None) -> dict[int, str | None]:
    """What normalization ignores past ASCII, as a str.translate table: the whitespace and punctuation
    of every script (a no-break space, an ideographic one, « », ¿, 。) mapped ``to``, and the
    invisible format characters (a zero-width space, a soft hyphen) removed. In the Basic
    Multilingual Plane, where they all are but a few."""
    table = {}
    for c in range(0x80, 0x10000):
        kind = unicodedata.category(chr(c))
        if kind == "Cf":
            table[c] = None
        elif chr(c).isspace() or kind.startswith(("P", "Z")):
            table[c] = to
    return table


def _folded(text: str, to: str | None) -> str:
    """A text that is not ASCII as the ASCII steps expect it: its compatibility forms read as what they
    stand for (full-width letters and digits, ligatures), case folded (ß as ss), with what
    :func:`_unicode_ignored` says made ``to`` or removed."""
    return unicodedata.normalize("NFKC", text).casefold().translate(_unicode_ignored(to))


def _normal_bytes(text: str) -> bytes:
    text = text.lower() if text.isascii() else _folded(text, " ")
    # A regex collapsing runs of spaces is twice as fast as bytes.split() and join on 1 KB texts.
    return _RUNS.sub(b" ", text.encode("utf-8", "surrogatepass").translate(_SEPARATORS)).strip(b" ")


def normalize(text: str) -> str:
    """
    >>> normalize("What is 57 plus 38?  (Answer: 95)")
    'what is 57 plus 38 answer 95'
    """
    return _normal_bytes(text).decode("utf-8", "replace")


def squash(text: str) -> bytes:
    """The normalized-duplicate form: case folded, punctuation and whitespace (of any script) removed.

    >>> squash("What is 57 plus 38?") == squash("what is 57plus 38 !")
    True
    """
    if text.isascii():  # the common case, in one pass: translate lowers and deletes at once
        return text.encode().translate(_ASCII_LOWER, _IGNORED)
    return _folded(text, None).encode("utf-8", "surrogatepass").translate(None, _IGNORED)


def words(text: str) -> list[str]:
    return normalize(text).split()


def key(text: str | bytes) -> int:
    """A 64-bit key, stable across processes and runs (unlike ``hash``)."""
    return xxhash.xxh3_64_intdigest(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)


def fingerprint(text: str) -> int:
    """The normalized-duplicate key: equal for texts that differ only in case, spacing or punctuation."""
    return key(squash(text))


# Mixing two 64-bit keys into one, vectorized: a multiply-add (a bijection in either argument for the
# other fixed, and order-sensitive) and MurmurHash3's finalizer to spread it. The inputs are xxh3 keys.
_K, _M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)


def mix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    x = a * _K + b  # uint64 arithmetic wraps around, as a hash wants
    x ^= x >> np.uint64(33)
    x *= _M1
    x ^= x >> np.uint64(33)
    x *= _M2
    return x ^ (x >> np.uint64(33))


def keys(texts: pa.Array, normalized: bool = False) -> np.ndarray:
    """:func:`key` (or, when ``normalized``, :func:`fingerprint`) of each text of a string column, read
    straight from its buffer: no Python string is made, except for a non-ASCII text to normalize."""
    texts = texts.cast(pa.string())
    offsets = np.frombuffer(texts.buffers()[1], np.int32)[texts.offset:texts.offset + len(texts) + 1].tolist()
    buffer = texts.buffers()[2]
    h = xxhash.xxh3_64_intdigest
    if not normalized:  # slices of a memoryview: no copy of each text, three times faster than bytes slices
        view = memoryview(buffer if buffer is not None else b"")
        return np.fromiter((h(view[a:b]) for a, b in zip(offsets, offsets[1:])), np.uint64, len(texts))
    data = buffer.to_pybytes() if buffer is not None else b""
    out = np.fromiter((h(data[a:b].translate(_ASCII_LOWER, _IGNORED)) for a, b in zip(offsets, offsets[1:])),
                      np.uint64, len(texts))
    other = np.flatnonzero(~pc.fill_null(pc.string_is_ascii(texts), True).to_numpy(zero_copy_only=False))
    for i in other.tolist():  # str.lower, as squash does, not an ASCII table
        out[i] = fingerprint(data[offsets[i]:offsets[i + 1]].decode())
    return out


def chat_keys(roles: pa.Array, contents: pa.Array, offsets: Sequence[int],
              remembered: Recent | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(exact, normalized) keys per chat (its messages are ``roles``/``contents[offsets[i]:offsets[i + 1]]``):
    equal for chats with the same roles and texts in the same order (texts compared by :func:`squash`
    for the normalized key). A text met again, such as a system prompt, is normalized once, and not
    again while ``remembered`` (by its exact key) holds it."""
    roles = pc.dictionary_encode(roles)  # a handful of distinct roles: each hashed once
    role_keys = keys(roles.dictionary)[roles.indices.to_numpy()]  # a message always has a role
    exact = keys(contents)
    _, first, again = np.unique(exact, return_index=True, return_inverse=True)
    distinct, remembered = exact[first], remembered or Recent(1, np.uint64)
    known, normalized = remembered.recall(distinct)
    new = np.flatnonzero(~known)
    normalized[new] = keys(contents.take(pa.array(first[new])), normalized=True)
    remembered.store(distinct[new], normalized[new])
    return _fold(mix(role_keys, exact), offsets), _fold(mix(role_keys, normalized[again]), offsets)


def _fold(message: np.ndarray, offsets: Sequence[int]) -> np.ndarray:
    starts = np.asarray(offsets[:-1], np.int64)
    lengths = np.diff(np.asarray(offsets, np.int64))
    out = lengths.astype(np.uint64)  # the length first, so a chat never shares a key with its prefix
    for j in range(int(lengths.max(initial=0))):  # a fold per position: chats are a few messages long
        at = np.flatnonzero(lengths > j)
        out[at] = mix(out[at], message[starts[at] + j])
    return out


class Recent:
    """Values of the 64-bit keys met lately, in a fixed size whatever the number of keys: a key goes to
    one slot (by its low bits), the last one kept, and a key crowded out is only computed again.
    Key 0 marks an empty slot, so it is never remembered."""

    def __init__(self, slots: int, dtype: type):
        if slots & (slots - 1):
            raise ValueError(f"slots={slots} is not a power of two")
        self._keys, self._values = np.zeros(slots, np.uint64), np.zeros(slots, dtype)

    def recall(self, found: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(which of the keys ``found`` are remembered; their values, meaningless where not)."""
        slots = self._slots(found)
        return (self._keys[slots] == found) & (found != 0), self._values[slots]

    def store(self, found: np.ndarray, values: np.ndarray) -> None:
        slots = self._slots(found)
        self._keys[slots], self._values[slots] = found, values

    def _slots(self, found: np.ndarray) -> np.ndarray:
        return (found & np.uint64(len(self._keys) - 1)).astype(np.intp)


class NgramIndex:
    """Word n-grams of the evaluation items, for asking whether a prompt overlaps any of them.

    The n-grams, space-delimited, go into one Aho-Corasick automaton: a prompt is checked in a single
    pass over its normalized bytes, whatever the number of eval items (a regex alternation of
    thousands of n-grams falls off RE2's fast path and costs ten times more).
    """

    def __init__(self, items: Iterable[str], n: int = 13, remembered: int = 1 << 19):
        import ahocorasick_rs

        self.n = n
        grams = set()
        for ws in map(words, items):
            size = min(n, len(ws))
            grams.update(" ".join(ws[i:i + size]) for i in range(len(ws) - size + 1) if ws)
        self._automaton = ahocorasick_rs.BytesAhoCorasick([f" {g} ".encode() for g in sorted(grams)]) if grams else None
        # The verdicts of the texts checked lately, by their :func:`key` (4.5 MB). Prompts come back, since
        # pairing wants several answers to one, and a prompt met again is not searched again: at a
        # million bench traces, half of them are not.
        self._verdicts = Recent(remembered, bool)

    def overlaps(self, text: str) -> bool:
        return self.overlaps_many([text])[0]

    def overlaps_many(self, texts: list[str]) -> list[bool]:
        if self._automaton is None:
            return [False] * len(texts)
        find = self._automaton.find_matches_as_indexes
        distinct = dict.fromkeys(texts)  # a question asked again is checked once
        for t in distinct:
            distinct[t] = bool(find(b" " + _normal_bytes(t) + b" "))
        return [distinct[t] for t in texts]

    def overlaps_array(self, texts: pa.Array) -> np.ndarray:
        """:meth:`overlaps_many` over a column of texts (no nulls), those checked lately remembered."""
        out = np.zeros(len(texts), bool)
        if self._automaton is None or not len(texts):
            return out
        found = keys(texts)
        known, out = self._verdicts.recall(found)
        new = np.flatnonzero(~known)
        if len(new):
            out[new] = self._search(texts.take(pa.array(new)) if len(new) < len(texts) else texts)
            self._verdicts.store(found[new], out[new])
        return out

    def _search(self, texts: pa.Array) -> np.ndarray:
        """ASCII texts are normalized together, one per NUL-ended line (no n-gram holds a NUL), and
        searched in one pass; the others (and any holding a NUL) one by one."""
        out = np.zeros(len(texts), bool)
        together = pc.fill_null(pc.string_is_ascii(texts), False).to_numpy(zero_copy_only=False)
        blob = self._lines(texts, together)
        ends = np.flatnonzero(np.frombuffer(blob, np.uint8) == 0)
        if len(ends) != together.sum():  # a text holds a NUL (rare, so only looked for now)
            together &= ~pc.fill_null(pc.match_substring(texts, "\0"), False).to_numpy(zero_copy_only=False)
            blob = self._lines(texts, together)
            ends = np.flatnonzero(np.frombuffer(blob, np.uint8) == 0)
        found = np.array([start for _, start, _ in self._automaton.find_matches_as_indexes(blob)], np.int64)
        if len(found):
            out[np.flatnonzero(together)[np.searchsorted(ends, found)]] = True
        if not together.all():
            rest = np.flatnonzero(~together)
            out[rest] = self.overlaps_many(texts.take(pa.array(rest)).to_pylist())
        return out

    @staticmethod
    def _lines(texts: pa.Array, chosen: np.ndarray) -> bytes:
        """The chosen (ASCII) texts normalized as :func:`normalize` does, each as " words " on a NUL-ended line."""
        if not chosen.any():
            return b""
        lines = pc.binary_join_element_wise(" ", texts.filter(pa.array(chosen)), " \0", "")
        offsets = np.frombuffer(lines.buffers()[1], np.int32)[lines.offset:lines.offset + len(lines) + 1]
        blob = np.frombuffer(lines.buffers()[2].to_pybytes()[offsets[0]:offsets[-1]].translate(_ASCII_NORMAL), np.uint8)
        spaces = blob == 32
        return blob[np.r_[True, ~(spaces[1:] & spaces[:-1])]].tobytes()  # a run of spaces becomes one
