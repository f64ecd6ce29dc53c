"""The materializer's benches run, on a small input, as their figures are taken on a large one: the
materializer bench's peer (DuckDB running the same transform in SQL, the scrubbing patterns ctpipe's
own) and its floor side by side, and each source the others compare keeping the same rows. Times are
the benches' to report, not asserted here."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_materializer_bench_runs_its_three_transforms_and_reports_its_ratios(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "materialize.py"), "--traces", "3000", "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    assert re.fullmatch(r"ratio_vs_duckdb=[\d.]+ ratio_vs_floor=[\d.]+ peak_rss_mb=\d+", lines[-1]), lines[-1]
    figures = {line.split()[0]: ast.literal_eval(line[line.index("{"):]) for line in lines if line.startswith(("ctpipe", "duckdb"))}
    # the peer keeps the rows ctpipe keeps: the same transform
    assert figures["duckdb"]["rows"] == figures["ctpipe"]["counts"]["traces"] > 2000


def test_the_formats_bench_materializes_every_format_and_reports_its_ratios(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "formats.py"), "--traces", "1000", "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    last = run.stdout.strip().splitlines()[-1]
    formats = ("openai", "openai-batch", "otel", "otel-batches", "otel-logs", "otel-evaluated", "langfuse", "helicone",
               "bedrock", "vertex")
    assert re.fullmatch(" ".join(rf"ratio_{f}_vs_ctpipe=[\d.]+" for f in formats), last), last


def _bench(tmp_path, script: str, *args: str) -> list[str]:
    run = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args, "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.strip().splitlines()


def _counts(lines: list[str]) -> dict[str, dict]:
    """Each source's counts, by the first word of its line."""
    return {line.split()[0]: ast.literal_eval(line[line.index("{"):]) for line in lines if line.rstrip().endswith("}")}


def test_the_compressed_sources_bench_reads_the_same_traces_plain_gzipped_zstd_and_as_parquet(tmp_path):
    lines = _bench(tmp_path, "compressed.py", "--traces", "2000")
    assert re.fullmatch(r"ratio_gzip_vs_plain=[\d.]+ ratio_zstd_vs_plain=[\d.]+ ratio_parquet_vs_plain=[\d.]+ peak_rss_mb=\d+",
                        lines[-1]), lines[-1]
    counts = _counts(lines)
    assert counts["plain"] == counts["gzip"] == counts["zstd"] and counts["plain"]["traces_in"] == 2000
    # Parquet holds the well-formed lines only: the same rows, fewer quarantined
    assert {k: v for k, v in counts["parquet"].items() if k not in ("traces_in", "quarantined")} \
        == {k: v for k, v in counts["plain"].items() if k not in ("traces_in", "quarantined")}


@pytest.mark.parametrize("parquet", ["0", "1"])
def test_the_small_files_bench_reads_the_same_traces_from_many_files_as_from_one(tmp_path, parquet):
    lines = _bench(tmp_path, "small_files.py", "--traces", "2000", "--per-file", "100", "--parquet", parquet)
    assert re.fullmatch(r"ratio_small_vs_large=[\d.]+ parts_small=\d+ peak_rss_mb=\d+", lines[-1]), lines[-1]
    counts = _counts(lines)
    assert counts["small"]["traces"] == counts["large"]["traces"] > 1500


def test_the_object_store_bench_reads_the_same_traces_from_s3_as_from_a_local_disk(tmp_path):
    lines = _bench(tmp_path, "object_store.py", "--traces", "100", "--latency-ms", "1")
    assert re.fullmatch(r"ratio_plain=[\d.]+ ratio_gzip=[\d.]+ ratio_named=[\d.]+", lines[-1]), lines[-1]
    counts = _counts(lines)
    assert counts.keys() == {"plain", "gzip", "named"} and counts["plain"] == counts["gzip"] == counts["named"]
    assert counts["plain"]["traces_in"] == 100


def test_the_key_sets_bench_measures_its_sets_alone_and_in_two_runs(tmp_path):
    lines = _bench(tmp_path, "key_sets.py", "--alone", "100000", "--filled", "50000", "--traces", "2000")
    assert re.fullmatch(r"alone_peak_rss_mb=\d+ peak_rss_mb=\d+ filled_peak_rss_mb=\d+ filled_time_ratio=[\d.]+", lines[-1]), lines[-1]
