"""The local serving stack: nginx on ``serving.local_port`` in front of one server per served version.

``<home>/serving/state.json`` names the champion's server and the canary's, if any; it is
rewritten whole after every change, so a later task (the next cycle's canary, a manual
rollback) finds the servers the last one left running.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import asdict
from pathlib import Path

from ctpipe.atomic import atomic_write_text
from ctpipe.canary.proxy import Backend, WeightedProxy
from ctpipe.canary.servers import ModelServer, engine_python
from ctpipe.config import Settings

log = logging.getLogger(__name__)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServing:
    def __init__(self, s: Settings):
        self.s = s
        self.dir = s.home / "serving"
        self.proxy = WeightedProxy(self.dir / "proxy", s.serving.local_port)
        self.state_file = self.dir / "state.json"
        self._engine: tuple[str, str, str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.s.serving.local_port}"

    @property
    def engine(self) -> tuple[str, str, str]:
        """(engine, python, why) of new servers, decided once so champion and canary run alike."""
        if self._engine is None:
            self._engine = engine_python(self.s.home, self.s.serving)
        return self._engine

    def _load(self) -> dict[str, ModelServer | None]:
        state = json.loads(self.state_file.read_text()) if self.state_file.exists() else {}
        out: dict[str, ModelServer | None] = {}
        for role in ("champion", "canary"):
            x = state.get(role)
            out[role] = ModelServer(**(x | {"dir": Path(x["dir"]), "checkpoint": Path(x["checkpoint"]),
                                            "cpus": tuple(x.get("cpus", ()))})) if x else None
        return out

    def _save(self, champion: ModelServer | None, canary: ModelServer | None) -> None:
        def row(m: ModelServer | None):
            return None if m is None else asdict(m) | {"dir": str(m.dir), "checkpoint": str(m.checkpoint)}

        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.state_file, json.dumps({"champion": row(champion), "canary": row(canary)}, indent=1))

    def champion(self) -> ModelServer | None:
        return self._load()["champion"]

    def canary(self) -> ModelServer | None:
        return self._load()["canary"]

    def new_server(self, version: str, checkpoint: Path, beside: ModelServer | None = None) -> ModelServer:
        """A server for ``version`` (not started), on the half of the cores that ``beside`` does not use."""
        engine, python, _ = self.engine
        port = _free_port()
        cores = sorted(os.sched_getaffinity(0))
        halves = (tuple(cores[: len(cores) // 2]), tuple(cores[len(cores) // 2:])) if len(cores) > 1 else ((), ())
        cpus = halves[1] if beside is not None and beside.cpus == halves[0] else halves[0]
        return ModelServer(self.dir / "servers" / f"v{version}-{port}", version, Path(checkpoint), port, engine,
                           python, self.s.model_name, cpus)

    def start(self, server: ModelServer) -> ModelServer:
        server.start(self.s.serving)
        return server

    def serve_only(self, server: ModelServer) -> None:
        """All traffic to ``server`` (it must be ready); every other server of ours is stopped."""
        backends = (Backend(server.address, 100),)
        if self.proxy.pid() is None:
            self.proxy.start(backends)
        else:
            self.proxy.set_weights(backends)
        current = self._load()
        self._save(server, None)
        for other in current.values():
            if other is not None and other.dir != server.dir:
                other.stop()

    def split(self, champion: ModelServer, canary: ModelServer, weight: int) -> None:
        self.proxy.set_weights((Backend(champion.address, 100 - weight), Backend(canary.address, weight)))
        self._save(champion, canary)

    def remove_canary(self) -> None:
        """Back to the champion alone. Best effort on each part, so a broken proxy still loses its canary."""
        state = self._load()
        champion, canary = state["champion"], state["canary"]
        try:
            if champion is not None and self.proxy.pid() is not None:
                self.proxy.set_weights((Backend(champion.address, 100),))
        finally:
            self._save(champion, None)
            if canary is not None:
                canary.stop()

    def stop_all(self) -> None:
        self.proxy.stop()
        for server in self._load().values():
            if server is not None:
                server.stop()
