"""A training run as a KubeRay ``RayJob`` (ray.io/v1), built from typed config, never from YAML text.

Shape of the rendered job:

* the Ray head on on-demand capacity, marked ``karpenter.sh/do-not-disrupt``; GPU workers on
  spot, tolerating the GPU pool's taints, with a SIGTERM grace period inside the cloud's reclaim
  notice. Karpenter labels both kinds of node ``karpenter.sh/capacity-type``; GKE labels only
  spot nodes (``cloud.google.com/gke-spot``), so there the head asks for nodes without it;
* ``CTPIPE_HOME`` on a shared PVC on every pod, so datasets, run directories and
  checkpoints survive a lost node and a resubmission resumes from them;
* gang scheduling: Volcano (queue and priority labels; KubeRay creates the PodGroup with
  head + workers as min members when started with ``--batch-scheduler=volcano``) or
  Kueue (queue label; Kueue owns ``spec.suspend``, so it is never set here);
* ``backoffLimit: 0``: KubeRay does not retry; the Airflow operator resubmits after a
  preemption and fails a genuine error, which KubeRay cannot tell apart;
* ``shutdownAfterJobFinishes`` with a TTL, and ``activeDeadlineSeconds`` from the run's timeout.

TRL jobs are one process: the entrypoint reserves the worker's GPUs (``entrypointNumGpus``)
so Ray runs it on the GPU worker, not on the head. NeMo-RL places its own Ray actors on
the workers (``cluster.num_nodes`` x ``cluster.gpus_per_node``), so its entrypoint stays on the head.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from ctpipe.config import KubernetesConfig, PodResources
from ctpipe.errors import PipelineError
from ctpipe.jobspec import JobSpec

GROUP, VERSION, PLURAL, KIND = "ray.io", "v1", "rayjobs", "RayJob"
MAX_NAME = 47  # KubeRay: a RayJob name leaves room for its RayCluster's suffixes
LABEL = "ctpipe.io"
_CAPACITY = "karpenter.sh/capacity-type"
_GKE_SPOT = "cloud.google.com/gke-spot"
# SIGTERM-to-SIGKILL grace that fits the cloud's spot notice (AWS 120 s; GKE 30 s, 25 s for pods).
RECLAIM_GRACE_S = {"karpenter": 100, "gke": 25}


def _label_value(value: str) -> str:
    """A Kubernetes label value: 63 characters of [A-Za-z0-9_.-], alphanumeric at both ends."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", value)
    if len(cleaned) > 63:
        cleaned = cleaned[:52] + "-" + hashlib.sha256(value.encode()).hexdigest()[:10]
    return cleaned.strip("_.-")


def job_name(dag_id: str, task_id: str, run_id: str, try_number: int, resubmission: int = 0) -> str:
    """Deterministic per task try and resubmission, so a restarted scheduler or triggerer finds its job.

    >>> job_name("train", "train", "manual__2026-11-22T10:00:00+00:00", 1)
    'ctpipe-train-train-1-87e72b8923'
    >>> len(job_name("a" * 80, "b" * 80, "r", 12, 3)) <= 47
    True
    """
    key = f"{dag_id}/{task_id}/{run_id}/{try_number}/{resubmission}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    stem = re.sub(r"[^a-z0-9-]+", "-", f"{dag_id}-{task_id}".lower()).strip("-")
    suffix = f"-{try_number}" + (f"-r{resubmission}" if resubmission else "") + f"-{digest}"
    return f"ctpipe-{stem}"[: MAX_NAME - len(suffix)].rstrip("-") + suffix


def pod_resources(r: PodResources) -> dict[str, Any]:
    amounts: dict[str, Any] = {"cpu": r.cpu, "memory": r.memory}
    if r.gpus:
        amounts["nvidia.com/gpu"] = str(r.gpus)
    # Requests equal to limits: Guaranteed QoS, so a GPU node never evicts training for memory.
    return {"requests": amounts, "limits": dict(amounts)}


def _placement(k: KubernetesConfig, spot: bool) -> dict[str, Any]:
    """Pod spec fields that put a pod on spot (tolerating its taints) or keep it off spot."""
    if k.capacity == "karpenter":
        label, spot_value = _CAPACITY, "spot"
        on_demand: dict[str, Any] = {"nodeSelector": {_CAPACITY: "on-demand"}}
    else:
        label, spot_value = _GKE_SPOT, "true"
        no_spot_label = {"matchExpressions": [{"key": _GKE_SPOT, "operator": "DoesNotExist"}]}
        on_demand = {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [no_spot_label]}}}}
    if not spot:
        return on_demand
    return {
        "nodeSelector": {label: spot_value},
        "tolerations": [
            {"key": k.gpu_taint, "operator": "Exists", "effect": "NoSchedule"},
            {"key": label, "operator": "Equal", "value": spot_value, "effect": "NoSchedule"},
        ],
    }


def _pod(k: KubernetesConfig, image: str, resources: PodResources, *, gpu: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "serviceAccountName": k.service_account,
        **_placement(k, spot=gpu),
        "containers": [{
            "name": "ray-worker" if gpu else "ray-head",
            "image": image,
            "resources": pod_resources(resources),
            "env": [{"name": "CTPIPE_HOME", "value": k.home_mount}, {"name": "PYTHONUNBUFFERED", "value": "1"}],
            "volumeMounts": [{"name": "ctpipe-home", "mountPath": k.home_mount}],
        }],
        "volumes": [{"name": "ctpipe-home", "persistentVolumeClaim": {"claimName": k.home_pvc}}],
    }
    metadata: dict[str, Any] = {}
    if gpu:
        spec["terminationGracePeriodSeconds"] = k.worker_grace_s or RECLAIM_GRACE_S[k.capacity]
        # NCCL and the dataloaders share memory through /dev/shm, which defaults to 64 MiB in a pod.
        spec["volumes"].append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
        spec["containers"][0]["volumeMounts"].append({"name": "dshm", "mountPath": "/dev/shm"})
    else:
        metadata["annotations"] = {"karpenter.sh/do-not-disrupt": "true"}  # losing the head loses the job
    return {"metadata": metadata, "spec": spec} if metadata else {"spec": spec}


def render(spec: JobSpec, k: KubernetesConfig, *, name: str, labels: dict[str, str]) -> dict[str, Any]:
    """The RayJob that runs ``spec`` (whose ``run_dir`` must be under ``k.home_mount``)."""
    if not spec.run_dir.startswith(k.home_mount.rstrip("/") + "/"):
        raise PipelineError(f"run_dir={spec.run_dir!r} is not on the shared volume mounted at {k.home_mount}")
    if len(name) > MAX_NAME or not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name):
        raise PipelineError(f"RayJob name {name!r} must be a DNS-1035 label of at most {MAX_NAME} characters")
    nemo = spec.script == "train_nemo_rl.py"
    if nemo:
        n = spec.train.nemo_rl
        image, workers = k.nemo_rl_image, n.num_nodes
        worker = k.worker.model_copy(update={"gpus": n.gpus_per_node})
        entrypoint_gpus = 0
    else:
        image, workers, worker = k.train_image, k.trl_workers, k.worker
        entrypoint_gpus = worker.gpus
    all_labels = {
        "app.kubernetes.io/name": "ctpipe",
        "app.kubernetes.io/component": "training",
        f"{LABEL}/algorithm": spec.algorithm,
        f"{LABEL}/trainer": "nemo_rl" if nemo else "trl",
        **{key: _label_value(v) for key, v in labels.items()},
    }
    if k.scheduler == "volcano":
        all_labels |= {"volcano.sh/queue-name": k.queue, "ray.io/priority-class-name": k.priority_class}
    elif k.scheduler == "kueue":
        all_labels |= {"kueue.x-k8s.io/queue-name": k.queue}
    job_spec: dict[str, Any] = {
        "entrypoint": f"python {k.project_dir}/jobs/{spec.script} --spec {spec.run_dir}/job.json",
        "submissionMode": "K8sJobMode",
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": k.ttl_after_finished_s,
        "activeDeadlineSeconds": spec.train.timeout_s,
        "backoffLimit": 0,
        "rayClusterSpec": {
            "headGroupSpec": {
                # The head schedules; it runs no training (TRL's entrypoint asks for a GPU worker).
                "rayStartParams": {"num-cpus": "0"},
                "template": _pod(k, image, k.head, gpu=False),
            },
            "workerGroupSpecs": [{
                "groupName": "gpu",
                "replicas": workers,
                "minReplicas": workers,
                "maxReplicas": workers,
                "rayStartParams": {},
                "template": _pod(k, image, worker, gpu=True),
            }],
        },
    }
    if entrypoint_gpus:
        job_spec["entrypointNumGpus"] = entrypoint_gpus
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name, "namespace": k.namespace, "labels": all_labels},
        "spec": job_spec,
    }
