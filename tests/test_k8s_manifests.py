"""Every Kustomize overlay renders, and every object in it passes its upstream schema in strict mode.

Built-in kinds are checked against the Kubernetes OpenAPI schema (kubernetes-validate, strict:
unknown fields fail); custom resources against the pinned operators' CRD schemas (k8s/schemas).
No cluster is used.
"""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ctpipe.k8s import schema

ROOT = Path(__file__).resolve().parents[1]
OVERLAYS = sorted(p.name for p in (ROOT / "k8s" / "overlays").iterdir() if (p / "kustomization.yaml").exists())
KUBERNETES_VERSION = "1.33"
CUSTOM_GROUPS = ("ray.io/", "karpenter.sh/", "karpenter.k8s.aws/", "scheduling.volcano.sh/", "kueue.x-k8s.io/")

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with kustomize) is not installed")


def render(overlay: str) -> list[dict]:
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / "k8s" / "overlays" / overlay)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def check(obj: dict) -> None:
    if obj["apiVersion"].startswith(CUSTOM_GROUPS):
        schema.validate(obj)
    else:
        import kubernetes_validate

        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_there_are_overlays():
    assert {"kind", "eks-volcano", "kueue", "gke"} <= set(OVERLAYS)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_of_every_overlay_is_valid(overlay):
    objects = render(overlay)
    kinds = {o["kind"] for o in objects}
    assert {"Namespace", "ServiceAccount", "Role", "RoleBinding", "PersistentVolumeClaim", "PriorityClass"} <= kinds
    for obj in objects:
        check(obj)


def test_airflow_may_only_touch_what_it_needs():
    (role,) = [o for o in render("kind") if o["kind"] == "Role"]
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert ("ray.io", "rayjobs", "create") in granted and ("", "pods/log", "get") in granted
    assert not any(v in {"*", "update", "patch", "escalate", "bind"} for _, _, v in granted)
    assert not any(r in {"secrets", "*"} for _, r, _ in granted)


def test_a_typo_in_a_manifest_is_caught():
    import kubernetes_validate

    (pvc,) = [o for o in render("kind") if o["kind"] == "PersistentVolumeClaim"]
    pvc["spec"]["accessMode"] = ["ReadWriteOnce"]
    with pytest.raises(kubernetes_validate.ValidationError):
        check(pvc)
    (pool, _) = [o for o in render("eks-volcano") if o["kind"] == "NodePool"]
    pool["spec"]["disruption"]["consolidateAfterr"] = "5m"
    with pytest.raises(schema.InvalidManifest, match="consolidateAfterr"):
        check(pool)


def test_the_gang_queue_names_match_what_rayjobs_are_rendered_with():
    from ctpipe.config import KubernetesConfig

    k = KubernetesConfig()
    (queue,) = [o for o in render("eks-volcano") if o["kind"] == "Queue"]
    (local,) = [o for o in render("kueue") if o["kind"] == "LocalQueue"]
    (pc,) = [o for o in render("kind") if o["kind"] == "PriorityClass"]
    assert queue["metadata"]["name"] == local["metadata"]["name"] == k.queue
    assert local["metadata"]["namespace"] == k.namespace and pc["metadata"]["name"] == k.priority_class


@pytest.mark.parametrize(("overlay", "capacity"), [("kueue", "karpenter"), ("gke", "gke")])
def test_the_spot_flavor_selects_the_nodes_rendered_workers_go_to(overlay, capacity, settings):
    from ctpipe.config import KubernetesConfig
    from ctpipe.jobspec import JobSpec
    from ctpipe.k8s import rayjob

    (flavor,) = [o for o in render(overlay) if o["kind"] == "ResourceFlavor" and o["metadata"]["name"] == "ctpipe-gpu-spot"]
    spec = JobSpec(
        algorithm="dpo", base_checkpoint="/m", base_version="1", dataset_uri="/d", dataset_version="v",
        run_dir="/mnt/ctpipe/runs/x", max_steps=1, learning_rate=1e-4, seed=0, train=settings.train,
    )
    job = rayjob.render(spec, KubernetesConfig(capacity=capacity, scheduler="kueue"), name="ctpipe-x", labels={})
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert flavor["spec"]["nodeLabels"] == worker["nodeSelector"]
