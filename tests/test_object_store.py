"""Sources and dataset versions on object stores: S3 through s3fs against moto's S3 server, and GCS
through gcsfs against gcp-storage-emulator (tests/gcs_server.py), both on loopback.

Credentials and endpoints come from the environment, as they would on a cluster (AWS_* variables or
a pod's role; STORAGE_EMULATOR_HOST, which Google's clients honour, or a service account): nothing in
the code names them. These servers speak the REST APIs that s3fs and gcsfs speak to the clouds; what
they cannot show is the clouds' own consistency and permissions.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest
import requests

from ctpipe import datasets, evaluation, sources
from ctpipe import materialize as mat
from ctpipe.cli import main
from ctpipe.config import DatasetConfig, Settings
from ctpipe.datasets import Manifest
from ctpipe.errors import PipelineError
from ctpipe.jobspec import load_job
from ctpipe.pipeline import materialize_interval, prepare_training
from tests.conftest import T0, free_port, run_job, trace, training_traces, write_traces
from tests.test_materialize import HOUR, bedrock_logs, lines, run


def _serve(args: list[str], probe: str, port: int):
    """A server started as ``python <args> <port>`` on loopback, once ``probe`` answers: its URL."""
    server = subprocess.Popen([sys.executable, *args, str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                requests.get(url + probe, timeout=1)
                break
            except requests.ConnectionError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"{' '.join(args)} did not answer on {url}")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="session")  # one port for the session: s3fs keeps its filesystems, endpoint and all
def s3_endpoint():
    yield from _serve(["-m", "moto.server", "-H", "127.0.0.1", "-p"], "/", free_port())


@pytest.fixture(scope="session")
def gcs_endpoint():
    yield from _serve(["-m", "tests.gcs_server"], "/storage/v1/b", free_port())


def _empty_buckets(fs) -> None:
    for bucket in ("traces", "datasets"):
        if fs.exists(bucket):
            fs.rm(bucket, recursive=True)
        fs.mkdir(bucket)


@pytest.fixture
def s3(s3_endpoint, monkeypatch):
    """An empty "traces" and "datasets" bucket, and the environment a job on a cluster would have."""
    import fsspec

    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": s3_endpoint}.items():
        monkeypatch.setenv(name, value)
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    _empty_buckets(fs)
    return fs


@pytest.fixture
def gs(gcs_endpoint, monkeypatch):
    """The same on GCS."""
    import fsspec

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_endpoint)
    # gcsfs otherwise asks the Storage Control gRPC API whether a bucket is hierarchical, which the
    # emulator does not serve: a minute's timeout per bucket, then the plain filesystem anyway.
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    fs = fsspec.filesystem("gs", skip_instance_cache=True)
    _empty_buckets(fs)
    return fs


@pytest.fixture(params=["s3", "gs"])
def store(request):
    """(URI scheme, filesystem) of each object store."""
    return request.param, request.getfixturevalue(request.param)


def _written(fs, path: str):
    """What changes when an object is written again: its generation on GCS, its time on S3."""
    info = fs.info(path)
    return info.get("generation") or info["LastModified"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_version_is_built_from_object_store_traces_and_published_there(store, monkeypatch, workers):
    scheme, fs = store
    if workers > 1:  # blocks read here, processed and written to the store by two worker processes
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    hour = "traces/date=2026-11-22/hour=10"
    fs.pipe(f"{hour}/part-a.jsonl.gz", gzip.compress(lines(trace(1, "What is 101 plus 1?", "102"), b"{cut")))
    fs.pipe(f"{hour}/part-b.jsonl", lines(*(trace(i, f"What is {i} plus 1?", str(i + 1)) for i in range(2, 40))))
    fs.pipe(f"{hour}/part-c.json", json.dumps([trace(i, f"What is {i} plus 1?", str(i + 1)) for i in (40, 41)], indent=2).encode())
    firehose = f"{hour}/traces-1-2026-11-22-10-05-00-0f1e2d3c"  # Firehose's names: none, or a bare .gz; read as their bytes say
    fs.pipe(firehose, lines(trace(42, "What is 42 plus 1?", "43")))
    fs.pipe(firehose + ".gz", gzip.compress(b"".join(json.dumps(trace(i, f"What is {i} plus 1?", str(i + 1))).encode()
                                                     for i in (43, 44))))  # and no delimiter between its records
    fs.pipe("traces/date=2026-11-21/hour=10/part-a.jsonl", lines(trace(99, at=T0 - 24 * HOUR)))  # a day the run skips
    listed, files, _ = sources.list_files(f"{scheme}://traces", keep=lambda folder, root: "2026-11-21" not in folder)
    assert list(files) == [f"{hour}/part-a.jsonl.gz", f"{hour}/part-b.jsonl", f"{hour}/part-c.json", firehose, firehose + ".gz"]
    # The filesystem keeps the listings it made (opening an object takes its details from them): the
    # interval's folders, not the other day's, a dict for each object.
    assert sorted(p for p in listed.dircache if p.startswith("traces")) == ["traces", "traces/date=2026-11-22", hour]
    started = time.monotonic()
    m = run(f"{scheme}://traces", f"{scheme}://datasets", dataset=DatasetConfig(workers=workers))
    assert time.monotonic() - started < 20  # parts moved into place, not retried (gcsfs backs off for 30 s)
    assert m.uri == f"{scheme}://datasets/{m.version}"
    assert m.counts["traces_in"] == 45 and m.counts["traces"] == 44 and m.quarantine_reasons == {"invalid_json": 1}
    assert sorted(fs.ls("datasets", detail=False)) == sorted(["datasets/LATEST", f"datasets/{m.version}",
                                                              "datasets/_listed", "datasets/_sources"])
    manifest = json.loads(fs.cat(f"datasets/{m.version}/manifest.json"))
    for entry in manifest["files"].values():  # every listed part is where the manifest says, none left staged
        assert all(fs.exists(f"datasets/{m.version}/{part}") for part in entry["parts"])
    assert not [p for p in fs.find("datasets") if "/.tmp-" in p]
    rows = m.read("traces").to_pylist()
    assert len(rows) == 44 and m.read("quarantine")["source_line"].to_pylist() == [2]
    assert [r["source_line"] for r in rows if r["source_file"].endswith("part-c.json")] == [1, 2]  # its array's elements
    assert fs.cat("datasets/LATEST").decode().strip() == m.version
    written = _written(fs, f"datasets/{m.version}/manifest.json")
    assert run(f"{scheme}://traces", f"{scheme}://datasets", dataset=DatasetConfig(workers=workers)).version == m.version
    assert _written(fs, f"datasets/{m.version}/manifest.json") == written


def test_a_plain_object_is_cut_by_ranged_reads_and_each_block_fetched_where_it_is_loaded(store, monkeypatch):
    """The process that cuts an object reads only a window around each cut; a worker fetches its block
    with its own ranged GET (a pickled block carries the store, not the bytes); the items are those of
    reading the object through; an object written again since it was cut is refused, not mixed."""
    import pickle
    import random

    from tests.test_sources import _export_of, _items

    scheme, fs = store
    monkeypatch.setattr(sources, "BLOCK_BYTES", 1 << 20)
    fs.pipe("traces/big.jsonl", b"".join(b'{"n": %d, "pad": "%s"}\n' % (i, b"x" * (i % 500)) for i in range(20_000)))
    store_fs, files, _ = sources.list_files(f"{scheme}://traces/big.jsonl")
    fetched = []
    cat_ranges = store_fs.cat_ranges

    def counting(*args, **kwargs):  # every read of the cutting process, windows and all
        got = cat_ranges(*args, **kwargs)
        fetched.extend(map(len, got))
        return got

    monkeypatch.setattr(store_fs, "cat_ranges", counting)
    places = list(sources.blocks(store_fs, files))
    assert len(places) > 4 and all(not b.data and b.size for b in places) and sum(fetched) < fs.size(next(iter(files))) / 10
    monkeypatch.setattr(store_fs, "cat_ranges", cat_ranges)
    assert [i.doc["n"] for i in sources.read(f"{scheme}://traces/big.jsonl")] == list(range(20_000))

    # Lines longer than a block, some over the limit, blank ones, OTLP exports of any size (some
    # broken off): as the object read through says.
    monkeypatch.setattr(sources, "MAX_RECORD_BYTES", 3000)
    monkeypatch.setattr(sources, "BLOCK_BYTES", 1024)
    monkeypatch.setattr(sources, "_EXPORT_BYTES", 500)
    monkeypatch.setattr(sources, "_EXPORT_READS", 8192)
    rng = random.Random(0)
    exports = [_export_of([{"spanId": f"{i}.{j}", "name": "z" * rng.randrange(100)} for j in range(rng.randrange(40))])
               for i in range(300)]
    lines = [rng.choice([b"", b'{"n": %d, "pad": "%s"}' % (i, b"x" * rng.randrange(200)), b"y" * rng.randrange(900, 5000),
                         exports[i], exports[i][:rng.randrange(len(exports[i]))]]) for i in range(300)]
    data = b"\n".join(lines) + b"\n"
    fs.pipe("traces/a.jsonl", data)
    store_fs, files, _ = sources.list_files(f"{scheme}://traces/a.jsonl")
    places = list(sources.blocks(store_fs, files))
    got = _items(pickle.loads(pickle.dumps(b)) for b in places)  # as a worker gets them
    assert got == _items(sources._jsonl_blocks(store_fs, *next(iter(files.items()))))
    assert [n for n, reason, *_ in got if reason == "record_too_large"] == [
        i + 1 for i, line in enumerate(lines) if len(line) > 3000 and line.startswith(b"y")]
    spans = [(n, span["spanId"]) for n, _, doc, _ in got if doc and "resourceSpans" in doc
             for span in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]]
    assert [n for n, _ in spans] == sorted(n for n, _ in spans) and len(spans) > 1000
    assert {n for n, _ in spans} >= {i + 1 for i, line in enumerate(lines) if line == exports[i] and b'"spanId"' in line}

    fs.pipe("traces/a.jsonl", data.replace(b'"n"', b'"m"'))  # the same size, written again
    with pytest.raises(sources.SourceError, match="traces/a.jsonl changed while it was read"):
        next(b for b in places if b.size).load()
    fs.rm("traces/a.jsonl")
    with pytest.raises(sources.SourceError, match="traces/a.jsonl could not be read again: FileNotFoundError"):
        next(b for b in places if b.size).load()


def test_an_object_named_plain_that_holds_gzip_is_read_as_gzip(store):
    """Stored with ``Content-Encoding: gzip`` and copied as stored, an object keeps its plain name; past
    what is fetched whole, its first bytes are asked for with the others' (not cut by ranged reads
    as plain text), and it is read as they say."""
    import random

    scheme, fs = store
    rng = random.Random(0)
    lines = b"".join(b'{"n": %d, "pad": "%x"}\n' % (i, rng.getrandbits(256)) for i in range(20_000))
    packed = gzip.compress(lines, mtime=0)
    assert len(packed) > sources._FETCHED
    fs.pipe("traces/big.jsonl", packed)
    head = lines[:lines.index(b"\n", 1000) + 1]
    fs.pipe("traces/small.jsonl", gzip.compress(head, mtime=0))
    got = [(i.file.rsplit("/", 1)[-1], i.reason or i.doc["n"]) for i in sources.read(f"{scheme}://traces")]
    assert got == [("big.jsonl", n) for n in range(20_000)] + [("small.jsonl", n) for n in range(head.count(b"\n"))]


def test_the_cli_reads_and_writes_an_object_store_and_names_a_missing_source(store, capsys):
    scheme, fs = store
    fs.pipe("traces/a.jsonl", lines(*(trace(i, f"What is {i} plus 2?", str(i + 2)) for i in range(3))))
    args = ["materialize", "--source", f"{scheme}://traces", "--out", f"{scheme}://datasets",
            "--start", T0.isoformat(), "--end", (T0 + HOUR).isoformat()]
    assert main(args) == 0
    assert "traces in 3 = 3 rows + 0 quarantined" in capsys.readouterr().out
    with pytest.raises(sources.SourceError, match=f"source '{scheme}://traces/nope' does not exist"):
        run(f"{scheme}://traces/nope", f"{scheme}://datasets")


@pytest.mark.parametrize("workers", [1, 2])
def test_bedrock_logs_are_read_from_s3_with_the_bodies_kept_apart(s3, monkeypatch, workers):
    """Bedrock's invocation logs as its logging delivers them to a bucket: a body over 100 KB is read
    from the object its record names, in the hour's data folder, which is not read as records."""
    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    for path, data in bedrock_logs("s3://traces/bedrock", 3).items():
        s3.pipe(path, data)
    m = run("s3://traces/bedrock", "s3://datasets", dataset=DatasetConfig(workers=workers))
    assert (m.counts["traces"], m.counts["quarantined"], m.source["formats"]) == (3, 0, {"bedrock": 3})
    assert [p for p in m.source["skipped_files"] if p.endswith("/data/")] == \
        ["traces/bedrock/AWSLogs/123456789012/BedrockModelInvocationLogs/us-east-1/2026/11/22/10/data/"]


def test_a_file_added_since_the_last_run_is_read(s3):
    """A scheduler's process runs interval after interval: the object store's listing must be new each time."""
    s3.pipe("traces/date=2026-11-22/hour=10/part-a.jsonl", lines(trace(1, "What is 1 plus 1?", "2")))
    first = run("s3://traces", "s3://datasets", end=T0 + 2 * HOUR)
    s3.pipe("traces/date=2026-11-22/hour=11/part-a.jsonl", lines(trace(2, "What is 2 plus 2?", "4", at=T0 + HOUR)))
    second = run("s3://traces", "s3://datasets", end=T0 + 2 * HOUR)
    assert (first.counts["traces_in"], second.counts["traces_in"]) == (1, 2) and second.version != first.version


def test_training_reads_a_version_from_an_s3_dataset_store(s3, settings, base_model, monkeypatch):
    """With dataset_store on S3, trace_to_dataset publishes there, the train DAG resolves versions there, and
    the TRL job (a subprocess, with only the environment's credentials) reads its table from there."""
    monkeypatch.setenv("CTPIPE_DATASET_STORE", "s3://datasets/versions")
    s = Settings()
    write_traces(s.traces_dir, training_traces())
    published = materialize_interval(s, T0, T0 + HOUR)
    assert published["uri"] == f"s3://datasets/versions/{published['version']}" and not s.datasets_dir.exists()
    job = prepare_training(s, {"algorithm": "dpo", "base_checkpoint": str(base_model), "dataset_version": "",
                               "max_steps": 2, "learning_rate": 1e-3, "seed": 0}, None, "manual__s3")
    assert job["dataset_version"] == published["version"]  # the latest version, found on S3

    spec, progress = run_job(s, base_model, published, "dpo", "s3", steps=2)
    assert progress[-1]["done"] is True and [p["step"] for p in progress if not p.get("done")] == [1, 2]
    manifest = Manifest.load(spec.dataset_uri)  # as the eval gate reads it
    assert len(evaluation.training_prompts(manifest)) == manifest.counts["grpo_prompts"] == 24

    missing = spec.model_copy(update={"dataset_uri": "s3://datasets/versions/nope", "dataset_version": "nope"})
    with pytest.raises(PipelineError, match="dataset version 'nope' does not exist: no manifest at "
                                            "s3://datasets/versions/nope/manifest.json"):
        load_job(missing.write())


def test_a_store_that_refuses_is_named_not_left_to_its_client(s3, monkeypatch, tmp_path):
    """No credentials anywhere: the error says which source or dataset store could not be reached."""
    from s3fs import S3FileSystem

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    for name, value in {"AWS_EC2_METADATA_DISABLED": "true", "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
                        "AWS_CONFIG_FILE": str(tmp_path / "none")}.items():
        monkeypatch.setenv(name, value)
    S3FileSystem.clear_instance_cache()  # a filesystem made earlier keeps the credentials it found
    write_traces(tmp_path / "traces", [trace(1)])
    try:
        with pytest.raises(sources.SourceError, match="source 's3://traces' could not be reached: NoCredentialsError") as e:
            run("s3://traces", tmp_path / "out")
        assert not e.value.retried  # credentials will not come on a retry: the task fails at once
        with pytest.raises(PipelineError, match="dataset store 's3://datasets' could not be reached: NoCredentialsError"):
            run(tmp_path / "traces", "s3://datasets")
    finally:
        S3FileSystem.clear_instance_cache()


def test_a_store_that_does_not_answer_is_retried(tmp_path):
    """A network's failure may pass: the task that reads the source is retried, not failed at once."""
    class Down:
        def info(self, path):
            raise ConnectionError("Connection refused")

    with pytest.raises(sources.SourceError, match="source 's3://traces' could not be reached: ConnectionError") as e:
        sources.reachable(Down(), "traces", "source 's3://traces'", sources.SourceError)
    assert e.value.retried


def test_a_version_is_marked_announced_once_on_an_object_store(store):
    """The mark is a put with If-None-Match: of two runs of one interval that both found none, the
    second learns the first's run, where it wrote over it and both announced."""
    scheme, fs = store
    out = datasets.Output(f"{scheme}://datasets/versions")
    version = "20261122T100000-20261122T110000-0123456789"
    assert out.mark_announced(version, "backfill__1") is None
    assert out.mark_announced(version, "manual__1") == "backfill__1"
    assert out.announced_by(version)[0] == "backfill__1"
    assert out.mark_announced(version, "manual__2", again=True) is None  # over a mark with no event
    assert out.announced_by(version)[0] == "manual__2"


def test_versions_past_their_age_are_pruned_from_an_object_store(store, capsys):
    """``ctpipe prune`` on S3 and GCS: the manifest, the parts and the source pointer of each version
    removed, and one published later of an interval pruned is superseded by age alone; one a training
    run holds kept until it releases it, and a hold past its time removed."""
    scheme, fs = store
    for h in range(3):
        fs.pipe(f"traces/date=2026-11-22/hour={10 + h}/a.jsonl",
                lines(*(trace(i, f"What is {i} plus 2?", str(i + 2), at=T0 + h * HOUR) for i in range(10 * h, 10 * h + 3))))
    made = [run(f"{scheme}://traces", f"{scheme}://datasets/v", T0 + h * HOUR, T0 + (h + 1) * HOUR) for h in range(3)]
    again = run(f"{scheme}://traces", f"{scheme}://datasets/v", dataset=DatasetConfig(dpo_min_margin=0.3))
    for m in [*made, again]:  # published as their hours ended, not just now (those are kept a day)
        body = json.loads(fs.cat(f"datasets/v/{m.version}/manifest.json"))
        fs.pipe(f"datasets/v/{m.version}/manifest.json", json.dumps(body | {"published_at": m.interval[1]}).encode())
    store, now = datasets.Output(f"{scheme}://datasets/v"), datetime.now(timezone.utc)
    store.hold("manual__train1", [made[1].version], now + HOUR)
    store.hold("manual__train0", [made[0].version], now - HOUR)
    assert main(["prune", "--out", f"{scheme}://datasets/v", "--older-than", "1h", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert sorted(done["removed"]) == sorted([made[0].version, again.version])
    assert (done["kept"], done["pointers"], done["failed"], done["held"], done["holds"]) == (2, 2, {}, 1, 1)
    assert [p.rpartition("/")[2] for p in datasets.entries(fs, "datasets/v/_in_use")] == ["manual__train1"]
    store.release("manual__train1")
    assert main(["prune", "--out", f"{scheme}://datasets/v", "--older-than", "1h", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == [made[1].version]
    fs.invalidate_cache()
    assert sorted(p.removeprefix("datasets/v/") for p in fs.find("datasets/v") if "/_" not in p) == \
        sorted(["LATEST", *(f"{made[2].version}/{part}" for part in ["manifest.json", *(
            p for t in made[2].files.values() for p in t["parts"])])])
    assert [fs.cat_file(p).decode().strip() for p in fs.ls("datasets/v/_sources")] == [made[2].version]
