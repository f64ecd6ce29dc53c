"""A set of 64-bit keys held in one numpy array, asked and filled a batch at a time.

The materializer's duplicate check keeps three keys of every trace it has kept. In Python sets
those cost about 70 bytes each (an int object and a slot) and a Python int per lookup; here a key
costs 16 to 32 bytes and a batch of thousands is looked up or added in a few numpy calls.

Open addressing with linear probing: a key's first slot is its low bits (the keys are hashes, so
the low bits are spread evenly), and it sits in the first free slot from there. The table doubles
before it is half full, so probe runs stay short. Slot value 0 means free; the key 0 itself is
remembered apart.
"""

from __future__ import annotations

import numpy as np


class KeySet:
    def __init__(self, capacity: int = 1 << 16):
        if capacity & (capacity - 1):
            raise ValueError(f"capacity={capacity} is not a power of two")
        self.slots = np.zeros(capacity, np.uint64)
        self.size = 0
        self.zero = False  # whether the key 0 is in the set

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
        return found

    def add(self, keys: np.ndarray) -> None:
        """Add ``keys``, which must be distinct and not in the set already (the caller knows: it asked)."""
        keys = np.asarray(keys, np.uint64)
        if not self.zero and (keys == 0).any():
            self.zero = True
            self.size += 1
        keys = keys[keys != 0]
        if 2 * (self.size + len(keys)) > len(self.slots):
            self._resize(2 * (self.size + len(keys)))
        self._place(keys)
        self.size += len(keys)

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
