"""Shared fixtures: an isolated ctpipe home per test session, and the base model built once."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

# Airflow reads its home at import time: keep tests away from the user's installation.
if "AIRFLOW_HOME" not in os.environ:
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="ctpipe-airflow-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

from ctpipe.config import Settings
from ctpipe.pipeline import materialize_interval
from ctpipe.jobspec import JobSpec, parse_progress
from ctpipe.traces import partition_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listen_port() -> int:
    """A free port below Linux's ephemeral range, for a server bound minutes later (the canary's nginx):
    a port from the ephemeral range may meanwhile go to one of the sockets vLLM opens while it starts."""
    import random

    for port in random.sample(range(20000, 32000), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000..32000")


@pytest.fixture
def settings(tmp_path, monkeypatch) -> Settings:
    monkeypatch.setenv("CTPIPE_HOME", str(tmp_path / "home"))
    return Settings()


# Two things the tests need take minutes to build: the default base model (about six minutes on one
# core) and vLLM's CPU environment (about three). Each is built in a background process from the end
# of collection, if a selected test needs it, while the tests that need neither run first.
_BUILDS = {
    "base_model": "from ctpipe.config import Settings; from ctpipe.tinymodel import ensure_base_model; "
                  "s = Settings(home=sys.argv[1]); print(ensure_base_model(s.base_model, s.task, s.models_dir))",
    "vllm_python": "from pathlib import Path; from ctpipe.canary.servers import ensure_vllm_env; "
                   "from ctpipe.config import ServingConfig; print(ensure_vllm_env(Path(sys.argv[1]), ServingConfig()))",
}


class _Build:
    def __init__(self, name: str, cache: Path):
        self.name, self.out, self.log = name, cache / f"{name}.out", cache / f"{name}.log"
        with self.out.open("w") as out, self.log.open("w") as err:
            self.process = subprocess.Popen([sys.executable, "-c", "import sys; " + _BUILDS[name], str(cache)],
                                            stdout=out, stderr=err)

    def result(self) -> str:
        if self.process.wait() != 0:
            raise RuntimeError(f"building {self.name} exited {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
        return self.out.read_text().strip().splitlines()[-1]


_STARTED: dict[str, _Build] = {}
_TEMPORARY: list[Path] = []  # a cache made for this session only, removed at its end


def _needs(item) -> list[str]:
    return [name for name in _BUILDS if name in getattr(item, "fixturenames", ()) and name in _STARTED]


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected
def pytest_collection_modifyitems(session, config, items):
    wanted = [name for name in _BUILDS if any(name in getattr(item, "fixturenames", ()) for item in items)]
    if os.environ.get("CTPIPE_SERVING__LOCAL_VLLM_PYTHON") and "vllm_python" in wanted:
        wanted.remove("vllm_python")
    if not wanted:
        return
    given = os.environ.get("CTPIPE_TEST_MODEL_CACHE")
    cache = Path(given or tempfile.mkdtemp(prefix="ctpipe-test-builds-"))
    cache.mkdir(parents=True, exist_ok=True)
    if not given:
        _TEMPORARY.append(cache)
    _STARTED.update({name: _Build(name, cache) for name in wanted})
    # Stable: tests keep their order within each group; the vLLM ones, which need both builds, go last.
    items.sort(key=lambda item: len(_needs(item)))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    # Wait here, outside the test's own timeout (pytest-timeout's wrapper runs inside this one).
    for name in _needs(item):
        _STARTED[name].process.wait()
    yield


def pytest_unconfigure(config):
    for build in _STARTED.values():
        if build.process.poll() is None:
            build.process.kill()
            build.process.wait()
    for cache in _TEMPORARY:
        shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture(scope="session")
def base_model() -> Path:
    """The default recipe's base model, from the background build."""
    return Path(_STARTED["base_model"].result())


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """vLLM's own environment's python: CTPIPE_SERVING__LOCAL_VLLM_PYTHON, or the background build."""
    return os.environ.get("CTPIPE_SERVING__LOCAL_VLLM_PYTHON") or _STARTED["vllm_python"].result()


ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc)


def trace(i: int, prompt: str = "What is 2 plus 3?", completion: str = "5", *, at: datetime | None = None, **over) -> dict:
    start = at or T0 + timedelta(seconds=i)
    rec = {
        "trace_id": f"t{i}",
        "start_time": start.isoformat(),
        "end_time": (start + timedelta(milliseconds=40)).isoformat(),
        "model": {"name": "m", "version": "1"},
        "messages": [{"role": "user", "content": prompt}],
        "completion": completion,
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        "feedback": {"thumb": None, "rating": None},
        "latency_ms": 40.0,
    }
    rec.update(over)
    return rec


def damage_row_group(path: Path, group: int) -> None:
    """Flip the bytes of the middle quarter of every column chunk of a Parquet file's row ``group``, so
    that reading the group fails (the chunks compressed, and not dictionary-encoded: a few flipped
    bytes of compressed text may decode as other text)."""
    import pyarrow.parquet as pq

    meta, data = pq.ParquetFile(path).metadata, bytearray(path.read_bytes())
    for column in map(meta.row_group(group).column, range(meta.num_columns)):
        middle, half = column.data_page_offset + column.total_compressed_size // 2, column.total_compressed_size // 8
        data[middle - half:middle + half + 1] = bytes(b ^ 0x5A for b in data[middle - half:middle + half + 1])
    path.write_bytes(bytes(data))


def zstd(data: bytes) -> bytes:
    """``data`` as one zstd frame with a content checksum, as the zstd tool writes it (pyarrow writes none)."""
    import pyarrow as pa
    import xxhash

    frame = bytearray(pa.compress(data, "zstd", asbytes=True))
    frame[4] |= 0x04  # the frame header's Content_Checksum_flag: the low 4 bytes of the content's XXH64 follow
    return bytes(frame) + xxhash.xxh64_intdigest(data).to_bytes(8, "little")[:4]


def fastest(call: Callable[[], object], times: int = 3) -> float:
    """The fewest seconds ``call`` took in ``times`` calls: the timing tests compare how the time grows
    with the input, on a machine whose other loads come and go."""
    best = float("inf")
    for _ in range(times):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def write_traces(root: Path, lines: list, name: str = "part-a.jsonl", at: datetime = T0) -> Path:
    d = partition_dir(root, at)
    d.mkdir(parents=True, exist_ok=True)
    path = d / name
    path.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines))
    return path


@pytest.fixture(scope="session")
def ray_url(tmp_path_factory) -> Iterator[str]:
    """A real local Ray head, stopped when the session ends (another session's head keeps running)."""
    from ctpipe.raycluster import ensure_local_head, stop_local_head

    url = os.environ.get("CTPIPE_TEST_RAY_URL")
    if url:
        yield url
        return
    s = Settings(
        home=tmp_path_factory.mktemp("ray"),
        ray_port=free_port(), ray_dashboard_port=free_port(), ray_agent_port=free_port(),
    )
    try:
        yield ensure_local_head(s)
    finally:
        stop_local_head(s)


def training_traces() -> list[dict]:
    """24 questions of the default task, each answered once rightly (thumb up) and once wrongly (thumb down)."""
    lines = []
    for i in range(24):
        a, b = 3 + 41 * i, 3 + 41 * i + 2 + i % 11
        lines += [
            trace(2 * i, f"Name a number between {a} and {b}.", str(a + 1), feedback={"thumb": "up", "rating": None}),
            trace(2 * i + 1, f"Name a number between {a} and {b}.", str(b), feedback={"thumb": "down", "rating": None}),
        ]
    return lines


@pytest.fixture
def training_dataset(settings):
    """A published dataset of :func:`training_traces`."""
    write_traces(settings.traces_dir, training_traces())
    return materialize_interval(settings, T0, T0 + timedelta(hours=1))


def published_hour(settings: Settings, h: int, n: int) -> dict:
    """The published version of the ``h``-th hour after T0, of the first ``n`` :func:`training_traces`."""
    at = T0 + timedelta(hours=h)
    lines = [trace(100 * h + i, t["messages"][0]["content"], t["completion"], at=at + timedelta(seconds=i),
                   feedback=t["feedback"]) for i, t in enumerate(training_traces()[:n])]
    write_traces(settings.traces_dir, lines, at=at)
    return materialize_interval(settings, at, at + timedelta(hours=1), f"scheduled__{h}")


def job_spec(
    settings: Settings, base_model, dataset, algorithm: str, run: str, steps: int,
    save_steps: int = 50, learning_rate: float = 1e-3,
) -> JobSpec:
    """A small job spec for the tiny model (written to its run directory)."""
    spec = JobSpec(
        algorithm=algorithm, base_checkpoint=str(base_model), base_version="1",
        dataset_uri=dataset["uri"], dataset_version=dataset["version"], run_dir=str(settings.runs_dir / run),
        max_steps=steps, learning_rate=learning_rate, seed=0,
        train=settings.train.model_copy(
            update={"grpo_batch_size": 8, "dpo_batch_size": 8, "grpo_num_generations": 4, "save_steps": save_steps}
        ),
    )
    spec.write()
    return spec


def job_command(spec: JobSpec) -> list[str]:
    return spec.command(sys.executable, ROOT / "jobs")


def run_job(*args, **kwargs):
    """Run jobs/train_trl.py as the Ray job would (a subprocess); the spec and its progress records."""
    spec = job_spec(*args, **kwargs)
    out = subprocess.run(job_command(spec), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return spec, [p for p in map(parse_progress, out.stdout.splitlines()) if p]


_ODD_VALUES = [None, "", "x", "2026-11-22T10:00:00Z", -1, 0, 1.5, 10**30, 1e300, True, [], {}, [1], {"k": 1}, [{"k": 1}]]


def mutated(doc):
    """``doc`` with one value anywhere in it replaced by each of :data:`_ODD_VALUES`, or its key removed."""
    children = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in list(children):
        for odd in _ODD_VALUES:
            yield _replaced(doc, key, odd)
        if isinstance(doc, dict):
            yield {k: v for k, v in doc.items() if k != key}
        for mutant in mutated(value):
            yield _replaced(doc, key, mutant)


def _replaced(doc, key, value):
    copy = dict(doc) if isinstance(doc, dict) else list(doc)
    copy[key] = value
    return copy
