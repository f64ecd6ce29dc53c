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


def test_an_environment_variable_that_names_no_setting_fails_and_a_near_one_is_suggested(monkeypatch):
    """pydantic-settings alone passes over them: a misspelt variable would leave its setting at the default."""
    monkeypatch.setenv("CTPIPE_REWARD_VERIFIER", "exact")  # one underscore
    monkeypatch.setenv("ctpipe_bogus", "1")
    with pytest.raises(ValidationError, match=r"name no setting: CTPIPE_REWARD_VERIFIER \(did you mean "
                                              r"CTPIPE_REWARD__VERIFIER\?\), ctpipe_bogus "):
        Settings()
    monkeypatch.delenv("CTPIPE_REWARD_VERIFIER")
    monkeypatch.delenv("ctpipe_bogus")
    monkeypatch.setenv("CTPIPE_REWARD__VERIFIR", "exact")  # a field of a section misspelt: its extra input, unsuggested
    with pytest.raises(ValidationError, match=r"CTPIPE_REWARD__VERIFIR \(did you mean CTPIPE_REWARD__VERIFIER\?\)"):
        Settings()
    monkeypatch.delenv("CTPIPE_REWARD__VERIFIR")
    for name, value in (("CTPIPE_REWARD__VERIFIER", "exact"), ("ctpipe_gate__alpha", "0.01"), ("CTPIPE_TEST_ANYTHING", "x")):
        monkeypatch.setenv(name, value)
    s = Settings()
    assert (s.reward.verifier, s.gate.alpha) == ("exact", 0.01)
    monkeypatch.setenv("CTPIPE_TRAIN__LEARNING_RATES__DPO", "2e-5")  # a key of a mapping: a setting (of one rate)
    with pytest.raises(ValidationError, match="learning_rates has no rate for grpo, sft") as e:
        Settings()
    assert "name no setting" not in str(e.value)
    monkeypatch.delenv("CTPIPE_TRAIN__LEARNING_RATES__DPO")
    monkeypatch.setenv("CTPIPE_GATE__ALPHA__X", "1")  # below a field that is no mapping
    with pytest.raises(ValidationError, match="CTPIPE_GATE__ALPHA__X"):
        Settings()


@pytest.mark.parametrize("given, expected", [("0,10", (0.0, 10.0)), ("[0, 10]", (0.0, 10.0)), ("(1, 5)", (1.0, 5.0))])
def test_a_judge_range_reads_as_two_numbers_with_or_without_brackets(monkeypatch, given, expected):
    monkeypatch.setenv("CTPIPE_REWARD__JUDGE_RANGE", given)
    assert Settings().reward.judge_range == expected


def test_one_score_for_both_the_judge_and_feedback_fails_where_both_are_weighted(monkeypatch):
    monkeypatch.setenv("CTPIPE_REWARD__FEEDBACK_SCORE", "judge")
    assert Settings().reward.feedback_score == "judge"  # the judge weighs nothing: counted once
    monkeypatch.setenv("CTPIPE_REWARD__JUDGE_WEIGHT", "0.5")
    with pytest.raises(ValidationError, match="both 'judge': its scores would count twice, as feedback and as the "
                                              "judge's; set CTPIPE_REWARD__FEEDBACK_SCORE to another name or to nothing"):
        Settings()


def test_an_empty_feedback_score_names_none(monkeypatch):
    monkeypatch.setenv("CTPIPE_REWARD__FEEDBACK_SCORE", "")
    monkeypatch.setenv("CTPIPE_REWARD__FEEDBACK_RANGE", "1,5")
    assert Settings().reward.feedback_score == "" and Settings().reward.feedback_range == (1.0, 5.0)


@pytest.mark.parametrize("field, value, said", [
    ("verifiable_weight", "inf", "reward.verifiable_weight"), ("judge_weight", "1e309", "reward.judge_weight"),
    ("judge_range", "0,NaN", "reward.judge_range.1"), ("judge_range", "[0, Infinity]", "reward.judge_range.1"),
    ("judge_range", "10,0", r"judge_range=\[10.0, 0.0\] must be increasing"),
    ("judge_range", "-1e308,1e308", r"judge_range=\[-1e\+308, 1e\+308\] is wider than a float holds"),
    ("judge_range", "0;10", "'0;10' is not two numbers separated by a comma, as 0,10 is"),
    ("judge_score", " ", "reward.judge_score"),
    ("feedback_range", "5,1", r"feedback_range=\[5.0, 1.0\] must be increasing"),
    ("feedback_score", " ", "feedback_score=' ' is blank: empty names none"),
    ("feedback_weight", "1e308", r"the reward weights sum past a float's range \(inf\)"),
    ("verifier", "none", "verifier='none' gives no verifiable signal: verifiable_weight=0.8 must be 0"),
])
def test_reward_settings_that_would_label_nothing_right_fail_naming_the_field(monkeypatch, field, value, said):
    monkeypatch.setenv(f"CTPIPE_REWARD__{field.upper()}", value)
    if field == "feedback_weight":
        monkeypatch.setenv("CTPIPE_REWARD__JUDGE_WEIGHT", value)
    with pytest.raises(ValidationError, match=said):
        Settings()


def test_a_margin_no_two_rewards_can_be_apart_fails():
    with pytest.raises(ValidationError, match="dataset.dpo_min_margin"):
        Settings(dataset={"dpo_min_margin": 1.5})
    assert Settings(dataset={"dpo_min_margin": 1.0}, reward={"verifier": "none", "verifiable_weight": 0}).dataset


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


@pytest.mark.parametrize("variable", ["CTPIPE_RAY_PORT", "CTPIPE_RAY_DASHBOARD_PORT", "CTPIPE_RAY_AGENT_PORT"])
def test_a_ray_port_among_the_ports_ray_gives_its_workers_fails_naming_it(monkeypatch, variable):
    monkeypatch.setenv(variable, "16380")
    with pytest.raises(ValidationError, match=r"=16380 lies in the ports Ray gives its workers \(10002 to 19999\)"):
        Settings()
