"""The local canary on vLLM's CPU build: two real vLLM servers behind nginx, promote then roll back.

Needs vLLM's own virtual environment (``vllm_python`` in tests/conftest.py builds it in the
background, once per cache: set CTPIPE_SERVING__LOCAL_VLLM_PYTHON to reuse one).
"""

from __future__ import annotations

import pytest

from tests.conftest import listen_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def test_vllm_canary_promotes_an_equal_version_then_rolls_back_a_collapsed_one(tmp_path, base_model, vllm_python):
    from ctpipe import tinymodel
    from ctpipe.canary.local import LocalServing
    from ctpipe.canary.rollout import LocalCanary
    from ctpipe.config import Settings
    from ctpipe.registry import Registry

    s = Settings(home=tmp_path / "home", serving={"local_vllm_python": vllm_python, "local_port": listen_port()},
                 canary={"steps": [25, 50, 100], "bake_s": 15, "min_requests": 30})
    registry = Registry(s)
    registry.ensure_champion(base_model)
    try:
        same = registry.register(registry.start_run("same").info.run_id, base_model, tags={})
        promoted = LocalCanary(s).roll_out(same)
        print("\n".join(promoted.steps))
        assert promoted.promoted and promoted.engine == "vllm", promoted.detail
        assert all(f["canary"]["p95_ttft_s"] is not None for f in promoted.step_figures)  # vLLM's own histograms
        assert registry.alias("champion") == same and LocalServing(s).champion().engine == "vllm"

        tok = tinymodel.build_tokenizer()
        collapsed = tmp_path / "collapsed"
        tinymodel.build_model(s.base_model, tok).save_pretrained(collapsed)
        tok.save_pretrained(collapsed)
        bad = registry.register(registry.start_run("collapsed").info.run_id, collapsed, tags={})
        refused = LocalCanary(s).roll_out(bad)
        print("\n".join(refused.steps))
        assert not refused.promoted and "online reward" in refused.detail
        assert registry.alias("champion") == same and LocalServing(s).canary() is None
    finally:
        LocalServing(s).stop_all()


def test_the_gate_answers_with_vllm_exactly_as_transformers_does(tmp_path, base_model, vllm_python):
    from ctpipe import arith
    from ctpipe.config import Settings
    from ctpipe.pipeline import _answer_test

    test = arith.splits(Settings().task).test
    s = Settings(home=tmp_path, gate={"engine": "vllm"}, serving={"local_vllm_python": vllm_python})
    flags, engine, why = _answer_test(s, {"champion": base_model}, test, 8)
    assert (engine, why) == ("vllm", "gate.engine=vllm")
    reference, engine, _ = _answer_test(Settings(home=tmp_path), {"champion": base_model}, test, 8)
    assert engine == "transformers" and flags == reference  # greedy: the same 500 answers' correctness
