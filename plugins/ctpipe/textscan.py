"""Per-text work of the materializer, compiled: one pass over a string column's Arrow buffers.

A million traces carry some 2 GB of text, hashed for exact and normalized dedup keys and laid out
for the eval-set n-gram search. A Python call per text costs more than that work itself on short
texts (roles, ids), so these run as numba-compiled loops over the whole column, making no Python
object per text. Only ASCII texts are normalized here: the rules for other text (``str.lower``)
stay in Python (:mod:`ctpipe.dedup`), and the functions say which texts they left to it.

The hash is MurmurHash3's 64-bit block step and finalizer over 8-byte little-endian words, one
lane: stable across processes, runs and machines (unlike ``hash``).
"""

from __future__ import annotations

import string
from functools import cache

import numpy as np
import pyarrow as pa

# What normalization ignores: ASCII punctuation and whitespace (letters of any script are kept).
IGNORED = (string.punctuation + string.whitespace).encode()
_LOWER = [c | 0x20 if 65 <= c <= 90 else c for c in range(256)]
# Byte -> the normalized-duplicate form (lower case, ignored bytes dropped): its value, and whether it is kept.
_KEEP = np.array([c not in IGNORED for c in range(256)], np.int64)
_SQUASH = np.array(_LOWER, np.uint8)
# Byte -> the n-gram search form: lower case, a space for an ignored byte.
_NORMAL = np.array([32 if c in IGNORED else _LOWER[c] for c in range(256)], np.uint8)


def _buffers(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(data bytes, int64 offsets) of a string or binary column; a null reads as empty."""
    large = pa.types.is_large_string(texts.type) or pa.types.is_large_binary(texts.type)
    offsets = np.frombuffer(texts.buffers()[1], np.int64 if large else np.int32)[texts.offset:texts.offset + len(texts) + 1]
    data = texts.buffers()[2]
    return (np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)), offsets.astype(np.int64)


def hashes(texts: pa.Array) -> np.ndarray:
    """The uint64 hash of each text's bytes."""
    data, offsets = _buffers(texts)
    out = np.empty(len(texts), np.uint64)
    _kernels().hashes(data, offsets, out)
    return out


def squashed_hashes(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(the :func:`hashes` value of each ASCII text's normalized-duplicate form: lower case, ASCII
    punctuation and whitespace removed; which texts are ASCII, the others' values being meaningless)."""
    data, offsets = _buffers(texts)
    out, ascii = np.empty(len(texts), np.uint64), np.empty(len(texts), np.bool_)
    _kernels().squashed_hashes(data, offsets, _SQUASH, _KEEP, out, ascii)
    return out, ascii


def normalized_lines(texts: pa.Array) -> tuple[bytes, np.ndarray]:
    """(ASCII texts in the n-gram search form, one per NUL-ended line, each as a space, its words
    joined by single spaces, a space; which texts are in it: those ASCII and without a NUL)."""
    data, offsets = _buffers(texts)
    out = np.empty(int(offsets[-1] - offsets[0]) + 3 * len(texts), np.uint8)
    taken = np.empty(len(texts), np.bool_)
    size = _kernels().normalized_lines(data, offsets, _NORMAL, out, taken)
    return out[:size].tobytes(), taken


@cache
def _kernels():
    """Compiled on first use and cached on disk by numba, so importing this module costs nothing."""
    from ctpipe import _textscan_kernels

    return _textscan_kernels
