"""The numba kernels of :mod:`ctpipe.textscan` (kept apart so that importing that module never loads numba)."""

import numba
import numpy as np

_u64 = np.uint64
# MurmurHash3's x64 constants.
_C1, _C2, _C3 = _u64(0x87C37B91114253D5), _u64(0x4CF5AD432745937F), _u64(0x52DCE729)
_F1, _F2 = _u64(0xFF51AFD7ED558CCD), _u64(0xC4CEB9FE1A85EC53)
_SEED = _u64(0x9E3779B97F4A7C15)


@numba.njit(inline="always")
def _block(h, k):
    k = k * _C1
    k = (k << _u64(31)) | (k >> _u64(33))
    h ^= k * _C2
    h = (h << _u64(27)) | (h >> _u64(37))
    return h * _u64(5) + _C3


@numba.njit(inline="always")
def _final(h, k, length):
    h = _block(h, k) ^ _u64(length)
    h ^= h >> _u64(33)
    h *= _F1
    h ^= h >> _u64(33)
    h *= _F2
    return h ^ (h >> _u64(33))


@numba.njit(inline="always")
def _word(data, j):
    # Little-endian 8 bytes from any offset: LLVM makes this one unaligned load.
    return (_u64(data[j]) | _u64(data[j + 1]) << _u64(8) | _u64(data[j + 2]) << _u64(16) | _u64(data[j + 3]) << _u64(24)
            | _u64(data[j + 4]) << _u64(32) | _u64(data[j + 5]) << _u64(40) | _u64(data[j + 6]) << _u64(48)
            | _u64(data[j + 7]) << _u64(56))


@numba.njit(inline="always")
def _hash(data, a, b):
    h = _SEED
    j = a
    while j + 8 <= b:
        h = _block(h, _word(data, j))
        j += 8
    tail = _u64(0)
    for t in range(b - j):
        tail |= _u64(data[j + t]) << _u64(8 * t)
    return _final(h, tail, b - a)


@numba.njit(cache=True, nogil=True, boundscheck=False)
def hashes(data, offsets, out):
    for i in range(len(offsets) - 1):
        out[i] = _hash(data, offsets[i], offsets[i + 1])


@numba.njit(cache=True, nogil=True, boundscheck=False)
def squashed_hashes(data, offsets, squash, keep, out, ascii):
    scratch = np.empty(8 + max(0, np.max(offsets[1:] - offsets[:-1])) if len(offsets) > 1 else 8, np.uint8)
    for i in range(len(offsets) - 1):
        # Compact the kept bytes first (branch-free), then hash them as hashes() would.
        k = 0
        high = 0
        for j in range(offsets[i], offsets[i + 1]):
            c = data[j]
            high |= c
            scratch[k] = squash[c]
            k += keep[c]
        out[i] = _hash(scratch, 0, k)
        ascii[i] = high < 128


@numba.njit(cache=True, nogil=True, boundscheck=False)
def normalized_lines(data, offsets, normal, out, taken):
    size = 0
    for i in range(len(offsets) - 1):
        a, b = offsets[i], offsets[i + 1]
        high = 0
        nul = False
        for j in range(a, b):
            high |= data[j]
            nul |= data[j] == 0
        taken[i] = high < 128 and not nul  # a NUL would end the line early
        if not taken[i]:
            continue
        out[size] = 32
        size += 1
        prev = 32
        for j in range(a, b):
            c = normal[data[j]]
            out[size] = c
            size += c != 32 or prev != 32  # a space after a space is written over
            prev = c
        if prev != 32:
            out[size] = 32
            size += 1
        out[size] = 0
        size += 1
    return size
