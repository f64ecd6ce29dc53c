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
