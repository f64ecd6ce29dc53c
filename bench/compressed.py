"""The materializer on compressed sources: the same traces as plain JSONL, gzip and zstd JSONL, and zstd Parquet.

Usage:
    python bench/compressed.py [--traces 1000000] [--dir /tmp/ctpipe-bench-materialize] [--system-bytes 0]

Takes the traces of ``bench/materialize.py`` (writing them first if they are not there yet; with
``--system-bytes 8000``, each with a system prompt of about 8 KB, as many chat logs have: the gzip
copy is then 8 times smaller than the JSON and the Parquet copy 20 times, where a run's first
estimate counts on 10) and writes them again, gzipped (level 1), zstd-compressed (Arrow's default
level, one frame a file) and as zstd Parquet, then materializes each of the four sources in its own
process, one after the other, as ``bench/materialize.py`` does ours.
Parquet holds the well-formed lines only (pyarrow's reader cannot skip a broken one), about 1%
fewer traces. Prints the time, traces/s, CPU seconds and the peak RSS of each process tree, and as
its last line:
    ratio_gzip_vs_plain=<x> ratio_zstd_vs_plain=<y> ratio_parquet_vs_plain=<z> peak_rss_mb=<the largest of the four>
Run it while nothing else loads the machine.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
from pathlib import Path

from materialize import __file__ as materialize_bench
from materialize import arguments, bench_traces, run_child, well_formed


def compressed_copies(src: Path, root: Path) -> dict[str, Path]:
    """``src``'s JSONL files gzipped, zstd-compressed and as Parquet, under ``root`` (each written once)."""
    import pyarrow as pa
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    out = {kind: root / kind / src.name for kind in ("gzip", "zstd", "parquet")}
    for kind, folder in out.items():
        if (folder.parent / "DONE").exists():
            continue
        folder.mkdir(parents=True, exist_ok=True)
        if kind == "parquet":
            with tempfile.TemporaryDirectory() as tmp:
                for path in sorted(well_formed(src, Path(tmp)).glob("*.jsonl")):
                    table = pj.read_json(path, read_options=pj.ReadOptions(block_size=16 << 20))
                    pq.write_table(table, folder / f"{path.stem}.parquet", compression="zstd")
        else:
            for path in sorted(src.glob("*.jsonl")):
                target = folder / (path.name + (".gz" if kind == "gzip" else ".zst"))
                with open(path, "rb") as f, (gzip.open(target, "wb", compresslevel=1) if kind == "gzip"
                                             else pa.CompressedOutputStream(str(target), "zstd")) as g:
                    shutil.copyfileobj(f, g, 1 << 20)
        (folder.parent / "DONE").write_text("")
    return out


def main() -> None:
    args = arguments(__doc__, 1_000_000, "/tmp/ctpipe-bench-materialize", [], system_bytes=0)
    src = bench_traces(args.dir, args.traces, args.system_bytes)
    name = src.parent.name.removeprefix("traces-")
    print("writing the gzip, zstd and Parquet copies (once) ...", flush=True)
    sources = {"plain": src, **compressed_copies(src, args.dir / f"compressed-{name}")}
    results = {}
    for kind, path in sources.items():
        size = sum(f.stat().st_size for f in path.iterdir() if f.name != "DONE")
        results[kind] = r = run_child(materialize_bench, "ctpipe", path, args.dir / f"out-{kind}")
        r["rate"] = r["counts"]["traces_in"] / r["seconds"]
        print(f"{kind:7s} {size / 1e9:5.2f} GB  {r['seconds']:6.1f} s  {r['rate']:8.0f} traces/s  "
              f"{r['cpu_s']:6.1f} CPU s  peak RSS {r['peak_rss_mb']:5.0f} MB  {r['counts']}", flush=True)
    plain = results["plain"]["rate"]
    print(f"ratio_gzip_vs_plain={results['gzip']['rate'] / plain:.2f} "
          f"ratio_zstd_vs_plain={results['zstd']['rate'] / plain:.2f} "
          f"ratio_parquet_vs_plain={results['parquet']['rate'] / plain:.2f} "
          f"peak_rss_mb={max(r['peak_rss_mb'] for r in results.values()):.0f}")


if __name__ == "__main__":
    main()
