"""The materializer bench runs, on a small input, as its figures are taken on a large one: its peer
(DuckDB running the same transform in SQL, the scrubbing patterns ctpipe's own) and its floor, side by
side. Times are the bench's to report, not asserted here."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

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
