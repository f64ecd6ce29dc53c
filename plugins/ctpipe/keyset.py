"""A set of 64-bit keys held in one numpy array, asked and filled a batch at a time, that moves its
keys to disk beyond a size so that its memory stays flat however many it holds.

The materializer's duplicate check keeps three keys of every trace it has kept. In Python sets
those cost about 70 bytes each (an int object and a slot) and a Python int per lookup; here a key
costs 16 to 32 bytes and a batch of thousands is looked up or added in a few numpy calls.

Open addressing with linear probing: a key's first slot is its low bits (the keys are hashes, so
the low bits are spread evenly), and it sits in the first free slot from there. The table doubles
before it is half full, so probe runs stay short. Slot value 0 means free; the key 0 itself is
remembered apart.

Given a folder, a set whose table holds ``hot_keys`` keys writes them there, sorted, as a run, and
starts an empty table. Of a run, memory keeps a Bloom filter (one 64-bit word per key, so a key is
asked with one read) and the first key of each 4 KB page (a 512th of its keys). A key the filter
lets through (a duplicate, or a false positive) costs reading the page it would be in.

The filters of all runs share a budget, ``filter_bytes``: a new run's filter has 16 bits a key
(about one false positive in 300), and when the filters outgrow the budget, every run is merged
into one whose filter takes half of it. Past that size the filter has fewer bits a key and lets
more keys through to a page read, so a set of a billion keys is slower to ask, not larger.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

import numpy as np

_PAGE = 512  # keys in a page of a run: 4 KB read per key that a run's filter lets through
_BITS = 16  # filter bits a key, while the budget allows
_MERGE_KEYS = 1 << 20  # keys a merge holds in memory at once (8 MB)
_FILTER_KEYS = 1 << 17  # keys put in a filter at once


class KeySet:
    def __init__(self, capacity: int = 1 << 16, spill_dir: str | None = None, hot_keys: int = 1 << 20,
                 filter_bytes: int = 32 << 20):
        if capacity & (capacity - 1):
            raise ValueError(f"capacity={capacity} is not a power of two")
        self.capacity, self.spill_dir, self.hot_keys, self.filter_bytes = capacity, spill_dir, hot_keys, filter_bytes
        self.slots = np.zeros(capacity, np.uint64)
        self.hot = 0  # keys in the table
        self.size = 0  # keys in the set, runs included
        self.zero = False  # whether the key 0 is in the set
        self.runs: list[_Run] = []
        self._files = 0

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
        self.size += len(keys)
        if self.spill_dir is not None and self.hot + len(keys) >= self.hot_keys:
            self._spill(keys)
            return
        if 2 * (self.hot + len(keys)) > len(self.slots):
            self._resize(2 * (self.hot + len(keys)))
        self._place(keys)
        self.hot += len(keys)

    def _spill(self, keys: np.ndarray) -> None:
        """Write the table's keys and ``keys`` as a run, and start an empty table.

        Memory stays near what the set holds anyway: the keys that fill the table go straight to the
        run (placing them first doubled the full table for a moment, 32 MB), and a merge lets go of
        the runs' filters before it builds its own (it reads the runs' files). A set of three million
        keys peaked at 70 MB at each run, now 38 MB; at its first merge (17 million keys), at 240 MB
        (the fences held every key, see _Run), now 70 MB."""
        keys = np.concatenate([self.slots[self.slots != 0], keys])
        self.slots, self.hot = np.zeros(self.capacity, np.uint64), 0
        keys.sort()
        self.runs.append(_Run(self._path(), [keys], len(keys), _BITS * len(keys) // 8))
        if sum(run.words.nbytes for run in self.runs) > self.filter_bytes:
            del keys
            for run in self.runs:
                run.words = None
            merged = _Run(self._path(), _merge(self.runs), sum(r.size for r in self.runs), self.filter_bytes // 2)
            for run in self.runs:
                os.remove(run.path)
            self.runs = [merged]

    def _path(self) -> str:
        self._files += 1
        return os.path.join(self.spill_dir, f"keys-{id(self):x}-{self._files}.u64")

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


def _merge(runs: list[_Run]) -> Iterator[np.ndarray]:
    """The keys of ``runs`` (distinct across them), sorted, a range of key values at a time: the keys
    are hashes, so equal ranges hold about equal numbers of keys."""
    n = sum(run.size for run in runs)
    ranges = max(1, n // _MERGE_KEYS)
    bounds = [(i << 64) // ranges for i in range(ranges)] + [None]
    for low, high in zip(bounds, bounds[1:]):
        # Each run's piece is sorted: the stable sort (timsort) merges them rather than sorting anew.
        keys = np.concatenate([run.between(low, high) for run in runs])
        keys.sort(kind="stable")
        yield keys


class _Run:
    """Keys written to a file, sorted; in memory, their filter and the first key of each page."""

    def __init__(self, path: str, chunks: Iterable[np.ndarray], size: int, filter_bytes: int):
        # A blocked Bloom filter: a key's word is chosen by its low bits, and sets some bits of it
        # chosen by its high bits (the keys are hashes: their bits are independent). A power of two
        # words, at most filter_bytes, and as many bits a key as that leaves, up to _BITS.
        self.words = np.zeros(1 << max(0, (max(filter_bytes, 8) // 8).bit_length() - 1), np.uint64)
        self.probes = _probes(self.words.size * 64 / max(size, 1))
        self.path, self.size = path, 0
        fences = []
        with open(path, "wb") as f:
            for keys in chunks:
                keys.tofile(f)
                fences.append(keys[-self.size % _PAGE::_PAGE].copy())  # not a view: it would keep every chunk
                for at in range(0, len(keys), _FILTER_KEYS):  # _where's arrays are 16 bytes a key
                    np.bitwise_or.at(self.words, *self._where(keys[at:at + _FILTER_KEYS]))
                self.size += len(keys)
        self.fences = np.concatenate(fences) if fences else np.zeros(0, np.uint64)

    def _where(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        word = keys & np.uint64(len(self.words) - 1)
        bits = np.zeros(len(keys), np.uint64)
        for i in range(self.probes):
            bits |= np.uint64(1) << ((keys >> np.uint64(34 + 6 * i)) & np.uint64(63))
        return word, bits

    def contains(self, keys: np.ndarray) -> np.ndarray:
        found = np.zeros(len(keys), bool)
        word, bits = self._where(keys)
        maybe = np.flatnonzero((self.words[word] & bits) == bits)
        page = np.searchsorted(self.fences, keys[maybe], side="right") - 1  # -1: below the run's first key
        maybe, page = maybe[page >= 0], page[page >= 0]
        if not len(maybe):
            return found
        # The pages asked for are read (4 KB each) in the file's order, which keeps their keys in
        # order, and searched at once. Mapping the file instead brought sixteen pages into this
        # process for each page touched (the kernel's fault-around): 100 to 190 MB more for a
        # moment, once a merged run's filter lets a tenth of the keys through (past about twenty
        # million keys).
        pages = np.unique(page)
        stored = np.empty((len(pages), _PAGE), np.uint64)
        with open(self.path, "rb", buffering=0) as f:
            for j, p in enumerate(pages.tolist()):
                f.seek(8 * _PAGE * p)
                got = f.readinto(memoryview(stored[j]).cast("B")) // 8
                stored[j, got:] = stored[j, got - 1]  # the run's last page: its last key again, still in order
        stored = stored.ravel()
        asked = keys[maybe]
        found[maybe] = stored[np.searchsorted(stored, asked, side="right") - 1] == asked  # never -1: asked >= its fence
        return found

    def between(self, low: int, high: int | None) -> np.ndarray:
        """The keys in [low, high) (high None: no upper bound), read from the file."""
        start, end = self._rank(low), self.size if high is None else self._rank(high)
        return np.fromfile(self.path, np.uint64, end - start, offset=8 * start)

    def _rank(self, key: int) -> int:
        """How many keys are below ``key``."""
        page = max(int(np.searchsorted(self.fences, np.uint64(key), side="left")) - 1, 0)
        keys = np.fromfile(self.path, np.uint64, min(_PAGE, self.size - page * _PAGE), offset=8 * page * _PAGE)
        return page * _PAGE + int(np.searchsorted(keys, np.uint64(key), side="left"))


def _probes(bits_per_key: float) -> int:
    """Bits a key sets in its filter word: fewer as the filter grows crowded. Measured best, with the
    false positives they let through: 5 at 16 bits a key (0.4%), 4 at 8 (3.4%), 3 at 4 (16%), 1 at
    2 (39%)."""
    return 5 if bits_per_key >= 12 else 4 if bits_per_key >= 6 else 3 if bits_per_key >= 3 else 1
