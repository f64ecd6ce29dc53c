"""Putting a registered version into service.

This is the seam where a canary rollout plugs in: ``eval_and_deploy`` hands a
version that passed the gate to a :class:`Deployer`, which decides whether it
reaches full traffic and returns what it did. The embedded default promotes
directly by moving the registry's ``champion`` alias (the serving side reads
the champion from the registry); a canary deployer shifts traffic in steps
first and may refuse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ctpipe.config import Settings
from ctpipe.errors import PipelineError


@dataclass(frozen=True)
class Rollout:
    version: str
    promoted: bool
    previous_champion: str | None
    detail: str
    steps: list[str] = field(default_factory=list)  # one line per canary step, as the UI lists them (a list: XCom keeps lists, not tuples)
    step_figures: list[dict] = field(default_factory=list)  # each step's figures and checks
    engine: str | None = None  # what served the canary
    mlflow_run_id: str | None = None
    serving: dict = field(default_factory=dict)  # where the proxy and the servers were


class Deployer(Protocol):
    def roll_out(self, version: str) -> Rollout: ...

    def restore(self, version: str | None, reason: str) -> Rollout:
        """Put ``version`` (None: the ``previous-champion``) back in service at full traffic, in one step."""
        ...


def restore_target(registry, version: str | None) -> str:
    """The version a rollback restores, checked to exist; PipelineError naming what is missing."""
    from ctpipe.registry import PREVIOUS

    target = version or registry.alias(PREVIOUS)
    if not target:
        raise PipelineError(f"version is empty and model {registry.name!r} has no {PREVIOUS!r} alias to restore")
    try:
        registry.get(target)
    except LookupError as e:
        raise PipelineError(f"version={target!r}: {e}") from None
    return target


class AliasPromotion:
    """Promote at once: the new version becomes ``champion``; the previous one stays registered for rollback."""

    def __init__(self, settings: Settings):
        self.settings = settings

    def roll_out(self, version: str) -> Rollout:
        from ctpipe.registry import Registry

        previous = Registry(self.settings).set_champion(version)
        return Rollout(
            version=version,
            promoted=True,
            previous_champion=previous,
            detail="champion alias moved (no canary configured)",
        )

    def restore(self, version: str | None, reason: str) -> Rollout:
        from ctpipe.registry import Registry

        registry = Registry(self.settings)
        target = restore_target(registry, version)
        previous = registry.set_champion(target)
        return Rollout(version=target, promoted=True, previous_champion=previous, detail=f"restored: {reason}")


def deployer_for(settings: Settings) -> Deployer:
    if settings.canary.enabled and settings.launcher == "ray_jobs":
        from ctpipe.canary.rollout import LocalCanary

        return LocalCanary(settings)
    # On Kubernetes, serving follows the registry: `ctpipe k8s serving` renders the Deployments and
    # the weighted HTTPRoute of each step for the cluster's own delivery tooling to apply.
    return AliasPromotion(settings)
