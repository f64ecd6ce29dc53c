"""A real local canary: nginx in front of two OpenAI-compatible server processes serving registered versions.

These use ctpipe's transformers server (the same process interface, metrics and proxy as vLLM's);
``tests/e2e/test_canary_vllm.py`` runs the same rollout on vLLM's CPU build.
"""

from __future__ import annotations

import os
import shutil

import pytest
import requests

from ctpipe.canary.local import LocalServing
from ctpipe.canary.proxy import Backend
from ctpipe.canary.rollout import CanaryError, LocalCanary
from ctpipe.canary.servers import ModelServer
from ctpipe.config import Settings
from ctpipe.errors import PipelineError
from ctpipe.registry import PREVIOUS, Registry
from tests.conftest import free_port, listen_port

HAVE_NGINX = shutil.which("nginx") is not None or os.path.exists("/usr/sbin/nginx")
pytestmark = [
    pytest.mark.skipif(not HAVE_NGINX and not os.environ.get("CI"), reason="nginx is not installed (nginx-light)"),
    pytest.mark.timeout(600),
]


@pytest.fixture
def canary_settings(tmp_path, monkeypatch) -> Settings:
    monkeypatch.setenv("CTPIPE_HOME", str(tmp_path / "home"))
    s = Settings(
        serving={"local_engine": "transformers", "local_port": listen_port(), "ready_timeout_s": 120},
        canary={"steps": [25, 50, 100], "bake_s": 4, "min_requests": 12, "local_load_rps": 12, "max_bakes": 2},
    )
    yield s
    LocalServing(s).stop_all()


@pytest.fixture
def collapsed_model(tmp_path, canary_settings):
    """A candidate that answers every request with HTTP 200 and nonsense: untrained weights."""
    from ctpipe import tinymodel

    tok = tinymodel.build_tokenizer()
    model = tinymodel.build_model(canary_settings.base_model, tok)
    out = tmp_path / "collapsed"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def register(settings: Settings, checkpoint, origin: str) -> str:
    registry = Registry(settings)
    run = registry.start_run(f"test {origin}")
    return registry.register(run.info.run_id, checkpoint, tags={"origin": origin})


def answered_by(serving: LocalServing) -> str:
    r = requests.post(f"{serving.url}/v1/chat/completions", timeout=30, json={
        "model": serving.s.model_name, "messages": [{"role": "user", "content": "What is 2 plus 3?"}], "max_tokens": 8})
    assert r.status_code == 200, r.text
    return r.headers["X-Ctpipe-Upstream"]


def mlflow_canary(settings: Settings, rollout) -> tuple[dict, dict]:
    from mlflow.artifacts import load_dict

    run = Registry(settings).client.get_run(rollout.mlflow_run_id)
    return run.data.tags, load_dict(f"{run.info.artifact_uri}/canary.json")


def test_an_equal_canary_is_promoted_step_by_step_and_the_old_champion_is_kept(canary_settings, base_model):
    registry = Registry(canary_settings)
    champion = registry.ensure_champion(base_model)
    version = register(canary_settings, base_model, "same weights")

    rollout = LocalCanary(canary_settings).roll_out(version)

    assert rollout.promoted, rollout.detail
    assert [f["weight"] for f in rollout.step_figures] == [25, 50]
    for step in rollout.step_figures:
        assert step["passed"] and step["canary"]["requests"] >= 12 and step["canary"]["errors"] == 0
        assert {c["name"] for c in step["checks"]} >= {"error rate", "p95 latency", "online reward", "refusal rate"}
        assert step["canary"]["p95_latency_s"] is not None  # read from the server's Prometheus histogram
    assert registry.alias("champion") == version and registry.alias(PREVIOUS) == champion.version
    tags, record = mlflow_canary(canary_settings, rollout)
    assert tags["ctpipe.decision"] == "promoted" and len(record["steps"]) == 2

    serving = LocalServing(canary_settings)
    assert serving.canary() is None and serving.champion().version == version
    assert answered_by(serving) == serving.champion().address
    assert len([p for p in (canary_settings.home / "serving" / "servers").iterdir()
                if ModelServer(p, "", p, 0, "", "", "").pid() is not None]) == 1  # the old champion's server stopped


def test_a_canary_that_answers_worse_is_rolled_back_at_the_first_step(canary_settings, base_model, collapsed_model):
    registry = Registry(canary_settings)
    champion = registry.ensure_champion(base_model)
    bad = register(canary_settings, collapsed_model, "collapsed")

    rollout = LocalCanary(canary_settings).roll_out(bad)

    assert not rollout.promoted
    assert "online reward" in rollout.detail and rollout.detail.startswith("rolled back at 25%")
    assert len(rollout.step_figures) == 1 and rollout.step_figures[0]["canary"]["errors"] == 0  # every request got 200
    assert registry.alias("champion") == champion.version and registry.alias(PREVIOUS) is None
    serving = LocalServing(canary_settings)
    assert serving.canary() is None and serving.champion().version == champion.version
    assert {answered_by(serving) for _ in range(8)} == {serving.champion().address}
    tags, record = mlflow_canary(canary_settings, rollout)
    assert tags["ctpipe.decision"] == "rolled back" and "online reward" in tags["ctpipe.reason"]


def test_a_version_missing_from_the_registry_starts_nothing(canary_settings, base_model):
    Registry(canary_settings).ensure_champion(base_model)
    with pytest.raises(CanaryError, match=r"has no version '7'.*no canary started"):
        LocalCanary(canary_settings).roll_out("7")
    assert not (canary_settings.home / "serving" / "servers").exists()


def test_a_canary_that_never_becomes_ready_is_removed_and_the_task_fails(canary_settings, base_model, tmp_path):
    registry = Registry(canary_settings)
    champion = registry.ensure_champion(base_model)
    broken = tmp_path / "broken"
    shutil.copytree(base_model, broken)
    (broken / "config.json").write_text("{not json")
    version = register(canary_settings, broken, "broken")

    with pytest.raises(CanaryError, match=r"champion v1 keeps full traffic: .* exited before it was ready: .*not a valid JSON"):
        LocalCanary(canary_settings).roll_out(version)

    serving = LocalServing(canary_settings)
    assert serving.canary() is None and serving.champion().version == champion.version
    assert serving.champion().healthy() and registry.alias("champion") == champion.version
    run = Registry(canary_settings).client.search_runs([registry.experiment_id()], "tags.`ctpipe.kind` = 'canary'")[0]
    assert run.data.tags["ctpipe.decision"] == "failed" and run.info.status == "FAILED"


def test_a_metrics_endpoint_that_is_down_rolls_back(canary_settings, base_model, monkeypatch):
    registry = Registry(canary_settings)
    registry.ensure_champion(base_model)
    version = register(canary_settings, base_model, "same weights")
    real_scrape = ModelServer.scrape
    monkeypatch.setattr(ModelServer, "scrape", lambda self: _down(self, version, real_scrape))
    with pytest.raises(CanaryError, match=rf"metrics endpoint .* of v{version} is down"):
        LocalCanary(canary_settings).roll_out(version)
    serving = LocalServing(canary_settings)
    assert serving.canary() is None and registry.alias("champion") == "1"


def _down(server: ModelServer, version: str, real_scrape):
    if server.version != version:
        return real_scrape(server)
    dead = ModelServer(server.dir, server.version, server.checkpoint, free_port(), server.engine, server.python,
                       server.served_name)
    return real_scrape(dead)


def test_a_proxy_reload_nginx_refuses_keeps_the_champion_serving(canary_settings, base_model, monkeypatch):
    registry = Registry(canary_settings)
    registry.ensure_champion(base_model)
    version = register(canary_settings, base_model, "same weights")

    def split(self, champion, canary, weight):
        # nginx -t refuses an upstream it cannot resolve: a real refusal of the new configuration.
        self.proxy.set_weights((Backend(champion.address, 100 - weight), Backend("canary.invalid:1", weight)))

    monkeypatch.setattr(LocalServing, "split", split)
    with pytest.raises(CanaryError, match=r"champion v1 keeps full traffic: nginx refused the configuration .* canary.invalid:1 25%: .*host not found"):
        LocalCanary(canary_settings).roll_out(version)
    serving = LocalServing(canary_settings)
    assert serving.canary() is None and serving.champion().healthy()
    assert {answered_by(serving) for _ in range(8)} == {serving.champion().address}


def test_a_manual_rollback_restores_the_previous_champion_in_one_step(canary_settings, base_model):
    registry = Registry(canary_settings)
    registry.ensure_champion(base_model)
    registry.set_champion(register(canary_settings, base_model, "release"))  # v2 promoted, v1 previous
    canary = LocalCanary(canary_settings)
    with pytest.raises(PipelineError, match=r"version='9': model 'ctpipe-arith' has no version '9'"):
        canary.restore("9", "typo")
    assert registry.alias("champion") == "2"

    rollout = canary.restore(None, "support tickets about wrong sums")

    assert rollout.version == "1" and rollout.previous_champion == "2"
    assert registry.alias("champion") == "1" and registry.alias(PREVIOUS) == "2"
    serving = LocalServing(canary_settings)
    assert serving.champion().version == "1" and answered_by(serving) == serving.champion().address
    run = registry.client.get_run(rollout.mlflow_run_id)
    assert run.data.tags["ctpipe.decision"] == "restored" and run.data.tags["ctpipe.reason"].startswith("support")


def test_a_champion_that_cannot_be_served_says_so_and_leaves_nothing_running(canary_settings, tmp_path):
    broken = tmp_path / "broken-champion"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    registry = Registry(canary_settings)
    registry.ensure_champion(broken)
    version = register(canary_settings, broken, "also broken")
    with pytest.raises(CanaryError, match=r"champion v1 is not served .*: the transformers server for v1 exited"):
        LocalCanary(canary_settings).roll_out(version)
    servers = canary_settings.home / "serving" / "servers"
    assert all(ModelServer(p, "", p, 0, "", "", "").pid() is None for p in servers.iterdir())
