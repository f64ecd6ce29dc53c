"""The numpy key set against Python's set, including keys that all want the same slots."""

import numpy as np
import pytest

from ctpipe.keyset import KeySet


@pytest.mark.parametrize("spread", ["hashes", "same_low_bits", "small"])
def test_a_key_set_answers_as_a_python_set_through_growth(spread):
    rng = np.random.default_rng(1)
    ours, reference = KeySet(capacity=8), set()
    for _ in range(60):
        batch = rng.integers(0, 2**64 - 1, int(rng.integers(0, 300)), dtype=np.uint64, endpoint=True)
        if spread == "same_low_bits":  # every key starts its probe at the same few slots
            batch = (batch >> np.uint64(40)) << np.uint64(40)
        elif spread == "small":  # 0 included, and runs of neighbouring slots
            batch = batch % np.uint64(500)
        asked = np.concatenate([batch, np.fromiter(reference, np.uint64, len(reference))[:50]])
        assert ours.contains(asked).tolist() == [k in reference for k in asked.tolist()]
        new = np.unique(batch[~ours.contains(batch)])
        ours.add(new)
        reference.update(new.tolist())
        assert len(ours) == len(reference)
    assert len(ours.slots) >= 2 * len(ours) and ours.contains(np.fromiter(reference, np.uint64)).all()


def test_a_capacity_that_is_no_power_of_two_is_refused():
    with pytest.raises(ValueError, match="capacity=12 is not a power of two"):
        KeySet(12)


@pytest.mark.parametrize("spread", ["hashes", "same_low_bits", "small"])
def test_a_key_set_that_moves_its_keys_to_disk_answers_the_same(tmp_path, spread):
    rng = np.random.default_rng(2)
    ours, reference = KeySet(capacity=8, spill_dir=str(tmp_path), hot_keys=700), set()
    for _ in range(80):
        batch = rng.integers(0, 2**64 - 1, int(rng.integers(0, 300)), dtype=np.uint64, endpoint=True)
        if spread == "same_low_bits":  # every key wants the same filter word
            batch = (batch >> np.uint64(40)) << np.uint64(40)
        elif spread == "small":  # 0 included; keys below and between a run's pages
            batch = batch % np.uint64(3000)
        asked = np.concatenate([batch, np.fromiter(reference, np.uint64, len(reference))[::7]])
        assert ours.contains(asked).tolist() == [k in reference for k in asked.tolist()]
        new = np.unique(batch[~ours.contains(batch)])
        ours.add(new)
        reference.update(new.tolist())
        assert len(ours) == len(reference)
    assert len(ours.runs) >= 3 and ours.hot < 700 and ours.contains(np.fromiter(reference, np.uint64)).all()
    assert len(list(tmp_path.iterdir())) == len(ours.runs)
