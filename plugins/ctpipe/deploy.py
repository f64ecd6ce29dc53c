"""Putting a registered version into service.

This is the seam where a canary rollout plugs in: ``eval_and_deploy`` hands a
version that passed the gate to a :class:`Deployer`, which decides whether it
reaches full traffic and returns what it did. The embedded default promotes
directly by moving the registry's ``champion`` alias (the serving side reads
the champion from the registry); a canary deployer shifts traffic in steps
first and may refuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ctpipe.config import Settings


@dataclass(frozen=True)
class Rollout:
    version: str
    promoted: bool
    previous_champion: str | None
    detail: str


class Deployer(Protocol):
    def roll_out(self, version: str) -> Rollout: ...


class AliasPromotion:
    """Promote at once: the new version becomes ``champion``; the previous one stays registered for rollback."""

    def __init__(self, settings: Settings):
        self.settings = settings

    def roll_out(self, version: str) -> Rollout:
        from ctpipe.registry import Registry

        registry = Registry(self.settings)
        previous = registry.champion()
        registry.set_champion(version)
        return Rollout(
            version=version,
            promoted=True,
            previous_champion=previous.version if previous else None,
            detail="champion alias moved (no canary configured)",
        )


def deployer_for(settings: Settings) -> Deployer:
    return AliasPromotion(settings)
