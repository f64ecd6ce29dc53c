import pytest

from ctpipe.config import GateConfig
from ctpipe.evaluation import ContaminationError, check_disjoint, compare, gate, mcnemar_exact, wilson


def test_compare_counts_discordant_pairs():
    champion = [True] * 20 + [False] * 80
    candidate = [True] * 15 + [False] * 5 + [True] * 30 + [False] * 50
    c = compare(champion, candidate)
    assert (c.champion_only, c.candidate_only) == (5, 30)
    assert c.champion_accuracy == 0.20 and c.candidate_accuracy == 0.45
    assert c.gain == pytest.approx(0.25)
    assert c.gain_ci[0] < 0.25 < c.gain_ci[1]
    assert c.p_value < 1e-4


def test_gate_needs_significance_and_gain():
    base = [True] * 30 + [False] * 70
    better = [True] * 60 + [False] * 40
    slightly = [True] * 31 + [False] * 69
    cfg = GateConfig(alpha=0.05, min_gain=0.0)
    assert gate(compare(base, better), cfg).passed
    d = gate(compare(base, slightly), cfg)
    assert not d.passed and "not significant" in d.reason
    d = gate(compare(better, base), cfg)
    assert not d.passed and "not above" in d.reason
    assert not gate(compare(base, better), GateConfig(min_gain=0.5)).passed


def test_mcnemar_is_symmetric_and_one_when_no_disagreement():
    assert mcnemar_exact(3, 9) == pytest.approx(mcnemar_exact(9, 3))
    assert mcnemar_exact(0, 0) == 1.0


def test_wilson_stays_in_bounds():
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and 0 < hi < 0.35
    assert wilson(10, 10)[1] == 1.0


def test_compare_refuses_unpaired_input():
    with pytest.raises(ValueError):
        compare([True], [True, False])


def test_contamination_is_refused():
    check_disjoint({"a", "b"}, ["c"])
    with pytest.raises(ContaminationError, match="1 evaluation questions"):
        check_disjoint({"a", "b"}, ["b ", "c"])


def test_the_gate_falls_back_to_transformers_when_vllm_cannot_answer(base_model, tmp_path):
    import sys

    from ctpipe import arith
    from ctpipe.config import Settings
    from ctpipe.pipeline import _answer_test

    test = arith.splits(Settings().task).test[:40]
    ckpts = {"champion": base_model, "candidate": base_model}
    missing = Settings(home=tmp_path, gate={"engine": "vllm"}, serving={"local_vllm_python": str(tmp_path / "nope")})
    flags, engine, why = _answer_test(missing, ckpts, test, 8)
    assert engine == "transformers" and why.startswith("fallback: serving.local_vllm_python=")
    assert flags["champion"] == flags["candidate"] and len(flags["champion"]) == 40

    # A python without vLLM: the job fails, and both checkpoints are answered by transformers alike.
    broken = Settings(home=tmp_path, gate={"engine": "vllm"}, serving={"local_vllm_python": sys.executable})
    flags2, engine, why = _answer_test(broken, ckpts, test, 8)
    assert engine == "transformers" and "vLLM generation exited" in why and flags2 == flags

    auto = Settings(home=tmp_path)
    _, engine, why = _answer_test(auto, ckpts, test, 8)  # no GPU, or no vLLM environment in this home
    assert engine == "transformers" and why.startswith("auto: no ")
