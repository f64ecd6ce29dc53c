"""The numpy key set against Python's set, its keys in memory, moved to disk, or moved to disk and merged
under a small filter budget, including keys that all want the same slots."""

import tracemalloc

import numpy as np
import pytest

from ctpipe import keyset
from ctpipe.keyset import KeySet


@pytest.mark.parametrize("spread", ["hashes", "same_low_bits", "small"])
# runs: past 100 keys, the table becomes a run on disk; merged: and past 2 KB of filters, the runs merge
@pytest.mark.parametrize("on_disk", [None, "runs", "merged"])
def test_a_key_set_answers_as_a_python_set_through_growth(tmp_path, spread, on_disk):
    rng = np.random.default_rng(1)
    budget = 2048 if on_disk == "merged" else 1 << 30
    ours = KeySet(capacity=8, **({"spill_dir": str(tmp_path), "hot_keys": 100, "filter_bytes": budget} if on_disk else {}))
    reference = set()
    for _ in range(60):
        batch = rng.integers(0, 2**64 - 1, int(rng.integers(0, 300)), dtype=np.uint64, endpoint=True)
        if spread == "same_low_bits":  # every key starts its probe at the same few slots, and wants the same filter word
            batch = (batch >> np.uint64(40)) << np.uint64(40)
        elif spread == "small":  # 0 included, and runs of neighbouring slots; keys below and between a run's pages
            batch = batch % np.uint64(500)
        asked = np.concatenate([batch, np.fromiter(reference, np.uint64, len(reference))[:50]])
        assert ours.contains(asked).tolist() == [k in reference for k in asked.tolist()]
        new = np.unique(batch[~ours.contains(batch)])
        ours.add(new)
        reference.update(new.tolist())
        assert len(ours) == len(reference)
    assert len(ours.slots) >= 2 * ours.hot and ours.contains(np.fromiter(reference, np.uint64)).all()
    if on_disk:
        assert ours.hot < 100 and len(list(tmp_path.iterdir())) == len(ours.runs)
        assert sum(run.words.nbytes for run in ours.runs) <= budget
    if on_disk == "runs":
        assert len(ours.runs) >= 3
    if on_disk == "merged" and spread != "small":  # one merged run, and the few made since (500 keys make no merge)
        assert len(ours.runs) <= 5 and ours.runs[0].size > len(reference) / 2


def test_a_capacity_that_is_no_power_of_two_is_refused():
    with pytest.raises(ValueError, match="capacity=12 is not a power of two"):
        KeySet(12)


def test_the_batch_that_fills_the_table_goes_to_disk_without_growing_it(tmp_path):
    """Placing that batch first would double the table for a moment: 32 MB more per set at the
    materializer's sizes, in the process that holds all three sets."""
    hot_keys = 1 << 19
    ours = KeySet(spill_dir=str(tmp_path), hot_keys=hot_keys)
    keys = np.random.default_rng(2).permutation(np.arange(1, hot_keys + 100, dtype=np.uint64))
    ours.add(keys[:hot_keys - 10])
    table = ours.slots.nbytes
    tracemalloc.start()
    try:
        ours.add(keys[hot_keys - 10:])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(ours.runs) == 1 and ours.runs[0].size == len(keys) and ours.hot == 0
    assert peak < 2 * table, (peak, table)  # the table, its keys in a run, and the run's filter
    assert ours.contains(keys).all() and not ours.contains(np.array([hot_keys + 100], np.uint64)).any()


def test_a_merge_holds_a_range_of_keys_at_a_time_not_the_set(tmp_path, monkeypatch):
    """A set merges first at about seventeen million keys (130 MB): holding them all at once would
    break the materializer's memory bound, in the process that holds all three sets."""
    monkeypatch.setattr(keyset, "_MERGE_KEYS", 1 << 14)
    run_keys = 1 << 15
    # Runs of 32,768 keys with a filter of 64 KB each: the 33rd run passes the budget and merges them.
    ours = KeySet(spill_dir=str(tmp_path), hot_keys=run_keys, filter_bytes=2 << 20)
    rng = np.random.default_rng(3)
    batches = [rng.integers(1, 2**64 - 1, run_keys, dtype=np.uint64, endpoint=True) for _ in range(33)]
    for batch in batches[:-1]:
        ours.add(batch)
    assert len(ours.runs) == 32
    tracemalloc.start()
    try:
        ours.add(batches[-1])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    every_key = 8 * 33 * run_keys  # 8.7 MB
    assert len(ours.runs) == 1 and ours.runs[0].size == 33 * run_keys
    assert peak < every_key / 3, (peak, every_key)  # the merged filter (1 MB), the new run and table, a range
    assert ours.contains(np.concatenate(batches)).all()


def test_a_run_of_several_pages_answers_for_every_key_and_its_neighbours(tmp_path):
    """A lookup reads the page a key would be in: first, middle and a last page of 276 keys."""
    rng = np.random.default_rng(4)
    keys = np.unique(rng.integers(2, 2**64 - 2, 1300, dtype=np.uint64))
    ours = KeySet(spill_dir=str(tmp_path), hot_keys=len(keys))
    ours.add(keys)
    assert len(ours.runs) == 1 and ours.hot == 0 and len(ours.runs[0].fences) == 3
    near = np.concatenate([keys - np.uint64(1), keys + np.uint64(1), np.array([1, 2**64 - 1], np.uint64)])
    asked = np.concatenate([keys, near])
    assert ours.contains(asked).tolist() == np.isin(asked, keys).tolist()
