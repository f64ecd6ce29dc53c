"""A set of 64-bit keys held in one numpy array, asked and filled a batch at a time, that moves its
keys to disk beyond a size so that its memory stays nearly flat however many it holds.

The materializer's duplicate check keeps three keys of every trace it has kept. In Python sets
those cost about 70 bytes each (an int object and a slot) and a Python int per lookup; here a key
costs 16 to 32 bytes and a batch of thousands is looked up or added in a few numpy calls.

Open addressing with linear probing: a key's first slot is its low bits (the keys are hashes, so
the low bits are spread evenly), and it sits in the first free slot from there. The table doubles
before it is half full, so probe runs stay short. Slot value 0 means free; the key 0 itself is
remembered apart.

Given a folder, a set whose table holds ``hot_keys`` keys writes them there, sorted, as a run, and
starts an empty table. Of a run, memory keeps a Bloom filter (16 bits a key, one 64-bit word per
key, so a key is asked with one read) and the first key of each 4 KB page: 2 bytes a key instead of
16 to 32. A key the filter lets through (a duplicate, or about one in 300 others) costs reading the
page it would be in.
"""

from __future__ import annotations

import os

import numpy as np

_PAGE = 512  # keys in a page of a run: 4 KB read per key that a run's filter lets through
_PROBES = 5  # bits a key sets in its filter word


class KeySet:
    def __init__(self, capacity: int = 1 << 16, spill_dir: str | None = None, hot_keys: int = 1 << 20):
        if capacity & (capacity - 1):
            raise ValueError(f"capacity={capacity} is not a power of two")
        self.capacity, self.spill_dir, self.hot_keys = capacity, spill_dir, hot_keys
        self.slots = np.zeros(capacity, np.uint64)
        self.hot = 0  # keys in the table
        self.size = 0  # keys in the set, runs included
        self.zero = False  # whether the key 0 is in the set
        self.runs: list[_Run] = []

    def __len__(self) -> int:
        return self.size

    def contains(self, keys: np.ndarray) -> np.ndarray:
        """Whether each of ``keys`` is in the set."""
        keys = np.asarray(keys, np.uint64)
        found = np.zeros(len(keys), bool)
        found[keys == 0] = self.zero
        todo = np.flatnonzero(keys != 0)
        wanted = keys[todo]
        mask = np.uint64(len(self.slots) - 1)
        at = wanted & mask
        while len(todo):  # each round, a key is found, meets a free slot (absent), or looks one slot on
            there = self.slots[at]
            hit = there == wanted
            found[todo[hit]] = True
            on = ~hit & (there != 0)
            todo, wanted, at = todo[on], wanted[on], (at[on] + np.uint64(1)) & mask
        for run in self.runs:
            rest = np.flatnonzero(~found & (keys != 0))
            found[rest[run.contains(keys[rest])]] = True
        return found

    def add(self, keys: np.ndarray) -> None:
        """Add ``keys``, which must be distinct and not in the set already (the caller knows: it asked)."""
        keys = np.asarray(keys, np.uint64)
        if not self.zero and (keys == 0).any():
            self.zero = True
            self.size += 1
        keys = keys[keys != 0]
        if 2 * (self.hot + len(keys)) > len(self.slots):
            self._resize(2 * (self.hot + len(keys)))
        self._place(keys)
        self.hot += len(keys)
        self.size += len(keys)
        if self.spill_dir is not None and self.hot >= self.hot_keys:
            path = os.path.join(self.spill_dir, f"keys-{id(self):x}-{len(self.runs)}.u64")
            self.runs.append(_Run(path, np.sort(self.slots[self.slots != 0])))
            self.slots, self.hot = np.zeros(self.capacity, np.uint64), 0

    def _resize(self, at_least: int) -> None:
        old = self.slots[self.slots != 0]
        self.slots = np.zeros(1 << max(at_least - 1, 1).bit_length(), np.uint64)
        self._place(old)

    def _place(self, keys: np.ndarray) -> None:
        mask = np.uint64(len(self.slots) - 1)
        at = keys & mask
        while len(keys):
            # Every key that reaches a free slot is written there; where several reach the same one,
            # one of them is what reading the slot back finds, and the others look one slot on.
            free = self.slots[at] == 0
            self.slots[at[free]] = keys[free]
            left = self.slots[at] != keys
            keys, at = keys[left], (at[left] + np.uint64(1)) & mask


class _Run:
    """Keys written to a file, sorted; in memory, their filter and the first key of each page."""

    def __init__(self, path: str, keys: np.ndarray):
        keys.tofile(path)
        self.path, self.fences = path, keys[::_PAGE].copy()
        # A blocked Bloom filter: a key's word is chosen by its low bits, and sets _PROBES bits of it
        # chosen by its high bits (the keys are hashes: their bits are independent).
        self.words = np.zeros(1 << max(0, (len(keys) * 16 // 64 - 1).bit_length()), np.uint64)
        np.bitwise_or.at(self.words, *self._where(keys))

    def _where(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        word = keys & np.uint64(len(self.words) - 1)
        bits = np.zeros(len(keys), np.uint64)
        for i in range(_PROBES):
            bits |= np.uint64(1) << ((keys >> np.uint64(34 + 6 * i)) & np.uint64(63))
        return word, bits

    def contains(self, keys: np.ndarray) -> np.ndarray:
        found = np.zeros(len(keys), bool)
        word, bits = self._where(keys)
        maybe = np.flatnonzero((self.words[word] & bits) == bits)
        page = np.searchsorted(self.fences, keys[maybe], side="right") - 1  # -1: below the run's first key
        maybe, page = maybe[page >= 0], page[page >= 0]
        order = np.argsort(page, kind="stable")
        maybe, page = maybe[order], page[order]
        starts = np.flatnonzero(np.r_[True, page[1:] != page[:-1]]) if len(page) else np.zeros(0, np.int64)
        with open(self.path, "rb") as f:
            for start, end in zip(starts.tolist(), [*starts[1:].tolist(), len(page)]):
                f.seek(int(page[start]) * _PAGE * 8)
                stored = np.fromfile(f, np.uint64, _PAGE)
                asked = keys[maybe[start:end]]
                found[maybe[start:end]] = stored[np.minimum(np.searchsorted(stored, asked), len(stored) - 1)] == asked
        return found
