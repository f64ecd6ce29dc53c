import pytest
from pydantic import ValidationError

from ctpipe.config import BaseModelRecipe, Settings


def test_nested_settings_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CTPIPE_HOME", str(tmp_path))
    monkeypatch.setenv("CTPIPE_GATE__ALPHA", "0.01")
    s = Settings()
    assert s.gate.alpha == 0.01 and s.home == tmp_path
    assert s.tracking_uri == f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}"


def test_unknown_keys_fail_loudly(monkeypatch):
    with pytest.raises(ValidationError, match="alpah"):
        Settings(gate={"alpah": 0.01})
    with pytest.raises(ValidationError):
        Settings(not_a_setting=1)


def test_out_of_range_values_name_the_field():
    with pytest.raises(ValidationError, match="alpha"):
        Settings(gate={"alpha": 2})
    with pytest.raises(ValidationError, match="head_dim"):
        BaseModelRecipe(head_dim=16)
    with pytest.raises(ValidationError, match="plateau_fraction"):
        BaseModelRecipe(plateau_fraction=1.5)


def test_each_algorithm_has_its_own_learning_rate_unless_one_is_set(monkeypatch):
    train = Settings().train
    assert [train.rate_for(a) for a in ("grpo", "dpo", "sft")] == [1e-3, 1e-5, 1e-4]
    monkeypatch.setenv("CTPIPE_TRAIN__LEARNING_RATE", "3e-4")
    assert Settings().train.rate_for("dpo") == 3e-4
    with pytest.raises(ValidationError, match="no rate for dpo, sft"):
        Settings(train={"learning_rates": {"grpo": 1e-3}})
    with pytest.raises(ValidationError, match="every rate must be in"):
        Settings(train={"learning_rates": {"grpo": 2, "dpo": 1e-5, "sft": 1e-4}})
