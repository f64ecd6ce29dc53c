"""The materializer on an object store's small objects, each request a round trip away, against the
same files on a local disk.

Usage:
    python bench/object_store.py [--traces 1000] [--latency-ms 20] [--dir /tmp/ctpipe-bench-store]

Serves S3 with moto's server on loopback, each request held ``--latency-ms`` first (a region's
round trip; moto answers in about a millisecond), and writes ``--traces`` of ``bench/materialize.py``'s
traces one to an object three ways: ``.jsonl``, ``.jsonl.gz``, and with Kinesis Firehose's names
(no suffix: read as their first bytes say). Each is materialized from the store and from the same
files on a local disk, each in a process of its own; prints the time, the store's requests and the
counts of each, and as its last line:
    ratio_plain=<store/local time> ratio_gzip=<x> ratio_named=<x>
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from materialize import arguments, bench_traces

KINDS = {"plain": "part-{:06d}.jsonl", "gzip": "part-{:06d}.jsonl.gz",
         "named": "traces-1-2026-11-22-10-00-00-{:06d}"}


def serve(port: int, latency_s: float) -> None:
    """moto's S3 server, each request held ``latency_s`` first; GET /__requests counts them."""
    from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import run_simple

    app, requests = DomainDispatcherApplication(create_backend_app), itertools.count()

    def held(environ, start_response):
        if environ.get("PATH_INFO") == "/__requests":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [str(next(requests)).encode()]
        next(requests)
        time.sleep(latency_s)
        return app(environ, start_response)

    run_simple("127.0.0.1", port, held, threaded=True, request_handler=MotoRequestHandler)


def requests(endpoint: str) -> int:
    import urllib.request

    with urllib.request.urlopen(endpoint + "/__requests") as r:
        return int(r.read())


def write(local: Path, traces: int) -> None:
    """The traces one to a file of each kind under ``local``/<kind>/<hour>, once."""
    if (local / "DONE").exists():
        return
    with open(next(bench_traces(local.parent, traces).glob("*.jsonl")), "rb") as f:
        lines = list(itertools.islice(f, traces))
    for kind, name in KINDS.items():
        hour = local / kind / "date=2026-11-22" / "hour=10"
        hour.mkdir(parents=True, exist_ok=True)
        for i, line in enumerate(lines):
            (hour / name.format(i)).write_bytes(gzip.compress(line, mtime=0) if kind == "gzip" else line)
    (local / "DONE").write_text("")


def run(src: str, out: Path) -> dict:
    """One materialization in a process of its own: its time and counts."""
    subprocess.run(["rm", "-rf", str(out)], check=True)
    code = ("import json, sys, time; from datetime import timedelta; from materialize import T0, settings_for_bench; "
            "from ctpipe.materialize import materialize; task, reward, dataset = settings_for_bench(); "
            "t = time.perf_counter(); m = materialize(sys.argv[1], sys.argv[2], T0, T0 + timedelta(hours=1), "
            "task=task, reward=reward, dataset=dataset); "
            "print('RESULT ' + json.dumps({'seconds': time.perf_counter() - t, 'counts': m.counts}))")
    done = subprocess.run([sys.executable, "-c", code, src, str(out)], capture_output=True, text=True,
                          cwd=Path(__file__).parent)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        sys.exit(f"{src} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(line[7:])


def main() -> None:
    args = arguments(__doc__, 1000, "/tmp/ctpipe-bench-store", [], latency_ms=20, serve=0)
    if args.serve:
        serve(args.serve, args.latency_ms / 1000)
        return
    import fsspec

    local = args.dir / f"objects-{args.traces}"
    write(local, args.traces)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                      AWS_ENDPOINT_URL=endpoint)
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--latency-ms", str(args.latency_ms)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                requests(endpoint)
                break
            except OSError:
                time.sleep(0.1)
        fs = fsspec.filesystem("s3")
        fs.mkdir("traces")
        fs.put(str(local) + "/", "traces/", recursive=True)
        print(f"{args.traces} one-trace objects of each kind, {args.latency_ms} ms a request", flush=True)
        ratios = {}
        for kind in KINDS:
            at = local / kind
            ours = run(str(at), args.dir / "out")
            before = requests(endpoint)
            store = run(f"s3://traces/{kind}", args.dir / "out")
            asked = requests(endpoint) - before - 1
            assert store["counts"] == ours["counts"], (store["counts"], ours["counts"])
            ratios[kind] = store["seconds"] / ours["seconds"]
            print(f"{kind:6s} local {ours['seconds']:6.1f} s  store {store['seconds']:6.1f} s, {asked} requests  "
                  f"{store['counts']}", flush=True)
    finally:
        server.terminate()
        server.wait()
    print(" ".join(f"ratio_{kind}={r:.2f}" for kind, r in ratios.items()))


if __name__ == "__main__":
    main()
