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
from collections.abc import Iterable, Iterator, Sequence

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
    return _spread(a * _K + b)  # uint64 arithmetic wraps around, as a hash wants


def _spread(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's finalizer: every bit of ``h`` spread over all of them."""
    h = h ^ (h >> np.uint64(33))
    h *= _M1
    h ^= h >> np.uint64(33)
    h *= _M2
    return h ^ (h >> np.uint64(33))


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
    # A fold per position, over the chats that long: longest first, they are a prefix of this order
    # (not a search of every chat per position, which made a block with a chat of 150,000 messages
    # cost 150,000 passes over all its chats).
    order = np.argsort(-lengths, kind="stable")
    longer = len(lengths) - np.searchsorted(np.sort(lengths), np.arange(int(lengths.max(initial=0))), "right")
    for j, n in enumerate(longer.tolist()):
        if n == 1:  # the longest chat alone: its other messages in plain integers, not an array call each
            i = int(order[0])
            out[i] = _mix_ints(int(out[i]), message[starts[i] + j:starts[i] + lengths[i]].tolist())
            break
        at = order[:n]
        out[at] = mix(out[at], message[starts[at] + j])
    return out


def _mix_ints(h: int, messages: list[int]) -> int:
    """:func:`mix` of ``h`` with each of ``messages`` in turn, in Python's integers."""
    k, m1, m2, low = int(_K), int(_M1), int(_M2), (1 << 64) - 1
    for m in messages:
        h = (h * k + m) & low
        h ^= h >> 33
        h = (h * m1) & low
        h ^= h >> 33
        h = (h * m2) & low
        h ^= h >> 33
    return h


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


# Polynomial hashing of words (their bytes, base _P) and of word sequences (their words' hashes, base
# _Q), modulo 2**64 as uint64 arithmetic wraps; odd bases, so that each has an inverse, which brings a
# span's sum back to the hash of the span alone (see _word_hashes, _ngram_hashes).
_P, _Q = 0x100000001B3, 0x9E3779B97F4A7C15
_P_INV, _Q_INV = (np.uint64(pow(b, -1, 1 << 64)) for b in (_P, _Q))
_P, _Q = np.uint64(_P), np.uint64(_Q)
_CHUNK = 1 << 20  # bytes of normalized text hashed at once: arrays of 8 bytes a byte, 8 MB each


def _powers(n: int, base: np.uint64) -> np.ndarray:
    """base**0 .. base**(n - 1), modulo 2**64."""
    out = np.full(n, base, np.uint64)
    out[:1] = 1
    return np.cumprod(out, out=out)


def _word_hashes(lines: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(a hash of each word, the index of its line) of normalized lines (words between spaces, each
    line starting and ending with one), in order."""
    offsets = np.frombuffer(lines.buffers()[1], np.int32)[lines.offset:lines.offset + len(lines) + 1].astype(np.int64)
    data = np.frombuffer(lines.buffers()[2], np.uint8)[offsets[0]:offsets[-1]]
    offsets -= offsets[0]
    space = data == 32
    inside = ~space
    starts = np.flatnonzero(inside & np.r_[True, space[:-1]])
    ends = np.flatnonzero(inside & np.r_[space[1:], True]) + 1
    sums = np.zeros(len(data) + 1, np.uint64)
    np.cumsum((data.astype(np.uint64) + np.uint64(1)) * _powers(len(data), _P), out=sums[1:])
    words = (sums[ends] - sums[starts]) * _powers(len(data), _P_INV)[starts]  # each as if it began the text
    return _spread(words), np.searchsorted(offsets, starts, side="right") - 1


def _ngram_hashes(words: np.ndarray, line_of: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(a key of each sequence of ``n`` words within a line, the index of its line)."""
    starts = np.flatnonzero(line_of[:len(line_of) - n + 1] == line_of[n - 1:]) if len(words) >= n else np.zeros(0, np.intp)
    sums = np.zeros(len(words) + 1, np.uint64)
    np.cumsum(words * _powers(len(words), _Q), out=sums[1:])
    grams = (sums[starts + n] - sums[starts]) * _powers(len(words), _Q_INV)[starts]
    return _spread(grams + np.uint64(n)), line_of[starts]


def _normal_lines(texts: pa.Array) -> pa.Array:
    """Each text as :func:`normalize` makes it, between spaces (a binary array): ASCII ones in one
    translation of their bytes, the others one by one."""
    texts = texts.cast(pa.string())
    ascii_ = pc.fill_null(pc.string_is_ascii(texts), True).to_numpy(zero_copy_only=False)
    lines = pc.binary_join_element_wise(" ", pc.fill_null(texts, ""), " ", "").cast(pa.binary())
    data = lines.buffers()[2]
    lines = pa.Array.from_buffers(pa.binary(), len(lines), [None, lines.buffers()[1],
                                                            pa.py_buffer((data.to_pybytes() if data else b"").translate(_ASCII_NORMAL))],
                                  offset=lines.offset)
    if ascii_.all():
        return lines
    other = np.flatnonzero(~ascii_)
    normal = [b" " + _normal_bytes(t) + b" " for t in texts.take(pa.array(other)).to_pylist()]
    return pc.replace_with_mask(lines, pa.array(~ascii_), pa.array(normal, pa.binary()))


def _chunks(lines: pa.Array) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(the index of its first line, :func:`_word_hashes`) of runs of ``lines`` of about :data:`_CHUNK` bytes."""
    ends = np.cumsum(pc.binary_length(lines).to_numpy(zero_copy_only=False))
    first = 0
    while first < len(lines):
        last = max(first + 1, int(np.searchsorted(ends, (ends[first - 1] if first else 0) + _CHUNK, "right")))
        yield first, *_word_hashes(lines.slice(first, last - first))
        first = last


class NgramIndex:
    """Word n-grams of the evaluation items, for asking whether a prompt overlaps any of them.

    Each n-gram (or a short item whole) is kept as a 64-bit key: a hash of its words' hashes, in
    order. A prompt's n-grams are hashed the same way, vectorized over a block's texts, and looked up
    in a bitmap of the keys' top bits, then, where it says maybe, in the sorted keys. Memory is about
    24 bytes an n-gram of the items, whatever their number (an automaton of the n-grams' texts took
    175 MB for a thousand items of 60 words, and each worker built its own). Two n-grams share a key
    one time in 2**64.
    """

    def __init__(self, items: Iterable[str], n: int = 13, remembered: int = 1 << 19):
        self.n = n
        lengths, found = {n}, []
        for _, words, line_of in _chunks(_normal_lines(pa.array(list(items), pa.string()))):
            count = np.bincount(line_of)
            shorter = {int(c) for c in count if 0 < c < n}  # an item shorter than n words counts whole
            lengths |= shorter
            for size in sorted({n} | shorter):
                grams, of = _ngram_hashes(words, line_of, size)
                found.append(grams if size == n else grams[count[of] == size])
        self.lengths = sorted(lengths)
        self._keys = np.unique(np.concatenate(found)) if found else np.zeros(0, np.uint64)
        bits = max(16, int(len(self._keys) * 8 - 1).bit_length())  # a slot in eight taken, at most
        self._shift = np.uint64(64 - bits)
        self._bitmap = np.zeros(1 << bits, bool)
        self._bitmap[(self._keys >> self._shift).astype(np.intp)] = True
        # The verdicts of the texts checked lately, by their :func:`key` (4.5 MB). Prompts come back, since
        # pairing wants several answers to one, and a prompt met again is not searched again: at a
        # million bench traces, half of them are not.
        self._verdicts = Recent(remembered, bool)

    def overlaps(self, text: str) -> bool:
        return self.overlaps_many([text])[0]

    def overlaps_many(self, texts: list[str]) -> list[bool]:
        return self._search(pa.array(texts, pa.string())).tolist()

    def overlaps_array(self, texts: pa.Array) -> np.ndarray:
        """:meth:`overlaps_many` over a column of texts (no nulls), those checked lately remembered."""
        out = np.zeros(len(texts), bool)
        if not len(self._keys) or not len(texts):
            return out
        found = keys(texts)
        known, out = self._verdicts.recall(found)
        new = np.flatnonzero(~known)
        if len(new):
            out[new] = self._search(texts.take(pa.array(new)) if len(new) < len(texts) else texts)
            self._verdicts.store(found[new], out[new])
        return out

    def _search(self, texts: pa.Array) -> np.ndarray:
        """Whether each text holds a key's n-gram, in chunks of about :data:`_CHUNK` bytes of text."""
        out = np.zeros(len(texts), bool)
        if not len(self._keys) or not len(texts):
            return out
        for first, words, line_of in _chunks(_normal_lines(texts)):
            for size in self.lengths:
                grams, of = _ngram_hashes(words, line_of, size)
                maybe = self._bitmap[(grams >> self._shift).astype(np.intp)]
                grams, of = grams[maybe], of[maybe]
                at = np.minimum(np.searchsorted(self._keys, grams), len(self._keys) - 1)
                out[first + of[self._keys[at] == grams]] = True
        return out
