"""A canary rollout on the local serving stack: traffic steps, bake windows, checks, promote or roll back.

For each step but the last, the canary takes that share of traffic for ``canary.bake_s`` (longer,
up to ``canary.max_bakes`` windows, until it has served ``canary.min_requests``), then
:func:`ctpipe.canary.analysis.analyze` compares it with the champion over the same window. The
first failed check rolls back at once: the canary leaves the proxy, its server stops, the
registry's aliases stay as they were. Passing every step promotes: the canary takes all traffic,
becomes ``champion`` in MLflow (the old champion becomes ``previous-champion``) and the old
champion's server stops.

A KPI rollback is a decision, returned like a promotion. What prevents a decision (the canary
never became ready, a metrics endpoint is down, the proxy refused a reload, the version is not
in the registry) also rolls back, and then fails the task naming the cause. Every step's figures
and the decision go to the task log and to an MLflow run of kind ``canary``.
"""

from __future__ import annotations

import fcntl
import json
import logging
import time
import zlib
from dataclasses import dataclass

from ctpipe.canary import load
from ctpipe.canary.analysis import E2E, TTFT, Verdict, Window, analyze, quantile
from ctpipe.canary.local import LocalServing
from ctpipe.canary.servers import ModelServer
from ctpipe.config import Settings
from ctpipe.deploy import Rollout, restore_target
from ctpipe.errors import PipelineError
from ctpipe.registry import Registry

log = logging.getLogger(__name__)


class CanaryError(PipelineError):
    pass


def _window(server: ModelServer, answers: list[load.Answer], before, after) -> Window:
    mine = [a for a in answers if a.upstream == server.address]
    answered = [a for a in mine if a.ok]
    return Window(
        requests=len(mine),
        errors=len(mine) - len(answered),
        e2e=after.since(before, E2E),
        ttft=after.since(before, TTFT),
        rewards=[a.reward for a in answered if a.reward is not None],
        refusals=sum(a.refusal for a in answered),
        output_tokens=[a.completion_tokens for a in answered if a.completion_tokens is not None],
    )


def _figures(w: Window) -> dict:
    mean = lambda xs: round(sum(xs) / len(xs), 4) if xs else None  # noqa: E731
    return {
        "requests": w.requests,
        "errors": w.errors,
        "p95_latency_s": quantile(0.95, w.e2e),
        "p95_ttft_s": quantile(0.95, w.ttft),
        "reward_mean": mean(w.rewards),
        "refusals": w.refusals,
        "output_tokens_mean": mean(w.output_tokens),
    }


@dataclass(frozen=True)
class Step:
    weight: int
    seconds: float
    canary: dict
    champion: dict
    verdict: Verdict

    def line(self) -> str:
        def kpis(f: dict) -> str:
            ms = lambda s: "n/a" if s is None else f"{s * 1000:.0f} ms"  # noqa: E731
            return (f"{f['requests']} req, {f['errors']} err, p95 {ms(f['p95_latency_s'])}, ttft p95 "
                    f"{ms(f['p95_ttft_s'])}, reward {f['reward_mean']}, {f['refusals']} refusals, "
                    f"{f['output_tokens_mean']} tok")

        return (f"{self.weight}% for {self.seconds:.0f} s: canary {kpis(self.canary)} | champion {kpis(self.champion)}"
                f" -> {'pass' if self.verdict.passed else 'FAIL'}: {self.verdict.reason}")

    def as_dict(self) -> dict:
        return {"weight": self.weight, "seconds": round(self.seconds, 1), "canary": self.canary,
                "champion": self.champion, "passed": self.verdict.passed,
                "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in self.verdict.checks]}


class LocalCanary:
    """The embedded default's deployer: a canary behind the local nginx, judged on simulated users."""

    def __init__(self, settings: Settings):
        self.s = settings
        self.cfg = settings.canary
        self.serving = LocalServing(settings)
        self._where: dict = {}

    def _bake(self, champion: ModelServer, canary: ModelServer, weight: int, seed: int) -> Step:
        t0 = time.monotonic()
        before = {m.address: m.scrape() for m in (champion, canary)}
        answers: list[load.Answer] = []
        for bake in range(self.cfg.max_bakes):
            answers += load.ask(self.serving.url, self.s.model_name, self.s.task, rps=self.cfg.local_load_rps,
                                duration_s=self.cfg.bake_s, seed=seed + bake)
            lost = [a for a in answers if not a.upstream]
            if lost:
                raise CanaryError(f"the proxy at {self.serving.url} did not answer {len(lost)} requests: {lost[0].error}")
            after = {m.address: m.scrape() for m in (champion, canary)}
            w_canary, w_champion = (_window(m, answers, before[m.address], after[m.address]) for m in (canary, champion))
            verdict = analyze(w_canary, w_champion, self.cfg)
            if verdict.judged or not verdict.passed:
                break
            log.info("%d%%: not enough to judge yet (%s); baking again", weight,
                     "; ".join(c.detail for c in verdict.checks if c.passed is None))
        return Step(weight, time.monotonic() - t0, _figures(w_canary), _figures(w_champion), verdict)

    def roll_out(self, version: str) -> Rollout:
        registry = Registry(self.s)
        try:
            candidate = registry.get(version)
        except LookupError as e:
            raise CanaryError(f"{e}: no canary started; the champion keeps full traffic") from None
        champion = registry.champion()
        if champion is None:
            raise CanaryError(f"model {self.s.model_name!r} has no champion to compare the canary with")
        lock_path = self.serving.dir / ".rollout.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one rollout at a time on this serving stack
            return self._roll_out(registry, champion.version, champion.path, version, candidate.path)

    def _roll_out(self, registry: Registry, champion_version: str, champion_path, version: str, candidate_path) -> Rollout:
        engine, _, why = self.serving.engine
        run = registry.start_run(f"canary v{version}", tags={"ctpipe.kind": "canary", "ctpipe.version": version})
        rid = run.info.run_id
        for k, v in {"version": version, "champion_version": champion_version, "engine": engine, "engine_reason": why,
                     "steps": self.cfg.steps, "bake_s": self.cfg.bake_s, "min_requests": self.cfg.min_requests,
                     "alpha": self.cfg.alpha, "load_rps": self.cfg.local_load_rps}.items():
            registry.client.log_param(rid, k, str(v)[:500])
        steps: list[Step] = []

        def finish(decision: str, reason: str, status: str = "FINISHED") -> None:
            registry.client.set_tag(rid, "ctpipe.decision", decision)
            registry.client.set_tag(rid, "ctpipe.reason", reason[:5000])
            registry.client.log_dict(rid, {"decision": decision, "reason": reason,
                                           "steps": [x.as_dict() for x in steps]}, "canary.json")
            registry.client.set_terminated(rid, status)
            log.info("canary v%s: %s: %s", version, decision, reason)

        canary = current = None
        try:
            current = self.serving.champion()
            fresh = current is None or current.version != champion_version or current.pid() is None
            if fresh:
                current = self.serving.start(self.serving.new_server(champion_version, champion_path))
            canary = self.serving.start(self.serving.new_server(version, candidate_path, beside=current))
            self._where = {"proxy": self.serving.url, "champion": f"v{champion_version} on {current.address}",
                           "canary": f"v{version} on {canary.address}", "engine": f"{engine} ({why})"}
            log.info("champion v%s on %s, canary v%s on %s (%s: %s), proxy %s", champion_version, current.address,
                     version, canary.address, engine, why, self.serving.url)
            # Both start before either is waited for: on two cores that saves a vLLM start-up per cycle.
            current.wait_ready(self.s.serving.ready_timeout_s)
            if fresh or self.serving.proxy.pid() is None:
                current.warm_up()
                self.serving.serve_only(current)
            canary.wait_ready(self.s.serving.ready_timeout_s)
            canary.warm_up()
            for i, weight in enumerate(self.cfg.steps[:-1]):
                self.serving.split(current, canary, weight)
                step = self._bake(current, canary, weight, seed=zlib.crc32(f"{version}/{i}".encode()))
                steps.append(step)
                log.info("canary v%s step %s", version, step.line())
                for c in step.verdict.checks:
                    log.info("  %-24s %-5s %s", c.name, {True: "pass", False: "FAIL", None: "n/a"}[c.passed], c.detail)
                for role, fig in (("canary", step.canary), ("champion", step.champion)):
                    for k, v in fig.items():
                        if v is not None:
                            registry.client.log_metric(rid, f"{role}_{k}", float(v), step=weight)
                if not step.verdict.passed or not step.verdict.judged:
                    reason = (f"at {weight}%: {step.verdict.reason}" if not step.verdict.passed else
                              f"at {weight}%: too little traffic to judge in {self.cfg.max_bakes} bakes")
                    self.serving.remove_canary()
                    finish("rolled back", reason)
                    return self._rollout(version, False, champion_version, f"rolled back {reason}", steps, rid, engine)
            self.serving.serve_only(canary)
            registry.set_champion(version)
        except Exception as e:
            try:
                self.serving.remove_canary()
            except Exception as cleanup:  # noqa: BLE001 - the first cause is the one to report
                log.error("removing the canary failed too: %s", cleanup)
            # Servers started here but never routed are not in the state file: stop them by hand.
            for server in (canary, current):
                if server is not None and server != self.serving.champion():
                    server.stop()
            finish("failed", f"{type(e).__name__}: {e}", status="FAILED")
            if isinstance(e, PipelineError):
                served = self.serving.champion()
                where = (f"champion v{champion_version} keeps full traffic" if served and served.healthy()
                         else f"champion v{champion_version} is not served (see {self.serving.dir})")
                raise CanaryError(f"canary v{version} rolled back, {where}: {e}") from e
            raise
        finish("promoted", f"passed {len(steps)} steps")
        detail = f"promoted after {len(steps)} canary step{'s' * (len(steps) != 1)}"
        return self._rollout(version, True, champion_version, detail, steps, rid, engine)

    def restore(self, version: str | None, reason: str) -> Rollout:
        """Serve ``version`` alone (starting its server if none runs), then move the aliases; one step."""
        registry = Registry(self.s)
        target = restore_target(registry, version)
        path = registry.get(target).path
        run = registry.start_run(f"rollback to v{target}", tags={"ctpipe.kind": "rollback", "ctpipe.version": target,
                                                                 "ctpipe.reason": reason[:5000]})
        try:
            current = self.serving.champion()
            if current is None or current.version != target or current.pid() is None:
                server = self.serving.start(self.serving.new_server(target, path, beside=current))
                server.wait_ready(self.s.serving.ready_timeout_s)
                server.warm_up()
            else:
                server = current
            self.serving.serve_only(server)  # stops every other server, a canary in progress included
        except Exception as e:
            registry.client.set_tag(run.info.run_id, "ctpipe.decision", f"failed: {e}"[:5000])
            registry.client.set_terminated(run.info.run_id, "FAILED")
            raise
        previous = registry.set_champion(target)
        registry.client.set_tag(run.info.run_id, "ctpipe.decision", "restored")
        registry.client.set_terminated(run.info.run_id)
        log.info("v%s serves all traffic on %s and is champion again (was v%s): %s", target, server.address,
                 previous or target, reason)
        return Rollout(version=target, promoted=True, previous_champion=previous, detail=f"restored: {reason}",
                       engine=server.engine, mlflow_run_id=run.info.run_id)

    def _rollout(self, version, promoted, previous, detail, steps, rid, engine) -> Rollout:
        return Rollout(version=version, promoted=promoted, previous_champion=previous, detail=detail,
                       steps=[s.line() for s in steps], mlflow_run_id=rid, engine=engine,
                       step_figures=json.loads(json.dumps([s.as_dict() for s in steps])), serving=self._where)
