"""vLLM serving objects rendered from typed config, each checked against its upstream schema (strict)."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest
import yaml

from ctpipe.cli import main
from ctpipe.config import KubernetesConfig, ServingConfig
from ctpipe.k8s import schema, serving


def check(obj: dict) -> None:
    if obj["apiVersion"] in ("v1", "apps/v1"):
        kubernetes_validate.validate(obj, "1.33", strict=True)
    else:
        schema.validate(obj)


def test_a_canary_rollout_renders_valid_objects_that_fit_together(capsys):
    assert main(["k8s", "serving", "--champion", "3", "--canary", "4", "--weight", "25"]) == 0
    objects = [o for o in yaml.safe_load_all(capsys.readouterr().out) if o]
    for obj in objects:
        check(obj)
    kinds = [o["kind"] for o in objects]
    assert kinds == ["Deployment", "Service", "Deployment", "Service", "HTTPRoute", "ServiceMonitor"]
    deployments = {o["metadata"]["labels"]["ctpipe.io/role"]: o for o in objects if o["kind"] == "Deployment"}
    canary = deployments["canary"]["spec"]["template"]["spec"]["containers"][0]
    assert canary["image"].startswith("vllm/vllm-openai:")
    assert canary["args"][:2] == ["--model", "/mnt/ctpipe/serving/ctpipe-arith/v4"]
    assert canary["resources"]["limits"]["nvidia.com/gpu"] == "1" and canary["readinessProbe"]["httpGet"]["path"] == "/health"
    (route,) = [o for o in objects if o["kind"] == "HTTPRoute"]
    (rule,) = route["spec"]["rules"]
    assert [(b["name"], b["weight"]) for b in rule["backendRefs"]] == [("ctpipe-vllm-v3", 75), ("ctpipe-vllm-v4", 25)]
    services = {o["metadata"]["name"] for o in objects if o["kind"] == "Service"}
    assert {b["name"] for b in rule["backendRefs"]} == services
    (monitor,) = [o for o in objects if o["kind"] == "ServiceMonitor"]
    for svc in (o for o in objects if o["kind"] == "Service"):  # the monitor scrapes every served version
        assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
        assert monitor["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]


def test_the_champion_alone_takes_all_traffic():
    route = serving.route(KubernetesConfig(), ServingConfig(hostnames=["llm.example.com"]), "3")
    schema.validate(route)
    assert route["spec"]["rules"][0]["backendRefs"] == [{"name": "ctpipe-vllm-v3", "port": 8000, "weight": 100}]
    assert route["spec"]["hostnames"] == ["llm.example.com"]
    with pytest.raises(ValueError, match="weight=10 needs a canary"):
        serving.route(KubernetesConfig(), ServingConfig(), "3", None, 10)


def test_a_typo_in_a_route_is_caught():
    route = serving.route(KubernetesConfig(), ServingConfig(), "3", "4", 10)
    bad = copy.deepcopy(route)
    bad["spec"]["rules"][0]["backendRefs"][0]["wieght"] = 90
    with pytest.raises(schema.InvalidManifest, match="wieght"):
        schema.validate(bad)
    bad = copy.deepcopy(route)
    bad["spec"]["rules"][0]["backendRefs"][0]["weight"] = -1
    with pytest.raises(schema.InvalidManifest, match="weight"):
        schema.validate(bad)


def test_the_kserve_variant_splits_with_canary_traffic_percent(capsys):
    assert main(["k8s", "serving", "--champion", "3", "--canary", "4", "--weight", "25", "--kserve"]) == 0
    (isvc,) = [o for o in yaml.safe_load_all(capsys.readouterr().out) if o]
    schema.validate(isvc)  # KServe v0.20.0's CRD, strict
    predictor = isvc["spec"]["predictor"]
    assert predictor["canaryTrafficPercent"] == 25
    (container,) = predictor["containers"]
    assert container["name"] == "kserve-container" and container["image"].startswith("vllm/vllm-openai:")
    assert {"name": "STORAGE_URI", "value": "pvc://ctpipe-home/serving/ctpipe-arith/v4"} in container["env"]
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Serverless"

    promoted = serving.inference_service(KubernetesConfig(), ServingConfig(), "ctpipe-arith", "4")
    schema.validate(promoted)
    assert "canaryTrafficPercent" not in promoted["spec"]["predictor"]
    bad = copy.deepcopy(promoted)
    bad["spec"]["predictor"]["canaryTrafficPercnt"] = 10
    with pytest.raises(schema.InvalidManifest, match="canaryTrafficPercnt"):
        schema.validate(bad)
