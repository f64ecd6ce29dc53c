"""The materializer on a source of many small files: the same traces in a few large files and in
files of ``--per-file`` traces each.

Usage:
    python bench/small_files.py [--traces 100000] [--per-file 10] [--parquet 0] [--dir /tmp/ctpipe-bench-small]

Writes ``--traces`` of ``bench/materialize.py``'s traces in its files of 100,000 lines, and again
cut into files of ``--per-file`` lines (as a log shipper that writes a file per pod and minute
leaves them, some gzipped: every fourth file), or with ``--parquet 1`` into Parquet files of
``--per-file`` rows (its malformed lines left out), then materializes each source in its own
process, one after the other. Prints the time, traces/s, CPU seconds, peak RSS and the number of
parts of the traces table of each, and as its last line:
    ratio_small_vs_large=<x> parts_small=<n> peak_rss_mb=<the larger of the two>
Run it while nothing else loads the machine.
"""

from __future__ import annotations

import gzip
import itertools
import json
from collections.abc import Iterator
from pathlib import Path

from materialize import __file__ as materialize_bench
from materialize import arguments, bench_traces, run_child


def _lines(src: Path) -> Iterator[bytes]:
    for path in sorted(src.glob("*.jsonl")):
        with open(path, "rb") as f:
            yield from f


def small_copy(src: Path, out: Path, per_file: int, parquet: bool) -> None:
    """``src``'s lines in files of ``per_file`` lines under ``out``, every fourth gzipped, or their
    records in Parquet files of ``per_file`` rows, all of one schema, as one writer leaves them
    (written once)."""
    if (out / "DONE").exists():
        return
    out.mkdir(parents=True, exist_ok=True)
    if parquet:
        _parquet_copy(src, out, per_file)
    else:
        lines = _lines(src)
        for n in itertools.count():
            chunk = b"".join(itertools.islice(lines, per_file))
            if not chunk:
                break
            name = out / f"part-{n:07d}.jsonl"
            if n % 4 == 3:
                name.with_suffix(".jsonl.gz").write_bytes(gzip.compress(chunk, compresslevel=1))
            else:
                name.write_bytes(chunk)
    (out / "DONE").write_text("")


def _parquet_copy(src: Path, out: Path, per_file: int) -> None:
    import msgspec
    import pyarrow as pa
    import pyarrow.parquet as pq

    def records() -> Iterator[dict]:
        for line in _lines(src):
            try:
                yield msgspec.json.decode(line)
            except msgspec.DecodeError:  # a malformed line: no Parquet row holds it
                pass

    rows = records()
    first = list(itertools.islice(rows, 10_000))
    schema = pa.Table.from_pylist(first).schema  # types of every field, nulls or not
    rows = itertools.chain(first, rows)
    for n in itertools.count():
        chunk = list(itertools.islice(rows, per_file))
        if not chunk:
            break
        pq.write_table(pa.Table.from_pylist(chunk, schema=schema), out / f"part-{n:07d}.parquet")


def parts(out: Path) -> int:
    """Parts of the traces table of the version published under ``out``."""
    manifest = next(out.glob("*/manifest.json"))
    return len(json.loads(manifest.read_text())["files"]["traces"]["parts"])


def main() -> None:
    args = arguments(__doc__, 100_000, "/tmp/ctpipe-bench-small", [], per_file=10, parquet=0)
    large = bench_traces(args.dir, args.traces)
    small = args.dir / f"small-{args.traces}-{args.per_file}{'-parquet' if args.parquet else ''}" / "date=2026-11-22"
    small_copy(large, small, args.per_file, bool(args.parquet))
    results = {}
    for kind, path in (("large", large), ("small", small)):
        files = sum(1 for f in path.iterdir() if f.name != "DONE")
        results[kind] = r = run_child(materialize_bench, "ctpipe", path, args.dir / f"out-{kind}")
        r["rate"], r["parts"] = r["counts"]["traces_in"] / r["seconds"], parts(args.dir / f"out-{kind}")
        print(f"{kind:5s} {files:7d} files  {r['seconds']:6.1f} s  {r['rate']:8.0f} traces/s  {r['cpu_s']:6.1f} CPU s  "
              f"peak RSS {r['peak_rss_mb']:5.0f} MB  {r['parts']} parts  {r['counts']}", flush=True)
    print(f"ratio_small_vs_large={results['small']['rate'] / results['large']['rate']:.2f} "
          f"parts_small={results['small']['parts']} "
          f"peak_rss_mb={max(r['peak_rss_mb'] for r in results.values()):.0f}")


if __name__ == "__main__":
    main()
