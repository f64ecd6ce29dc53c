"""RayJobs rendered from typed config, checked against KubeRay's CRD schema (no API server runs here)."""

import copy
from pathlib import Path

import pytest
import yaml

from ctpipe.cli import main
from ctpipe.config import KubernetesConfig
from ctpipe.errors import PipelineError
from ctpipe.jobspec import JobSpec
from ctpipe.k8s import rayjob, schema


def rendered(capsys, *args) -> dict:
    assert main(["k8s", "render", *args]) == 0
    return yaml.safe_load(capsys.readouterr().out)


@pytest.mark.parametrize("algorithm", ["grpo", "dpo"])
@pytest.mark.parametrize("scheduler", ["volcano", "kueue", "none"])
def test_every_default_render_is_a_valid_rayjob(capsys, algorithm, scheduler):
    job = rendered(capsys, "--algorithm", algorithm, "--scheduler", scheduler)
    schema.validate(job)  # the command validated it too; this checks what was printed
    labels, spec = job["metadata"]["labels"], job["spec"]
    assert len(job["metadata"]["name"]) <= 47
    assert ("volcano.sh/queue-name" in labels) == (scheduler == "volcano")
    assert ("kueue.x-k8s.io/queue-name" in labels) == (scheduler == "kueue")
    assert "suspend" not in spec  # Kueue owns it; Volcano needs nothing there
    assert spec["shutdownAfterJobFinishes"] is True and spec["backoffLimit"] == 0
    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    (workers,) = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert head["nodeSelector"] == {"karpenter.sh/capacity-type": "on-demand"}
    assert workers["template"]["spec"]["nodeSelector"] == {"karpenter.sh/capacity-type": "spot"}
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"]
    assert workers["template"]["spec"]["terminationGracePeriodSeconds"] < 120  # inside AWS's spot notice
    gpus = workers["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    if algorithm == "grpo":  # NeMo-RL by default on a cluster: its image, its actors on the workers
        assert "jobs/train_nemo_rl.py" in spec["entrypoint"] and "entrypointNumGpus" not in spec
        assert workers["template"]["spec"]["containers"][0]["image"] == KubernetesConfig().nemo_rl_image
        assert gpus == "8"
    else:  # TRL is one process: the entrypoint asks for the worker's GPU so it runs there
        assert "jobs/train_trl.py" in spec["entrypoint"] and spec["entrypointNumGpus"] == 1
        assert gpus == "1"


def test_unknown_fields_and_bad_values_are_named(capsys):
    job = rendered(capsys, "--algorithm", "dpo", "--scheduler", "volcano")
    bad = copy.deepcopy(job)
    bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicaz"] = 2
    bad["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["imagee"] = "x"
    bad["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = 0  # must be a string
    with pytest.raises(schema.InvalidManifest) as e:
        schema.validate(bad)
    msg = str(e.value)
    assert "workerGroupSpecs[0]: Additional properties are not allowed ('replicaz'" in msg
    assert "containers[0]: Additional properties are not allowed ('imagee'" in msg
    assert "rayStartParams.num-cpus: 0 is not of type 'string'" in msg
    bad = copy.deepcopy(job)
    bad["apiVersion"] = "ray.io/v2"
    with pytest.raises(schema.InvalidManifest, match="no schema for RayJob ray.io/v2"):
        schema.validate(bad)


def test_names_are_deterministic_per_try_and_resubmission():
    a = rayjob.job_name("train", "train", "scheduled__2026-11-22T10:00:00+00:00", 1)
    assert a == rayjob.job_name("train", "train", "scheduled__2026-11-22T10:00:00+00:00", 1)
    assert a != rayjob.job_name("train", "train", "scheduled__2026-11-22T10:00:00+00:00", 2)
    again = rayjob.job_name("train", "train", "r", 1, resubmission=1)
    assert "-1-r1-" in again and again != rayjob.job_name("train", "train", "r", 1)


def dpo_spec(settings, run_dir: str) -> JobSpec:
    return JobSpec(
        algorithm="dpo", base_checkpoint="/m", base_version="1", dataset_uri="/d", dataset_version="v",
        run_dir=run_dir, max_steps=1, learning_rate=1e-4, seed=0, train=settings.train,
    )


def test_a_run_directory_off_the_shared_volume_is_refused(settings):
    spec = dpo_spec(settings, "/tmp/runs/x")
    with pytest.raises(PipelineError, match="not on the shared volume mounted at /mnt/ctpipe"):
        rayjob.render(spec, KubernetesConfig(), name="ctpipe-x", labels={})


def test_a_rendered_job_reads_the_spec_where_the_train_dag_writes_it(capsys, settings):
    from ctpipe.pipeline import run_dir_for

    run_id = "scheduled__2026-11-24T10:00:00+00:00"
    job = rendered(capsys, "--algorithm", "dpo", "--scheduler", "none", "--run-id", run_id)
    on_volume = run_dir_for(settings.model_copy(update={"home": Path(KubernetesConfig().home_mount)}), run_id)
    assert job["spec"]["entrypoint"].endswith(f" --spec {on_volume}/job.json")
    assert str(on_volume) == "/mnt/ctpipe/runs/scheduled__2026-11-24T10_00_00_00_00"


def test_long_label_values_are_shortened_not_rejected(settings):
    spec = dpo_spec(settings, "/mnt/ctpipe/runs/x")
    job = rayjob.render(spec, KubernetesConfig(), name="ctpipe-x", labels={"ctpipe.io/run-id": "manual__" + "9" * 80 + "+00:00"})
    value = job["metadata"]["labels"]["ctpipe.io/run-id"]
    assert len(value) <= 63 and "+" not in value
    schema.validate(job)


def test_gke_puts_workers_on_spot_and_keeps_the_head_off_it(settings):
    spec = dpo_spec(settings, "/mnt/ctpipe/runs/x")
    job = rayjob.render(spec, KubernetesConfig(capacity="gke"), name="ctpipe-gke-1-0123456789", labels={})
    schema.validate(job)
    cluster = job["spec"]["rayClusterSpec"]
    head, worker = cluster["headGroupSpec"]["template"]["spec"], cluster["workerGroupSpecs"][0]["template"]["spec"]
    (term,) = head["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == {"matchExpressions": [{"key": "cloud.google.com/gke-spot", "operator": "DoesNotExist"}]}
    assert "nodeSelector" not in head
    assert worker["nodeSelector"] == {"cloud.google.com/gke-spot": "true"}
    assert {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in worker["tolerations"]
    assert worker["terminationGracePeriodSeconds"] == 25  # GKE gives pods 25 s of its 30 s notice
    explicit = rayjob.render(spec, KubernetesConfig(capacity="gke", worker_grace_s=20), name="ctpipe-gke-1-0123456789", labels={})
    assert explicit["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["terminationGracePeriodSeconds"] == 20


def test_the_training_images_hold_the_project_where_rendered_jobs_look_for_it(settings):
    """The Dockerfile is not built here (no container engine); its paths and pins must match the renderer."""
    import re
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    dockerfile = (root / "k8s" / "image" / "Dockerfile").read_text()
    assert set(re.findall(r"^WORKDIR (\S+)$", dockerfile, re.M)) == {KubernetesConfig().project_dir}
    assert set(re.findall(r"^FROM \S+ AS (\S+)$", dockerfile, re.M)) == {"trl", "nemo-rl"}
    for source in re.findall(r"^COPY (.+) \S+$", dockerfile, re.M):
        assert all((root / p).exists() for p in source.split()), source
    train = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"]
    (ray,) = [d for d in train if d.startswith("ray")]
    assert f"ARG RAY_BASE=rayproject/ray:{ray.split('==')[1]}-py311" in dockerfile
    assert f"ARG NEMO_RL_BASE={settings.train.nemo_rl.image}\n" in dockerfile
