"""Which checkpoint a resumed run may load, and refusing one from another model."""

import json

import pytest

from ctpipe.checkpoints import check_same_model, latest_resumable, problem_with
from ctpipe.errors import PipelineError


def make_checkpoint(trainer_dir, step: int):
    import numpy as np
    from safetensors.numpy import save_file

    d = trainer_dir / f"checkpoint-{step}"
    d.mkdir(parents=True)
    save_file({"w": np.full((4, 4), step, dtype=np.float32)}, str(d / "model.safetensors"))
    (d / "optimizer.pt").write_bytes(b"x")
    (d / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    return d


def test_the_newest_readable_checkpoint_wins(tmp_path):
    for step in (2, 4, 10):
        make_checkpoint(tmp_path, step)
    assert latest_resumable(tmp_path).name == "checkpoint-10"


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda d: (d / "trainer_state.json").unlink(), "unreadable trainer_state.json"),
        (lambda d: (d / "trainer_state.json").write_text('{"global_st'), "unreadable trainer_state.json"),
        (lambda d: (d / "trainer_state.json").write_text('{"global_step": 3}'), "says step 3"),
        (lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:40]), "model.safetensors"),
        (lambda d: (d / "model.safetensors").unlink(), "unreadable model.safetensors"),
        (lambda d: (d / "optimizer.pt").unlink(), "no optimizer.pt"),
    ],
    ids=["no-state", "half-written-state", "wrong-step", "truncated-weights", "no-weights", "no-optimizer"],
)
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one_and_says_why(tmp_path, damage, why):
    make_checkpoint(tmp_path, 4)
    damage(make_checkpoint(tmp_path, 8))
    said = []
    assert latest_resumable(tmp_path, log=said.append).name == "checkpoint-4"
    assert len(said) == 1 and "checkpoint-8" in said[0] and why in said[0] and "falling back" in said[0]
    assert why in problem_with(tmp_path / "checkpoint-8")


def test_sharded_weights_are_checked_shard_by_shard(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    make_checkpoint(tmp_path, 4)
    d = make_checkpoint(tmp_path, 8)
    (d / "model.safetensors").unlink()
    for i in (1, 2):
        save_file({f"w{i}": np.ones((8, 8), dtype=np.float32)}, str(d / f"model-0000{i}-of-00002.safetensors"))
    weight_map = {"w1": "model-00001-of-00002.safetensors", "w2": "model-00002-of-00002.safetensors"}
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert latest_resumable(tmp_path).name == "checkpoint-8"
    shard = d / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])
    said = []
    assert latest_resumable(tmp_path, log=said.append).name == "checkpoint-4"
    assert "model-00002-of-00002.safetensors is truncated" in said[0]


def test_an_interrupted_save_is_removed_and_other_names_are_ignored(tmp_path):
    make_checkpoint(tmp_path, 2)
    staging = tmp_path / ".tmp-checkpoint-4-1234" / "checkpoint-4"
    staging.mkdir(parents=True)
    (tmp_path / "checkpoint-final").mkdir()
    said = []
    assert latest_resumable(tmp_path, log=said.append).name == "checkpoint-2"
    assert not staging.parent.exists() and "interrupted" in said[0]
    assert latest_resumable(tmp_path / "missing") is None


def test_a_checkpoint_of_another_model_is_refused_by_name(tmp_path):
    base, other = tmp_path / "base", tmp_path / "other"
    for d, hidden in ((base, 128), (other, 256)):
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": hidden, "vocab_size": 40}))
    check_same_model(base, base)
    with pytest.raises(PipelineError, match=r"other belongs to a different model.*hidden_size=256 \(base has 128\)"):
        check_same_model(other, base)
