"""The RayJob operator and trigger against the Kubernetes API's documented behaviour.

No API server can run here, so a small HTTP server plays the part of the custom-objects
endpoints for ``rayjobs`` (create: 201, or 409 when the name exists; get: 200 or 404;
delete: 200 or 404; injected 429/500/403 answers) and of the core ``pods``, ``pods/log`` and
``events`` lists a test fills in, while the test moves the job's ``status`` through KubeRay's
documented transitions. The operator and trigger use the real
clients (Airflow's KubernetesHook/AsyncKubernetesHook, kubernetes, kubernetes_asyncio)
through a real kubeconfig connection.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
import yaml
from aiohttp import web
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from ctpipe.airflow.operators.kuberay import KubeRayJobOperator
from ctpipe.airflow.triggers.kuberay import RayJobStatusTrigger
from ctpipe.config import KubernetesConfig
from ctpipe.jobspec import JobSpec

pytestmark = pytest.mark.timeout(120)
BASE = "/apis/ray.io/v1/namespaces/{ns}/rayjobs"


class FakeApiServer:
    """rayjobs in one namespace, with statuses a test sets and errors it injects."""

    def __init__(self):
        self.jobs: dict[str, dict] = {}
        self.errors: list[int] = []  # answered (once each, in order) before any real handling
        self.calls: list[tuple[str, str]] = []
        self.namespaces = {"ctpipe"}
        self.pods: list[dict] = []
        self.events: list[dict] = []
        self.logs: dict[str, list[str]] = {}  # pod -> "timestamp line" lines, as pods/log?timestamps=true
        self.denied: set[str] = set()  # core resources answered with 403

    def _error(self):
        if self.errors:
            code = self.errors.pop(0)
            return web.json_response({"kind": "Status", "code": code, "message": f"injected {code}"}, status=code)
        return None

    async def create(self, req):
        self.calls.append(("POST", req.path))
        if err := self._error():
            return err
        if req.match_info["ns"] not in self.namespaces:
            return web.json_response({"kind": "Status", "code": 404, "reason": "NotFound"}, status=404)
        body = await req.json()
        name = body["metadata"]["name"]
        if name in self.jobs:
            return web.json_response({"kind": "Status", "code": 409, "reason": "AlreadyExists"}, status=409)
        self.jobs[name] = body | {"status": {}}
        return web.json_response(self.jobs[name], status=201)

    async def get(self, req):
        self.calls.append(("GET", req.path))
        if err := self._error():
            return err
        job = self.jobs.get(req.match_info["name"])
        return web.json_response(job) if job else web.json_response({"kind": "Status", "code": 404}, status=404)

    async def delete(self, req):
        self.calls.append(("DELETE", req.path))
        if self.jobs.pop(req.match_info["name"], None) is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        return web.json_response({"kind": "Status", "status": "Success"})

    def set_status(self, name: str, **status):
        self.jobs[name]["status"] = status

    def _core_list(self, kind: str, items: list[dict]):
        async def handler(req):
            self.calls.append(("GET", req.path))
            if kind in self.denied:
                return web.json_response({"kind": "Status", "code": 403, "reason": "Forbidden"}, status=403)
            return web.json_response({"kind": f"{kind}List", "apiVersion": "v1", "metadata": {}, "items": items})

        return handler

    async def log(self, req):
        self.calls.append(("GET", req.path))
        lines = self.logs.get(req.match_info["pod"], [])
        if "tailLines" in req.query:
            lines = lines[-int(req.query["tailLines"]):]
        return web.Response(text="".join(line + "\n" for line in lines))

    def start(self) -> int:
        app = web.Application()
        app.router.add_post(BASE, self.create)
        app.router.add_get(BASE + "/{name}", self.get)
        app.router.add_delete(BASE + "/{name}", self.delete)
        app.router.add_get("/api/v1/namespaces/{ns}/events", self._core_list("Event", self.events))
        app.router.add_get("/api/v1/namespaces/{ns}/pods", self._core_list("Pod", self.pods))
        app.router.add_get("/api/v1/namespaces/{ns}/pods/{pod}/log", self.log)
        ready = threading.Event()

        def serve():
            loop = asyncio.new_event_loop()
            runner = web.AppRunner(app)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()

        threading.Thread(target=serve, daemon=True).start()
        ready.wait(10)
        return self.port


@pytest.fixture
def api(tmp_path, monkeypatch):
    server = FakeApiServer()
    port = server.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "t", "user": {"token": "t"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
    }))
    monkeypatch.setenv("AIRFLOW_CONN_K8S_TEST", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": "ctpipe"}}
    ))
    return server


@pytest.fixture
def spec_path(tmp_path, settings):
    home = tmp_path / "mnt"
    spec = JobSpec(
        algorithm="dpo", base_checkpoint=f"{home}/m", base_version="1", dataset_uri=f"{home}/d", dataset_version="v",
        run_dir=f"{home}/runs/manual__1", max_steps=2, learning_rate=1e-4, seed=0, train=settings.train,
    )
    return str(spec.write()), KubernetesConfig(home_mount=str(home), scheduler="kueue")


def operator(spec_path, **kw) -> KubeRayJobOperator:
    path, k = spec_path
    kw = {"kubernetes_conn_id": "k8s_test", "poll_interval": 0.05} | kw
    op = KubeRayJobOperator(task_id="train", spec_path=path, **kw)
    op.kubernetes = k
    return op


def context(try_number=1):
    return {"ti": SimpleNamespace(dag_id="train", task_id="train", run_id="manual__1", try_number=try_number)}


def collect(trigger) -> dict:
    async def first():
        async for e in trigger.run():
            return e.payload

    return asyncio.run(first())


def later(fn, after_s=0.3):
    threading.Timer(after_s, fn).start()


def test_create_defer_follow_transitions_and_succeed(api, spec_path):
    op = operator(spec_path)
    with pytest.raises(TaskDeferred) as d:
        op.execute(context())
    trigger = d.value.trigger
    (name,) = api.jobs
    assert trigger.name == name and api.jobs[name]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "ctpipe-training"
    assert "suspend" not in api.jobs[name]["spec"]  # Kueue owns it
    api.set_status(name, jobDeploymentStatus="Suspended")  # queued by Kueue: not terminal
    later(lambda: api.set_status(name, jobDeploymentStatus="Running", jobStatus="RUNNING"), 0.2)
    later(lambda: api.set_status(name, jobDeploymentStatus="Complete", jobStatus="SUCCEEDED"), 0.5)
    event = collect(trigger)
    assert event["status"] == "SUCCEEDED" and event["jobStatus"] == "SUCCEEDED"
    assert op.execute_complete(context(), event) == {"rayjob": name, "namespace": "ctpipe", "preemptions": 0}


def test_the_trigger_round_trips_through_serialize():
    t = RayJobStatusTrigger("j", "ctpipe", "k8s_test", poll_interval=2.0, deadline=123.0)
    path, kwargs = t.serialize()
    assert path == "ctpipe.airflow.triggers.kuberay.RayJobStatusTrigger"
    assert RayJobStatusTrigger(**kwargs).serialize() == (path, kwargs)


def test_a_restarted_worker_attaches_instead_of_creating_a_second_job(api, spec_path):
    with pytest.raises(TaskDeferred):
        operator(spec_path).execute(context())
    with pytest.raises(TaskDeferred) as again:  # same try: the same name, 409, attach
        operator(spec_path).execute(context())
    assert len(api.jobs) == 1 and again.value.trigger.name in api.jobs


def test_transient_api_errors_are_retried(api, spec_path):
    op = operator(spec_path)
    with pytest.raises(TaskDeferred) as d:
        op.execute(context())
    (name,) = api.jobs
    api.set_status(name, jobDeploymentStatus="Complete", jobStatus="SUCCEEDED")
    api.errors = [500, 429, 503]
    assert collect(d.value.trigger)["status"] == "SUCCEEDED"
    assert len([c for c in api.calls if c == ("GET", BASE.format(ns="ctpipe") + "/" + name)]) == 4


def test_a_preempted_job_is_recreated_and_a_genuine_failure_fails(api, spec_path):
    op = operator(spec_path, max_preemptions=1, preemption_backoff=timedelta(seconds=0.01))
    with pytest.raises(TaskDeferred) as d:
        op.execute(context())
    (first,) = api.jobs
    api.set_status(first, jobDeploymentStatus="Failed", jobStatus="FAILED", reason="AppFailed",
                   message="Job entrypoint command failed with exit code 143")
    event = collect(d.value.trigger)
    with pytest.raises(TaskDeferred) as wait:
        op.execute_complete(context(), event)
    assert first not in api.jobs  # the preempted job is deleted before the next is created
    with pytest.raises(TaskDeferred) as d2:
        getattr(op, wait.value.method_name)(context(), None, **wait.value.kwargs)
    (second,) = api.jobs
    assert second != first and "-r1-" in second
    api.set_status(second, jobDeploymentStatus="Failed", jobStatus="FAILED", reason="AppFailed",
                   message="Job entrypoint command failed with exit code 143")
    with pytest.raises(AirflowException, match="after 1 resubmissions"):
        op.execute_complete(context(), collect(d2.value.trigger), **d2.value.kwargs)

    api.jobs.clear()
    with pytest.raises(TaskDeferred) as d3:
        operator(spec_path).execute(context(try_number=2))
    (broken,) = api.jobs
    api.set_status(broken, jobDeploymentStatus="ValidationFailed", reason="ValidationFailed",
                   message="The RayJob metadata is invalid")
    with pytest.raises(AirflowException, match="ended FAILED: ValidationFailed The RayJob metadata is invalid"):
        operator(spec_path).execute_complete(context(2), collect(d3.value.trigger))
    assert broken not in api.jobs  # its story is in the task log; the job is not left behind


def test_rbac_denial_a_rejected_spec_and_a_missing_namespace_name_the_cause(api, spec_path):
    api.errors = [403]
    with pytest.raises(AirflowException, match="HTTP 403 creating RayJob .*Role ctpipe-airflow"):
        operator(spec_path).execute(context())
    api.errors = [422]  # the API server's own schema check (e.g. an older KubeRay CRD)
    with pytest.raises(AirflowException, match="the API server refused RayJob ctpipe/ctpipe-train-train-1-.*HTTP 422.*injected 422"):
        operator(spec_path).execute(context())
    path, k = spec_path
    op = operator((path, k.model_copy(update={"namespace": "nope"})))
    with pytest.raises(AirflowException, match="namespace 'nope' does not exist"):
        op.execute(context())
    assert not api.jobs  # nothing orphaned


def test_a_deleted_job_and_a_deadline_end_the_trigger(api, spec_path):
    with pytest.raises(TaskDeferred) as d:
        operator(spec_path).execute(context())
    (name,) = api.jobs
    api.jobs.clear()
    assert collect(d.value.trigger)["status"] == "DELETED"
    with pytest.raises(TaskDeferred) as d:
        operator(spec_path).execute(context(try_number=3))
    (name,) = api.jobs
    t = d.value.trigger
    t.deadline = time.time() + 0.2
    assert collect(t)["status"] == "TIMEOUT" and name not in api.jobs  # deleted, not orphaned


def test_killing_the_task_deletes_the_job(api, spec_path):
    with pytest.raises(TaskDeferred) as d:
        operator(spec_path).execute(context())
    (name,) = api.jobs
    asyncio.run(d.value.trigger.on_kill())
    assert name not in api.jobs


def ago(seconds: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, *, containers=("ray-head",), scheduled: bool = True, waited_s: float = 0) -> dict:
    condition = {"type": "PodScheduled", "status": "True" if scheduled else "False", "lastTransitionTime": ago(waited_s)}
    if not scheduled:
        condition |= {"reason": "Unschedulable", "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ctpipe"},
        "spec": {"containers": [{"name": c, "image": "x"} for c in containers]},
        "status": {"phase": "Running" if scheduled else "Pending", "conditions": [condition]},
    }


def event(obj: str, reason: str, message: str, *, type_="Warning", count=1, kind="Pod") -> dict:
    return {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{obj}.{reason}", "namespace": "ctpipe", "uid": f"{obj}-{reason}"},
        "involvedObject": {"kind": kind, "name": obj, "namespace": "ctpipe"}, "reason": reason, "message": message,
        "type": type_, "count": count, "lastTimestamp": "2026-11-22T10:00:00Z",
    }


def started(api, spec_path, try_number=1):
    """The operator's RayJob and its trigger, with the RayCluster KubeRay would name."""
    with pytest.raises(TaskDeferred) as d:
        operator(spec_path).execute(context(try_number))
    (name,) = [n for n in api.jobs]
    return name, f"{name}-x7k2p", d.value.trigger


def test_the_driver_log_and_the_pods_events_stream_into_the_task_log(api, spec_path, capfd):
    name, cluster, trigger = started(api, spec_path)
    submitter = f"{name}-q9z8w"
    api.pods += [pod(f"{cluster}-head-abcde"), pod(submitter, containers=("ray-job-submitter",)), pod("other-job-head-zzzzz")]
    api.events += [
        event(f"{cluster}-gpu-worker-fghij", "Scheduled", "Successfully assigned ctpipe/... to ip-10-0-1-7", type_="Normal"),
        event("other-job-head-zzzzz", "Pulled", "not ours", type_="Normal"),
    ]
    api.logs[submitter] = [f"2026-11-22T10:00:0{i}.5Z step {i}/4 loss={1 - i / 10}" for i in range(2)]
    api.set_status(name, jobDeploymentStatus="Running", jobStatus="RUNNING", rayClusterName=cluster)

    def more():  # new lines arrive; the old ones come back too (sinceSeconds overlaps) and are not repeated
        api.logs[submitter] += ["2026-11-22T10:00:02Z step 2/4 loss=0.8", "2026-11-22T10:00:03.25Z step 3/4 loss=0.7"]
        api.events.append(event(f"{cluster}-gpu-worker-fghij", "BackOff", "Back-off restarting failed container", count=2))

    later(more, 0.3)
    later(lambda: api.set_status(name, jobDeploymentStatus="Complete", jobStatus="SUCCEEDED", rayClusterName=cluster), 0.6)
    capfd.readouterr()
    assert collect(trigger)["status"] == "SUCCEEDED"
    logged = capfd.readouterr().out  # the trigger's log, which Airflow writes into the task's log
    assert re.findall(rf"\[{submitter}\] (step \S+ loss=\S+)", logged) == [f"step {i}/4 loss={1 - i / 10}" for i in range(4)]
    assert f"Normal Scheduled pod/{cluster}-gpu-worker-fghij: Successfully assigned ctpipe/... to ip-10-0-1-7" in logged
    assert f"Warning BackOff pod/{cluster}-gpu-worker-fghij: Back-off restarting failed container (x2)" in logged
    assert logged.count("Back-off restarting") == 1 and "not ours" not in logged


@pytest.mark.parametrize(("events", "pods", "cause"), [
    ([("Failed", 'Failed to pull image "ghcr.io/ctpipe/ctpipe-train:0.1.0": manifest unknown', 1)], [],
     'ImagePullFailed Warning Failed pod/{cluster}-head-abcde: Failed to pull image "ghcr.io/ctpipe/ctpipe-train:0.1.0": manifest unknown'),
    ([("Failed", "Error: ErrImagePull", 3)], [], "ImagePullFailed Warning Failed pod/{cluster}-head-abcde: Error: ErrImagePull (x3)"),
    ([("FailedScheduling", 'Failed to schedule pod, incompatible with nodepool "gpu-spot", daemonset overhead={"cpu":"180m"}, '
       'no instance type has enough resources, requirements=..., resources={"nvidia.com/gpu":"16"}', 1)], [],
     "Unschedulable no node pool has an instance type that fits the pod"),
    ([], [False], "Unschedulable pod {cluster}-gpu-worker-0 unschedulable for"),
])
def test_pods_that_cannot_start_fail_the_task_naming_the_cause_and_leave_no_job(api, spec_path, events, pods, cause):
    name, cluster, trigger = started(api, spec_path)
    api.set_status(name, jobDeploymentStatus="Initializing", rayClusterName=cluster)
    api.events += [event(f"{cluster}-head-abcde", reason, msg, count=n) for reason, msg, n in events]
    api.pods += [pod(f"{cluster}-gpu-worker-0", scheduled=s, waited_s=120) for s in pods]
    trigger.schedule_timeout = 60
    result = collect(trigger)
    assert result["status"] == "FAILED" and name not in api.jobs
    with pytest.raises(AirflowException, match=re.escape(cause.format(cluster=cluster))):
        operator(spec_path).execute_complete(context(), result)
    assert not api.jobs  # not resubmitted: a new job would fail the same way


def test_waiting_that_may_still_end_does_not_fail_the_job(api, spec_path):
    name, cluster, trigger = started(api, spec_path)
    api.set_status(name, jobDeploymentStatus="Initializing", rayClusterName=cluster)
    api.events += [
        event(f"{cluster}-head-abcde", "Failed", 'Failed to pull image "x": i/o timeout', count=1),  # a hiccup
        event(f"{cluster}-head-abcde", "FailedScheduling", "Failed to schedule pod, all available instance types "
              'exceed limits for nodepool: "gpu-spot"'),  # the pool is full for now
    ]
    api.pods.append(pod(f"{cluster}-gpu-worker-0", scheduled=False, waited_s=120))  # under the hour allowed
    later(lambda: api.set_status(name, jobDeploymentStatus="Complete", jobStatus="SUCCEEDED"), 0.3)
    assert collect(trigger)["status"] == "SUCCEEDED"


def test_a_missing_connection_or_kubeconfig_is_named_and_creates_nothing(api, spec_path, tmp_path, monkeypatch):
    with pytest.raises(AirflowException, match="connection 'nope'.*isn't defined.*CTPIPE_KUBERNETES__KUBERNETES_CONN_ID"):
        operator(spec_path, kubernetes_conn_id="nope").execute(context())
    monkeypatch.setenv("AIRFLOW_CONN_K8S_GONE", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(tmp_path / "no-such-kubeconfig")}}
    ))
    with pytest.raises(AirflowException, match="connection 'k8s_gone'.*Invalid kube-config file"):
        operator(spec_path, kubernetes_conn_id="k8s_gone").execute(context())
    assert not api.jobs
    event = collect(RayJobStatusTrigger("j", "ctpipe", "nope", poll_interval=0.05))
    assert event["status"] == "ERROR" and "'nope'" in event["message"]


def test_create_is_retried_through_server_errors_and_progress_survives_denied_reads(api, spec_path, capfd):
    api.errors = [503, 429]
    name, cluster, trigger = started(api, spec_path)
    assert [c[0] for c in api.calls].count("POST") == 3
    api.denied = {"Event", "Pod"}  # a Role without events or pods: progress is skipped, the outcome is not
    later(lambda: api.set_status(name, jobDeploymentStatus="Complete", jobStatus="SUCCEEDED"), 0.3)
    capfd.readouterr()
    assert collect(trigger)["status"] == "SUCCEEDED"
    logged = capfd.readouterr().out
    assert logged.count("cannot read events") == 1 and logged.count("cannot read pods") == 1
