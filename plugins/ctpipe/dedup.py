"""Duplicates and evaluation contamination, decided on normalized words.

* Exact duplicates share the same raw text; normalized duplicates the same :func:`squash` text
  (case, whitespace and the punctuation of prose ignored, but not what changes a number, a formula
  or code).
  :func:`fingerprint` is that key, hashed; :func:`keys` gives either key of a whole column of texts,
  :func:`chat_keys` the exact key of whole chats.
* A prompt is contaminated when it shares a word n-gram (13 words, as common practice) with an
  evaluation item, words being those of :func:`normalize`. Items shorter than n words count as one
  n-gram of their own length, so a short eval question can never slip through by being short: the
  prompt must then contain it whole.
"""

from __future__ import annotations

import functools
import os
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


# What squash removes of ASCII: white space and the punctuation of prose. Every other sign is kept: the
# signs of arithmetic and comparison, whose loss made `-5` and `5`, or the answers to `2+2` and `2*2`,
# one text, and those of code and formulas (`x != 5`, `a || b`, `f[a]`, `|x|`, `5!`, `$5`). And a
# decimal point or a thousands' comma between two digits, made one of these bytes (kept; no text has
# them), for `1.5` and `15` likewise.
_SQUASHED = b".,;:?'\"`" + string.whitespace.encode()
_BETWEEN_DIGITS = {ord("."): 1, ord(","): 2}
_SEPARATOR_IN_NUMBER = re.compile(rb"(?<=[0-9])[.,](?=[0-9])")


def _mark_separators(data: bytes) -> bytes:
    return _SEPARATOR_IN_NUMBER.sub(lambda m: bytes([_BETWEEN_DIGITS[m[0][0]]]), data)


_RUNS = re.compile(rb"  +")
# normalize() of ASCII text as one translation: upper case lowered, ignored characters made spaces.
_ASCII_NORMAL = bytes.maketrans(string.ascii_uppercase.encode() + _IGNORED,
                                string.ascii_lowercase.encode() + b" " * len(_IGNORED))


# Unicode's default-ignorable code points that are no format character (Cf): a combining grapheme
# joiner, variation selectors, Hangul fillers. Drawn as nothing, they would split a word, or make two
# texts that read alike two texts.
_IGNORABLE = [(0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x3164, 0x3164),
              (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
              (0xE0000, 0xE0FFF)]
# Scripts written with no space between words (Han, kana, Thai, Lao, Khmer, Myanmar): each character
# counts as a word, or a clause would be one word and a prompt holding an eval item's text with more
# around it would share none of its n-grams.
_UNSPACED = re.compile("([\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf"
                       "\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f])")


@functools.cache
def _unicode_ignored(to: str | None) -> dict[int, str | None]:
    """What normalization ignores past ASCII, as a str.translate table: the whitespace and punctuation
    of every script (a no-break space, an ideographic one, « », ¿, 。) mapped ``to``, and what is drawn
    as nothing (format characters such as a zero-width space or a soft hyphen, variation selectors,
    tags: see :data:`_IGNORABLE`) removed. Punctuation and spaces are all in the Basic Multilingual
    Plane but a few; format characters in the first two planes and the fourteenth."""
    table = {c: None for lo, hi in _IGNORABLE for c in range(lo, hi + 1)}
    for c in [*range(0x80, 0x20000), *range(0xE0000, 0xE1000)]:
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
    text = text.lower() if text.isascii() else _UNSPACED.sub(r" \1 ", _folded(text, " "))
    # A regex collapsing runs of spaces is twice as fast as bytes.split() and join on 1 KB texts.
    return _RUNS.sub(b" ", text.encode("utf-8", "surrogatepass").translate(_SEPARATORS)).strip(b" ")


def normalize(text: str) -> str:
    """
    >>> normalize("What is 57 plus 38?  (Answer: 95)")
    'what is 57 plus 38 answer 95'
    """
    return _normal_bytes(text).decode("utf-8", "replace")


def squash(text: str) -> bytes:
    """The normalized-duplicate form: case folded, whitespace and the punctuation of prose (of any script)
    removed, but not a decimal point or comma within a number, nor any other sign.

    >>> squash("What is 57 plus 38?") == squash("what is 57plus 38 ."), squash("It is 1.5.") == squash("It is 15")
    (True, False)
    >>> squash("-5") == squash("5"), squash("x != 5") == squash("x = 5"), squash("**Paris**") == squash("Paris")
    (False, False, False)
    """
    if text.isascii():  # the common case, in one pass: translate lowers and deletes at once
        return _mark_separators(text.encode()).translate(_ASCII_LOWER, _SQUASHED)
    return _mark_separators(_folded(text, None).encode("utf-8", "surrogatepass")).translate(None, _SQUASHED)


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
    data = _marked_in_texts(buffer, offsets)
    out = np.fromiter((h(data[a:b].translate(_ASCII_LOWER, _SQUASHED)) for a, b in zip(offsets, offsets[1:])),
                      np.uint64, len(texts))
    other = np.flatnonzero(~pc.fill_null(pc.string_is_ascii(texts), True).to_numpy(zero_copy_only=False))
    for i in other.tolist():  # str.lower, as squash does, not an ASCII table
        out[i] = fingerprint(bytes(memoryview(buffer)[offsets[i]:offsets[i + 1]]).decode())
    return out


def _marked_in_texts(buffer: pa.Buffer | None, offsets: list[int]) -> bytearray:
    """The bytes of a column's texts (``offsets`` into ``buffer``) with :func:`_mark_separators` done to
    each text, at once: a separator between two digits of one text marked, not one at a text's edge."""
    marked = bytearray(memoryview(buffer)) if buffer is not None else bytearray()
    data = np.frombuffer(marked, np.uint8)
    at = np.flatnonzero((data == ord(".")) | (data == ord(",")))
    at = at[(at > offsets[0]) & (at < offsets[-1] - 1)] if len(at) else at
    at = at[(data[at - 1] - ord("0") < 10) & (data[at + 1] - ord("0") < 10)]  # uint8 wraps: a digit's < 10
    bounds = np.asarray(offsets, np.int64)
    text = np.searchsorted(bounds, at, "right") - 1
    at = at[(at > bounds[text]) & (at + 1 < bounds[text + 1])]
    data[at] = np.where(data[at] == ord("."), 1, 2)
    return marked


def chat_keys(roles: pa.Array, contents: pa.Array, offsets: Sequence[int]) -> np.ndarray:
    """A key per chat (its messages are ``roles``/``contents[offsets[i]:offsets[i + 1]]``): equal for
    chats with the same roles and texts in the same order."""
    roles = pc.dictionary_encode(roles)  # a handful of distinct roles: each hashed once
    role_keys = keys(roles.dictionary)[roles.indices.to_numpy()]  # a message always has a role
    return _fold(mix(role_keys, keys(contents)), offsets)


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


# A word sequence's key: a polynomial hash of its words' numbers in the evaluation items' vocabulary
# (a word no item holds is in no item's n-gram, and breaks every sequence through it), modulo 2**64
# as uint64 arithmetic wraps, in an odd base, whose inverse brings a span's sum back to the hash of
# the span alone (see _keys_of).
_Q = 0x9E3779B97F4A7C15
_Q_INV = np.uint64(pow(_Q, -1, 1 << 64))
_Q = np.uint64(_Q)
_BITS = (1 << np.arange(8)).astype(np.uint8)  # a slot's bit in its byte of an NgramIndex's bitmap
_CHUNK = 1 << 21  # bytes of text taken at once: a few arrays of a word's 8 bytes each
_POWERS: dict[int, np.ndarray] = {}
# normalize()'s ASCII translation, with a NUL made \x01: a NUL ends each text in the words' blob.
_ASCII_WORDS = _ASCII_NORMAL[:1].replace(b"\0", b"\x01") + _ASCII_NORMAL[1:]


def _powers(n: int, base: np.uint64) -> np.ndarray:
    """base**0 .. base**(n - 1), modulo 2**64 (kept, and grown as needed)."""
    have = _POWERS.get(int(base))
    if have is None or len(have) < n:
        have = np.full(max(n, 1 << 16), base, np.uint64)
        have[:1] = 1
        _POWERS[int(base)] = have = np.cumprod(have, out=have)
    return have[:n]


def _words(texts: pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """(the words of ``texts`` as :func:`normalize` makes them, each with one space after it, and a
    NUL word after each text's; where those NULs are; the index of the text of each word). ASCII
    texts are normalized in one translation of their bytes, the others one by one."""
    texts = pc.fill_null(texts.cast(pa.string()), "").cast(pa.binary())
    data = texts.buffers()[2]
    normal = pa.Array.from_buffers(pa.binary(), len(texts), [None, texts.buffers()[1], pa.py_buffer(
        (data.to_pybytes() if data is not None else b"").translate(_ASCII_WORDS))], offset=texts.offset)
    ascii_ = pc.fill_null(pc.string_is_ascii(texts.cast(pa.string())), True).to_numpy(zero_copy_only=False)
    if not ascii_.all():
        other = [_normal_bytes(t).replace(b"\0", b"\x01") for t in texts.filter(pa.array(~ascii_)).cast(pa.string()).to_pylist()]
        normal = pc.replace_with_mask(normal, pa.array(~ascii_), pa.array(other, pa.binary()))
    lines = pc.binary_join_element_wise(b" ", normal, b" \0 ", b"")
    offsets = np.frombuffer(lines.buffers()[1], np.int32)[lines.offset:lines.offset + len(lines) + 1]
    data = np.frombuffer(lines.buffers()[2], np.uint8)[offsets[0]:offsets[-1]] if len(lines) else np.zeros(0, np.uint8)
    space = data == 32
    data = data[np.r_[True, ~(space[1:] & space[:-1])]] if len(data) else data  # a run of spaces becomes one
    space = data == 32
    starts = np.flatnonzero(~space & np.r_[True, space[:-1]]) if len(data) else np.zeros(0, np.intp)
    words = pa.Array.from_buffers(pa.binary(), len(starts), [None, pa.py_buffer(np.r_[starts, len(data)].astype(np.int32)),
                                                             pa.py_buffer(data.tobytes())])
    ends = data[starts] == 0
    return words, ends, np.cumsum(ends) - ends


def _keys_of(numbers: np.ndarray, text_of: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(the key of each sequence of ``n`` words of known ``numbers`` (-1: a word no item holds, or a
    text's end), the index of its text)."""
    unknown = np.zeros(len(numbers) + 1, np.int64)
    np.cumsum(numbers < 0, out=unknown[1:])
    starts = np.flatnonzero(unknown[n:] == unknown[:-n]) if len(numbers) >= n else np.zeros(0, np.intp)
    if not len(starts):
        return np.zeros(0, np.uint64), np.zeros(0, np.intp)
    sums = np.zeros(len(numbers) + 1, np.uint64)
    np.cumsum((numbers + 1).astype(np.uint64) * _powers(len(numbers), _Q), out=sums[1:])
    grams = (sums[starts + n] - sums[starts]) * _powers(len(numbers), _Q_INV)[starts]
    return _spread(grams + np.uint64(n)), text_of[starts]


def _chunks(texts: pa.Array) -> Iterator[tuple[int, pa.Array]]:
    """(the index of its first text, a run of ``texts``) of about :data:`_CHUNK` bytes each."""
    ends = np.cumsum(pc.fill_null(pc.binary_length(texts), 0).to_numpy(zero_copy_only=False))
    first = 0
    while first < len(texts):
        last = max(first + 1, int(np.searchsorted(ends, (ends[first - 1] if first else 0) + _CHUNK, "right")))
        yield first, texts.slice(first, last - first)
        first = last


class NgramIndex:
    """Word n-grams of the evaluation items, for asking whether a prompt overlaps any of them.

    Each n-gram (or a short item, whole) is kept as a 64-bit key of its words' numbers in the items'
    vocabulary. A block's prompts are split into words at once, their words numbered by one lookup
    in that vocabulary, and their n-grams of known words keyed the same way and looked up: in a
    bitmap of the keys' top bits, then, where it says maybe, in the sorted keys. Memory is about 10
    bytes an n-gram of the items, whatever their number (an Aho-Corasick automaton of the n-grams'
    texts took 175 MB for a thousand items of 60 words, in each worker). Two n-grams share a key one
    time in 2**64.

    Built once, :meth:`save` writes it to files that :meth:`mapped` maps: processes mapping them share
    one copy in memory, where each built its own (and a build's memory is many times the index's).
    """

    def __init__(self, items: Iterable[str], n: int = 13, remembered: int = 1 << 19):
        self.n = n
        # The items split a few MB at a time, each run's words kept as its distinct words and their
        # places: the vocabulary is all runs' distinct words, and a word's number its distinct word's.
        runs = []
        for _, chunk in _chunks(pa.array(list(items), pa.string())):
            words, ends, text_of = _words(chunk)
            runs.append((pc.dictionary_encode(words), ends, text_of, len(chunk)))
        every = pa.concat_arrays([pa.array([], pa.binary()), *(coded.dictionary for coded, *_ in runs)])
        self._vocabulary = pc.unique(every.filter(pc.not_equal(every, b"\0 ")))  # a text's end is no word
        lengths, found = {n}, []
        runs.reverse()
        while runs:  # each run's words let go once keyed, each run's keys once merged: building took 4 times the index
            coded, ends, text_of, texts = runs.pop()
            numbers = self._numbers(coded.dictionary)[coded.indices.to_numpy()]
            count = np.bincount(text_of[~ends], minlength=texts)
            shorter = {int(c) for c in count if 0 < c < n}  # an item shorter than n words counts whole
            lengths |= shorter
            for size in sorted({n} | shorter):
                grams, of = _keys_of(numbers, text_of, size)
                found.append(np.unique(grams if size == n else grams[count[of] == size]))
        self.lengths = sorted(lengths)
        self._keys = np.concatenate(found) if found else np.zeros(0, np.uint64)
        found.clear()
        self._keys.sort()
        self._keys = self._keys[np.r_[True, self._keys[1:] != self._keys[:-1]]] if len(self._keys) else self._keys
        bits = max(16, int(len(self._keys) * 8 - 1).bit_length())  # a slot in eight taken, at most
        self._bitmap = np.zeros(1 << (bits - 3), np.uint8)
        self._ready(remembered)
        np.bitwise_or.at(self._bitmap, *self._slots(self._keys))

    def _ready(self, remembered: int) -> None:
        # The verdicts of the texts checked lately, by their :func:`key` (4.5 MB). Prompts come back, since
        # pairing wants several answers to one, and a prompt met again is not searched again: at a
        # million bench traces, half of them are not.
        self._verdicts = Recent(remembered, bool)
        self._shift = np.uint64(64 - int(len(self._bitmap) * 8 - 1).bit_length())  # a slot of the bitmap's 8 a byte

    def _slots(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the byte of the bitmap, and the bit in it) of each key's slot: its top bits."""
        slots = keys >> self._shift
        return (slots >> np.uint64(3)).astype(np.intp), _BITS[(slots & np.uint64(7)).astype(np.intp)]

    _FILES = ("keys", "bitmap", "offsets", "words", "lengths")

    def save(self, folder: str) -> None:
        """Write this index into ``folder`` (made here), for :meth:`mapped`."""
        os.makedirs(folder)
        vocabulary = self._vocabulary
        data = vocabulary.buffers()[2]
        arrays = (self._keys, self._bitmap,
                  np.frombuffer(vocabulary.buffers()[1], np.int32)[vocabulary.offset:vocabulary.offset + len(vocabulary) + 1],
                  np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8), np.array(self.lengths))
        for name, array in zip(self._FILES, arrays, strict=True):
            np.save(os.path.join(folder, name + ".npy"), array)

    @classmethod
    def mapped(cls, folder: str, remembered: int = 1 << 19) -> NgramIndex:
        """The index :meth:`save` wrote into ``folder``, mapped rather than read."""
        index = cls.__new__(cls)
        keys, index._bitmap, offsets, words, lengths = (np.load(os.path.join(folder, name + ".npy"), mmap_mode="r")
                                                         for name in cls._FILES)
        index._keys, index.lengths, index.n = keys, lengths.tolist(), int(lengths[-1])
        index._vocabulary = pa.Array.from_buffers(pa.binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(words)])
        index._ready(remembered)
        return index

    def _numbers(self, words: pa.Array) -> np.ndarray:
        """Each word's number in the items' vocabulary; -1 for one no item holds, and for a text's end."""
        return pc.fill_null(pc.index_in(words, value_set=self._vocabulary), -1).to_numpy().astype(np.int64)

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
        for first, chunk in _chunks(texts):
            words, _, text_of = _words(chunk)
            numbers = self._numbers(words)
            for size in self.lengths:
                grams, of = _keys_of(numbers, text_of, size)
                byte, bit = self._slots(grams)
                maybe = (self._bitmap[byte] & bit).astype(bool)
                grams, of = grams[maybe], of[maybe]
                at = np.minimum(np.searchsorted(self._keys, grams), len(self._keys) - 1)
                out[first + of[self._keys[at] == grams]] = True
        return out
