"""Sources and dataset versions on Google Cloud Storage, through gcsfs against a local GCS JSON API
server (tests/gcs_server.py: gcp-storage-emulator on loopback).

The endpoint comes from the environment (STORAGE_EMULATOR_HOST, which Google's clients and gcsfs
honour), as credentials would on a cluster: nothing in the code names either. What the emulator
cannot show is GCS's own permissions and consistency.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time

import pytest
import requests

from ctpipe import materialize as mat
from ctpipe import sources
from ctpipe.cli import main
from ctpipe.config import DatasetConfig
from tests.conftest import T0, free_port, trace
from tests.test_materialize import HOUR, lines, run


@pytest.fixture(scope="session")
def gcs_endpoint():
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tests.gcs_server", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                requests.get(f"{url}/storage/v1/b", timeout=1)
                break
            except requests.ConnectionError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"the GCS emulator did not answer on {url}")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture
def gcs(gcs_endpoint, monkeypatch):
    """An empty "traces" and "datasets" bucket, and the environment that points Google's clients at them."""
    import fsspec

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_endpoint)
    # gcsfs otherwise asks the Storage Control gRPC API whether a bucket is hierarchical, which the
    # emulator does not serve: a minute's timeout per bucket, then the plain filesystem anyway.
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    fs = fsspec.filesystem("gs", skip_instance_cache=True)
    for bucket in ("traces", "datasets"):
        if fs.exists(bucket):
            fs.rm(bucket, recursive=True)
        fs.mkdir(bucket)
    return fs


@pytest.mark.parametrize("workers", [1, 2])
def test_a_version_is_built_from_gcs_traces_and_published_to_gcs(gcs, monkeypatch, workers):
    if workers > 1:  # blocks read here, processed and written to GCS by two worker processes
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    hour = "traces/date=2026-11-22/hour=10"
    gcs.pipe(f"{hour}/part-a.jsonl.gz", gzip.compress(lines(trace(1, "What is 101 plus 1?", "102"), b"{cut")))
    gcs.pipe(f"{hour}/part-b.jsonl", lines(*(trace(i, f"What is {i} plus 1?", str(i + 1)) for i in range(2, 40))))
    started = time.monotonic()
    m = run("gs://traces", "gs://datasets", dataset=DatasetConfig(workers=workers))
    assert time.monotonic() - started < 20  # objects moved into place, not retried for half a minute
    assert m.uri == f"gs://datasets/{m.version}"
    assert m.counts["traces_in"] == 40 and m.counts["traces"] == 39 and m.quarantine_reasons == {"invalid_json": 1}
    assert sorted(gcs.ls("datasets", detail=False)) == sorted(["datasets/LATEST", f"datasets/{m.version}", "datasets/_sources"])
    manifest = json.loads(gcs.cat(f"datasets/{m.version}/manifest.json"))
    for entry in manifest["files"].values():  # every listed part is where the manifest says, none left staged
        assert all(gcs.exists(f"datasets/{m.version}/{part}") for part in entry["parts"])
    assert not [p for p in gcs.find("datasets") if "/.tmp-" in p]
    assert m.read("traces").num_rows == 39 and m.read("quarantine")["source_line"].to_pylist() == [2]
    assert gcs.cat("datasets/LATEST").decode().strip() == m.version
    written = gcs.info(f"datasets/{m.version}/manifest.json")["generation"]
    assert run("gs://traces", "gs://datasets", dataset=DatasetConfig(workers=workers)).version == m.version
    assert gcs.info(f"datasets/{m.version}/manifest.json")["generation"] == written  # not written again


def test_the_cli_reads_and_writes_gcs_and_names_a_missing_source(gcs, capsys):
    gcs.pipe("traces/a.jsonl", lines(*(trace(i, f"What is {i} plus 2?", str(i + 2)) for i in range(3))))
    args = ["materialize", "--source", "gs://traces", "--out", "gs://datasets",
            "--start", T0.isoformat(), "--end", (T0 + HOUR).isoformat()]
    assert main(args) == 0
    assert "traces in 3 = 3 rows + 0 quarantined" in capsys.readouterr().out
    with pytest.raises(sources.SourceError, match="source 'gs://traces/nope' does not exist"):
        run("gs://traces/nope", "gs://datasets")
