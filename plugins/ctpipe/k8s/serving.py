"""Serving registered versions on Kubernetes: vLLM Deployments, a weighted Gateway API route, metrics.

Shape, built from typed config (``ServingConfig``), never from YAML text:

* one Deployment + Service per served version (``ctpipe-vllm-v<version>``), running the official
  vLLM OpenAI-compatible image on the checkpoint under the shared volume
  (``<home_mount>/<models_subdir>/<model>/v<version>``), ready when ``/health`` answers;
* one ``HTTPRoute`` (gateway.networking.k8s.io/v1) whose single rule splits traffic between the
  champion's and the canary's Services by weight: a canary step is a change of two weights;
* one ``ServiceMonitor`` (monitoring.coreos.com/v1) scraping every served version's ``/metrics``,
  where the canary analysis reads ``vllm:e2e_request_latency_seconds`` and friends;
* or, for KServe users, one ``InferenceService`` whose ``canaryTrafficPercent`` does the split.
"""

from __future__ import annotations

from typing import Any

from ctpipe.config import KubernetesConfig, ServingConfig
from ctpipe.k8s.rayjob import pod_resources

ROUTE = "ctpipe-serving"
COMPONENT = {"app.kubernetes.io/name": "ctpipe", "app.kubernetes.io/component": "serving"}


def server_name(version: str) -> str:
    """
    >>> server_name("12")
    'ctpipe-vllm-v12'
    """
    return f"ctpipe-vllm-v{version}"


def model_dir(k: KubernetesConfig, s: ServingConfig, model: str, version: str) -> str:
    return f"{k.home_mount.rstrip('/')}/{s.models_subdir}/{model}/v{version}"


def _vllm_args(s: ServingConfig, model: str, path: str) -> list[str]:
    """vLLM's OpenAI server flags: the checkpoint at ``path``, served under the registered model's name."""
    args = ["--model", path, "--served-model-name", model, "--port", str(s.port),
            "--gpu-memory-utilization", str(s.gpu_memory_utilization)]
    return args + (["--max-model-len", str(s.max_model_len)] if s.max_model_len else [])


def _vllm_pod(k: KubernetesConfig, s: ServingConfig, model: str, version: str) -> dict[str, Any]:
    """The pod spec parts every variant shares: vLLM's container on the version's checkpoint, its volumes."""
    probe = {"httpGet": {"path": "/health", "port": s.port}, "periodSeconds": 5}
    container = {
        "name": "vllm",
        "image": s.vllm_image,
        "args": _vllm_args(s, model, model_dir(k, s, model, version)),
        "ports": [{"name": "http", "containerPort": s.port}],
        "resources": pod_resources(s.resources),
        "readinessProbe": probe | {"failureThreshold": 3},
        # Loading weights can take minutes; liveness starts counting only once it is up.
        "startupProbe": probe | {"failureThreshold": 120},
        "volumeMounts": [{"name": "ctpipe-home", "mountPath": k.home_mount, "readOnly": True},
                         {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    return {
        "serviceAccountName": k.service_account,
        "containers": [container],
        "tolerations": [{"key": k.gpu_taint, "operator": "Exists", "effect": "NoSchedule"}] if s.resources.gpus else [],
        "volumes": [
            {"name": "ctpipe-home", "persistentVolumeClaim": {"claimName": k.home_pvc, "readOnly": True}},
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        ],
    }


def server(k: KubernetesConfig, s: ServingConfig, model: str, version: str, role: str) -> list[dict[str, Any]]:
    """The Deployment and Service of one version (``role``: champion or canary, a label only)."""
    name = server_name(version)
    labels = COMPONENT | {"ctpipe.io/server": name, "ctpipe.io/model-version": version, "ctpipe.io/role": role}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": k.namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"ctpipe.io/server": name}},
            "template": {"metadata": {"labels": labels}, "spec": _vllm_pod(k, s, model, version)},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": k.namespace, "labels": labels},
        "spec": {"selector": {"ctpipe.io/server": name}, "ports": [{"name": "http", "port": s.port, "targetPort": "http"}]},
    }
    return [deployment, service]


def route(k: KubernetesConfig, s: ServingConfig, champion: str, canary: str | None = None, weight: int = 0) -> dict[str, Any]:
    """The HTTPRoute sending ``weight`` percent to the canary's Service and the rest to the champion's."""
    if not 0 <= weight <= 100 or (weight and canary is None):
        raise ValueError(f"weight={weight} needs a canary and must be in 0..100")
    backends = [{"name": server_name(champion), "port": s.port, "weight": 100 - weight}]
    if canary is not None:
        backends.append({"name": server_name(canary), "port": s.port, "weight": weight})
    parent = {"name": s.gateway} | ({"namespace": s.gateway_namespace} if s.gateway_namespace else {})
    spec: dict[str, Any] = {
        "parentRefs": [parent],
        "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}], "backendRefs": backends}],
    }
    if s.hostnames:
        spec["hostnames"] = list(s.hostnames)
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": ROUTE, "namespace": k.namespace, "labels": dict(COMPONENT)},
        "spec": spec,
    }


def monitor(k: KubernetesConfig) -> dict[str, Any]:
    """The ServiceMonitor that has Prometheus scrape every served version's vLLM metrics."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "ctpipe-vllm", "namespace": k.namespace, "labels": dict(COMPONENT)},
        "spec": {
            "selector": {"matchLabels": dict(COMPONENT)},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": "15s"}],
        },
    }


def inference_service(
    k: KubernetesConfig, s: ServingConfig, model: str, version: str, canary_percent: int | None = None
) -> dict[str, Any]:
    """The KServe variant: one InferenceService (serverless mode) whose predictor runs vLLM on ``version``.

    KServe splits a canary itself: applying a new ``version`` with ``canary_percent`` sends that share
    to the new revision and the rest to the last one that was fully rolled out (the champion);
    ``canary_percent`` None (or 100) promotes it.
    """
    if canary_percent is not None and not 0 <= canary_percent <= 100:
        raise ValueError(f"canary_percent={canary_percent} must be in 0..100")
    # KServe's storage initializer copies the checkpoint from the claim into /mnt/models, so the
    # pod needs no volume of ours (Knative allows PVC volumes only behind a feature flag), and
    # Knative accepts only an unnamed (or http1/h2c) port and no startup probe.
    path = f"{s.models_subdir}/{model}/v{version}"
    container = {
        "name": "kserve-container",
        "image": s.vllm_image,
        "args": _vllm_args(s, model, "/mnt/models"),
        "env": [{"name": "STORAGE_URI", "value": f"pvc://{k.home_pvc}/{path}"}],
        "ports": [{"containerPort": s.port, "protocol": "TCP"}],
        "resources": pod_resources(s.resources),
        "readinessProbe": {"httpGet": {"path": "/health", "port": s.port}, "periodSeconds": 5, "failureThreshold": 3},
    }
    predictor: dict[str, Any] = {"minReplicas": 1, "serviceAccountName": k.service_account, "containers": [container]}
    if s.resources.gpus:
        predictor["tolerations"] = [{"key": k.gpu_taint, "operator": "Exists", "effect": "NoSchedule"}]
    if canary_percent is not None and canary_percent < 100:
        predictor["canaryTrafficPercent"] = canary_percent
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": f"ctpipe-{model}".lower()[:45],
            "namespace": k.namespace,
            "labels": COMPONENT | {"ctpipe.io/model-version": version},
            # Canary traffic splitting needs Knative revisions: serverless mode, not raw deployments.
            "annotations": {"serving.kserve.io/deploymentMode": "Serverless"},
        },
        "spec": {"predictor": predictor},
    }


def manifests(
    k: KubernetesConfig, s: ServingConfig, model: str, champion: str, canary: str | None = None, weight: int = 0
) -> list[dict[str, Any]]:
    """Everything that serves ``champion`` (and ``canary`` at ``weight`` percent), in apply order."""
    objects = server(k, s, model, champion, "champion")
    if canary is not None:
        objects += server(k, s, model, canary, "canary")
    return objects + [route(k, s, champion, canary, weight), monitor(k)]
