"""The numpy key set against Python's set, its keys in memory, moved to disk, or moved to disk and merged
under a small filter budget, including keys that all want the same slots."""

import numpy as np
import pytest

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

