"""The materializer on real files: every format, every kind of damage, PII, dedup, decontamination, labels, workers."""

from __future__ import annotations

import gzip
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctpipe import materialize as mat
from ctpipe import columns, datasets, sources
from ctpipe.cli import main
from ctpipe.config import DatasetConfig, RewardConfig, TaskConfig
from ctpipe.formats import FormatError
from ctpipe.traces import InvalidTrace, decode
from tests.conftest import T0, damage_row_group, mutated, trace, zstd
from tests.test_formats import BATCH_OUTPUT, BATCH_REQUEST, BEDROCK, HELICONE, OPENAI, VERTEX, kv, otlp

HOUR = timedelta(hours=1)
SECOND = timedelta(seconds=1)
# An OTLP export with the older, flattened GenAI attributes.
_OTEL_FLAT = otlp([kv("gen_ai.request.model", "m"), kv("gen_ai.prompt.0.role", "user"),
                   kv("gen_ai.prompt.0.content", "What is 4 plus 4?"), kv("gen_ai.completion.0.content", "8")])


def run(src, out, start=T0, end=T0 + HOUR, reward=None, dataset=None):
    return mat.materialize(str(src), str(out), start, end, task=TaskConfig(), reward=reward or RewardConfig(),
                           dataset=dataset or DatasetConfig())


def lines(*records) -> bytes:
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in records)


def table(m, name: str) -> list[dict]:
    return m.read(name).to_pylist()


def unordered(m, name: str) -> list[str]:
    """A table's rows, in an order of their own (bucketed pairing may order prompts differently)."""
    return sorted(json.dumps(r, sort_keys=True) for r in table(m, name))


def accounted(m) -> bool:
    c = m.counts
    return c["traces_in"] == c["traces"] + c["quarantined"] == len(table(m, "traces")) + len(table(m, "quarantine"))


def at(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, timezone.utc)


def choices_log(answers: list[str], prompt: str | None = None, **response) -> dict:
    """OPENAI asked for ``len(answers)`` choices (``prompt`` its user message), a choice of each answer,
    ``response``'s fields set."""
    request = {**OPENAI["request"], "n": len(answers)}
    if prompt is not None:
        request["messages"] = [{"role": "user", "content": prompt}]
    return {**OPENAI, "request": request, "response": {**OPENAI["response"], **response, "choices": [
        {"index": k, "message": {"role": "assistant", "content": a}, "finish_reason": "stop"} for k, a in enumerate(answers)]}}


@pytest.mark.parametrize("workers", [1, 2])
def test_files_in_no_known_format_and_files_not_read_are_named(tmp_path, monkeypatch, capsys, workers):
    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    src = tmp_path / "src"
    src.mkdir()
    (src / "export.csv").write_bytes(b"trace_id,prompt,completion\nt1,What is 1 plus 1?,2\n")  # a broken row of ours
    (src / "notes.txt").write_bytes(b"trace_id=t1\n")
    (src / "_SUCCESS").write_bytes(b"")
    (src / ".part-0.jsonl.crc").write_bytes(b"\x00\x01")
    (src / "array.json").write_bytes(lines([trace(9)], {"id": 1}))
    (src / "ours.jsonl").write_bytes(lines(trace(1), {**trace(2), "completion": None}))  # one good, one broken
    (src / "broken.jsonl").write_bytes(lines({k: v for k, v in trace(3).items() if k != "model"}, b"{cut"))
    (src / "mixed.jsonl").write_bytes(lines(trace(4, "What is 4 plus 4?", "8"), {"hello": "world"}))
    (src / "more.ndjson").write_bytes(lines(trace(5, "What is 5 plus 5?", "10")))
    m = run(src, tmp_path / "out", dataset=DatasetConfig(workers=workers))
    assert accounted(m) and m.counts["traces"] == 3 and m.counts["traces_in"] == 10
    # Every line of array.json is in no format at all; the others hold traces, or broken records of ours.
    assert m.source["unrecognized_files"] == {str(src / "array.json"): 2}
    assert m.source["skipped_files"] == {str(src / "notes.txt"): sources.NOT_READ}  # markers and hidden files go unsaid
    assert main(["materialize", "--source", str(src), "--out", str(tmp_path / "out"), "--start", T0.isoformat(),
                 "--end", (T0 + HOUR).isoformat()]) == 0
    out = capsys.readouterr().out
    assert f"{src / 'array.json'}: no trace in a known format, 2 items quarantined" in out
    assert f"{src / 'notes.txt'}: not read: its name ends in none of .jsonl .ndjson" in out
    assert "mixed.jsonl" not in out and "_SUCCESS" not in out


@pytest.mark.parametrize("workers", [1, 2])  # with workers, the joined Langfuse generations are labeled there too
def test_auto_detects_every_format_per_record_and_reports_unknown_ones(tmp_path, monkeypatch, workers):
    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    src = tmp_path / "src"
    src.mkdir()
    (src / "ours.jsonl").write_bytes(lines(trace(1, "What is 103 plus 3?", "106")))
    with gzip.open(src / "openai.jsonl.gz", "wb") as f:
        f.write(lines(OPENAI))
    (src / "otel.jsonl").write_bytes(lines(_OTEL_FLAT))
    pq.write_table(pa.Table.from_pylist([
        {"id": "obs-1", "traceId": "lf-1", "type": "GENERATION", "startTime": "2026-11-22T09:33:20Z",
         "endTime": "2026-11-22T09:33:21Z", "model": "m", "input": [{"role": "user", "content": "What is 6 plus 1?"}],
         "output": {"role": "assistant", "content": "7"}},
    ]), src / "langfuse-observations.parquet")
    (src / "langfuse-scores.jsonl").write_bytes(lines(
        {"id": "s-1", "traceId": "lf-1", "observationId": "obs-1", "name": "judge", "value": 0.5,
         "dataType": "NUMERIC", "source": "EVAL"}))
    (src / "other.jsonl").write_bytes(lines({"hello": "world"}))
    created = OPENAI["response"]["created"]
    m = run(src, tmp_path / "out", at(created) - HOUR, T0 + HOUR,
            reward=RewardConfig(judge_weight=1.0, verifiable_weight=0.0, feedback_weight=0.0),
            dataset=DatasetConfig(workers=workers))
    assert m.source["formats"] == {"ctpipe": 1, "langfuse": 2, "openai": 1, "otel": 1}
    assert accounted(m) and m.quarantine_reasons == {"unknown_format": 1}
    (q,) = table(m, "quarantine")
    assert q["source_file"].endswith("other.jsonl") and "hello" in q["detail"]
    assert m.source["unrecognized_files"] == {str(src / "other.jsonl"): 1}
    rows = {r["trace_id"]: r for r in table(m, "traces")}
    assert rows["lf-1:obs-1"]["judge_reward"] == 0.5 and rows["lf-1:obs-1"]["final_reward"] == 0.5
    assert rows["chatcmpl-1"]["completion"] == "5" and rows["chatcmpl-1"]["source_file"].endswith("openai.jsonl.gz")


def test_a_block_of_mixed_formats_reads_the_same_whichever_begins_it():
    """A block that begins with an OTLP export tries that fast path first; every line is still
    taken by the path of its own format."""
    ours, openai, otel = (json.dumps(doc).encode() for doc in (trace(1), OPENAI, _OTEL_FLAT))
    read = {}
    for first in ("otel", "ours"):
        block = [otel, ours, openai, otel] if first == "otel" else [ours, otel, openai, otel]
        formats: Counter = Counter()
        table, at = mat._fast(b"\n".join(block), block, "auto", formats)
        assert at.tolist() == [0, 1, 2, 3] and formats == {"ctpipe": 1, "openai": 1, "otel": 2}, first
        kinds = ["otel" if line == otel else "ours" if line == ours else "openai" for line in block]
        read[first] = sorted(zip(kinds, table["trace_id"].to_pylist()))
    assert read["otel"] == read["ours"]


def test_a_line_without_a_trace_id_key_skips_our_typed_decoding_and_keeps_its_reason():
    ours_unnamed = {k: v for k, v in trace(1).items() if k != "trace_id"}  # ours, with a field missing
    for line, reason in {b"[1, 2]": "not_an_object", b'"text"': "not_an_object", b"{cut": "invalid_json",
                         b'{"a": NaN}': "non_finite_number", b'{"a": "\xff"}': "invalid_utf8",
                         json.dumps(ours_unnamed).encode(): "missing_field", b'{"hello": 1}': "unknown_format"}.items():
        with pytest.raises((InvalidTrace, FormatError)) as e:
            mat._decode(line, "auto")
        assert e.value.reason == reason, line
        assert reason != "missing_field" or "trace_id" in str(e.value)
    escaped = json.dumps(trace(2)).replace('"trace_id"', '"trace\\u005fid"').encode()  # ours all the same
    assert mat._decode(escaped, "auto") == ("ctpipe", [decode(json.dumps(trace(2)))])
    assert mat._decode(json.dumps(OPENAI).encode(), "auto")[0] == "openai"


def test_bad_input_is_quarantined_with_its_place_and_no_valid_record_is_lost(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "BLOCK_BYTES", 4096)  # many blocks, so a record never depends on its block
    src = tmp_path / "src"
    src.mkdir()
    good = [trace(i, f"Compute {i} + 1", str(i + 1)) for i in range(1, 60)]
    damaged = [
        b'{"trace_id": "utf", "completion": "\xff\xfe"}',
        json.dumps(trace(100, latency_ms=float("nan"))).encode(),
        json.dumps(trace(101, feedback={"thumb": None, "rating": float("inf")})).encode(),
        trace(102, usage={"prompt_tokens": "ten", "completion_tokens": 1, "total_tokens": 11}),
        trace(103, completion="different", prompt="Compute 1 + 1") | {"trace_id": "t1"},  # id reused, other content
        json.dumps(trace(104, completion="x" * 50_000_000)).encode(),  # a 50 MB record
        trace(105, start_time="yesterday"),
        b"[1, 2, 3]",
        # The schema changes mid-file: another writer's field names and types from here on.
        {"id": "t106", "ts": 1795340000, "prompt": "What is 2 plus 2?", "answer": 4},
    ]
    body = lines(*good[:30], *damaged, *good[30:])
    (src / "a.jsonl").write_bytes(body)
    (src / "empty.jsonl").write_bytes(b"")
    cut = gzip.compress(lines(*(trace(200 + i, f"Compute {i} + 2", str(i + 2)) for i in range(300))))
    (src / "b.jsonl.gz").write_bytes(cut[: len(cut) * 2 // 3])
    pq.write_table(pa.Table.from_pylist([trace(400 + i, f"Compute {i} + 3", str(i + 3)) for i in range(200)]),
                   src / "c.parquet", row_group_size=50, compression="zstd", use_dictionary=False)
    damage_row_group(src / "c.parquet", 2)  # the third
    m = run(src, tmp_path / "out")
    assert accounted(m)
    assert m.quarantine_reasons == {
        "duplicate_trace_id": 1, "invalid_field": 2, "invalid_utf8": 1, "non_finite_number": 2, "not_an_object": 1,
        "record_too_large": 1, "truncated_gzip": 1, "unknown_format": 1, "unreadable_parquet": 1,
    }
    parquet_rows = sorted(r["source_line"] for r in table(m, "traces") if r["source_file"].endswith(".parquet"))
    assert parquet_rows == [*range(1, 101), *range(151, 201)]  # the other row groups, read
    ids = {r["trace_id"] for r in table(m, "traces")}
    assert {f"t{i}" for i in range(1, 60)} <= ids  # every valid record of the damaged file is kept
    gz_rows = sorted(r["source_line"] for r in table(m, "traces") if r["source_file"].endswith(".gz"))
    assert gz_rows == list(range(1, len(gz_rows) + 1)) and len(gz_rows) > 100
    q = {r["reason"]: r for r in table(m, "quarantine")}
    assert q["truncated_gzip"]["source_line"] == len(gz_rows) + 1
    assert q["record_too_large"]["source_line"] == 36 and len(q["record_too_large"]["raw"]) <= 200
    assert "usage.prompt_tokens" in q["invalid_field"]["detail"] or "start_time" in q["invalid_field"]["detail"]
    assert q["unknown_format"]["source_line"] == 39
    assert q["unreadable_parquet"]["source_line"] == 101 and "row group 2 (50 of its 50" in q["unreadable_parquet"]["detail"]


def test_a_parquet_value_python_cannot_hold_is_quarantined_naming_its_column(tmp_path):
    """Parquet holds timestamps past the year 9999 and before the year 1, which no datetime holds:
    such a row is quarantined, and the run and the other rows of its batch go on."""
    src = tmp_path / "src"
    src.mkdir()
    rows = pa.Table.from_pylist([trace(i, f"What is {i} plus 1?", str(i + 1)) for i in range(1, 5)])
    micros = [int(datetime.fromisoformat(t).timestamp()) * 10**6 for t in rows["start_time"].to_pylist()]
    micros[1:3] = [300_000_000_000_000_000, -70_000_000_000_000_000]
    rows = rows.set_column(1, "start_time", pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC")))
    pq.write_table(rows, src / "a.parquet")
    m = run(src, tmp_path / "out")
    assert accounted(m) and m.counts["traces"] == 2 and m.quarantine_reasons == {"invalid_field": 2}
    q = table(m, "quarantine")
    assert [r["source_line"] for r in q] == [2, 3] and all(r["detail"].startswith("`start_time`: ") for r in q)
    assert '"start_time": "11476-08-15' in q[0]["raw"] and '"trace_id": "t2"' in q[0]["raw"]


@pytest.mark.parametrize("dictionary", [False, True])
def test_a_parquet_row_of_bytes_that_are_not_utf8_is_quarantined_naming_its_column(tmp_path, dictionary):
    """Parquet's reader does not check that strings are UTF-8: such a row ended the run where its text
    became Python's, naming no file, row or column. A dictionary column's rows share its values."""
    src = tmp_path / "src"
    src.mkdir()
    rows = pa.Table.from_pylist([trace(i, f"What is {i} plus 1?", str(i + 1)) for i in range(1, 6)])
    completions = pa.array([b"2", b"3\xff", b"4", b"5", b"6"]).view(pa.string())
    rows = rows.set_column(rows.schema.get_field_index("completion"), "completion",
                           completions.dictionary_encode() if dictionary else completions)
    messages = rows["messages"].combine_chunks()
    contents = pa.array([b"What is 1 plus 1?", b"What is 2 plus 1?", b"What is \xfe plus 1?", b"What is 4 plus 1?",
                         b"What is 5 plus 1?"]).view(pa.string())
    messages = pa.ListArray.from_arrays(messages.offsets, pa.StructArray.from_arrays(
        [messages.values.field("role"), contents], names=["role", "content"]))
    pq.write_table(rows.set_column(rows.schema.get_field_index("messages"), "messages", messages), src / "a.parquet")
    m = run(src, tmp_path / "out")
    assert accounted(m) and m.counts["traces"] == 3 and m.quarantine_reasons == {"invalid_utf8": 2}
    q = table(m, "quarantine")
    assert [(r["source_line"], r["detail"]) for r in q] == [(2, "completion: not UTF-8 text"), (3, "messages: not UTF-8 text")]
    assert '"trace_id": "t2"' in q[0]["raw"] and '"completion": "3\ufffd"' in q[0]["raw"]
    assert sorted(r["completion"] for r in table(m, "traces")) == ["2", "5", "6"]


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz"])
def test_records_after_a_byte_order_mark_are_read_as_any_other(tmp_path, name):
    bom = b"\xef\xbb\xbf"
    src = tmp_path / "src"
    src.mkdir()
    created = OPENAI["response"]["created"]
    data = (bom + lines(trace(1, "What is 1 plus 1?", "2", at=at(created)), trace(2, "What is 7 plus 1?", "8", at=at(created)))
            + bom + lines(OPENAI))
    (src / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    m = run(src, tmp_path / "out", at(created), at(created) + HOUR)
    assert accounted(m) and m.counts["traces"] == 3 and not m.quarantine_reasons
    assert [r["source_line"] for r in table(m, "traces")] == [1, 2, 3]
    assert table(m, "traces")[0]["prompt"] == "What is 1 plus 1?"


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz"])
def test_a_files_broken_last_line_takes_the_interval_of_the_record_before_it(tmp_path, monkeypatch, name):
    """However the file is cut (in place, or read through as a gzip stream is), its last line stays in
    a block with the lines before it: a crashed writer's half record counts in the interval its file
    was being written in, not in the day's first hour that a date-only partition would give it."""
    monkeypatch.setattr(sources, "BLOCK_BYTES", 2048)
    folder = tmp_path / "src" / "date=2026-11-22"
    folder.mkdir(parents=True)
    data = lines(*(trace(i, f"What is {i} plus 1?", str(i + 1)) for i in range(1, 40))) + b'{"trace_id": "t40", "sta'
    (folder / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    m = run(tmp_path / "src", tmp_path / "out")
    assert m.counts["traces_in"] == 40 and m.quarantine_reasons == {"invalid_json": 1}
    assert table(m, "quarantine")[0]["source_line"] == 40


@pytest.mark.parametrize("workers", [1, 2])
def test_an_interval_with_no_trace_says_what_was_read(tmp_path, monkeypatch, capsys, settings, workers):
    """Records all of other times (an interval typed in local time, a day's folder of the day before)
    gave "no traces" and no why: the files read, the records' formats and times, the files not read."""
    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    src = tmp_path / "src"
    src.mkdir()
    (src / "ours.jsonl").write_bytes(lines(*(trace(i, at=T0 + 5 * HOUR + timedelta(seconds=i)) for i in range(3))))
    (src / "openai.jsonl").write_bytes(lines(OPENAI))  # created 09:33:20
    (src / "notes.txt").write_text("not traces")
    m = run(src, tmp_path / "out", dataset=DatasetConfig(workers=workers))
    assert isinstance(m, mat.NoTraces) and not list((tmp_path / "out").rglob("manifest.json"))
    why = [f"no trace started in [{T0.isoformat()}, {(T0 + HOUR).isoformat()}) in {src}: 2 files read, 1 not read",
           "4 records of other times read (ctpipe, openai), started from 2026-11-22T09:33:20+00:00 to "
           "2026-11-22T15:00:02+00:00"]
    assert m.lines(DatasetConfig())[:2] == why and m.lines(DatasetConfig())[2].startswith(f"{src}/notes.txt: not read: ")

    args = ["materialize", "--source", str(src), "--out", str(tmp_path / "cli"), "--start", T0.isoformat(),
            "--end", (T0 + HOUR).isoformat()]
    assert main(args) == 0 and capsys.readouterr().out.startswith("\n  ".join(why))
    assert main(args + ["--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["version"] is None and said["outside_interval"] == 4 and said["files"] == 2
    assert said["formats"] == {"ctpipe": 3, "openai": 1} and list(said["skipped_files"]) == [f"{src}/notes.txt"]

    from ctpipe.errors import NothingToPublish
    from ctpipe.pipeline import materialize_interval

    with pytest.raises(NothingToPublish, match=r"2 files read, 1 not read; 4 records of other times"):
        materialize_interval(settings.model_copy(update={"trace_source": str(src)}), T0, T0 + HOUR)


@pytest.mark.parametrize("workers", [1, 2])
def test_helicones_exports_are_read_as_jsonl_and_as_a_json_array(tmp_path, monkeypatch, workers):
    """@helicone/export writes JSONL, or with --format json an array of pretty-printed requests; the
    requests of a line-by-line OpenAI log beside them take that log's fast path, Helicone's the reader."""
    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    src = tmp_path / "src"
    src.mkdir()

    def request(i: int, **change) -> dict:
        body = {**OPENAI["request"], "messages": [{"role": "user", "content": f"What is {i} plus 3?"}]}
        answer = {**OPENAI["response"]["choices"][0], "message": {"role": "assistant", "content": str(i + 3)}}
        return {**HELICONE, "request_id": f"req-{i}", "request_created_at": f"2026-11-22 10:{i:02d}:00.250",
                "request_body": body, "response_body": {**OPENAI["response"], "choices": [answer]}, **change}

    (src / "export.jsonl").write_bytes(lines(*(request(i) for i in range(6)), request(6, response_status=500),
                                             request(7, request_body={"helicone_message": "fetching body from signed_url..."}),
                                             OPENAI))
    # As the tool writes it without --limit: a comma after every record, the last too.
    (src / "export.json").write_text("[\n" + "".join(json.dumps(request(i), indent=2) + ",\n" for i in range(10, 13)) + "]\n")
    m = run(src, tmp_path / "out", dataset=DatasetConfig(workers=workers))
    assert accounted(m) and m.source["formats"] == {"helicone": 9, "openai": 1}  # OPENAI created at 09:33: outside
    assert m.quarantine_reasons == {"failed_request": 1, "no_content": 1} and m.counts["outside_interval"] == 1
    rows = {r["trace_id"]: r for r in table(m, "traces")}
    assert sorted(rows) == sorted(f"req-{i}" for i in (*range(6), *range(10, 13)))
    assert rows["req-12"]["start_time"] == datetime(2026, 11, 22, 10, 12, 0, 250000, tzinfo=timezone.utc)
    assert rows["req-12"]["source_file"] == str(src / "export.json") and rows["req-3"]["completion"] == "6"
    assert rows["req-3"]["feedback_thumb"] == "up" and rows["req-3"]["latency_ms"] == 1250.0


def bedrock_logs(root, calls: int, written_at=None) -> dict:
    """Amazon Bedrock's invocation logs of ``calls`` calls in its layout under ``root`` (a path or a
    URI), gzipped JSON Lines in the hour's folder; the first call's question kept apart in the hour's
    data folder, as a body over 100 KB is. The files to write, by path. ``written_at``: where Bedrock
    wrote them, as the records name it, of which ``root`` holds a copy."""
    hour = "AWSLogs/123456789012/BedrockModelInvocationLogs/us-east-1/2026/11/22/10"
    kept = f"{written_at or root}/{hour}/data/req-0_input.json.gz"
    hour = f"{root}/{hour}"

    def call(i: int) -> dict:
        body = {**BEDROCK["input"]["inputBodyJson"], "messages": [{"role": "user", "content": [{"text": f"What is {i} plus 3?"}]}]}
        answer = {**BEDROCK["output"]["outputBodyJson"],
                  "output": {"message": {"role": "assistant", "content": [{"text": str(i + 3)}]}}}
        given = {"inputTokenCount": 16, "inputBodyS3Path": kept} if i == 0 else {"inputTokenCount": 16, "inputBodyJson": body}
        return {**BEDROCK, "requestId": f"req-{i}", "timestamp": f"2026-11-22T10:{i:02d}:00Z", "input": given,
                "output": {**BEDROCK["output"], "outputBodyJson": answer}}, body

    records, bodies = zip(*(call(i) for i in range(calls)))
    return {f"{hour}/20261122T100100123Z_9b86bf4994c4ab1c.json.gz": gzip.compress(lines(*records)),
            f"{hour}/data/req-0_input.json.gz": gzip.compress(json.dumps(bodies[0]).encode()),
            f"{root}/AWSLogs/123456789012/BedrockModelInvocationLogs/amazon-bedrock-logs-permission-check": b""}


@pytest.mark.parametrize("workers", [1, 2])
def test_bedrock_and_vertex_ai_logs_are_read_in_their_own_layouts(tmp_path, monkeypatch, workers):
    """Bedrock's log files, hour by hour, with the bodies it keeps apart read with their records; a
    BigQuery export of Vertex AI's logging table (newline-delimited JSON: its JSON columns as text)."""
    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    src = tmp_path / "src"
    for path, data in bedrock_logs(src, 4).items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    rows = [{**VERTEX, "request_id": str(7000 + i), "logging_time": f"2026-11-22 10:{i:02d}:03.284 UTC",
             "full_response": json.dumps(VERTEX["full_response"]), "full_request": json.dumps(
                 {**VERTEX["full_request"], "contents": [{"role": "user", "parts": [{"text": f"What is {i} plus 5?"}]}]})}
            for i in range(3)]
    (src / "vertex").mkdir()
    (src / "vertex" / "000000000000.json").write_bytes(lines(*rows, {**VERTEX, "full_response": {"error": {"message": "quota"}}}))
    m = run(src, tmp_path / "out", dataset=DatasetConfig(workers=workers))
    assert accounted(m) and m.source["formats"] == {"bedrock": 4, "vertex": 3}
    assert m.quarantine_reasons == {"failed_request": 1}
    found = {r["trace_id"]: r for r in table(m, "traces")}
    assert sorted(found) == ["7000", "7001", "7002", "req-0", "req-1", "req-2", "req-3"]
    assert found["req-0"]["prompt"].endswith("What is 0 plus 3?") and found["req-0"]["completion"] == "3"
    assert found["7001"]["start_time"] == datetime(2026, 11, 22, 10, 1, 2, 34000, tzinfo=timezone.utc)
    # BigQuery's export to Parquet: JSON columns as text, the time a timestamp, the NUMERIC id a decimal.
    from decimal import Decimal

    exported = pa.table({
        "request_id": pa.array([Decimal(f"{8000 + i}.000000000") for i in range(2)], pa.decimal128(38, 9)),
        "logging_time": pa.array([datetime(2026, 11, 22, 10, 30 + i, 3, 284000, tzinfo=timezone.utc) for i in range(2)],
                                 pa.timestamp("us", tz="UTC")),
        "model": ["publishers/google/models/gemini-2.5-flash"] * 2, "api_method": ["GenerateContent"] * 2,
        "full_request": [json.dumps({**VERTEX["full_request"], "contents": [{"role": "user", "parts": [{"text": f"What is {i} plus 7?"}]}]})
                         for i in range(2)], "full_response": [json.dumps(VERTEX["full_response"])] * 2,
        "metadata": [json.dumps(VERTEX["metadata"])] * 2})
    pq.write_table(exported, src / "vertex" / "000000000001.parquet")
    m = run(src, tmp_path / "parquet", dataset=DatasetConfig(workers=workers))
    assert accounted(m) and m.source["formats"] == {"bedrock": 4, "vertex": 5}
    whole = m
    found = {r["trace_id"]: r for r in table(m, "traces")}
    assert found["8001"]["end_time"] == datetime(2026, 11, 22, 10, 31, 3, 284000, tzinfo=timezone.utc)
    hour = f"{src}/AWSLogs/123456789012/BedrockModelInvocationLogs/us-east-1/2026/11/22/10"
    assert m.source["skipped_files"] == {
        f"{src}/AWSLogs/123456789012/BedrockModelInvocationLogs/amazon-bedrock-logs-permission-check": sources.NOT_READ,
        f"{hour}/data/": sources._BEDROCK_BODIES_NOT_READ}
    # A copy of the logs, in another place than the one the records name: the body is read from the copy.
    for path, data in bedrock_logs(tmp_path / "copy", 4, written_at="s3://bedrock-logs-123456789012").items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    m = run(tmp_path / "copy", tmp_path / "from-copy", dataset=DatasetConfig(workers=workers))
    assert (m.counts["traces"], m.counts["quarantined"]) == (4, 0)
    os.remove(f"{hour}/data/req-0_input.json.gz")  # a body kept apart that is gone: its record says where it was
    m = run(src, tmp_path / "again", dataset=DatasetConfig(workers=workers))
    (gone,) = [q for q in table(m, "quarantine") if q["reason"] == "no_content"]
    assert f"input.inputBodyS3Path={hour}/data/req-0_input.json.gz cannot be read: FileNotFoundError" in gone["detail"]
    # The body lands after its record (a copy job's order): the run of the same store builds again,
    # and the version is the one of the records with their body, not the one that lacked it.
    with open(f"{hour}/data/req-0_input.json.gz", "wb") as f:
        f.write(bedrock_logs(src, 4)[f"{hour}/data/req-0_input.json.gz"])
    landed = run(src, tmp_path / "again", dataset=DatasetConfig(workers=workers))
    assert landed.version == whole.version != m.version and landed.counts == whole.counts
    with open(f"{hour}/data/req-0_input.json.gz", "wb") as f:  # another body under the same name: another version
        f.write(gzip.compress(json.dumps({**BEDROCK["input"]["inputBodyJson"], "messages": [
            {"role": "user", "content": [{"text": "What is 9 plus 3?"}]}]}).encode()))
    assert run(src, tmp_path / "again", dataset=DatasetConfig(workers=workers)).version not in (whole.version, m.version)


@pytest.mark.parametrize("workers", [1, 2])
def test_log_events_of_a_cloudwatch_subscription_are_read_as_their_messages(tmp_path, monkeypatch, workers):
    """A log group's events as its subscription sends them through Firehose to S3: records of many
    events each, gzipped apiece, one after another in an object Firehose names without a suffix."""
    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    src = tmp_path / "firehose" / "2026" / "11" / "22" / "10"
    src.mkdir(parents=True)

    def envelope(*messages, kind="DATA_MESSAGE"):
        return json.dumps({"owner": "123456789012", "logGroup": "bedrock-invocations", "logStream": "aws/bedrock/modelinvocations",
                           "subscriptionFilters": ["to-s3"], "messageType": kind, "logEvents": [
                               {"id": f"3719{i:04d}", "timestamp": 1795342502000 + i, "message": m}
                               for i, m in enumerate(messages)]}).encode()

    calls = [json.dumps({**BEDROCK, "requestId": f"req-{i}", "output": {**BEDROCK["output"], "outputBodyJson": {
        **BEDROCK["output"]["outputBodyJson"], "output": {"message": {"role": "assistant", "content": [{"text": str(i)}]}}}}})
        for i in range(4)]
    control = envelope("CWL CONTROL MESSAGE: Checking health of destination Firehose.", kind="CONTROL_MESSAGE")
    (src / "invocations-1-2026-11-22-10-05-00-0f1e2d3c").write_bytes(
        gzip.compress(control) + gzip.compress(envelope(*calls[:2])) + gzip.compress(envelope(calls[2], "not json", calls[3])))
    m = run(tmp_path / "firehose", tmp_path / "out", dataset=DatasetConfig(workers=workers))
    assert accounted(m) and m.source["formats"] == {"bedrock": 4}
    (bad,) = table(m, "quarantine")
    assert bad["reason"] == "invalid_json" and json.loads(bad["raw"])["message"] == "not json"
    assert sorted(r["trace_id"] for r in table(m, "traces")) == ["req-0", "req-1", "req-2", "req-3"]
    # A batch's lines logged as events join as the lines they are, not as the records that hold them.
    answered = {**BATCH_OUTPUT, "response": {**BATCH_OUTPUT["response"], "body": {**OPENAI["response"], "created": 1795342502}}}
    (src / "batch-1-2026-11-22-10-06-00-1a2b3c4d").write_bytes(
        gzip.compress(envelope(json.dumps(BATCH_REQUEST))) + gzip.compress(envelope(json.dumps(answered))))
    m = run(tmp_path / "firehose", tmp_path / "again", dataset=DatasetConfig(workers=workers))
    assert accounted(m) and m.counts["traces"] == 5 and m.source["formats"] == {"bedrock": 4, "openai": 2}


def test_an_interval_with_no_trace_names_some_of_thousands_of_files_not_read(tmp_path):
    """The reason is a skip's, which Airflow keeps as an XCom and the run's tab shows: 3,000 files not
    read made it 879 KB."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(30):
        (src / f"blob-{i:02d}").write_bytes(b"\x00\x01binary")
    m = run(src, tmp_path / "out")
    said = m.lines(DatasetConfig())
    assert said[0].endswith(f"in {src}: 0 files read, 30 not read") and len(said) == 1 + mat._SAID_FILES + 1
    assert said[-1] == "and 10 more files not read (ctpipe materialize --json lists them all)"
    assert len(m.skipped_files) == 30


def test_thousands_of_files_in_no_format_are_counted_and_some_named_in_the_log_and_the_summary(tmp_path, capsys, caplog):
    """60,000 files of one unreadable line each made a log line of 4 MB, and a line each in the
    command's summary; the manifest names them all."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(30):
        (src / f"bad-{i:02d}.jsonl").write_bytes(b"oops\n")
    (src / "good.jsonl").write_bytes(lines(trace(1)))
    with caplog.at_level(logging.WARNING, logger="ctpipe.materialize"):
        assert main(["materialize", "--source", str(src), "--out", str(tmp_path / "out"), "--start", T0.isoformat(),
                     "--end", (T0 + HOUR).isoformat()]) == 0
    out = capsys.readouterr().out
    assert out.count("no trace in a known format, 1 items quarantined") == 20
    assert "  and 10 more files so (--json lists them all)\n" in out
    [said] = [r.getMessage() for r in caplog.records if "with no trace in" in r.getMessage()]
    assert said.startswith("30 files with no trace in any known format") and said.count("(1 items)") == 20
    assert said.endswith("and 10 more files so (the manifest names them all)")
    manifest = datasets.Output(tmp_path / "out").resolve(None)
    assert len(manifest.source["unrecognized_files"]) == 30 and manifest.counts["traces"] == 1


def test_a_missing_source_is_named_and_an_empty_one_publishes_nothing(tmp_path, capsys):
    with pytest.raises(sources.SourceError, match="does not exist"):
        run(tmp_path / "nope", tmp_path / "out")
    (tmp_path / "empty.jsonl").write_text("")
    empty = run(tmp_path / "empty.jsonl", tmp_path / "out")
    assert isinstance(empty, mat.NoTraces) and empty.files == 1 and empty.outside_interval == 0
    assert empty.lines(DatasetConfig()) == [f"no trace started in [{T0.isoformat()}, {(T0 + HOUR).isoformat()}) in "
                                           f"{tmp_path / 'empty.jsonl'}: 1 file read"]
    assert not list((tmp_path / "out").rglob("manifest.json"))
    assert main(["materialize", "--source", str(tmp_path / "nope"), "--start", T0.isoformat(),
                 "--end", (T0 + HOUR).isoformat()]) == 1
    assert "nope' does not exist" in capsys.readouterr().err


def test_pii_is_scrubbed_everywhere_and_counted(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(lines(
        trace(1, "Mail me at ann@example.com: what is 2 plus 3?", "5, call +1 415-555-0100"),
        trace(2, "Pay with 4111 1111 1111 1111 for order 123-456", "ok sk-abc123defghijklmnopqrstuv"),
    ))
    m = run(tmp_path / "a.jsonl", tmp_path / "out")
    assert m.scrubbed == {"card": 1, "email": 1, "phone": 1, "secret": 1}
    rows = table(m, "traces")
    assert rows[0]["prompt"] == "Mail me at <EMAIL>: what is 2 plus 3?" and rows[0]["completion"] == "5, call <PHONE>"
    assert rows[1]["messages"][0]["content"] == "Pay with <CARD> for order 123-456"
    assert rows[1]["completion"] == "ok <SECRET>"


def test_a_quarantined_records_raw_text_is_scrubbed_too(tmp_path):
    """The quarantine is published with the version: its raw text kept the e-mail and the card the
    traces lost."""
    bad = trace(1, "Mail ann@example.com, card 4111 1111 1111 1111", "5", latency_ms="1")
    generation = {**_LANGFUSE[0], "startTime": "yesterday", "input": [{"role": "user", "content": "I am bob@example.org"}]}
    quoted = {**_LANGFUSE[0], "id": "g2", "input": {"prompt": "Mail carl@example.net"}}  # the detail quotes it
    (tmp_path / "a.jsonl").write_bytes(lines(bad, trace(2)))
    (tmp_path / "b.jsonl").write_bytes(lines(generation))
    (tmp_path / "c.jsonl").write_bytes(lines(quoted))
    cut = json.dumps(trace(3, "Reach me at jane.smith@gmail.com please", "5"))  # a line cut in the address
    (tmp_path / "d.jsonl").write_bytes(cut[:cut.index("@gm") + 3].encode() + b"\n")
    m = run(tmp_path, tmp_path / "out")
    q = {r["source_file"].rsplit("/", 1)[-1]: r for r in table(m, "quarantine")}
    assert "Mail <EMAIL>" in q["c.jsonl"]["detail"] and "carl@" not in q["c.jsonl"]["raw"]
    assert q["d.jsonl"]["reason"] == "invalid_json" and q["d.jsonl"]["raw"].endswith("Reach me at <EMAIL>")
    assert accounted(m) and m.scrubbed == {"card": 1, "email": 5}
    assert "<EMAIL>, card <CARD>" in q["a.jsonl"]["raw"] and json.loads(q["a.jsonl"]["raw"])["latency_ms"] == "1"
    assert q["b.jsonl"]["reason"] == "invalid_field" and "I am <EMAIL>" in q["b.jsonl"]["raw"]  # a Langfuse row's own text


def test_every_text_published_is_scrubbed_and_labels_read_the_texts_as_written(tmp_path):
    """A reference answer reaches the GRPO dataset, a score's name and label the traces table: both are
    scrubbed (a reference but for its numbers, which GRPO's reward reads). A long answer taken for a
    card is scrubbed where published, but labeled as written."""
    scored = [{"name": "judge ann@example.com", "value": 1.0, "label": "call +1 415-555-0100", "source": "eval"},
              {"name": "judge", "value": 0.5, "label": None, "source": "by cy@example.com"}]  # a source was not scrubbed
    (tmp_path / "a.jsonl").write_bytes(lines(
        trace(1, "Who is the contact?", "bob@example.org", reference_answer="bob@example.org", scores=scored),
        trace(2, "What is 4111 1111 1111 1110 plus 1?", "4111 1111 1111 1111", reference_answer="4111 1111 1111 1111"),
        trace(3, "Whose account?", "Jo's", reference_answer="DE89 3704 0044 0532 0130 00 (Jo, SSN 536-22-1234)"),
    ))
    m = run(tmp_path / "a.jsonl", tmp_path / "out", reward=RewardConfig(verifier="exact"))
    one, two, three = table(m, "traces")
    assert three["reference_answer"] == "<IBAN> (Jo, SSN <SSN>)"  # no math answer is either
    assert one["reference_answer"] == one["completion"] == "<EMAIL>"
    assert one["scores"] == [{"name": "judge <EMAIL>", "value": 1.0, "label": "call <PHONE>", "source": "eval"},
                             {"name": "judge", "value": 0.5, "label": None, "source": "by <EMAIL>"}]
    assert two["completion"] == "<CARD>" and two["reference_answer"] == "4111 1111 1111 1111"
    assert two["verifiable_reward"] == 1.0
    assert sorted(r["answer"] for r in table(m, "grpo")) == ["4111 1111 1111 1111", "<EMAIL>", "<IBAN> (Jo, SSN <SSN>)"]
    published = json.dumps([table(m, name) for name in ("traces", "grpo", "dpo", "quarantine")], default=str)
    assert "@example" not in published and "415-555" not in published and "3704" not in published
    assert published.replace("4111 1111 1111 1110", "").count("4111") == 2  # the reference, and the GRPO answer


def test_a_tool_call_finish_reason_is_no_answer_on_the_fast_path_too(tmp_path):
    """A log with text and the finish reason tool_calls but no calls listed: the reader refused it, the
    fast path (which reads such logs by the column) published its text as the answer."""
    log = json.loads(json.dumps(OPENAI))
    log["response"]["choices"][0].update({"finish_reason": "tool_calls", "message": {"role": "assistant", "content": "Let me look."}})
    (tmp_path / "a.jsonl").write_bytes(lines(*[{**log, "response": {**log["response"], "id": f"c{i}"}} for i in range(50)]))
    m = run(tmp_path / "a.jsonl", tmp_path / "out")
    assert m.quarantine_reasons == {"no_text_answer": 50} and accounted(m)


def test_a_latency_of_minus_zero_is_published_as_zero(tmp_path):
    import math

    (tmp_path / "a.jsonl").write_bytes(json.dumps(trace(1)).replace('"latency_ms": 40.0', '"latency_ms": -0').encode() + b"\n")
    assert '"latency_ms": -0' in (tmp_path / "a.jsonl").read_text()
    latency = table(run(tmp_path / "a.jsonl", tmp_path / "out"), "traces")[0]["latency_ms"]
    assert latency == 0 and math.copysign(1, latency) == 1


def test_texts_that_differ_only_in_what_is_scrubbed_alike_stay_two(tmp_path):
    """Duplicates and pairing read the texts as written, as the labels do: two questions that read
    alike once their numbers are scrubbed are two prompts, each with its answer, and a right answer
    is not dropped as a duplicate of a wrong one that scrubs the same."""
    (tmp_path / "a.jsonl").write_bytes(lines(
        trace(1, "What is 734-256-1289?", "-811", reference_answer="-811"),
        trace(2, "What is 734-256-1289?", "-812", reference_answer="-811"),
        trace(3, "What is 415-555-1000?", "-140", reference_answer="-140"),
        trace(4, "What is 415-555-1000?", "-811", reference_answer="-140"),
        trace(5, "Which card?", "2441497819752768", reference_answer="2441497819752768"),
        trace(6, "Which card?", "2441497819752818", reference_answer="2441497819752768"),
    ))
    m = run(tmp_path / "a.jsonl", tmp_path / "out", reward=RewardConfig(verifier="exact"))
    assert accounted(m) and m.quarantine_reasons == {}
    assert [(r["prompt"], r["completion"], r["verifiable_reward"]) for r in table(m, "traces")] == [
        ("What is <PHONE>?", "-811", 1.0), ("What is <PHONE>?", "-812", 0.0), ("What is <PHONE>?", "-140", 1.0),
        ("What is <PHONE>?", "-811", 0.0), ("Which card?", "<CARD>", 1.0), ("Which card?", "<CARD>", 0.0)]
    assert sorted(r["answer"] for r in table(m, "grpo")) == ["-140", "-811", "2441497819752768"]
    # Published alike, the two cards make no pair: DPO learns nothing from two identical texts.
    assert sorted((r["chosen"][-1]["content"], r["rejected"][-1]["content"]) for r in table(m, "dpo")) == [
        ("-140", "-811"), ("-811", "-812")]


def test_a_detail_quotes_a_value_cut_where_a_word_ends_and_scrubbed(tmp_path):
    """A detail quotes the first 80 characters of a value it refuses: cut in an address or a number,
    it kept a part no pattern saw (jane.smith@gma); as Python writes it, a no-break space was \\xa0."""
    def log(text: str) -> dict:  # an OpenAI log whose message content is neither text nor parts: its detail quotes it
        return {**OPENAI, "request": {**OPENAI["request"], "messages": [{"role": "user", "content": {"note": text}}]}}

    (tmp_path / "a.jsonl").write_bytes(lines(log("x" * 40 + " write to jane.smith@gmail.com or call 06\u00a012\u00a034"),
                                             log("call 06\u00a012\u00a034\u00a056\u00a078")))
    m = run(tmp_path / "a.jsonl", tmp_path / "out")
    cut, whole = table(m, "quarantine")
    assert "jane" not in cut["detail"] and "gma" not in cut["detail"] and "x" * 40 + " write to…" in cut["detail"]
    assert "call <PHONE>" in whole["detail"] and "call <PHONE>" in whole["raw"] and accounted(m)


def test_a_value_a_quarantined_records_raw_text_is_cut_in_is_scrubbed_whole(tmp_path):
    """The raw text is published cut to 2,000 characters: a number, or a key, that the cut splits is
    scrubbed whole, not left in part; a key an answer's token limit cut before its end line too."""
    base = json.dumps(trace(1, "call +1 415-555-0100 thanks", "5", latency_ms=-1))
    phone = trace(1, "x" * (1993 - base.index("+1 415")) + " call +1 415-555-0100 thanks", "5", latency_ms=-1)
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAE" * 40
    cut_key = trace(2, "Why does ssh reject this key?", key, latency_ms=-1)
    (tmp_path / "a.jsonl").write_bytes(lines(phone, cut_key, trace(3, "What is 1 plus 1?", key)))
    m = run(tmp_path / "a.jsonl", tmp_path / "out")
    q = table(m, "quarantine")
    assert len(q[0]["raw"]) == 2000 and q[0]["raw"].endswith("<PHONE>"[:2000 - 1994]) and len(q[1]["raw"]) < 2000
    assert "415-555" not in q[0]["raw"] and "b3BlbnNz" not in json.dumps(q) and "<SECRET>" in q[1]["raw"]
    assert table(m, "traces")[0]["completion"] == "<SECRET>" and m.scrubbed == {"phone": 1, "secret": 2}


def test_a_chats_every_message_and_any_scripts_spacing_count_for_contamination(tmp_path):
    """An eval question in a system prompt or an earlier turn, or written with a no-break space,
    full-width letters or a zero-width space between its words, is the eval question all the same."""
    item = "A farmer has seventeen sheep and all but nine run away through the broken fence, how many are left?"
    (tmp_path / "eval.jsonl").write_bytes(lines({"prompt": item}))
    full_width = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else "\u3000" for c in item)
    (tmp_path / "a.jsonl").write_bytes(lines(
        trace(1, messages=[{"role": "system", "content": f"Answer this: {item}"}, {"role": "user", "content": "Go."}]),
        trace(2, messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": item},
                           {"role": "user", "content": "And?"}]),
        trace(3, item.replace(" ", "\u00a0")), trace(4, full_width), trace(5, item.replace(" ", " \u200b")),
        trace(6, "What is 2 plus 3?"),
    ))
    m = run(tmp_path / "a.jsonl", tmp_path / "out", dataset=DatasetConfig(eval_sets=[str(tmp_path / "eval.jsonl")]))
    assert m.quarantine_reasons == {"eval_contamination": 5} and [r["trace_id"] for r in table(m, "traces")] == ["t6"]


def test_texts_differing_only_in_unicode_spacing_or_case_are_near_duplicates(tmp_path):
    question = "Quelle est la capitale de la France ? Réponds en un mot."
    (tmp_path / "a.jsonl").write_bytes(lines(
        trace(1, question, "Paris, France."), trace(2, question, "Paris,\u00a0France"), trace(3, question, "PARIS FRANCE"),
        trace(4, question, "Lyon"),
        trace(5, question.upper(), "Paris, France."),  # another chat: pairing groups answers by the chat as it is
    ))
    m = run(tmp_path / "a.jsonl", tmp_path / "out")
    assert m.quarantine_reasons == {"near_duplicate": 2} and [r["trace_id"] for r in table(m, "traces")] == ["t1", "t4", "t5"]


def test_answers_that_differ_in_a_sign_an_operator_or_the_verifiers_label_are_no_near_duplicates(tmp_path):
    math = RewardConfig(verifier="math", verifiable_weight=1.0, feedback_weight=0.0)
    asked = lambda i, q, answer, ref: trace(i, q, answer, reference_answer=ref)  # noqa: E731
    (tmp_path / "a.jsonl").write_bytes(lines(
        # The same answer to questions that differ in their operator only: each question keeps its right one.
        asked(1, "What is 2-2?", "4", "0"), asked(2, "What is 2-2?", "0", "0"),
        asked(3, "What is 2+2?", "4", "4"), asked(4, "What is 2+2?", "5", "4"),
        asked(5, "What is 2*2?", "4", "4"), asked(6, "What is 2*2?", "6", "4"),
        # One question, answers that differ in a sign or a decimal point: the right one is kept.
        asked(7, "What is 3-8?", "5", "-5"), asked(8, "What is 3-8?", "-5", "-5"),
        asked(9, "What is 3/2?", "15", "1.5"), asked(10, "What is 3/2?", "1.5", "1.5"),
        # Spelt alike, told apart by the verifier: 5! is 120.
        asked(11, "What is 5 factorial?", "It is 5", "120"), asked(12, "What is 5 factorial?", "It is 5!", "120"),
        # The same answer again but for its full stop: a near duplicate still.
        asked(13, "What is 2+2?", "4.", "4"),
    ))
    m = run(tmp_path / "a.jsonl", tmp_path / "out", reward=math)
    assert m.quarantine_reasons == {"near_duplicate": 1} and json.loads(table(m, "quarantine")[0]["raw"])["trace_id"] == "t13"
    pairs = {(p["prompt"][-1]["content"], p["chosen"][-1]["content"], p["rejected"][-1]["content"]) for p in table(m, "dpo")}
    assert pairs == {("What is 2-2?", "0", "4"), ("What is 2+2?", "4", "5"), ("What is 2*2?", "4", "6"),
                     ("What is 3-8?", "-5", "5"), ("What is 3/2?", "1.5", "15"), ("What is 5 factorial?", "It is 5!", "It is 5")}
    # Which answer is kept no longer depends on the order the lines come in.
    (tmp_path / "b.jsonl").write_bytes(lines(asked(8, "What is 3-8?", "-5", "-5"), asked(7, "What is 3-8?", "5", "-5")))
    assert run(tmp_path / "b.jsonl", tmp_path / "out-b", reward=math).counts["dpo_pairs"] == 1


def test_judge_scores_outside_the_judge_range_are_counted_and_said(tmp_path, caplog):
    """A 0-10 judge left at the default range gives 1.0 for every score from 1 up: said, not silent."""
    judged = lambda i, v: trace(i, f"What is {i} plus 1?", str(i + 1), scores=[{"name": "judge", "value": v, "source": "eval"}])  # noqa: E731
    (tmp_path / "a.jsonl").write_bytes(lines(judged(1, 8.0), judged(2, 0.5), judged(3, -1.0), judged(4, 1.0)))
    reward = RewardConfig(judge_weight=1.0, verifiable_weight=0.0, feedback_weight=0.0)
    m = run(tmp_path / "a.jsonl", tmp_path / "out", reward=reward)
    assert m.reward_stats["judge_outside_range"] == 2 and [r["final_reward"] for r in table(m, "traces")] == [1.0, 0.5, 0.0, 1.0]
    assert "2 scores named 'judge' lie outside judge_range [0.0, 1.0]" in caplog.text
    m = run(tmp_path / "a.jsonl", tmp_path / "wide", reward=reward.model_copy(update={"judge_range": (-1.0, 10.0)}))
    assert "judge_outside_range" not in m.reward_stats


def test_a_feedback_score_is_user_feedback_where_a_trace_has_no_thumb_or_rating(tmp_path, caplog):
    """Langfuse's SDKs keep a thumb as a score named user-feedback (BOOLEAN: 1 up, 0 down), which
    the export's rows carry; a thumb the trace holds comes first, and a score of another scale is said."""
    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(pa.Table.from_pylist([
        {"id": f"obs-{i}", "traceId": f"lf-{i}", "type": "GENERATION", "startTime": "2026-11-22T09:33:20Z",
         "endTime": "2026-11-22T09:33:21Z", "model": "m", "input": [{"role": "user", "content": f"What is {i} plus 1?"}],
         "output": {"role": "assistant", "content": str(i + 1)}} for i in (1, 2, 3)
    ]), src / "langfuse-observations.parquet")
    (src / "langfuse-scores.jsonl").write_bytes(lines(
        {"id": "s-1", "traceId": "lf-1", "name": "user-feedback", "value": 1, "dataType": "BOOLEAN",
         "stringValue": "True", "source": "API"},
        {"id": "s-2", "traceId": "lf-2", "observationId": "obs-2", "name": "user-feedback", "value": 0,
         "dataType": "NUMERIC", "source": "API", "comment": "wrong"}))
    (src / "ours.jsonl").write_bytes(lines(
        trace(4, "What is 4 plus 1?", "5", feedback={"thumb": "down", "rating": None},  # its score unused: not counted
              scores=[{"name": "user-feedback", "value": 4.0, "source": "api"}]),
        trace(5, "What is 5 plus 1?", "6", feedback={"thumb": None, "rating": None},
              scores=[{"name": "user-feedback", "value": 4.0, "source": "api"}])))
    reward = RewardConfig(feedback_weight=1.0, verifiable_weight=0.0)
    m = run(src, tmp_path / "out", T0 - HOUR, T0 + HOUR, reward=reward)
    assert {r["trace_id"]: r["feedback_reward"] for r in table(m, "traces")} == \
           {"lf-1:obs-1": 1.0, "lf-2:obs-2": 0.0, "lf-3:obs-3": None, "t4": 0.0, "t5": 1.0}
    assert m.reward_stats["signals"]["feedback"] == 4 and m.reward_stats["feedback_outside_range"] == 1
    assert "1 scores named 'user-feedback' lie outside feedback_range [0.0, 1.0]" in caplog.text
    assert "CTPIPE_REWARD__FEEDBACK_RANGE" in caplog.text
    ratings = run(src, tmp_path / "ratings", T0 - HOUR, T0 + HOUR, reward=reward.model_copy(update={"feedback_range": (1.0, 5.0)}))
    assert {r["trace_id"]: r["feedback_reward"] for r in table(ratings, "traces")}["t5"] == 0.75
    unnamed = run(src, tmp_path / "none", T0 - HOUR, T0 + HOUR, reward=reward.model_copy(update={"feedback_score": ""}))
    assert unnamed.reward_stats["signals"]["feedback"] == 1  # t4's thumb alone


def test_a_weighted_signal_no_trace_carries_is_said_and_counted(tmp_path, caplog):
    """A misspelt judge_score (the score is "Judge") weighted the judge over nothing: under zero every
    label was cut by the judge's share, under drop none was labeled, and nothing said why."""
    judged = lambda i, thumb: trace(i, f"What is {i} plus 1?", str(i + 1), feedback={"thumb": thumb, "rating": None},  # noqa: E731
                                    scores=[{"name": "Judge", "value": 0.9, "source": "eval"}])
    (tmp_path / "a.jsonl").write_bytes(lines(judged(1, "up"), judged(2, None)))
    reward = RewardConfig(verifier="none", verifiable_weight=0.0, feedback_weight=1.0, judge_weight=1.0, missing="zero")
    m = run(tmp_path / "a.jsonl", tmp_path / "out", reward=reward)
    assert m.reward_stats["signals"] == {"verifiable": 0, "feedback": 1, "judge": 0}
    assert "no trace of the 2 kept carries a judge signal, weighted 1.0 (missing=zero): no score named 'judge' " \
           "with a number" in caplog.text
    caplog.clear()
    m = run(tmp_path / "a.jsonl", tmp_path / "named", reward=reward.model_copy(update={"judge_score": "Judge"}))
    assert m.reward_stats["signals"]["judge"] == 2 and "carries a" not in caplog.text


def test_a_local_file_replaced_while_it_is_read_fails_the_run_to_be_read_again(tmp_path, monkeypatch):
    """A re-export renamed over a file while its blocks were read gave rows of two files (blocks cut at
    the old one's offsets, read from the new one): a version of a source that never was, exit 0."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_bytes(lines(*(trace(i) for i in range(1, 40))))
    read, done = mat._read, []

    def replaced_on_first_read(*args, **kwargs):
        if not done:
            done.append(True)
            (src / "new.jsonl").write_bytes(lines(trace(0), *(trace(i) for i in range(1, 40))))
            os.replace(src / "new.jsonl", src / "a.jsonl")
        return read(*args, **kwargs)

    monkeypatch.setattr(mat, "_read", replaced_on_first_read)
    with pytest.raises(sources.SourceChanged, match=f"1 files of the source changed while they were read: {src / 'a.jsonl'}"):
        run(src, tmp_path / "out", dataset=DatasetConfig(workers=1))
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("2026*"))
    monkeypatch.setattr(mat, "_read", read)
    assert run(src, tmp_path / "out").counts["traces_in"] == 40  # read again, whole
    # A file appended to while it is read (the hour a shipper still writes) is read as it was listed.
    done.clear()

    def appended_on_first_read(*args, **kwargs):
        if not done:
            done.append(True)
            with open(src / "a.jsonl", "ab") as f:
                f.write(lines(trace(99)))
        return read(*args, **kwargs)

    monkeypatch.setattr(mat, "_read", appended_on_first_read)
    assert run(src, tmp_path / "appended", dataset=DatasetConfig(workers=1)).counts["traces_in"] == 40
    # So is one appended to after it was listed, before it was opened: it was read to its new end.
    monkeypatch.setattr(mat, "_read", read)
    blocks = sources.blocks

    def appended_once_listed(fs, files):
        with open(src / "a.jsonl", "ab") as f:
            f.write(lines(trace(100)))
        return blocks(fs, files)

    monkeypatch.setattr(sources, "blocks", appended_once_listed)
    m = run(src, tmp_path / "appended later", dataset=DatasetConfig(workers=1))
    assert m.counts["traces_in"] == 41  # the lines it held when listed, not the 42 it holds


def test_exact_and_normalized_duplicates_are_dropped_first_one_kept(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(lines(
        trace(1, "What is 2 plus 3?", "It is 5."),
        trace(1, "What is 2 plus 3?", "It is 5."),  # the same record logged twice
        trace(2, "What is 2 plus 3?", "It is 5."),  # another user, the very same text
        trace(3, "What is 2 plus 3?", "it is 5"),  # the same but for case and punctuation
        trace(4, "What is 2 plus 3?", "It is 6."),
    ))
    m = run(tmp_path / "a.jsonl", tmp_path / "out")
    assert m.quarantine_reasons == {"duplicate": 2, "near_duplicate": 1} and accounted(m)
    assert [r["trace_id"] for r in table(m, "traces")] == ["t1", "t4"]
    q = table(m, "quarantine")
    assert json.loads(q[2]["raw"])["trace_id"] == "t3"  # what was dropped is kept whole


def test_prompts_sharing_13_words_with_an_eval_set_are_excluded(tmp_path):
    item = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
    (tmp_path / "eval.jsonl").write_bytes(lines({"prompt": item}))
    (tmp_path / "a.jsonl").write_bytes(lines(
        trace(1, "Please: TWO three four five six seven eight, nine ten eleven twelve thirteen fourteen!", "ok"),
        trace(2, "two three four five six seven eight nine ten eleven twelve thirteen", "ok"),  # only 12 in a row
        trace(3, "Tell me: What is 107 plus 5?", "112"),
    ))
    held_out = sorted(__import__("ctpipe.arith", fromlist=["x"]).splits(TaskConfig()).held_out_prompts())[0]
    (tmp_path / "a.jsonl").open("ab").write(lines(trace(4, f"Quick one. {held_out}", "1")))
    m = run(tmp_path / "a.jsonl", tmp_path / "out", dataset=DatasetConfig(eval_sets=[str(tmp_path / "eval.jsonl")]))
    assert m.quarantine_reasons == {"eval_contamination": 2}
    assert [r["trace_id"] for r in table(m, "traces")] == ["t2", "t3"]
    # An eval set that grew since: the same interval is built again against it, not answered from before.
    (tmp_path / "eval.jsonl").open("ab").write(lines({"question": "Tell me: what is 107 plus 5?"}))
    again = run(tmp_path / "a.jsonl", tmp_path / "out", dataset=DatasetConfig(eval_sets=[str(tmp_path / "eval.jsonl")]))
    assert again.version != m.version and again.quarantine_reasons == {"eval_contamination": 3}
    assert run(tmp_path / "a.jsonl", tmp_path / "out",
               dataset=DatasetConfig(eval_sets=[str(tmp_path / "eval.jsonl")])).version == again.version
    # Its items in another order, one twice: the same items, the same version.
    (tmp_path / "eval.jsonl").write_bytes(lines({"question": "Tell me: what is 107 plus 5?"}, {"prompt": item}, {"prompt": item}))
    assert run(tmp_path / "a.jsonl", tmp_path / "out",
               dataset=DatasetConfig(eval_sets=[str(tmp_path / "eval.jsonl")])).version == again.version


def test_a_missing_eval_set_is_named_and_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "a.jsonl").write_bytes(lines(trace(1, "What is 101 plus 1?", "102")))
    with pytest.raises(sources.SourceError, match=f"eval set '{tmp_path / 'nope.jsonl'}' does not exist"):
        run(tmp_path / "a.jsonl", tmp_path / "out", dataset=DatasetConfig(eval_sets=[str(tmp_path / "nope.jsonl")]))
    assert not list(tmp_path.glob("ctpipe-spill-*")) and not list((tmp_path / "out").glob(".tmp-*"))


@pytest.mark.parametrize("where", ["close", "publish"])
def test_a_run_stopped_while_its_workers_finish_or_while_it_publishes_leaves_nothing_staged(tmp_path, monkeypatch, where):
    """SIGTERM raised in the wait for the workers (in the cleanup itself) or in the publishing, past
    the build's own handling: the staged folder and the spill folder stayed behind."""
    from ctpipe.errors import Terminated

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)  # workers, and a pool to close
    (tmp_path / "a.jsonl").write_bytes(lines(*(trace(i, f"What is {i} plus 1?", str(i + 1)) for i in range(20))))

    close = mat._Pool.close

    def stop(*args, **kwargs):
        if where == "close":
            close(*args)  # its workers shut down, as the signal's handler would leave them
        raise Terminated()

    monkeypatch.setattr(mat._Pool, "close", stop) if where == "close" else monkeypatch.setattr(datasets.Staging, "publish", stop)
    with pytest.raises(Terminated):
        run(tmp_path / "a.jsonl", tmp_path / "out", dataset=DatasetConfig(workers=2))
    assert not list(tmp_path.glob("ctpipe-spill-*")) and not list((tmp_path / "out").glob(".tmp-*"))


@pytest.mark.parametrize("reward, expected", [
    # the regex verifier compares texts, and numbers written as numbers ("0.5" is not "\frac{1}{2}");
    # math-verify compares values
    (RewardConfig(verifier="regex", verifiable_weight=1, feedback_weight=1, judge_weight=2, judge_range=(0, 10)),
     {"t1": 0.5, "t2": 0.0, "t3": 1.0}),
    (RewardConfig(verifier="regex", verifiable_weight=1, feedback_weight=1, missing="zero"), {"t1": 0.5, "t2": 0.0, "t3": 0.5}),
    (RewardConfig(verifier="regex", verifiable_weight=1, feedback_weight=1, missing="drop"), {"t1": 0.5, "t2": 0.0, "t3": None}),
    (RewardConfig(verifier="math", verifiable_weight=1, feedback_weight=0), {"t1": 1.0, "t2": 0.0, "t3": 1.0}),
])
def test_labels_follow_the_reward_config(tmp_path, reward, expected):
    (tmp_path / "a.jsonl").write_bytes(lines(
        trace(1, "Half of one?", "so #### 0.5", reference_answer="\\frac{1}{2}", feedback={"thumb": "up", "rating": None},
              scores=[{"name": "judge", "value": 5, "source": "eval"}]),
        trace(2, "Half of one?", "so #### 2", reference_answer="\\frac{1}{2}", feedback={"thumb": "down", "rating": None}),
        trace(3, "Two?", "it is #### 2", reference_answer="2"),
    ))
    m = run(tmp_path / "a.jsonl", tmp_path / "out", reward=reward)
    assert {r["trace_id"]: r["final_reward"] for r in table(m, "traces")} == expected


def test_worker_processes_give_the_same_version_as_one_process(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "BLOCK_BYTES", 2048)
    monkeypatch.setattr(sources, "_BATCH_ROWS", 64)
    src = tmp_path / "src"
    src.mkdir()
    traces = [trace(i, f"What is {100 + i % 7} plus 1?", str(101 + i % 7 + i % 2),
                    feedback={"thumb": "up" if i % 3 else "down", "rating": None}) for i in range(600)]
    # The plain file's blocks are loaded by the workers where they lie; the gzip lines and Parquet rows
    # are read here, then spilled to a file per block.
    (src / "a.jsonl").write_bytes(lines(*traces[:200], b"{broken"))
    (src / "b.jsonl.gz").write_bytes(gzip.compress(lines(*traces[200:400])))
    pq.write_table(pa.Table.from_pylist(traces[400:]), src / "c.parquet")
    one = run(src, tmp_path / "one")
    monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    monkeypatch.setattr(mat, "_BUCKET_BYTES", 8192)  # several pairing buckets, paired in the pool too
    many = run(src, tmp_path / "many", dataset=DatasetConfig(workers=2))
    assert many.version == one.version and many.counts == one.counts
    for name in ("traces", "quarantine"):
        assert table(many, name) == table(one, name)
    monkeypatch.setattr(mat, "_SPILL_BYTES", 1)  # in one process again, a spill file per block: the same pieces, cut finer
    monkeypatch.setattr(mat, "_PROMPT_SLOTS", 2)  # and prompts' messages forgotten, so spilled again and again
    finer = run(src, tmp_path / "finer", dataset=DatasetConfig(workers=1))
    monkeypatch.setattr(mat, "_FANOUT", 2)  # spilled into two buckets, each split again when paired
    split = run(src, tmp_path / "split", dataset=DatasetConfig(workers=2))
    assert len(split.files["dpo"]["parts"]) > 2 and split.counts == one.counts
    for name in ("grpo", "dpo"):  # the same rows
        assert unordered(many, name) == unordered(one, name)
        assert unordered(split, name) == unordered(one, name)
        assert table(finer, name) == table(many, name)


def test_rows_kept_for_pairing_from_a_piece_read_back_hold_their_own_memory_not_the_piece(tmp_path, monkeypatch):
    """A piece of a part read from its file is one buffer, its columns slices of it: the rows kept for
    pairing kept every such piece whole, with the long prompt each choice repeats (300 logs of 64
    choices of a 100 KB prompt peaked at 3,556 MB), while their own size said a few MB."""
    prompt = "lorem ipsum dolor " * 3000
    logs = [{**choices_log([f"Answer {k}" for k in range(32)], f"{prompt} Question {i}", id=f"chatcmpl-{i}",
                           created=int(T0.timestamp()) + i), "metadata": {"rating": 4}} for i in range(12)]  # every row rated
    (tmp_path / "a.jsonl").write_bytes(lines(*logs))
    monkeypatch.setattr(mat, "_HELD_BYTES", 20_000)  # every piece but the first held on disk
    monkeypatch.setattr(mat, "_PIECE_BYTES", 100_000)
    held = []
    spill = mat.spill
    monkeypatch.setattr(mat, "spill", lambda: held.append((sum(size for _, size in mat._SPILLING), pa.total_allocated_bytes()))
                        or spill())
    m = run(tmp_path / "a.jsonl", tmp_path / "out")
    assert m.counts["traces"] == 12 * 32 and m.reward_stats["signals"]["feedback"] == 12 * 32 and len(held) == 1
    counted, allocated = held[0]
    assert counted < 2_000_000 and allocated < counted + 2_000_000, held  # 12 prompts of 54 KB, once each


def test_many_choices_sharing_a_long_prompt_are_made_into_rows_in_pieces_held_on_disk(tmp_path, monkeypatch):
    """OpenAI logs of ``n`` choices (each choice a trace carrying the whole prompt), broken lines
    between them, with duplicate answers: made into rows a few records at a time, some by the fast
    path and most by the exact one, and held on disk until they are written, they give the tables
    made in one piece, in memory, all by the fast path."""
    src = tmp_path / "src"
    src.mkdir()
    logs = []
    for i in range(60):
        n = (1, 6, 1, 17)[i % 4]
        prompt = f"Context {i}: " + "lorem ipsum dolor " * (200 if n > 1 else 2) + f"What is {i % 9} plus 1?"
        answers = [f"#### {i % 9 + 1 + k % 2}" if k % 5 else f"It is {i % 9 + 1}." for k in range(n)]
        logs.append(choices_log(answers, prompt, id=f"chatcmpl-{i}", created=int(T0.timestamp()) + i))
    (src / "a.jsonl").write_bytes(lines(*logs[:30], b"{broken", *logs[30:], logs[3]))
    (src / "b.jsonl.gz").write_bytes(gzip.compress(lines(*logs[::7])))
    one = run(src, tmp_path / "one")
    on_disk = []
    pieces = mat._Held.pieces
    monkeypatch.setattr(mat._Held, "pieces", lambda self: on_disk.append(self.writer is not None) or pieces(self))
    monkeypatch.setattr(mat, "_PIECE_BYTES", 8000)  # a few records a piece
    monkeypatch.setattr(mat, "_HELD_BYTES", 20_000)
    monkeypatch.setattr(columns, "_COPIES_BYTES", 20_000)  # most logs of several choices left to the exact path
    rows = []

    def fast(lines):
        rows.append(got := columns.parse_openai_lines(lines))
        return got

    monkeypatch.setattr(mat, "_FAST", tuple((name, key, fast if name == "openai" else parse) for name, key, parse in mat._FAST))
    cut = run(src, tmp_path / "cut")
    taken = [row["trace_id"] for got in rows if got is not None for row in got[0].select(["trace_id"]).to_pylist()]
    several = [t for t in taken if ":" in t]  # choices of logs of several
    assert several and len(taken) < cut.counts["traces_in"] / 2  # some logs of several choices, not most
    assert any(on_disk) and not list(tmp_path.glob("**/held-*"))
    choices = sum(len(log["response"]["choices"]) for log in logs + [logs[3]] + logs[::7])
    assert cut.counts == one.counts and cut.counts["traces_in"] == choices + 1  # and the broken line
    assert cut.quarantine_reasons == one.quarantine_reasons and one.quarantine_reasons["duplicate"] > 100
    assert max(pq.ParquetFile(f).num_row_groups for f in (tmp_path / "cut").glob("*/traces/*.parquet")) > 1
    for name in ("traces", "quarantine", "grpo", "dpo"):
        assert table(cut, name) == table(one, name)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("partitioned", [False, True])
def test_small_files_gathered_into_blocks_give_what_each_file_alone_gives(tmp_path, monkeypatch, workers, partitioned):
    """Two hundred small files (ours, OpenAI logs, gzip, zstd, Parquet, one in no format, records of
    another hour, duplicates across files, blank lines) make a handful of parts, and the same rows,
    reasons and counts as when every file is a block of its own; in hour and day partitions too,
    with records their partition should not hold. (Gathered files that the fast paths take whole are
    read together, see _read_fast; the others, and files alone, one by one.)"""
    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    src = tmp_path / "src"
    src.mkdir()
    folders = [src / "date=2026-11-22" / "hour=10", src / "date=2026-11-22"] if partitioned else [src]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    for i in range(200):
        q = i - 1 if i % 25 == 24 else i  # the file before's questions and answers again, other trace ids
        later = T0 + HOUR if i % 50 == 8 else T0 - 2 * HOUR if i % 50 == 10 else None  # of another hour
        records = [trace(i * 3 + k, f"What is {q} plus {k}?", str(q + k), at=later if k == 1 else None) for k in range(3)]
        body = lines(*records, b"{cut" if i % 10 == 3 else records[0])  # a broken line, or a duplicate
        body += b"\n \n" if i % 20 == 5 else b""  # blank lines
        folder = folders[i % len(folders)]
        if i >= 170:  # Parquet files of one schema, then one of another (thumbs as strings, not all null)
            rows = pa.Table.from_pylist(records + [records[0]] if i != 199 else
                                        [dict(r, feedback={"thumb": "up", "rating": None}) for r in records])
            pq.write_table(rows, folder / f"part-{i:04d}.parquet")
            continue
        name, packed = [(f"part-{i:04d}.jsonl", body), (f"part-{i:04d}.jsonl.gz", gzip.compress(body)),
                        (f"part-{i:04d}.jsonl.zst", zstd(body)), (f"part-{i:04d}.jsonl", body)][i % 4]
        (folder / name).write_bytes(packed)
    (folders[0] / "part-0100.jsonl").write_bytes(lines(OPENAI, {"hello": "world"}))
    (folders[0] / "part-0150.jsonl").write_bytes(lines({"hello": 1}, {"hello": 2}))  # in no format
    together = []  # files read together, seen in this process only
    read_fast = mat._read_fast
    monkeypatch.setattr(mat, "_read_fast", lambda members, *a: together.append(len(members)) or read_fast(members, *a))
    gathered = run(src, tmp_path / "gathered", dataset=DatasetConfig(workers=workers))
    assert workers > 1 or sum(together) == 200 - 17 - 2  # not those with a broken line, an OpenAI log or none
    monkeypatch.setattr(sources, "gathered", lambda blocks: blocks)
    alone = run(src, tmp_path / "alone", dataset=DatasetConfig(workers=workers))
    assert len(gathered.files["traces"]["parts"]) < 10 < 150 < len(alone.files["traces"]["parts"])
    assert gathered.counts == alone.counts and gathered.quarantine_reasons == alone.quarantine_reasons
    assert gathered.counts["outside_interval"] == 4 + 4 + 1 and accounted(gathered)  # and the OpenAI log, of another day
    assert gathered.source["misplaced"] == alone.source["misplaced"]
    assert sorted(gathered.source["misplaced"]) == (["after_partition", "before_partition"] if partitioned else [])
    assert gathered.source["unrecognized_files"] == alone.source["unrecognized_files"] == {
        str(folders[0] / "part-0150.jsonl"): 2}
    assert gathered.source["formats"] == alone.source["formats"]
    for name in ("traces", "quarantine"):
        assert table(gathered, name) == table(alone, name)
    for name in ("grpo", "dpo"):
        assert unordered(gathered, name) == unordered(alone, name)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_file_is_named_as_in_no_format_only_when_none_of_its_blocks_holds_a_record(tmp_path, monkeypatch, workers):
    monkeypatch.setattr(sources, "BLOCK_BYTES", 2048)
    monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0 if workers > 1 else mat._IN_PROCESS_BYTES)
    src = tmp_path / "src"
    src.mkdir()
    other = [{"hello": f"world {i}", "pad": "x" * 200} for i in range(40)]  # some ten blocks of them
    questions = [trace(i, f"What is {100 + i} plus 1?", str(101 + i)) for i in range(20)]
    (src / "a.jsonl").write_bytes(lines(*other, *questions))  # records in its last blocks only
    (src / "b.jsonl").write_bytes(lines(*other))  # none in any
    (src / "c.jsonl").write_bytes(lines(*questions[:5], *other))  # records in its first block only
    for i in range(3):  # small files, gathered into one block: one in no format between two that are not
        (src / f"d{i}.jsonl").write_bytes(lines(other[i] if i == 1 else questions[i]))
    m = run(src, tmp_path / "out", dataset=DatasetConfig(workers=workers))
    assert accounted(m) and m.counts["traces_in"] == 3 * 40 + 20 + 5 + 3
    assert m.source["unrecognized_files"] == {str(src / "b.jsonl"): 40, str(src / "d1.jsonl"): 1}


def test_workers_that_cannot_start_leave_no_spill_files_nor_staged_parts(tmp_path, monkeypatch):
    (tmp_path / "a.jsonl").write_bytes(lines(trace(1, "What is 101 plus 1?", "102")))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def refused(self, job, workers):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(mat._Pool, "__init__", refused)
    with pytest.raises(OSError, match="Resource temporarily unavailable"):
        run(tmp_path / "a.jsonl", tmp_path / "out")
    assert not list(tmp_path.glob("ctpipe-spill-*")) and not list((tmp_path / "out").glob(".tmp-*"))


def test_a_worker_failing_mid_run_leaves_no_staged_parts_and_its_error_is_the_one_raised(tmp_path, monkeypatch):
    """The other worker is still writing parts when the failure reaches this process: the staged
    version is removed only once it has stopped, so nothing is left and nothing hides the error."""
    monkeypatch.setattr(sources, "BLOCK_BYTES", 2048)
    monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "a.jsonl").write_bytes(lines(*(trace(i, f"What is {100 + i} plus 1?", str(101 + i)) for i in range(400))))
    monkeypatch.setattr(datasets, "_staged_name", lambda now: ".tmp-fixed")
    # Part 5's file cannot be written (a folder is in its place), by the second worker, while the first goes on.
    (tmp_path / "out" / ".tmp-fixed" / "traces" / "part-00005.parquet").mkdir(parents=True)
    with pytest.raises(IsADirectoryError, match="part-00005"):
        run(tmp_path / "a.jsonl", tmp_path / "out", dataset=DatasetConfig(workers=2))
    assert not list(tmp_path.glob("ctpipe-spill-*")) and not list((tmp_path / "out").glob(".tmp-*"))


@pytest.mark.parametrize("store", ["local", "memory"])
def test_versions_staged_by_runs_killed_long_ago_are_removed_by_the_next_run(tmp_path, store, caplog):
    """A run killed outright (SIGKILL, a node lost) cannot remove what it staged. The next run into the
    store removes what was staged more than STALE_STAGING ago, by the time its name holds, and
    nothing else: not a run's staging begun since (it may be writing now), nor a hidden folder of
    another name."""
    import fsspec

    (tmp_path / "a.jsonl").write_bytes(lines(trace(1, "What is 101 plus 1?", "102")))
    out = str(tmp_path / "out") if store == "local" else f"memory://{tmp_path.name}/out"
    fs, root = fsspec.core.url_to_fs(out)
    now = datetime.now(timezone.utc)
    old, recent = (datasets._staged_name(now - age) for age in (datasets.STALE_STAGING + HOUR, datasets.STALE_STAGING - HOUR))
    others = [".tmp-" + uuid.uuid4().hex, ".tmp-19990101T000000Z-mine",  # no time, or no staging's name,
              ".tmp-20261399T000000Z-" + uuid.uuid4().hex]  # or no day of the calendar
    for name in (old, recent, *others):
        fs.makedirs(f"{root}/{name}/traces", exist_ok=True)
        fs.pipe(f"{root}/{name}/traces/part-00000.parquet", b"PAR1")
    with caplog.at_level(logging.INFO, logger="ctpipe.datasets"):
        m = run(tmp_path / "a.jsonl", out)
    assert m.counts["traces"] == 1
    left = sorted(p.rstrip("/").rpartition("/")[2] for p in fs.ls(root, detail=False) if ".tmp-" in p)
    assert left == sorted([recent, *others])
    assert [r.getMessage() for r in caplog.records if "staged by a run" in r.getMessage()] == [
        f"removed {out}/{old}, staged by a run that stopped before publishing it"]
    assert run(tmp_path / "a.jsonl", out).version == m.version and fs.exists(f"{root}/LATEST")


@pytest.mark.parametrize("store", ["local", "memory"])
def test_a_version_folder_left_without_its_manifest_is_replaced_not_published_over(tmp_path, store):
    """A run stopped while it published (an object store's copy cut short, or killed between a local
    rename and the manifest) left the version's folder without a manifest; the next run wrote its
    manifest over that run's files, whose parts (cut by pairing buckets the listing sizes) were others:
    parts listed that were not there, and parts there that were not listed."""
    import fsspec

    (tmp_path / "a.jsonl").write_bytes(lines(*(trace(i, f"What is {i} plus 1?", str(i + 1)) for i in range(20))))
    out = str(tmp_path / "out") if store == "local" else f"memory://{tmp_path.name}/out"
    fs, root = fsspec.core.url_to_fs(out)
    first = run(tmp_path / "a.jsonl", out)
    fs.rm(f"{root}/{first.version}/manifest.json")
    fs.rm(f"{root}/{first.version}/grpo/part-00000.parquet")
    fs.pipe(f"{root}/{first.version}/grpo/part-00007.parquet", b"PAR1 of another run")
    again = run(tmp_path / "a.jsonl", out)
    assert again.version == first.version
    assert sorted(p.rpartition("/")[2] for p in fs.find(f"{root}/{again.version}/grpo")) == \
        [p.rpartition("/")[2] for p in again.files["grpo"]["parts"]]
    assert again.read("grpo").to_pylist() == first.read("grpo").to_pylist() and len(table(again, "grpo")) == 20
    assert not [p for p in fs.ls(root, detail=False) if ".tmp-" in p]


def test_a_local_version_appears_with_its_manifest_in_one_rename(tmp_path, monkeypatch):
    """A run killed between moving a version into place and writing its manifest left a folder that
    readers skip and the next run had to reckon with: the manifest is in the folder it renames."""
    (tmp_path / "a.jsonl").write_bytes(lines(trace(1)))
    renamed = []
    rename = os.rename
    monkeypatch.setattr(os, "rename", lambda a, b: renamed.append(os.path.exists(f"{a}/manifest.json")) or rename(a, b))
    run(tmp_path / "a.jsonl", tmp_path / "out")
    assert True in renamed


def test_a_version_whose_staged_parts_another_run_removed_is_not_published(tmp_path):
    """Another run takes a live run's staging for a stale one only if a clock is days off (or the run
    lasts days): the live run then publishes nothing, rather than a manifest of parts that are gone."""
    out = datasets.Output(tmp_path / "out")
    staging = out.staging()
    parts = [staging.write_part("traces", i, pa.table({"n": [i]})) for i in range(2)]
    staging.add_table("traces", pa.schema([("n", pa.int64())]), parts)
    os.remove(f"{staging.dir}/traces/part-00000.parquet")
    with pytest.raises(FileNotFoundError, match=r"the staged parts \['traces/part-00000.parquet'\] of .* are gone"):
        staging.publish("20261122T100000-20261122T110000-abc")
    assert os.listdir(tmp_path / "out") == []


def test_a_full_disk_is_named_with_the_room_each_folder_has_and_leaves_nothing(tmp_path, monkeypatch, caplog, capsys):
    """Writing to /dev/full fails as a full disk does (ENOSPC), here in the spill (of this process:
    spawned workers would not see the patch; a worker's OSError comes back with its errno)."""
    monkeypatch.setattr(sources, "BLOCK_BYTES", 2048)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "a.jsonl").write_bytes(lines(*(trace(i, f"What is {100 + i} plus 1?", str(101 + i)) for i in range(400))))
    monkeypatch.setattr(mat, "_spill_path", lambda bucket, writer: "/dev/full")
    monkeypatch.setattr(mat, "_SPILL_NEED", {"langfuse": 2.0, "other": 1e6})  # more than any disk: warned of
    with pytest.raises(mat.DiskFull) as e:
        run(tmp_path / "a.jsonl", tmp_path / "out")
    spill = f"{tmp_path}/ctpipe-spill-"
    assert e.value.errno == 28 and "no space left on the device of the spill folder " + spill in str(e.value)
    assert f"or of the dataset store {tmp_path}/out (" in str(e.value) and "nothing was published" in str(e.value)
    assert [r.message.startswith(f"the spill folder {spill}") and "set TMPDIR" in r.message
            for r in caplog.records if r.levelname == "WARNING"] == [True]
    assert not list(tmp_path.glob("ctpipe-spill-*")) and not list((tmp_path / "out").glob(".tmp-*"))
    assert main(["materialize", "--source", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "out"),
                 "--start", T0.isoformat(), "--end", (T0 + timedelta(days=1)).isoformat()]) == 1
    assert capsys.readouterr().err.startswith("ctpipe materialize: DiskFull: [Errno 28] no space left on the device")


def _process_or_die(item):
    """A worker's block, unless it is the tenth: then the worker dies, as the out-of-memory killer ends it."""
    if item[0] == 9:
        os.kill(os.getpid(), signal.SIGKILL)
    return mat.process(item)


def test_a_worker_killed_mid_run_is_reported_as_such_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "BLOCK_BYTES", 2048)
    monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "a.jsonl").write_bytes(lines(*(trace(i, f"What is {100 + i} plus 1?", str(101 + i)) for i in range(4000))))
    monkeypatch.setattr(mat, "process", _process_or_die)
    with pytest.raises(mat.WorkerLost, match="out-of-memory killer"):
        run(tmp_path / "a.jsonl", tmp_path / "out", dataset=DatasetConfig(workers=2))
    assert not list(tmp_path.glob("ctpipe-spill-*")) and not list((tmp_path / "out").glob(".tmp-*"))


def test_rerun_returns_the_published_version_and_a_backfill_makes_one_per_interval(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_bytes(lines(*(trace(i, f"What is {100 + i} plus 1?", str(101 + i), at=T0 + timedelta(minutes=10 * i)) for i in range(12))))
    args = ["materialize", "--source", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "out"),
            "--start", T0.isoformat(), "--end", (T0 + 2 * HOUR).isoformat(), "--every", "1h"]
    assert main(args) == 0
    first, totals = capsys.readouterr().out.split("backfill ")
    assert first.count("version ") == 2 and "traces in 6 = 6 rows + 0 quarantined" in first
    assert totals == (f"[{T0.isoformat()}, {(T0 + 2 * HOUR).isoformat()}) by 1:00:00: 2 intervals, 2 built, 0 found "
                      "built before, 0 with no trace\n  traces in 12 = 12 rows + 0 quarantined {}; 12 GRPO prompts, 0 DPO pairs\n")
    versions = sorted(p.name for p in (tmp_path / "out").iterdir() if p.name[0].isdigit())
    assert len(versions) == 2
    stamp = (tmp_path / "out" / versions[0] / "manifest.json").stat().st_mtime_ns
    assert main(args) == 0
    (again, totals), found = capsys.readouterr().out.split("backfill "), " (found: built before from these very files)"
    assert again.count(found) == 2 and again.replace(found, "") == first  # both found, as they were
    assert "2 intervals, 0 built, 2 found built before, 0 with no trace" in totals
    assert (tmp_path / "out" / versions[0] / "manifest.json").stat().st_mtime_ns == stamp
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".tmp")]


def test_a_backfill_ends_with_its_totals_and_looks_for_stale_staging_once_an_hour(tmp_path, capsys, monkeypatch):
    """A year's backfill printed 42,000 lines and no total; and each of its intervals listed the whole
    store for what runs killed days before had staged (0.4 s of 8,000 versions on S3)."""
    (tmp_path / "a.jsonl").write_bytes(lines(
        *(trace(i, f"What is {100 + i} plus 1?", str(101 + i)) for i in range(3)), trace(3, "What is 100 plus 1?", "101"),
        trace(4, at=T0 + 2 * HOUR), trace(5, completion="6", at=T0 + 2 * HOUR + timedelta(seconds=1))))
    swept = []
    remove_stale = datasets.Output.remove_stale
    monkeypatch.setattr(datasets.Output, "remove_stale", lambda out, now: swept.append(now) or remove_stale(out, now))
    args = ["materialize", "--source", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "out"),
            "--start", T0.isoformat(), "--end", (T0 + 3 * HOUR).isoformat(), "--every", "1h"]
    assert main(args) == 0
    assert capsys.readouterr().out.split("\nbackfill ")[1] == (
        f"[{T0.isoformat()}, {(T0 + 3 * HOUR).isoformat()}) by 1:00:00: 3 intervals, 2 built, 0 found built before, "
        '1 with no trace\n  traces in 6 = 5 rows + 1 quarantined {"duplicate": 1}; 4 GRPO prompts, 1 DPO pairs\n')
    assert len(swept) == 1
    assert main([*args[:4], f"{tmp_path}/./out/", *args[5:]]) == 0 and len(swept) == 1  # the same store, spelled otherwise
    monkeypatch.setattr(datasets, "_SWEPT", {k: time.monotonic() - datasets._SWEEP_EVERY for k in datasets._SWEPT})  # an hour on
    (tmp_path / "a.jsonl").write_bytes(lines(trace(6, at=T0 + HOUR)))
    assert main(args) == 0 and len(swept) == 2


@pytest.mark.parametrize("stop", [RuntimeError("the store refused"), KeyboardInterrupt()])
def test_a_backfill_that_fails_or_is_stopped_gives_the_totals_of_the_intervals_done(tmp_path, capsys, monkeypatch, stop):
    (tmp_path / "a.jsonl").write_bytes(lines(*(trace(i, f"What is {100 + i} plus 1?", str(101 + i),
                                                     at=T0 + timedelta(minutes=25 * i)) for i in range(6))))
    materialize = mat.materialize

    def third_fails(source, out, start, end, **settings):
        if start == T0 + 2 * HOUR:
            raise stop
        return materialize(source, out, start, end, **settings)

    monkeypatch.setattr(mat, "materialize", third_fails)
    args = ["materialize", "--source", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "out"),
            "--start", T0.isoformat(), "--end", (T0 + 4 * HOUR).isoformat(), "--every", "1h"]
    assert main(args) == (130 if isinstance(stop, KeyboardInterrupt) else 1)
    out, err = capsys.readouterr()
    assert f"[{(T0 + 2 * HOUR).isoformat()}, {(T0 + 3 * HOUR).isoformat()}) " in err
    assert out.split("\nbackfill ")[1] == (
        f"[{T0.isoformat()}, {(T0 + 2 * HOUR).isoformat()}) by 1:00:00: 2 intervals, 2 built, 0 found built before, "
        "0 with no trace\n  traces in 5 = 5 rows + 0 quarantined {}; 5 GRPO prompts, 0 DPO pairs\n")


def test_a_manifest_says_when_it_was_published_which_orders_an_intervals_versions(tmp_path):
    """Late files make a re-run publish another version of the interval; with no publish time in the
    manifests, only the folders' times ordered them, and a store copied elsewhere loses those."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_bytes(lines(trace(1)))
    first = run(src, tmp_path / "out")
    (src / "late.jsonl").write_bytes(lines(trace(2, "What is 4 plus 4?", "8")))
    again = run(src, tmp_path / "out")
    assert again.version != first.version and again.interval == first.interval
    assert datetime.fromisoformat(first.published_at) < datetime.fromisoformat(again.published_at) <= datetime.now(timezone.utc)
    assert datasets.Output(tmp_path / "out").load(first.version).published_at == first.published_at
    older = tmp_path / "out" / first.version / "manifest.json"  # written before manifests said when
    older.write_text(json.dumps({k: v for k, v in json.loads(older.read_text()).items() if k != "published_at"}))
    assert datasets.Output(tmp_path / "out").load(first.version).published_at == ""


def test_a_source_spelled_otherwise_builds_the_same_version(tmp_path):
    """Its path is in every row it gives (source_file): src//a.jsonl made another version of the same data."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_bytes(lines(*(trace(i, f"What is {i} plus 1?", str(i + 1)) for i in range(3))))
    first = run(src / "a.jsonl", tmp_path / "out")
    for spelled in (f"{src}//a.jsonl", f"{src}/../src/a.jsonl", f"{src}/./"):
        again = run(spelled, tmp_path / "out")
        assert again.version == first.version and table(again, "traces")[0]["source_file"] == str(src / "a.jsonl")


def test_a_version_of_the_same_source_built_otherwise_has_the_same_content_hash(tmp_path):
    """The source's content hash was the version's own digest, which the config changes too: two
    versions of the same traces did not say they were."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_bytes(lines(*(trace(i, f"What is {i} plus 1?", str(i + 1)) for i in range(4))))
    first = run(src, tmp_path / "out")
    other = run(src, tmp_path / "out", dataset=DatasetConfig(dpo_min_margin=0.3))
    assert other.version != first.version and other.source["content_hash"] == first.source["content_hash"]
    (src / "a.jsonl").write_bytes(lines(*(trace(i, f"What is {i} plus 2?", str(i + 2)) for i in range(4))))
    assert run(src, tmp_path / "out").source["content_hash"] != first.source["content_hash"]


def test_latest_stays_on_the_newest_interval_through_a_backfill_or_a_rerun_of_an_older_one(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_bytes(lines(*(trace(i, f"What is {100 + i} plus 1?", str(101 + i), at=T0 + timedelta(minutes=10 * i))
                                               for i in range(18))))
    later = run(tmp_path / "a.jsonl", tmp_path / "out", T0 + 2 * HOUR, T0 + 3 * HOUR)
    assert main(["materialize", "--source", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "out"),
                 "--start", T0.isoformat(), "--end", (T0 + 2 * HOUR).isoformat(), "--every", "1h"]) == 0
    assert (tmp_path / "out" / "LATEST").read_text().strip() == later.version
    (tmp_path / "out" / "LATEST").chmod(0o444)  # a re-run of the latest rewrites nothing
    assert run(tmp_path / "a.jsonl", tmp_path / "out", T0 + 2 * HOUR, T0 + 3 * HOUR).version == later.version
    (tmp_path / "out" / "LATEST").chmod(0o644)
    newest = run(tmp_path / "a.jsonl", tmp_path / "out", T0 + 2 * HOUR, T0 + 4 * HOUR)
    assert datasets.Output(tmp_path / "out").resolve(None).version == newest.version


def test_records_of_other_intervals_alone_leave_the_version_as_it_was(tmp_path):
    """A flat folder, or a day's: a file of the next hour's records, added or changed, makes the same
    version of this hour, which a re-run then leaves untouched; a file with records of this hour
    makes another."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_bytes(lines(*(trace(i, f"What is {i} plus 3?", str(i + 3)) for i in range(1, 4))))
    first = run(src, tmp_path / "out")
    later = [trace(i, f"What is {i} plus 3?", str(i + 3), at=T0 + HOUR + timedelta(minutes=i)) for i in range(4, 7)]
    (src / "b.jsonl").write_bytes(lines(*later))
    again = run(src, tmp_path / "out")
    assert again.version == first.version and again.counts["outside_interval"] == 0  # the manifest as it was
    (src / "0.jsonl").write_bytes(lines(*later[:1]))  # before a.jsonl: its blocks come first
    assert run(src, tmp_path / "out").version == first.version
    (src / "c.jsonl").write_bytes(lines(trace(9, "What is 9 plus 3?", "12")))
    assert run(src, tmp_path / "out").version != first.version
    # Parquet files alike: a file of other times' rows gathered with this hour's leaves its version.
    parquet = tmp_path / "parquet"
    parquet.mkdir()
    ours = [trace(i, f"What is {i} plus 3?", str(i + 3), latency_ms=None if i == 2 else 40.0) for i in range(1, 4)]
    pq.write_table(pa.Table.from_pylist(ours), parquet / "a.parquet")
    first = run(parquet, tmp_path / "pout")
    pq.write_table(pa.Table.from_pylist(later), parquet / "b.parquet")
    assert run(parquet, tmp_path / "pout").version == first.version
    pq.write_table(pa.Table.from_pylist(later[1:]), parquet / "b.parquet")
    assert run(parquet, tmp_path / "pout").version == first.version


def test_a_trace_at_the_last_instant_of_its_hour_in_nanoseconds_is_of_that_hour(tmp_path):
    """10:59:59.9999999Z, in the hour=10 folder, was rounded into 11:00, which the next hour's run,
    reading only its own folder, never read: in no version."""
    folder = tmp_path / "src" / "date=2026-11-22" / "hour=10"
    folder.mkdir(parents=True)
    last = {**trace(1), "start_time": "2026-11-22T10:59:59.9999999Z", "end_time": "2026-11-22T10:59:59.9999999Z"}
    (folder / "a.jsonl").write_bytes(lines(last))
    m = run(tmp_path / "src", tmp_path / "out")
    assert (m.counts["traces"], m.counts["outside_interval"]) == (1, 0) and not m.source.get("misplaced")
    assert table(m, "traces")[0]["start_time"].isoformat() == "2026-11-22T10:59:59.999999+00:00"


def test_a_dataset_store_inside_the_source_is_not_read_back_as_traces(tmp_path, caplog, monkeypatch):
    """--out under --source: each run read the versions before it as traces, and published another."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_bytes(lines(*(trace(i, f"What is {i} plus 3?", str(i + 3)) for i in range(1, 4))))
    first = run(src, src / "datasets")
    again = run(src, src / "datasets")
    assert again.version == first.version and again.counts == first.counts == {**again.counts, "traces_in": 3, "quarantined": 0}
    assert "lies inside the source" in caplog.text
    # However the path is spelled: its folder as it resolves, not the text.
    (tmp_path / "link").symlink_to(src)
    for out in (f"{src}/./datasets", f"{src}//datasets", f"{src}/../src/datasets", tmp_path / "link" / "datasets"):
        assert run(src, out).version == first.version, out
    linked = run(tmp_path / "link", src / "datasets")  # another version: its rows name their files by the link
    assert linked.counts == first.counts
    monkeypatch.chdir(tmp_path)  # a relative source: named absolute in the manifest
    assert run("src", src / "datasets").source["uri"] == str(src)


def test_a_source_inside_the_store_is_read_whole_and_the_store_as_the_source_is_refused(tmp_path, caplog, monkeypatch):
    """--source proj/traces --out proj: the versions sit beside the traces, not in them; the source
    was taken for the store's folder and not read (0 traces, exit 0). --out as --source: refused."""
    src = tmp_path / "proj" / "traces" / "date=2026-11-22" / "hour=10"
    src.mkdir(parents=True)
    (src / "a.jsonl").write_bytes(lines(*(trace(i, f"What is {i} plus 3?", str(i + 3)) for i in range(1, 4))))
    m = run(tmp_path / "proj" / "traces", tmp_path / "proj")
    assert m.counts["traces"] == 3 and "lies inside the source" not in caplog.text
    monkeypatch.chdir(tmp_path / "proj")
    assert run("traces", ".").version == m.version
    with pytest.raises(sources.SourceError, match="is the source .*: its versions would be read back as traces"):
        run(tmp_path / "proj" / "traces", tmp_path / "proj" / "traces" / ".")


@pytest.mark.parametrize("above", ["exports/2026-01-05", "archive/2025/12/31", "date=2025-12-31"])
def test_a_dated_folder_above_the_source_names_no_partition(tmp_path, above):
    """Partitions are the folders below the source: one above it (a job's dated folder) made every
    folder of the source a partition of that day, which the interval's run passed over whole, and
    a flat source's records of other times."""
    src = tmp_path / above / "traces"
    (src / "date=2026-11-22" / "hour=10").mkdir(parents=True)
    (src / "date=2026-11-22" / "hour=10" / "a.jsonl").write_bytes(lines(trace(1, "What is 1 plus 3?", "4")))
    (src / "b.jsonl").write_bytes(lines(trace(2, "What is 2 plus 3?", "5")))
    m = run(src, tmp_path / "out")
    assert m.counts["traces"] == 2 and not m.source.get("misplaced")


def test_a_worker_whose_parent_was_killed_ends(tmp_path):
    """SIGKILL (the OOM killer) runs no cleanup: a worker waiting on its queue would live on, holding its memory."""
    parent = subprocess.Popen([sys.executable, "-c", "import os, subprocess, sys, time\n"
                               "child = subprocess.Popen([sys.executable, '-c', 'import sys; from ctpipe.materialize import _orphaned; "
                               "_orphaned(int(sys.argv[1]))', str(os.getpid())])\n"
                               "print(child.pid, flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _running(child):
        time.sleep(0.2)
    if _running(child):
        os.kill(child, signal.SIGKILL)
        pytest.fail("the orphaned worker lived on")


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs: neither gone nor a zombie (which an init that reaps nothing keeps)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_spill_folders_of_runs_that_are_gone_are_removed_by_the_next(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    host = mat._spill_owner().split("@")[1]
    kept = [f"ctpipe-spill-{os.getpid()}@{host}abc", f"ctpipe-spill-{gone}@elsewhere-abc", "ctpipe-spill-x-abc"]
    for name in [f"ctpipe-spill-{gone}@{host}abc", *kept]:
        (tmp_path / "tmp" / name).mkdir()
    (tmp_path / "src.jsonl").write_bytes(lines(trace(1)))
    run(tmp_path / "src.jsonl", tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "tmp")) == sorted(kept)


def test_partitions_are_read_for_the_intervals_their_records_may_start_in(tmp_path, capsys):
    """A writer that partitions by arrival time puts a request begun at 10:59:59 in hour=11: the run
    of 10:00 reads hour=11 only when told so, and a run that finds records their partition should
    not hold says so; a date= folder alone is a day's partition."""
    src, minute = tmp_path / "src", timedelta(minutes=1)
    for folder, starts in {"date=2026-11-22/hour=10": [T0 + 30 * minute, T0 + 90 * minute],
                           "date=2026-11-22/hour=11": [T0 + HOUR - timedelta(seconds=1), T0 + 65 * minute],
                           "date=2026-11-21": [T0 - 24 * HOUR],
                           "date=2026-11-23": [T0 + 13 * HOUR + 30 * minute, T0 + 24 * HOUR]}.items():
        (src / folder).mkdir(parents=True)
        (src / folder / "part-a.jsonl").write_bytes(lines(*(trace(i, at=t) for i, t in enumerate(starts, 10 * len(folder)))))

    def arrival(lag):
        return DatasetConfig(partitioned_by="arrival", arrival_lag=lag)

    def check(start, end, dataset, files, traces_in, outside, misplaced):
        m = run(src, tmp_path / "out", start, end, dataset=dataset)
        assert (m.source["files"], m.counts["traces_in"], m.counts["outside_interval"]) == (files, traces_in, outside)
        assert m.source["misplaced"] == {f"{side}_partition": {"traces": n, "most_seconds": s} for side, (n, s) in misplaced.items()}
        return m

    # Hours. 11:30 in hour=10 is missed by the run of 11:00, and 10:59:59 in hour=11 by that of 10:00
    # unless it reads hour=11 too.
    by_start = check(T0, T0 + HOUR, DatasetConfig(), 1, 1, 1, {"after": (1, 1800.0)})
    assert check(T0, T0 + HOUR, DatasetConfig(arrival_lag=HOUR), 1, 1, 1, {"after": (1, 1800.0)}).version == by_start.version
    check(T0 + HOUR, T0 + 2 * HOUR, DatasetConfig(), 1, 1, 1, {"before": (1, 1.0)})
    late = check(T0 + HOUR, T0 + 2 * HOUR, arrival(timedelta(0)), 1, 1, 1, {"before": (1, 1.0)})
    assert mat.misplaced_lines(late.source["misplaced"], arrival(timedelta(0))) == [
        "1 traces started up to 0:00:01 before the partition folder holding them, more than dataset.arrival_lag "
        "(0:00:00): the run of the interval each started in read that partition only if its interval reached it; "
        "set arrival_lag to at least 0:00:01, and run those intervals again"]
    by_arrival = check(T0, T0 + HOUR, arrival(timedelta(seconds=1)), 2, 2, 2, {"after": (1, 1800.0)})
    assert by_arrival.version != by_start.version and by_arrival.config["dataset"]["partition_lag_s"] == 1.0
    assert "partition_lag_s" not in by_start.config["dataset"]
    check(T0 + HOUR, T0 + 2 * HOUR, arrival(timedelta(minutes=15)), 1, 1, 1, {})
    # Days: the 22nd reads its hours (and says what they hold) and no other day; 23:30 of the 22nd, in
    # the 23rd's folder, needs a lag.
    check(T0 - 10 * HOUR, T0 + 14 * HOUR, DatasetConfig(), 2, 4, 0, {"after": (1, 1800.0), "before": (1, 1.0)})
    assert run(src, tmp_path / "out", T0 + 13 * HOUR, T0 + 14 * HOUR).files == 0  # its record lies in the 23rd's folder
    check(T0 + 13 * HOUR, T0 + 14 * HOUR, arrival(HOUR), 1, 1, 1, {})
    check(T0 + 14 * HOUR, T0 + 38 * HOUR, DatasetConfig(), 1, 1, 1, {"before": (1, 1800.0)})

    args = ["materialize", "--source", str(src), "--out", str(tmp_path / "cli"), "--start", (T0 + HOUR).isoformat(),
            "--end", (T0 + 2 * HOUR).isoformat()]
    assert main(args) == 0 and ("1 traces started up to 0:00:01 before the partition folder holding them: the run "
                                "of the interval each started in read that partition only if its interval reached it; "
                                "for a source partitioned by arrival time, set partitioned_by to 'arrival' and "
                                "arrival_lag to at least 0:00:01") in capsys.readouterr().out
    assert main(args + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["misplaced"] == {"before_partition": {"traces": 1, "most_seconds": 1.0}}


def test_files_that_land_after_their_hour_was_built_are_named_by_the_next_runs(tmp_path, caplog, capsys):
    """Files that arrive in an hour's partition after its run are read by no later run (each reads its
    own partitions): the next runs list the hours before theirs again and say which changed, and what
    their run built, until a re-run of the hour publishes what they hold."""
    src, out = tmp_path / "src", tmp_path / "out"

    def hour(h: int, name: str, *numbers: int) -> None:
        folder = src / "date=2026-11-22" / f"hour={10 + h:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(lines(*(trace(i, f"What is {i} plus 1?", str(i + 1), at=T0 + h * HOUR + i * SECOND)
                                            for i in numbers)))

    def built(h: int):
        return run(src, out, T0 + h * HOUR, T0 + (h + 1) * HOUR)

    def said(h: int) -> list:
        return [(T0 + h * HOUR).isoformat(), (T0 + (h + 1) * HOUR).isoformat()]

    hour(0, "a.jsonl", 1, 2)
    hour(1, "a.jsonl", 3)
    first, second = built(0), built(1)
    assert first.source["late"] == second.source["late"] == []  # nothing changed since
    assert isinstance(built(2), mat.NoTraces)  # an hour with no file yet: recorded all the same
    hour(0, "late.jsonl", 4, 5)  # two hours late
    hour(2, "a.jsonl", 6)  # a whole hour late
    hour(3, "a.jsonl", 7)
    caplog.clear()
    third = built(3)
    assert third.source["late"] == [{"interval": said(2), "version": None, "files": 1},
                                    {"interval": said(0), "version": first.version, "files": 2}]
    assert (f"the files of [{said(0)[0]}, {said(0)[1]}) changed since its run listed them (it built {first.version}): "
            "2 files now, which no later run reads; a re-run of that interval publishes what they hold") in caplog.text
    assert "(it found no trace): 1 files now" in caplog.text
    # Re-runs publish them; the runs after say no more, a re-run that finds its version too.
    again, late = built(0), built(2)
    assert again.version != first.version and again.counts["traces"] == 4 and late.counts["traces"] == 1
    found = built(3)
    assert found.found and found.source["late"] == []
    hour(4, "a.jsonl", 8)
    fourth = built(4)
    assert fourth.source["late"] == []
    # The command says it too, in its summary and its JSON.
    hour(2, "later.jsonl", 9)
    hour(5, "a.jsonl", 10)
    args = ["materialize", "--source", str(src), "--out", str(out), "--start", (T0 + 5 * HOUR).isoformat(),
            "--end", (T0 + 6 * HOUR).isoformat()]
    assert main(args) == 0
    assert (f"  the files of [{said(2)[0]}, {said(2)[1]}) changed since its run listed them (it built {late.version}): "
            "2 files now, which no later run reads; a re-run of that interval publishes what they hold") \
        in capsys.readouterr().out
    assert main(args + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["late"] == [{"interval": said(2), "version": late.version, "files": 2}]
    # A run that finds no trace says it as well.
    hour(4, "late.jsonl", 11)
    quiet = built(6)
    assert isinstance(quiet, mat.NoTraces) and quiet.late == [{"interval": said(4), "version": fourth.version, "files": 2}]
    assert any(line.startswith(f"the files of [{said(4)[0]}, ") for line in quiet.lines(DatasetConfig()))


@pytest.mark.parametrize("layout", ["flat", "days", "arrival", "hours_in_90_minutes"])
def test_a_run_that_cannot_tell_an_hours_files_says_nothing(tmp_path, caplog, layout):
    """A flat source is read whole by every run, a day's folder grows all day long, with
    partitioned_by=arrival a late trace lands in a later partition (its run counts it misplaced), and
    a 90-minute run's last hour holds the next run's traces too: no run says an interval's files
    changed."""
    src, length = tmp_path / "src", 1.5 * HOUR if layout == "hours_in_90_minutes" else HOUR
    folder = {"flat": src, "days": src / "date=2026-11-22", "arrival": src / "date=2026-11-22" / "hour=10",
              "hours_in_90_minutes": src / "date=2026-11-22" / "hour=11"}[layout]
    folder.mkdir(parents=True)
    dataset = DatasetConfig(partitioned_by="arrival", arrival_lag=timedelta(0)) if layout == "arrival" else None
    ninety = layout == "hours_in_90_minutes"  # [10:00, 11:30) and [11:30, 13:00), the second's traces in hour=11 too
    (folder / "a.jsonl").write_bytes(lines(trace(1, "What is 1 plus 1?", "2", at=T0 + (HOUR if ninety else 0 * HOUR))))
    first = run(src, tmp_path / "out", T0, T0 + length, dataset=dataset)
    (folder / "b.jsonl").write_bytes(lines(trace(2, "What is 2 plus 1?", "3", at=T0 + 1.75 * HOUR)))
    later = run(src, tmp_path / "out", T0 + length, T0 + 2 * length, dataset=dataset)
    assert first.counts["traces"] == 1 and first.source["late"] == []
    assert isinstance(later, mat.NoTraces) or later.source["late"] == []
    assert "changed since its run" not in caplog.text


def test_a_broken_line_after_a_misplaced_record_is_quarantined_by_a_run_that_reads_its_partition(tmp_path):
    """A broken line belongs to the interval of the record before it: a record of 09:59:59 in hour=10
    took it to the run of 09:00, which does not read hour=10, and no run counted it."""
    hour = tmp_path / "src" / "date=2026-11-22" / "hour=10"
    hour.mkdir(parents=True)
    (hour / "part-a.jsonl").write_bytes(lines(trace(1, at=T0 - timedelta(seconds=1)), b"{broken",
                                              trace(2, "What is 9 plus 1?", "10", at=T0 + timedelta(seconds=1)),
                                              trace(3, at=T0 + HOUR + timedelta(seconds=5)), b"{broken too"))
    runs = [run(tmp_path / "src", tmp_path / "out", T0 + h * HOUR, T0 + (h + 1) * HOUR) for h in (-1, 0, 1)]
    assert runs[0].files == runs[2].files == 0  # hour=10 is not theirs to read
    assert accounted(runs[1]) and runs[1].counts["traces"] == 1 and runs[1].quarantine_reasons == {"invalid_json": 2}


def test_a_firehose_layout_is_partitioned_by_hour_and_its_objects_read_whatever_their_names(tmp_path, monkeypatch):
    """Kinesis Data Firehose writes YYYY/MM/DD/HH folders by arrival time, with no key=, names its
    objects <stream>-<version>-<time>-<uuid> (no suffix, or ".gz" when it compresses them), and by
    default joins the records in them with no delimiter. Only the files of the partitions a run may
    read are opened to see what they hold."""
    src = tmp_path / "firehose"
    for hour, starts in {9: [T0 - HOUR / 2], 10: [T0 + HOUR / 12], 11: [T0 + HOUR - timedelta(seconds=2), T0 + HOUR * 7 / 6]}.items():
        (src / f"2026/11/22/{hour:02d}").mkdir(parents=True)
        data = b"".join(json.dumps(trace(n := hour * 10 + i, f"What is {n} plus 1?", str(n + 1), at=t)).encode()
                        for i, t in enumerate(starts))
        name = f"2026/11/22/{hour:02d}/traces-1-2026-11-22-{hour:02d}-04-59-{uuid.UUID(int=hour)}"
        (src / (name + ".gz" if hour == 11 else name)).write_bytes(gzip.compress(data) if hour == 11 else data)
    (src / "2026/11/22/10/notes.txt").write_text("what is in here\n")  # its bytes say no
    opened, listed = [], []
    monkeypatch.setattr(sources, "_sniffed", lambda fs, file, sniffed=sources._sniffed: opened.append(file) or sniffed(fs, file))
    monkeypatch.setattr(os, "scandir", lambda path, scandir=os.scandir: listed.append(path) or scandir(path))
    m = run(src, tmp_path / "out")
    assert (m.source["files"], m.counts["traces_in"], m.source["misplaced"]) == (1, 1, {})
    # The other hours' folders are not even listed.
    assert [p for p in listed if str(p).startswith(str(src))] == [
        f"{src}/", f"{src}/2026/", f"{src}/2026/11/", f"{src}/2026/11/22/", f"{src}/2026/11/22/10/"]
    assert m.source["skipped_files"] == {str(src / "2026/11/22/10/notes.txt"): sources.NOT_READ}
    assert sorted(opened) == [str(src / "2026/11/22/10/notes.txt"),
                              str(src / f"2026/11/22/10/traces-1-2026-11-22-10-04-59-{uuid.UUID(int=10)}")]
    m = run(src, tmp_path / "out", dataset=DatasetConfig(partitioned_by="arrival", arrival_lag=timedelta(minutes=5)))
    assert (m.source["files"], m.counts["traces_in"], m.counts["outside_interval"], m.source["misplaced"]) == (2, 2, 1, {})
    assert [(r["trace_id"], r["source_line"]) for r in m.read("traces").select(["trace_id", "source_line"]).to_pylist()] == [
        (trace(100)["trace_id"], 1), (trace(110)["trace_id"], 1)]  # each record numbered by its place in its file
    m = run(src, tmp_path / "out", T0 + HOUR, T0 + 2 * HOUR)
    assert [r["source_line"] for r in m.read("traces").select(["source_line"]).to_pylist()] == [2]
    assert m.source["misplaced"] == {"before_partition": {"traces": 1, "most_seconds": 2.0}}


def test_sources_and_versions_behind_any_fsspec_uri(tmp_path, monkeypatch):
    import fsspec

    fs = fsspec.filesystem("memory")
    with fs.open("/traces/date=2026-11-22/hour=10/part-a.jsonl.gz", "wb") as f:
        f.write(gzip.compress(lines(trace(1, "What is 101 plus 1?", "102"), b"{cut")))
    fs.pipe("/traces/date=2026-11-21/hour=10/part-a.jsonl", lines(trace(2, at=T0 - 24 * HOUR)))
    listed = []
    ls = type(fs).ls
    monkeypatch.setattr(type(fs), "ls", lambda self, path, **kw: listed.append(path) or ls(self, path, **kw))
    m = run("memory://traces", "memory://datasets")
    assert m.uri == f"memory://datasets/{m.version}" and m.counts["traces_in"] == 2
    assert {p for p in listed if p.startswith("/traces")} == {  # the 21st's folder is not listed
        "/traces", "/traces/date=2026-11-22", "/traces/date=2026-11-22/hour=10"}
    assert json.loads(fs.cat(f"/datasets/{m.version}/manifest.json"))["files"]["traces"]["rows"] == 1
    assert fs.cat("/datasets/LATEST").decode().strip() == m.version
    assert not [p for p in fs.ls("/datasets", detail=False) if ".tmp-" in p]
    assert m.read("quarantine")["reason"].to_pylist() == ["invalid_json"]
    assert run("memory://traces", "memory://datasets").version == m.version


def test_dedup_verdicts_are_those_of_one_row_at_a_time_in_order(tmp_path):
    def one_by_one(parts):  # the rule: first occurrence wins, exact content before id before normalized content
        ids, exact, norm, out = set(), set(), set(), []
        for part in parts:
            verdicts = {}
            for i, (k_id, k_exact, k_norm) in enumerate(zip(*part)):
                if k_exact in exact:
                    verdicts[i] = "duplicate"
                elif k_id in ids:
                    verdicts[i] = "duplicate_trace_id"
                elif k_norm in norm:
                    verdicts[i] = "near_duplicate"
                else:
                    ids.add(k_id), exact.add(k_exact), norm.add(k_norm)
            out.append(verdicts)
        return out

    rng = np.random.default_rng(0)
    for keyspace, hot_keys in ((5, 1 << 20), (40, 1 << 20), (1000, 1 << 20), (1000, 64)):  # 64: keys moved to disk
        parts = [[rng.integers(0, keyspace, size, dtype=np.uint64) for _ in range(3)]
                 for size in rng.integers(0, 60, 30)]
        dedup = mat._Dedup(str(tmp_path), hot_keys=hot_keys)
        got = [dedup.verdicts(dict(zip(("id_key", "exact_key", "norm_key"), part))) for part in parts]
        assert got == one_by_one(parts)
        assert any(got)
    assert dedup.ids.runs and dedup.exact.runs


@pytest.mark.parametrize("strategy", ["best_vs_worst", "all_pairs"])
def test_spills_keep_only_the_answers_pairing_can_take_and_pair_as_before(strategy):
    from ctpipe.datasets import dpo_pairs

    rng = np.random.default_rng(1)
    for k, values, texts in ((1, 40, 6), (2, 40, 6), (3, 40, 6), (1, 2, 3000), (3, 2, 3000)):
        cfg = DatasetConfig(dpo_strategy=strategy, dpo_max_pairs_per_prompt=k, dpo_min_margin=0.25)
        n = 3000
        rows = pa.table({  # crowded prompts, tied rewards (of 40 values, or a verifier's 0 or 1), texts said again
            "row": rng.permutation(n), "prompt_key": rng.integers(0, 40, n).astype(np.uint64),
            "trace_id": [f"t{i}" for i in rng.permutation(n)],
            "completion": [str(c) + " " * int(s) for c, s in zip(rng.integers(0, texts, n), rng.integers(0, 2, n))],
            "final_reward": pa.array(np.where(rng.random(n) < 0.1, np.nan, rng.integers(0, values, n) / (values - 1)),
                                     from_pandas=True),
            "reference_answer": [str(x) if x < 3 else None for x in rng.integers(0, 100, n)]})  # rare, and they differ

        def pairing(table):  # each prompt: its earliest row, its earliest reference answer, and its pairs
            out = {}
            for r in table.to_pylist():
                out.setdefault(r["prompt_key"], []).append(r)
            return {key: (min(a["row"] for a in answers),
                          min(((a["row"], a["reference_answer"]) for a in answers if a["reference_answer"]), default=None),
                          [(c["trace_id"], r["trace_id"]) for c, r in dpo_pairs(answers, cfg)])
                    for key, answers in out.items()}

        whole = pairing(rows)
        assert sum(len(pairs) for _, _, pairs in whole.values()) > 20
        spills = [mat._pairable(rows.slice(at, 1000), k) for at in (0, 1000, 2000)]  # as three spills would
        assert pairing(pa.concat_tables(spills)) == whole
        assert pairing(mat._pairable(pa.concat_tables(spills), k)) == whole
        assert sum(map(len, spills)) < 0.55 * n  # 25 answers a prompt a spill: about 12 kept at k=3
        if texts > 6:  # answers that all differ: a tie keeps k + 1 of each end, not half a prompt's answers
            assert max(Counter(s["prompt_key"].to_pylist()).most_common(1)[0][1] for s in spills) <= 2 + 6 * (k + 1)


def test_a_prompt_asked_by_many_users_pairs_as_when_nothing_is_left_out(tmp_path, monkeypatch):
    records = [trace(i, "What is 2 plus 3?", f"{i % 7} apples", feedback={"thumb": "up" if i % 3 else "down", "rating": None},
                     reference_answer="5") for i in range(400)]
    (tmp_path / "a.jsonl").write_bytes(lines(*records))
    monkeypatch.setattr(mat, "_SPILL_BYTES", 1)  # a spill per block: pairing gathers what many spills kept
    monkeypatch.setattr(sources, "BLOCK_BYTES", 4096)
    reward = RewardConfig(verifier="exact", verifiable_weight=0.5, feedback_weight=0.5)
    few = run(tmp_path / "a.jsonl", tmp_path / "few", reward=reward)
    monkeypatch.setattr(mat, "_pairable", lambda rows, k: rows)
    every = run(tmp_path / "a.jsonl", tmp_path / "every", reward=reward)
    assert few.version == every.version and few.counts == every.counts and few.counts["dpo_pairs"] == 2
    for name in ("grpo", "dpo"):
        assert table(few, name) == table(every, name)


def test_the_tasks_verifier_answers_its_questions_and_keeps_the_references_of_others(tmp_path):
    """With the built-in task's verifier, its question's answer is the reference; a prompt not of the
    task keeps the one its trace gives (published, and its GRPO row's), with no verifiable reward."""
    (tmp_path / "a.jsonl").write_bytes(lines(trace(1, "What is 2 plus 3?", "5", reference_answer="7"),
                                             trace(2, "Capital of France?", "Paris", reference_answer="Paris")))
    m = run(tmp_path / "a.jsonl", tmp_path / "out")
    rows = {r["trace_id"]: r for r in table(m, "traces")}
    assert [(rows[t]["reference_answer"], rows[t]["verifiable_reward"]) for t in ("t1", "t2")] == [("5", 1.0), ("Paris", None)]
    assert sorted(r["answer"] for r in table(m, "grpo")) == ["5", "Paris"]


def test_a_run_from_a_thread_of_its_own_labels_with_math_verify(tmp_path):
    """math-verify's time limits are signal alarms, which only the main thread may set: run from
    another thread, a small source is labeled in a worker process, not in the caller's thread (where
    math-verify refused to run, or would run without limits)."""
    import threading

    (tmp_path / "a.jsonl").write_bytes(lines(trace(1, "Half of one?", "$\\frac{1}{2}$", reference_answer="0.5"),
                                             trace(2, "Half of one?", "0.25", reference_answer="0.5")))
    got = []
    reward = RewardConfig(verifier="math", verifiable_weight=1, feedback_weight=0)
    thread = threading.Thread(target=lambda: got.append(run(tmp_path / "a.jsonl", tmp_path / "out", reward=reward)))
    thread.start()
    thread.join()
    assert {r["trace_id"]: r["verifiable_reward"] for r in table(got[0], "traces")} == {"t1": 1.0, "t2": 0.0}


def test_a_prompts_grpo_answer_is_the_first_reference_any_of_its_traces_gives(tmp_path, monkeypatch):
    """An application that logs a reference only at times: the prompt's first trace may have none."""
    monkeypatch.setattr(mat, "_SPILL_BYTES", 1)  # a spill per block, pruned each (see _pairable)
    monkeypatch.setattr(sources, "BLOCK_BYTES", 2048)
    unrated = {"thumb": None, "rating": None}
    # A blank reference is none, as the verifiers take it: published as null, and no GRPO answer.
    records = [trace(i, "What is 6 times 7?", f"{i} apples", feedback=unrated,
                     reference_answer={2: "", 3: " \t", 5: "42", 9: "forty-two"}.get(i)) for i in range(40)]  # crowded: pruned per spill
    records += [trace(40, "What is 9 plus 1?", "10", feedback=unrated)]
    (tmp_path / "a.jsonl").write_bytes(lines(*records))
    m = run(tmp_path / "a.jsonl", tmp_path / "out", reward=RewardConfig(verifier="exact"))
    assert table(m, "grpo") == [{"prompt": [{"role": "user", "content": "What is 6 times 7?"}], "answer": "42"}]
    assert m.counts["grpo_prompts"] == 1
    given = {r["trace_id"]: r["reference_answer"] for r in table(m, "traces")}
    assert [given[f"t{i}"] for i in range(2, 6)] == [None, None, None, "42"]


def test_a_reference_keeps_its_numbers_that_look_like_a_card_or_a_phone(tmp_path):
    """F(62) passes the card check and a toll-free number is a phone's form: scrubbed, GRPO's reward
    in training called the right answer wrong. Its addresses and secrets are scrubbed as any text's."""
    unrated = {"thumb": None, "rating": None}
    records = [trace(0, "What is F(62)?", "4052739537881", feedback=unrated, reference_answer="4052739537881"),
               trace(1, "Which number do I call?", "1-800-555-0199", feedback=unrated, reference_answer="1-800-555-0199"),
               trace(2, "Whom do I write to?", "jo", feedback=unrated, reference_answer="jo@example.com")]
    (tmp_path / "a.jsonl").write_bytes(lines(*records))
    m = run(tmp_path / "a.jsonl", tmp_path / "out", reward=RewardConfig(verifier="exact"))
    assert {r["answer"] for r in table(m, "grpo")} == {"4052739537881", "1-800-555-0199", "<EMAIL>"}
    assert {r["trace_id"]: (r["reference_answer"], r["completion"], r["verifiable_reward"]) for r in table(m, "traces")} == {
        "t0": ("4052739537881", "<CARD>", 1.0), "t1": ("1-800-555-0199", "<PHONE>", 1.0), "t2": ("<EMAIL>", "jo", 0.0)}
    assert m.scrubbed == {"card": 1, "phone": 1, "email": 1}


def test_only_a_prompts_first_row_spills_its_messages_and_rows_without_reward_stay_out(tmp_path, monkeypatch):
    unrated = {"thumb": None, "rating": None}
    records = [trace(0, "What is 2 plus 3?", "no idea", feedback=unrated),  # first of its prompt: no reward, yet its GRPO row
               trace(1, "What is 2 plus 3?", "5", feedback={"thumb": "up", "rating": None}),
               trace(2, "What is 2 plus 3?", "four", feedback=unrated),  # no reward and not first: never paired
               trace(3, "What is 2 plus 3?", "6", feedback={"thumb": "down", "rating": None}),
               trace(4, "What is 9 plus 1?", "10", feedback=unrated, reference_answer="10")]
    (tmp_path / "a.jsonl").write_bytes(lines(*records))
    spilled = []
    pair = mat._pair
    monkeypatch.setattr(mat, "_pair", lambda index, table: spilled.append(table) or pair(index, table))
    m = run(tmp_path / "a.jsonl", tmp_path / "out", reward=RewardConfig(verifier="exact"),
            dataset=DatasetConfig(dpo_min_margin=0.5))
    rows = sorted((r for t in spilled for r in t.to_pylist()), key=lambda r: r["row"])
    assert [(r["trace_id"], r["messages"] is not None) for r in rows] == [
        ("t0", True), ("t1", False), ("t3", False), ("t4", True)]
    asked = [{"role": "user", "content": "What is 2 plus 3?"}]
    assert table(m, "dpo") == [{"prompt": asked, "chosen": [{"role": "assistant", "content": "5"}],
                                "rejected": [{"role": "assistant", "content": "6"}], "chosen_reward": 1.0,
                                "rejected_reward": 0.0}]
    assert table(m, "grpo") == [{"prompt": [{"role": "user", "content": "What is 9 plus 1?"}], "answer": "10"}]


def _csv_text(rows: list[dict]) -> bytes:
    """Rows as Langfuse's CSV export writes them: lists and objects as JSON text, times as
    ``YYYY-MM-DD HH:MM:SS.ffffff``, null as an empty value."""
    import csv
    import io

    def text(v):
        if v is None:
            return ""
        if isinstance(v, datetime):
            return v.strftime("%Y-%m-%d %H:%M:%S.%f")
        if isinstance(v, list) and v and isinstance(v[0], tuple):  # a map's items
            return json.dumps(dict(v))
        return json.dumps(v) if isinstance(v, (list, dict)) else str(v)

    out = io.StringIO()
    writer = csv.DictWriter(out, list(rows[0]))
    writer.writeheader()
    writer.writerows({k: text(v) for k, v in r.items()} for r in rows)
    return out.getvalue().encode()


@pytest.mark.parametrize("kind", ["parquet", "csv.gz"])
def test_an_export_of_enriched_observations_is_read_as_langfuse_writes_it(tmp_path, kind):
    """Langfuse's scheduled export as it writes it since its v4: observations_v2/ and scores/ in Parquet
    (times without a zone, counts in a map, the answer's tool calls listed apart, the trace's release
    on each row), or in gzipped CSV (each value a text), and each run's manifest in manifests/. Windows
    share their bounds: the next window's files repeat what lies on one, which counts once (a
    generation's repeat is a duplicate)."""
    src = tmp_path / "src" / "project"
    (src / "manifests").mkdir(parents=True)
    (src / "manifests" / "2026-11-22T10-00.json").write_text('{"files": [], "window": {}}')
    call = '{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}'
    at = T0.replace(tzinfo=None)
    observations = [{"id": f"g{i}", "trace_id": f"t{i}", "type": "GENERATION", "parent_observation_id": "",
                     "start_time": at + timedelta(minutes=i), "end_time": at + timedelta(minutes=i, seconds=1),
                     "version": "", "provided_model_name": "m", "release": "v7",
                     "input": json.dumps([{"role": "user", "content": f"What is {i} plus 1?"}]),
                     "output": json.dumps({"role": "assistant", "content": str(i + 1)}),
                     "usage_details": [("input", 9), ("output", 1), ("total", 10)], "tags": ["prod"],
                     "tool_calls": [call] if i == 2 else []} for i in range(3)]
    scores = [{"id": f"s{i}", "timestamp": at, "trace_id": f"t{i}", "observation_id": f"g{i}", "name": "judge",
               "value": value, "source": "EVAL", "data_type": kind, "string_value": label, "comment": None}
              for i, value, kind, label in ((0, 0.5, "NUMERIC", None), (1, 0.0, "TEXT", "terse"), (1, 1.0, "BOOLEAN", "True"))]
    schema = pa.schema([("id", pa.string()), ("trace_id", pa.string()), ("type", pa.string()),
                        ("parent_observation_id", pa.string()), ("start_time", pa.timestamp("us")),
                        ("end_time", pa.timestamp("us")), ("version", pa.string()), ("provided_model_name", pa.string()),
                        ("release", pa.string()), ("input", pa.string()), ("output", pa.string()),
                        ("usage_details", pa.map_(pa.string(), pa.uint64())), ("tags", pa.list_(pa.string())),
                        ("tool_calls", pa.list_(pa.string()))])
    for folder, rows, window in (("observations_v2", observations, "10-00"), ("observations_v2", observations[:1], "11-00"),
                                 ("scores", scores, "10-00"), ("scores", scores[:1], "11-00")):
        (src / folder).mkdir(exist_ok=True)
        if kind == "parquet":
            pq.write_table(pa.Table.from_pylist(rows, schema=schema if folder != "scores" else None),
                           src / folder / f"2026-11-22T{window}.parquet")
        else:
            (src / folder / f"2026-11-22T{window}.csv.gz").write_bytes(gzip.compress(_csv_text(rows)))
    m = run(tmp_path / "src", tmp_path / "out", reward=RewardConfig(judge_weight=1.0, verifiable_weight=0.0,
                                                                    feedback_weight=0.0))
    assert accounted(m) and m.counts["traces_in"] == 4
    assert m.quarantine_reasons == {"duplicate": 1, "no_text_answer": 1}
    rows = table(m, "traces")
    assert [(r["trace_id"], r["model_name"], r["model_version"], r["final_reward"]) for r in rows] == [
        ("t0:g0", "m", "v7", 0.5), ("t1:g1", "m", "v7", 1.0)]
    assert [len(r["scores"]) for r in rows] == [1, 1]
    assert m.source["skipped_files"] == {f"{src}/manifests/": sources._LANGFUSE_MANIFESTS_NOT_READ}


def test_workers_start_whatever_the_main_script_does_when_imported_again(tmp_path):
    """Under Airflow, ``__main__`` is the ``airflow`` script, whose import in a spawned worker failed (the
    task's environment blocks the metadata database's URL): workers must not import it again."""
    import subprocess
    import sys

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_bytes(lines(*(trace(i, f"What is {i} plus 1?", str(i + 1)) for i in range(40))))
    script = tmp_path / "airflow_like.py"
    script.write_text(f"""
import json, sys
if __name__ != "__main__":  # imported again, as a spawned worker imports the main script
    raise SystemExit("the main script was imported again in a worker")
from datetime import datetime
from ctpipe import materialize as mat
from ctpipe.config import DatasetConfig, RewardConfig, TaskConfig
mat._IN_PROCESS_BYTES = 0
start = datetime.fromisoformat({T0.isoformat()!r})
m = mat.materialize({str(src)!r}, {str(tmp_path / "out")!r}, start, start + mat.timedelta(hours=1), task=TaskConfig(),
                    reward=RewardConfig(), dataset=DatasetConfig(workers=2))
print(json.dumps(m.counts))
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1])["traces"] == 40


def test_a_gathered_file_whose_lines_make_several_rows_still_has_its_other_lines_read(tmp_path, monkeypatch):
    """A small file whose OpenAI log of two choices makes two rows, beside a line the fast path leaves
    (a broken one, a log in the flat layout): that line is read, as when each file is a block of its
    own, not dropped as if the file had been taken whole."""
    def log(i: int, n: int) -> dict:
        return choices_log([f"{i + 3 + k}" for k in range(n)], f"What is {i} plus 3?", id=f"c{i}")

    src = tmp_path / "src"
    src.mkdir()
    flat = {**OPENAI["response"], "id": "flat", "messages": [{"role": "user", "content": "What is 9 plus 3?"}]}
    (src / "a.jsonl").write_bytes(lines(log(1, 2), b"{broken"))
    (src / "b.jsonl").write_bytes(lines(log(2, 2), flat))
    (src / "c.jsonl").write_bytes(lines(log(3, 1)))
    start = datetime.fromtimestamp(OPENAI["response"]["created"], timezone.utc).replace(minute=0, second=0)
    gathered = run(src, tmp_path / "gathered", start, start + HOUR)
    monkeypatch.setattr(sources, "gathered", lambda blocks: blocks)
    alone = run(src, tmp_path / "alone", start, start + HOUR)
    assert gathered.counts == alone.counts and gathered.counts["traces_in"] == 2 + 1 + 2 + 1 + 1
    assert gathered.quarantine_reasons == alone.quarantine_reasons == {"invalid_json": 1}
    assert [r["trace_id"] for r in table(gathered, "traces")] == ["c1:0", "c1:1", "c2:0", "c2:1", "flat", "c3"]


def test_bytes_not_utf8_in_a_text_the_fast_paths_read_are_quarantined_as_such(tmp_path):
    """pyarrow's JSON reader keeps bytes that are not UTF-8 in a text without escapes; the shape
    checks skip the texts: such a line is the exact path's, which names it, and the run goes on."""
    src = tmp_path / "src"
    src.mkdir()
    two = choices_log(["fiveXFF0", "fiveXFF1"])
    ours = trace(1, "What is 2 plus 3?", "fiveXFF")
    (src / "a.jsonl").write_bytes(lines(two, ours, trace(2, "What is 4 plus 4?", "8")).replace(b"XFF", b"\xff"))
    start = datetime.fromtimestamp(OPENAI["response"]["created"], timezone.utc).replace(minute=0, second=0)
    m = run(src, tmp_path / "out", min(start, T0), max(start, T0) + HOUR)
    assert m.quarantine_reasons == {"invalid_utf8": 2} and m.counts["traces"] == 1 and accounted(m)


def test_a_join_part_of_generations_and_batch_outputs_keeps_them_in_the_order_read(tmp_path):
    """Langfuse generations between two files of a batch's outputs, all taken by their fast paths (one
    path after the other): the part's rows come in the order the files were read."""
    created = int(T0.timestamp())
    requests = [{"custom_id": f"q-{i}", "method": "POST", "url": "/v1/chat/completions",
                 "body": {"model": "m", "messages": [{"role": "user", "content": f"What is {i} plus 1?"}]}} for i in range(4)]
    outputs = [{"id": f"b{i}", "custom_id": f"q-{i}", "error": None, "response": {"status_code": 200, "body": {
        "id": f"chatcmpl-{i}", "object": "chat.completion", "created": created + i, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": str(i + 1)}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}}}} for i in range(4)]
    generations = [{"id": f"g{i}", "traceId": f"t{i}", "type": "GENERATION", "model": "m",
                    "startTime": (T0 + timedelta(minutes=i)).isoformat(),
                    "input": [{"role": "user", "content": f"What is {i} times 2?"}],
                    "output": {"role": "assistant", "content": str(2 * i)}} for i in range(3)]
    src = tmp_path / "src"
    src.mkdir()
    (src / "a_batch_output.jsonl").write_bytes(lines(*outputs[:2]))
    (src / "b_observations.jsonl").write_bytes(lines(*generations))
    (src / "c_batch_output.jsonl").write_bytes(lines(*outputs[2:]))
    (src / "batch_input.jsonl").write_bytes(lines(*requests))
    m = run(src, tmp_path / "out")
    assert [r["trace_id"] for r in table(m, "traces")] == [
        "chatcmpl-0", "chatcmpl-1", "t0:g0", "t1:g1", "t2:g2", "chatcmpl-2", "chatcmpl-3"]


def test_generations_with_many_scores_are_joined_a_few_at_a_time_as_all_at_once(tmp_path, monkeypatch):
    """Trace-level scores attach to every generation of their trace, and one generation has many scores
    of its own: joined a few generations at a time, with only what attaches to them, they give the
    tables joined all at once."""
    src = tmp_path / "src"
    src.mkdir()
    scores = [{"id": f"s{t}-{k}", "traceId": f"t{t}", "name": f"judge{k % 3}", "value": (t + k) % 10 / 10,
               "dataType": "NUMERIC", "source": "EVAL"} for t in range(3) for k in range(40)]
    scores += [{"id": f"own{k}", "traceId": "t1", "observationId": "g1-5", "name": "judge", "value": k % 2,
                "dataType": "NUMERIC", "source": "ANNOTATION"} for k in range(300)]
    (src / "scores.jsonl").write_bytes(lines(*scores))
    (src / "observations.jsonl").write_bytes(lines(*(
        {"id": f"g{t}-{i}", "traceId": f"t{t}", "type": "GENERATION", "model": "m",
         "startTime": (T0 + timedelta(minutes=i)).isoformat(),
         "input": [{"role": "user", "content": f"What is {i} plus {t}?"}],
         "output": f"{i + t}" if i % 3 else {"role": "assistant", "content": f"{i + t + 1}"}}
        for t in range(3) for i in range(20))))
    reward = RewardConfig(judge_score="judge1", judge_weight=1.0, verifiable_weight=0.0, feedback_weight=0.0)
    whole = run(src, tmp_path / "whole", reward=reward)
    joins = []
    join = mat.formats.join
    monkeypatch.setattr(mat.formats, "join", lambda entries: joins.append(got := join(entries)) or got)
    monkeypatch.setattr(mat, "_PIECE_BYTES", 20_000)
    cut = run(src, tmp_path / "cut", reward=reward)
    assert len(joins) > 5 and max(map(len, joins)) < 20 and sum(map(len, joins)) == 60
    assert cut.counts == whole.counts and whole.counts["traces"] == 60 and accounted(cut)
    assert max(len(r["scores"]) for r in table(whole, "traces")) == 340
    for name in ("traces", "quarantine", "grpo", "dpo"):
        assert table(cut, name) == table(whole, name)


def test_a_bad_langfuse_score_is_quarantined_alone_and_a_score_joins_only_its_own_trace(tmp_path):
    """A score whose name or label is not text cost the generation it scored (with its good scores);
    a score naming another trace than its generation's joined it all the same, by the observation id."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "observations.jsonl").write_bytes(lines(*(
        {"id": f"g{i}", "traceId": f"t{i}", "type": "GENERATION", "model": "m",
         "startTime": (T0 + timedelta(minutes=i)).isoformat(),
         "input": [{"role": "user", "content": f"What is {i} plus 1?"}], "output": f"{i + 1}"} for i in range(2))))

    def score(sid, trace, **kw):
        return {"id": sid, "traceId": trace, "observationId": "g0", "name": "judge", "value": 0.4,
                "dataType": "NUMERIC", "source": "EVAL", **kw}

    (src / "scores.jsonl").write_bytes(lines(score("label", "t0", stringValue=5), score("name", "t0", name=123),
                                             score("ok", "t0", name="tone"), score("other", "t1", value=0.9)))
    m = run(src, tmp_path / "out")
    assert accounted(m) and m.counts["traces"] == 2 and m.quarantine_reasons == {"invalid_field": 2}
    assert {r["trace_id"]: [s["name"] for s in r["scores"]] for r in table(m, "traces")} == {"t0:g0": ["tone"], "t1:g1": []}
    assert sorted((r["source_line"], r["detail"]) for r in table(m, "quarantine")) == [
        (1, "score label: stringValue=5 is not text"), (2, "score name: name=123 is not text")]
    assert m.source["unjoined"] == {"langfuse_scores": 1}


def test_a_join_of_large_records_is_cut_into_parts_of_about_a_block(tmp_path, monkeypatch):
    """One trace of many generations is one bucket: parts of 2,000 of 12 KB generations took a worker
    past 300 MB, and the run past 1 GB. Parts hold about a block's worth of records, and give the same tables."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "observations.jsonl").write_bytes(lines(*(
        {"id": f"g{i}", "traceId": "t0", "type": "GENERATION", "model": "m", "startTime": (T0 + timedelta(seconds=i)).isoformat(),
         "input": [{"role": "system", "content": "Be brief. " * 100}, {"role": "user", "content": f"What is {i} plus 1?"}],
         "output": f"{i + 1}"} for i in range(40))))
    whole = run(src, tmp_path / "whole")
    sizes = []
    size = mat._join_part_size
    monkeypatch.setattr(mat, "_join_part_size", lambda n, b: sizes.append(got := size(n, b)) or got)
    monkeypatch.setattr(mat, "_JOIN_PART_BYTES", 8 * 1024)  # about eight generations
    cut = run(src, tmp_path / "cut")
    assert sizes and 4 <= sizes[0] <= 12 and len(cut.files["traces"]["parts"]) >= 4
    assert cut.counts == whole.counts and table(cut, "traces") == table(whole, "traces")


def test_a_langfuse_export_is_joined_and_labeled_a_part_at_a_time_as_all_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "BLOCK_BYTES", 256)  # files of several blocks, whose lines are counted in the workers
    src = tmp_path / "src"
    src.mkdir()
    (src / "scores.jsonl").write_bytes(lines(*(  # scores first, in another file than their generations
        {"id": f"s{i}", "traceId": f"t{i}", "observationId": f"g{i}", "name": "judge", "value": i / 10,
         "dataType": "NUMERIC", "source": "EVAL"} for i in range(10)),
        {"id": "bad", "traceId": "t1", "name": "q", "value": "high", "dataType": "NUMERIC", "source": "API"},
        # Scores that attach to nothing here: of a generation in another interval's files, of a trace without one.
        {"id": "s-gone", "traceId": "t-gone", "observationId": "g-gone", "name": "judge", "value": 1,
         "dataType": "NUMERIC", "source": "EVAL"},
        {"id": "s-trace", "traceId": "t-none", "name": "judge", "value": 1, "dataType": "NUMERIC", "source": "ANNOTATION"}))
    (src / "observations.jsonl").write_bytes(lines(*(
        {"id": f"g{i}", "traceId": f"t{i}", "type": "GENERATION", "model": "m",
         "startTime": "yesterday" if i == 4 else (T0 + (2 * HOUR if i == 8 else timedelta(minutes=i))).isoformat(),
         "input": [{"role": "user", "content": f"What is {i} plus 1?"}],  # odd ones' output the fast path leaves
         "output": f"{i + 1}" if i % 2 else {"role": "assistant", "content": f"{i + 1}"}} for i in range(10))))
    reward = RewardConfig(judge_weight=1.0, verifiable_weight=0.0, feedback_weight=0.0)
    taken = []
    parse = columns.parse_langfuse_lines
    monkeypatch.setattr(columns, "parse_langfuse_lines", lambda *a: taken.append(got := parse(*a)) or got)
    whole = run(src, tmp_path / "whole", reward=reward)
    assert taken[0][1].tolist() == [0, 2, 6, 8]  # not g4, which starts "yesterday"; g8, outside the interval, is
    monkeypatch.setattr(mat, "_JOIN_PART", 3)
    monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)  # the parts go to two workers, a bad generation's error too
    parts = run(src, tmp_path / "parts", reward=reward, dataset=DatasetConfig(workers=2))
    assert parts.version == whole.version and parts.counts == whole.counts
    assert len(parts.files["traces"]["parts"]) == 4 > len(whole.files["traces"]["parts"])  # ten generations, three a part
    for name in ("traces", "quarantine"):
        assert table(parts, name) == table(whole, name)
    assert accounted(parts) and whole.counts["outside_interval"] == 1 and whole.quarantine_reasons == {"invalid_field": 2}
    assert whole.source["unjoined"] == parts.source["unjoined"] == {"langfuse_scores": 2}
    assert sorted((q["source_file"].rsplit("/", 1)[1], q["source_line"]) for q in table(parts, "quarantine")) == [
        ("observations.jsonl", 5), ("scores.jsonl", 11)]
    assert [r["final_reward"] for r in table(parts, "traces")] == [i / 10 for i in (0, 1, 2, 3, 5, 6, 7, 9)]
    # Rows spread over buckets by trace: each generation still meets its score, wherever its rows were read.
    monkeypatch.setattr(mat, "_BUCKET_BYTES", 200)
    spread = run(src, tmp_path / "spread", reward=reward, dataset=DatasetConfig(workers=2))
    assert spread.counts == whole.counts and len(spread.files["traces"]["parts"]) > 4
    assert spread.source["unjoined"] == {"langfuse_scores": 2}

    def by_place(m, name):
        return sorted(table(m, name), key=lambda r: (r["source_file"], r["source_line"]))

    assert all(by_place(spread, name) == by_place(whole, name) for name in ("traces", "quarantine"))
    # Two buckets, as a source of a thousand would have, each cut again by trace before it is joined.
    monkeypatch.setattr(mat, "_FANOUT", 2)
    cut = []
    split_joined = mat.split_joined
    monkeypatch.setattr(mat, "split_joined", lambda item: cut.append(item[::2]) or split_joined(item))
    alone = run(src, tmp_path / "split-alone", reward=reward, dataset=DatasetConfig(workers=1))  # cuts seen here
    assert [b for b, _ in sorted(cut)] == [0, 1] and all(n > 4 for _, n in cut)
    monkeypatch.setattr(mat, "split_joined", split_joined)
    split = run(src, tmp_path / "split", reward=reward, dataset=DatasetConfig(workers=2))
    assert split.counts == alone.counts == whole.counts and len(split.files["traces"]["parts"]) > 4
    assert split.source["unjoined"] == alone.source["unjoined"] == {"langfuse_scores": 2}
    for m in (alone, split):
        assert all(by_place(m, name) == by_place(whole, name) for name in ("traces", "quarantine"))


_OTEL = otlp([kv("gen_ai.request.model", "m"), kv("gen_ai.usage.input_tokens", 3),
              kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Hi"}]}])),
              kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Hello"}]}]))],
             [{"name": "gen_ai.evaluation.result", "attributes": [kv("gen_ai.evaluation.name", "judge"),
                                                                  kv("gen_ai.evaluation.score.value", 0.9)]}])
_LANGFUSE = [
    {"id": "g1", "traceId": "t1", "type": "GENERATION", "startTime": "2026-11-22T10:00:00Z", "endTime": "2026-11-22T10:00:01Z",
     "model": "m", "input": [{"role": "user", "content": "What is 6 plus 1?"}], "output": {"role": "assistant", "content": "7"},
     "usageDetails": {"input": 19, "output": 2, "total": 21}},
    {"id": "s1", "traceId": "t1", "observationId": "g1", "name": "judge", "value": 0.5, "dataType": "NUMERIC", "source": "EVAL"},
    {"id": "t1", "timestamp": "2026-11-22T10:00:00Z", "release": "3"},
]


@pytest.mark.parametrize("workers", [1, 2])
def test_half_a_character_in_json_text_within_a_record_is_quarantined_and_the_run_goes_on(tmp_path, monkeypatch, workers):
    """A surrogate escaped alone (an emoji cut in two) in JSON text that a record holds as a string:
    Python's reader takes it, and it ended the run where the texts became a table."""
    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    half = json.loads('"cut \\ud83d"')
    otel = otlp([kv("gen_ai.request.model", "m"), kv("gen_ai.prompt", json.dumps([{"role": "user", "content": "What is 4 plus 4?"}])),
                 kv("gen_ai.completion", json.dumps([{"role": "assistant", "content": half}]))])
    langfuse = [dict(_LANGFUSE[0], input=json.dumps([{"role": "user", "content": half}])), *_LANGFUSE[1:]]
    src = tmp_path / "src"
    src.mkdir()
    (src / "otel.jsonl").write_bytes(lines(otel, _OTEL_FLAT))
    (src / "langfuse.jsonl").write_bytes(lines(*langfuse))
    m = run(src, tmp_path / "out", at(1795340000) - HOUR, at(1795340000) + HOUR)
    assert accounted(m) and m.quarantine_reasons == {"invalid_utf8": 2}, m.quarantine_reasons
    assert sorted(q["detail"].split(": ")[-2] for q in table(m, "quarantine")) == ["`completion`", "`messages[0].content`"]
    assert [r["completion"] for r in table(m, "traces")] == ["8"]


def _genai_span(i: int) -> dict:
    """A GenAI span of its own question, started ``i`` thirds of a second into the hour."""
    start = int(T0.timestamp()) * 10**9 + i * 10**9 // 3
    return {"traceId": f"{i:032x}", "spanId": f"{i:016x}", "name": "chat m", "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + 250_000_000), "attributes": [
                kv("gen_ai.request.model", "m"),
                kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [{"type": "text",
                                                                                   "content": f"What is {i} plus 1?"}]}])),
                kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [{"type": "text",
                                                                                          "content": str(i + 1)}]}]))]}


def _export(spans_by_version: dict[str, list[list[dict]]]) -> dict:
    """An OTLP export: a resource per service version, holding scopes of these spans."""
    return {"resourceSpans": [{"resource": {"attributes": [kv("service.version", version)]}, "schemaUrl": "s",
                               "scopeSpans": [{"scope": {"name": f"lib{j}"}, "spans": spans} for j, spans in enumerate(scopes)]}
                              for version, scopes in spans_by_version.items()]}


def test_a_span_without_ids_or_that_is_no_object_is_quarantined_in_its_place_and_the_others_kept(tmp_path):
    """Spans without ids all made traces named ":", the second a duplicate_trace_id; a number among an
    export's spans cost the spans beside it."""
    spans = [_genai_span(i) for i in range(4)]
    del spans[0]["traceId"], spans[1]["traceId"], spans[1]["spanId"]
    spans[2]["spanId"] = ""
    src = tmp_path / "src"
    src.mkdir()
    (src / "spans.jsonl").write_bytes(lines(_export({"7": [[spans[0]]]}), _export({"7": [[spans[1], 5, spans[3]]]}),
                                            _export({"7": [[spans[2]]]})))
    m = run(src, tmp_path / "out")
    assert accounted(m) and [r["trace_id"] for r in table(m, "traces")] == [f"{3:032x}:{3:016x}"]
    assert sorted((r["source_line"], r["detail"]) for r in table(m, "quarantine")) == [
        (1, "span :0000000000000000: traceId=None is not an id"), (2, "scopeSpans[].spans[1]=5 is not an object"),
        (2, "span :: traceId=None is not an id"), (3, f"span {2:032x}:: spanId='' is not an id")]


def test_a_held_span_of_a_time_no_datetime_holds_is_quarantined_not_fatal(tmp_path):
    """A Parquet export's span of no content, held for its log records, starting at infinity: placing
    its item by its own time raised OverflowError, and ended the run."""
    span = _genai_span(0)
    span["attributes"] = [kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "m")]
    assert mat.formats.span_time({**span, "startTimeUnixNano": float("inf")}) is None
    assert mat.formats.span_time(5) is None and mat.formats.span_time(span) == T0


def test_a_span_whose_values_fail_the_trace_checks_is_named_by_its_trace(tmp_path):
    spans = [_genai_span(i) for i in range(2)]
    spans[1]["attributes"].append(kv("gen_ai.usage.input_tokens", -3))
    src = tmp_path / "src"
    src.mkdir()
    (src / "spans.jsonl").write_bytes(lines(_export({"7": [spans]})))
    m = run(src, tmp_path / "out")
    (q,) = table(m, "quarantine")
    assert accounted(m) and m.counts["traces"] == 1
    assert q["detail"].startswith(f"invalid_field: trace {1:032x}:{1:016x}: ") and "usage.prompt_tokens" in q["detail"]


@pytest.mark.parametrize("partitioned", [False, True])
def test_a_joined_record_or_langfuse_row_that_maps_to_nothing_is_quarantined_in_the_run_of_its_own_time(
        tmp_path, partitioned):
    """A span without content, a generation of no trace and a score that is no number each hold their
    time: every run that read their file quarantined them, so a backfill counted each once an hour.
    In a partition, an item of a time the partition may not hold goes to the run that reads it."""
    src = tmp_path / "src"
    folder = src / "date=2026-11-22" / "hour=10" if partitioned else src
    folder.mkdir(parents=True)
    span = _genai_span(0)
    span["attributes"] = [kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "m")]
    late = [_genai_span(i) for i in (3, 4)]  # of 15:00: tokens below 0, no trace id
    for s in late:
        s.update({k: str(int(s[k]) + 5 * 3600 * 10**9) for k in ("startTimeUnixNano", "endTimeUnixNano")})
    late[0]["attributes"].append(kv("gen_ai.usage.input_tokens", -3))
    del late[1]["traceId"]
    (folder / "spans.jsonl").write_bytes(lines(_export({"7": [[span, _genai_span(1)]]}),
                                               _export({"7": [[_genai_span(2), late[0]]]}), _export({"7": [[late[1]]]})))
    (folder / "observations.jsonl").write_bytes(lines(*(
        {"id": f"g{i}", "traceId": None if i == 1 else f"t{i}", "type": "GENERATION", "model": "m",
         "startTime": (T0 + timedelta(minutes=10 * i)).isoformat(),
         "input": [{"role": "user", "content": f"What is {i} plus 2?"}], "output": f"{i + 2}"} for i in range(2))))
    (folder / "scores.jsonl").write_bytes(lines(*(
        {"id": f"s{h}", "traceId": "t0", "observationId": "g0", "name": "judge", "value": "abc", "dataType": "NUMERIC",
         "source": "EVAL", "timestamp": (T0 + timedelta(hours=h, minutes=30)).isoformat()} for h in (0, 5))))
    hours = [run(src, tmp_path / "out", T0 + h * HOUR, T0 + (h + 1) * HOUR) for h in range(3)]
    assert isinstance(hours[1], mat.NoTraces) and isinstance(hours[2], mat.NoTraces)
    first = hours[0]
    assert accounted(first) and first.counts["traces"] == 3
    quarantined = sorted((r["source_file"].rsplit("/", 1)[1], r["reason"]) for r in table(first, "quarantine"))
    assert quarantined == [("observations.jsonl", "invalid_field"), ("scores.jsonl", "invalid_field"),
                           *[("scores.jsonl", "invalid_field")] * partitioned,
                           *[("spans.jsonl", "invalid_field")] * (2 * partitioned), ("spans.jsonl", "no_content")]
    if not partitioned:  # the score of 15:30 and the spans of 15:00 are the run's of that hour
        later = run(src, tmp_path / "out", T0 + 5 * HOUR, T0 + 6 * HOUR)
        assert sorted(r["detail"].split(": ")[-1] for r in table(later, "quarantine")) == [
            "-3", "traceId=None is not an id", "value='abc' is not a number"]


def test_a_partition_read_for_the_lag_alone_does_not_report_what_it_holds_misplaced(tmp_path):
    """With partitioned_by=arrival, the run of 10:00 reads hour=11 too, for its late arrivals: a record
    of 06:30 misplaced in hour=11 was reported by both runs, twice in a backfill."""
    src = tmp_path / "src"
    for hour, starts in {10: [T0 + timedelta(minutes=5)], 11: [T0 + timedelta(minutes=65), T0 - timedelta(hours=3, minutes=30)]}.items():
        (src / f"date=2026-11-22/hour={hour}").mkdir(parents=True)
        (src / f"date=2026-11-22/hour={hour}/part-a.jsonl").write_bytes(
            lines(*(trace(10 * hour + i, f"What is {hour} plus {i}?", at=t) for i, t in enumerate(starts))))
    dataset = DatasetConfig(partitioned_by="arrival", arrival_lag=timedelta(minutes=15))
    ten, eleven = (run(src, tmp_path / "out", T0 + h * HOUR, T0 + (h + 1) * HOUR, dataset=dataset) for h in (0, 1))
    assert ten.source["files"] == 2 and ten.source["misplaced"] == {}
    assert eleven.source["misplaced"] == {"before_partition": {"traces": 1, "most_seconds": 16200.0}}


def test_a_time_an_offset_takes_past_the_years_of_utc_is_refused_naming_it(tmp_path):
    """Year 1 at +01:00 is in year 0 in UTC, which Python's datetime cannot hold: the lines read one
    by one (the first one's wrong type sends the block there) ended the run with an OverflowError,
    then were taken for traces of other times; the fast path published one of year 10000."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_bytes(lines(trace(4, latency_ms="40"), trace(1),
                                        trace(2, start_time="0001-01-01T00:00:00+01:00", end_time="0001-01-01T00:00:00+01:00"),
                                        trace(3, start_time="9999-12-31T23:59:59-00:01", end_time="9999-12-31T23:59:59-00:01")))
    m = run(src, tmp_path / "out")
    assert accounted(m) and m.counts["traces"] == 1 and m.quarantine_reasons == {"invalid_field": 3}
    assert sorted(q["detail"].split("`")[-2] for q in table(m, "quarantine")) == ["latency_ms", "start_time", "start_time"]


def test_a_span_that_is_not_a_trace_is_quarantined_and_the_others_of_its_export_kept(tmp_path):
    """An export holds thousands of spans (the Collector batches 8,192): one that is not a trace (an
    answer with no text) was the export's one quarantined item, its other spans lost uncounted."""
    spans = [_genai_span(i) for i in range(6)]
    spans[2]["attributes"][2] = kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [
        {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {}}]}]))
    src = tmp_path / "src"
    src.mkdir()
    (src / "spans.jsonl").write_bytes(lines(_export({"7": [spans]}), trace(9)))
    m = run(src, tmp_path / "out")
    assert accounted(m) and m.counts["traces_in"] == 7 and m.counts["traces"] == 6
    (q,) = table(m, "quarantine")
    assert q["source_line"] == 1 and q["reason"] == "no_text_answer" and "get_weather" in q["raw"]
    assert sorted(r["prompt"] for r in table(m, "traces") if r["prompt"].endswith("plus 1?")) == [f"What is {i} plus 1?" for i in (0, 1, 3, 4, 5)]


def test_a_span_whose_prompt_showed_an_image_is_quarantined_and_text_parts_read_on_their_lines(tmp_path):
    """Among spans the fast path takes, one with an image part is the reader's, which refuses it by
    name; the text parts of another are joined on a new line, as vLLM renders them."""
    spans = [_genai_span(i) for i in range(5)]
    spans[1]["attributes"][1] = kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [
        {"type": "text", "content": "What is in"}, {"type": "uri", "modality": "image", "uri": "s3://b/cat.png"}]}]))
    spans[3]["attributes"][1] = kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [
        {"type": "text", "content": "Question:"}, {"type": "text", "content": "What is 3 plus 1?"}]}]))
    src = tmp_path / "src"
    src.mkdir()
    (src / "spans.jsonl").write_bytes(lines(_export({"7": [spans]}), trace(9)))
    m = run(src, tmp_path / "out")
    assert accounted(m) and m.counts["traces"] == 5 and m.quarantine_reasons == {"non_text_content": 1}
    (q,) = table(m, "quarantine")
    assert "gen_ai.input.messages[0] holds a part of type uri" in q["detail"] and "s3://b/cat.png" in q["raw"]
    assert "Question:\nWhat is 3 plus 1?" in {r["prompt"] for r in table(m, "traces")}


def test_an_agents_log_whose_prompt_holds_tool_calls_is_quarantined_whole_beside_the_plain_ones(tmp_path):
    """An assistant turn of tool calls read as an empty turn, then the tool's answer to nothing: a
    chat the model was never served. Among logs the fast path takes, such a log is the reader's,
    which refuses it by name, keeping the call in its raw text."""
    logs = []
    for i in range(6):
        doc = json.loads(json.dumps(OPENAI))
        doc["response"]["id"] = f"chatcmpl-{i}"
        doc["request"]["messages"][0]["content"] = f"What is {i} plus 3?"  # no duplicates
        if i == 2:
            doc["request"]["messages"][:0] = [
                {"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "4 C, rain"}]
        logs.append(doc)
    src = tmp_path / "src"
    src.mkdir()
    (src / "openai.jsonl").write_bytes(lines(*logs))
    created = OPENAI["response"]["created"]
    m = run(src, tmp_path / "out", at(created) - HOUR, at(created) + HOUR)
    assert accounted(m) and m.counts["traces"] == 5 and m.quarantine_reasons == {"tool_call_in_prompt": 1}
    (q,) = table(m, "quarantine")
    assert q["source_line"] == 3 and "request.messages[1] holds tool_calls" in q["detail"] and '"weather"' in q["raw"]
    assert sorted(r["trace_id"] for r in table(m, "traces")) == [f"chatcmpl-{i}" for i in (0, 1, 3, 4, 5)]


def test_a_source_of_model_calls_recorded_without_content_says_so_instead_of_giving_nothing(tmp_path):
    """The OpenTelemetry instrumentations record no prompt or answer by default: such an export gave
    a run of no trace that said nothing of why."""
    spans = [_genai_span(i) for i in range(4)]
    for span in spans[1:]:
        span["attributes"] = [kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "m")]
    src = tmp_path / "src"
    src.mkdir()
    (src / "spans.jsonl").write_bytes(lines(_export({"7": [spans]})))
    m = run(src, tmp_path / "out")
    assert accounted(m) and m.counts["traces"] == 1 and m.quarantine_reasons == {"no_content": 3}
    assert all("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in q["detail"] for q in table(m, "quarantine"))


def _log_records(i: int, question: str, answer: str) -> list[dict]:
    """The log records OpenTelemetry's instrumentations make of the content of :func:`_genai_span` ``i``."""
    def record(name, body):
        return {"timeUnixNano": str(int(T0.timestamp()) * 10**9 + i * 10**9 // 3), "eventName": name,
                "traceId": f"{i:032x}", "spanId": f"{i:016x}", "attributes": [kv("gen_ai.system", "openai")],
                "body": {"kvlistValue": {"values": [{"key": k, "value": v} for k, v in body.items()]}}}

    message = {"kvlistValue": {"values": [{"key": "role", "value": {"stringValue": "assistant"}},
                                          {"key": "content", "value": {"stringValue": answer}}]}}
    return [record("gen_ai.user.message", {"content": {"stringValue": question}}),
            record("gen_ai.choice", {"index": {"intValue": "0"}, "finish_reason": {"stringValue": "stop"},
                                     "message": message})]


@pytest.mark.parametrize("workers", [1, 2])
def test_spans_without_content_join_the_log_records_of_their_content_from_other_files(tmp_path, monkeypatch, workers):
    """OpenTelemetry's own instrumentations record the content as log records of the call's span, which
    the Collector writes to a file of its own: each span joins its records, in whichever file and
    block; a span whose records are not there is no_content."""
    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    spans = [_genai_span(i) for i in range(40)]
    for span in spans:
        span["attributes"] = [kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "m"),
                              kv("gen_ai.usage.input_tokens", 7), kv("gen_ai.usage.output_tokens", 1)]
    records = [r for i in range(40) if i != 5 for r in _log_records(i, f"What is {i} plus 1?", str(i + 1))]
    src = tmp_path / "src"
    src.mkdir()
    (src / "logs.jsonl").write_bytes(lines(*({"resourceLogs": [{"resource": {}, "scopeLogs": [{"logRecords": records[j:j + 7]}]}]}
                                             for j in range(0, len(records), 7))))
    (src / "traces.jsonl").write_bytes(lines(*(_export({"7": [spans[j:j + 10]]}) for j in range(0, 40, 10))))
    m = run(src, tmp_path / "out", dataset=DatasetConfig(workers=workers))
    assert accounted(m) and m.counts["traces"] == 39 and m.quarantine_reasons == {"no_content": 1}
    rows = {r["prompt"]: r for r in table(m, "traces")}
    assert rows["What is 7 plus 1?"]["completion"] == "8" and rows["What is 7 plus 1?"]["model_version"] == "7"
    assert rows["What is 7 plus 1?"]["trace_id"] == f"{7:032x}:{7:016x}" and rows["What is 7 plus 1?"]["prompt_tokens"] == 7
    (q,) = table(m, "quarantine")
    assert q["source_file"].endswith("traces.jsonl") and q["source_line"] == 1 and f"{5:016x}" in q["detail"]
    assert "unrecognized_files" not in m.source or not m.source["unrecognized_files"]
    assert run(src, tmp_path / "again", dataset=DatasetConfig(workers=3 - workers)).version == m.version


def _evaluation_record(i: int, score: float) -> dict:
    """The log record of an evaluation of :func:`_genai_span` ``i``'s answer, as semconv's event."""
    return {"timeUnixNano": str(int(T0.timestamp()) * 10**9 + i * 10**9 // 3 + 10**9), "eventName": "gen_ai.evaluation.result",
            "traceId": f"{i:032x}", "spanId": f"{i:016x}",
            "attributes": [kv("gen_ai.evaluation.name", "judge"), kv("gen_ai.evaluation.score.value", score)]}


@pytest.mark.parametrize("workers", [1, 2])
def test_spans_that_hold_their_content_take_the_evaluation_results_logged_of_them(tmp_path, monkeypatch, caplog, workers):
    """semconv's evaluation results are events, which SDKs write as log records: a span that held its
    content was read where it lay, and the scores of it were counted as attached to nothing. A run
    that meets both reads the spans again, joined with their records; their traces are those of the
    spans alone, with the scores and the rewards they make."""
    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    spans = [_genai_span(i) for i in range(40)]
    src = tmp_path / "src"
    src.mkdir()
    (src / "traces.jsonl").write_bytes(lines(*(_export({"7": [spans[j:j + 10]]}) for j in range(0, 40, 10))))
    reward = RewardConfig(verifiable_weight=0, feedback_weight=0, judge_weight=1, judge_range=(0, 10))
    dataset = DatasetConfig(workers=workers)
    with caplog.at_level("WARNING", logger=mat.log.name):
        alone = run(src, tmp_path / "alone", reward=reward, dataset=dataset)
    assert "read again" not in caplog.text and alone.source["formats"] == {"otel": 40}  # no log records: no second look
    # An evaluation naming no span, only its response's id (semconv allows it where the span's id is
    # not known): it joins nothing, is counted so, and is no reason for a second look.
    orphan = _evaluation_record(5, 9)
    orphan |= {"traceId": "", "spanId": "", "attributes": orphan["attributes"] + [kv("gen_ai.response.id", "chatcmpl-5")]}
    (src / "orphan.jsonl").write_bytes(lines({"resourceLogs": [{"resource": {}, "scopeLogs": [{"logRecords": [orphan]}]}]}))
    with caplog.at_level("WARNING", logger=mat.log.name):
        lone = run(src, tmp_path / "lone", reward=reward, dataset=dataset)
    assert "read again" not in caplog.text and accounted(lone) and lone.source["unjoined"] == {"otel_log_records": 1}
    # Spans 0 to 29 evaluated, some twice; and one span not among the files.
    records = [_evaluation_record(i, i % 10) for i in range(30)] + [_evaluation_record(3, 9), _evaluation_record(77, 5)]
    records.insert(5, _log_records(8, "What is 8 plus 1?", "9")[0])  # content logged as well: the span's own is read
    (src / "logs.jsonl").write_bytes(lines(*({"resourceLogs": [{"resource": {}, "scopeLogs": [{"logRecords": records[j:j + 8]}]}]}
                                             for j in range(0, len(records), 8))))
    with caplog.at_level("WARNING", logger=mat.log.name):
        m = run(src, tmp_path / "out", reward=reward, dataset=dataset)
    assert "log records of evaluation results (scores): read again" in caplog.text
    assert accounted(m) and m.counts["traces"] == 40 and m.source["unjoined"] == {"otel_log_records": 2}  # span 77's, the orphan
    rows = {r["trace_id"]: r for r in table(m, "traces")}
    before = {r["trace_id"]: r for r in table(alone, "traces")}
    assert rows.keys() == before.keys()
    for i in range(40):
        got, was = rows[f"{i:032x}:{i:016x}"], before[f"{i:032x}:{i:016x}"]
        scores = [i % 10] + [9] * (i == 3) if i < 30 else []
        assert [(s["name"], s["value"], s["source"]) for s in got["scores"]] == [("judge", v, "otel") for v in scores]
        assert got["final_reward"] == (pytest.approx(sum(scores) / len(scores) / 10) if scores else None)
        assert {k: v for k, v in got.items() if k not in ("scores", "judge_reward", "final_reward")} == \
               {k: v for k, v in was.items() if k not in ("scores", "judge_reward", "final_reward")}
    assert run(src, tmp_path / "again", reward=reward, dataset=DatasetConfig(workers=3 - workers)).version == m.version


def test_an_evaluation_logged_apart_that_is_no_score_is_quarantined_alone_and_its_span_keeps_its_trace(tmp_path):
    """A record of its own, as a Langfuse score row is: a NaN, a text or a boolean for a value cost
    the span it named its whole trace."""
    spans = [_genai_span(i) for i in range(4)]
    for span in spans:
        span["attributes"] = [kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "m")]
    records = [r for i in range(4) for r in _log_records(i, f"What is {i} plus 1?", str(i + 1))]
    records += [_evaluation_record(0, 7.0), _evaluation_record(1, 7.0), _evaluation_record(2, 7.0)]
    records[-2]["attributes"][1] = {"key": "gen_ai.evaluation.score.value", "value": {"doubleValue": "NaN"}}
    records[-1]["attributes"][1] = {"key": "gen_ai.evaluation.score.value", "value": {"boolValue": True}}
    src = tmp_path / "src"
    src.mkdir()
    (src / "logs.jsonl").write_bytes(lines({"resourceLogs": [{"resource": {}, "scopeLogs": [{"logRecords": records}]}]}))
    (src / "traces.jsonl").write_bytes(lines(_export({"7": [spans]})))
    m = run(src, tmp_path / "out")
    assert accounted(m) and m.counts["traces"] == 4 and m.quarantine_reasons == {"non_finite_number": 1, "invalid_field": 1}
    assert {r["trace_id"][-1]: [s["value"] for s in r["scores"]] for r in table(m, "traces")} == {
        "0": [7.0], "1": [], "2": [], "3": []}
    q = {r["reason"]: r for r in table(m, "quarantine")}
    assert q["invalid_field"]["source_file"].endswith("logs.jsonl") and "score.value=True is not a number" in q["invalid_field"]["detail"]
    assert '"boolValue": true' in q["invalid_field"]["raw"]


@pytest.mark.parametrize("workers", [1, 2])
def test_log_records_whose_span_is_not_among_the_files_are_counted_and_named_not_dropped_unsaid(
        tmp_path, monkeypatch, caplog, capsys, workers):
    """A span sampled out, or in another interval's folder than its records: its records attach to
    nothing. They were dropped without a word; a source of records alone gave "no traces" and no why."""
    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    spans = [_genai_span(i) for i in range(6)]
    for span in spans:
        span["attributes"] = [kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "m")]
    records = [r for i in range(9) for r in _log_records(i, f"What is {i} plus 1?", str(i + 1))]  # 6 to 8: no span
    src = tmp_path / "src"
    src.mkdir()
    (src / "logs.jsonl").write_bytes(lines({"resourceLogs": [{"resource": {}, "scopeLogs": [{"logRecords": records}]}]}))
    (src / "traces.jsonl").write_bytes(lines(_export({"7": [spans]})))
    m = run(src, tmp_path / "out", dataset=DatasetConfig(workers=workers))
    per_call = len(records) // 9
    assert accounted(m) and m.counts["traces"] == 6 and m.source["unjoined"] == {"otel_log_records": 3 * per_call}
    assert m.asset_extra()["unjoined"] == m.source["unjoined"]  # the Airflow asset event's, which the UI shows
    assert main(["materialize", "--source", str(src), "--out", str(tmp_path / "cli"), "--start", T0.isoformat(),
                 "--end", (T0 + HOUR).isoformat()]) == 0
    assert f"  {3 * per_call} OTLP log records of GenAI events attached to no model call's span" in capsys.readouterr().out
    (src / "traces.jsonl").unlink()
    with caplog.at_level("WARNING", logger=mat.log.name):
        alone = run(src, tmp_path / "alone", dataset=DatasetConfig(workers=workers))
    assert alone.unjoined == {"otel_log_records": len(records)}
    assert f"{len(records)} OTLP log records of GenAI events attached to no model call's span" in caplog.text


@pytest.mark.parametrize("workers", [1, 2])
def test_a_batchs_input_output_and_error_files_join_by_custom_id(tmp_path, monkeypatch, workers):
    """OpenAI's Batch API and vLLM's run_batch write requests, answers and failures to files of their
    own: each answer joins its request, a failure is quarantined saying why, and a request not answered
    is counted."""
    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    created = OPENAI["response"]["created"]
    requests = [{"custom_id": f"q-{i}", "method": "POST", "url": "/v1/chat/completions",
                 "body": {"model": "m", "messages": [{"role": "user", "content": f"What is {i} plus 1?"}]}} for i in range(6)]

    def answer(i: int) -> dict:
        body = {"id": f"chatcmpl-{i}", "object": "chat.completion", "created": created + i, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": str(i + 1)}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}}
        return {"id": f"batch_req_{i}", "custom_id": f"q-{i}", "response": {"status_code": 200, "body": body}, "error": None}

    refused = {"id": "batch_req_3", "custom_id": "q-3", "error": None, "response": {
        "status_code": 400, "body": {"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}}}}
    expired = {"id": "batch_req_4", "custom_id": "q-4", "response": None,
               "error": {"code": "batch_expired", "message": "This request could not be executed before the window"}}
    src = tmp_path / "src"
    src.mkdir()
    (src / "batch_output.jsonl").write_bytes(lines(answer(0), answer(1), answer(2), refused))
    (src / "batch_errors.jsonl").write_bytes(lines(expired))
    (src / "batch_input.jsonl").write_bytes(lines(*requests))
    taken = []  # by the fast path, in this process (without workers)
    parse = columns.parse_batch_lines
    monkeypatch.setattr(columns, "parse_batch_lines", lambda *a: taken.append(got := parse(*a)) or got)
    m = run(src, tmp_path / "out", at(created) - HOUR, at(created) + HOUR, dataset=DatasetConfig(workers=workers))
    assert workers > 1 or [t[1].tolist() for t in taken] == [[1, 2, 3]]  # the failures not (the error file is read first)
    assert accounted(m) and m.counts["traces"] == 3 and m.quarantine_reasons == {"failed_request": 2}
    rows = {r["trace_id"]: r for r in table(m, "traces")}
    assert rows["chatcmpl-2"]["prompt"] == "What is 2 plus 1?" and rows["chatcmpl-2"]["completion"] == "3"
    assert rows["chatcmpl-2"]["source_file"].endswith("batch_output.jsonl") and rows["chatcmpl-2"]["source_line"] == 3
    assert sorted(q["detail"].split(": ", 1)[-1] for q in table(m, "quarantine")) == [
        "This request could not be executed before the window", "max_tokens is too large"]
    assert m.source["formats"] == {"openai": 11} and m.source["unjoined"] == {"batch_requests": 1}  # q-5, not run


def test_an_otlp_export_past_a_records_size_is_read_as_exports_of_a_megabyte_of_spans(tmp_path, monkeypatch):
    """A Collector's batch of spans on one line, well past the size of a record, whatever its size:
    each span a trace under its own resource, numbered as that line. An export that breaks off is
    read up to there, the rest quarantined; any other line past a record's size is quarantined as
    too large (the sizes made small here; the next test runs one at full size in workers)."""
    monkeypatch.setattr(sources, "MAX_RECORD_BYTES", 4000)
    monkeypatch.setattr(sources, "_EXPORT_BYTES", 2000)
    monkeypatch.setattr(sources, "BLOCK_BYTES", 3000)
    spans = [_genai_span(i) for i in range(300)]
    big = _export({"7": [spans[:100], spans[100:150]], "8": [spans[150:]]})
    bigger = json.dumps(_export({"3": [[_genai_span(5000 + i) for i in range(1200)]]})).encode()
    cut = json.dumps(_export({"4": [[_genai_span(3000 + i) for i in range(50)]]})).encode()
    cut = cut[:cut.index(b'"spanId": "%016x"' % 3030)]  # in span 30
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_bytes(lines(
        trace(1, "What is 1000 plus 1?", "1001"), big, trace(2, "What is 1001 plus 1?", "1002"), bigger,
        {**trace(3, "What is 1002 plus 1?", "1003"), "pad": "x" * 5000}, cut, trace(4, "What is 4003 plus 1?", "4004")))
    assert 4000 < len(json.dumps(big)) < 400_000 < len(bigger)
    m = run(src, tmp_path / "out")
    assert accounted(m) and m.counts["traces"] == 1533
    assert m.quarantine_reasons == {"invalid_json": 1, "record_too_large": 1}
    rows = table(m, "traces")
    assert [(r["source_line"], r["model_version"]) for r in rows] == (
        [(1, "1")] + [(2, "7")] * 150 + [(2, "8")] * 150 + [(3, "1")] + [(4, "3")] * 1200 + [(6, "4")] * 30 + [(7, "1")])
    assert [r["completion"] for r in rows if r["source_line"] in (2, 4, 6)] == [
        str(i + 1) for i in [*range(300), *range(5000, 6200), *range(3000, 3030)]]
    padded = len(json.dumps({**trace(3, "What is 1002 plus 1?", "1003"), "pad": "x" * 5000}))
    assert [(q["source_line"], q["detail"]) for q in table(m, "quarantine")] == [
        (5, f"{padded} bytes > 4000"), (6, f"an OTLP export past 4000 bytes, not read from here: the export breaks off "
                                          f"after {len(cut)} bytes")]


def test_an_otlp_export_that_breaks_off_within_a_records_size_keeps_the_spans_before_the_break(tmp_path):
    """The last line a Collector that died wrote is cut short: as one past a record's size, its spans
    before the break are read, and the rest is an item; all of it was one invalid_json item."""
    cut = json.dumps(_export({"4": [[_genai_span(3000 + i) for i in range(50)]]})).encode()
    cut = cut[:cut.index(b'"spanId": "%016x"' % 3030)]  # in span 30
    (tmp_path / "a.jsonl").write_bytes(lines(trace(1, "What is 1000 plus 1?", "1001"), cut, b'{"resourceSpans": [{'))
    m = run(tmp_path / "a.jsonl", tmp_path / "out")
    assert accounted(m) and m.counts["traces"] == 31 and m.quarantine_reasons == {"invalid_json": 2}
    assert [r["completion"] for r in table(m, "traces")][1:] == [str(i + 1) for i in range(3000, 3030)]
    assert [(q["source_line"], q["detail"]) for q in table(m, "quarantine")] == [
        (2, f"not read: the export breaks off after {len(cut)} bytes"), (3, "invalid_json: Input data was truncated")]
    # An export that closes, with something after it that is not JSON, is no export cut short: one item.
    whole = json.dumps(_export({"4": [[_genai_span(3000 + i) for i in range(3)]]})).encode()
    (tmp_path / "b.jsonl").write_bytes(lines(whole + b" trailing garbage", whole[:-1] + b', "extra": tru}'))
    m = run(tmp_path / "b.jsonl", tmp_path / "out-b")
    assert accounted(m) and m.counts["traces"] == 0 and m.quarantine_reasons == {"invalid_json": 2}


def test_a_file_that_gives_nothing_but_damage_or_refused_rows_is_named_as_in_no_format(tmp_path):
    """An HTML error page saved under a data file's name: as CSV of a comma (each row refused), as
    gzip (not gzip at all). Its items were counted, and no file was named."""
    page = b"<!DOCTYPE html>\n<html><head><title>503 Service Unavailable, try later</title></head>\n<body>busy</body></html>\n"
    src = tmp_path / "src"
    src.mkdir()
    (src / "observations.csv").write_bytes(page)
    (src / "traces.jsonl.gz").write_bytes(page)
    (src / "ours.jsonl").write_bytes(lines(trace(1)))
    m = run(src, tmp_path / "out")
    assert accounted(m) and m.counts["traces"] == 1
    assert m.source["unrecognized_files"] == {str(src / "observations.csv"): 2, str(src / "traces.jsonl.gz"): 1}


@pytest.mark.parametrize("fmt", ["ctpipe", "openai", "otel"])
def test_a_record_of_another_format_than_the_one_named_is_wrong_format_saying_which(tmp_path, fmt):
    """Under --format ctpipe an OpenAI log was missing_field (trace_id), a Langfuse row invalid_field."""
    openai = {**OPENAI, "response": {**OPENAI["response"], "created": int(T0.timestamp()) + 5}}
    records = {"ctpipe": trace(1), "openai": openai, "otel": _export({"1": [[_genai_span(7)]]})}
    (tmp_path / "a.jsonl").write_bytes(lines(*records.values(), {k: v for k, v in trace(2).items() if k != "model"}))
    m = run(tmp_path / "a.jsonl", tmp_path / "out", dataset=DatasetConfig(format=fmt))
    assert accounted(m) and m.counts["traces"] == 1
    said = {q["source_line"]: (q["reason"], q["detail"]) for q in table(m, "quarantine")}
    others = [n for n, name in enumerate(records, 1) if name != fmt]
    assert {n: said[n] for n in others} == {
        n: ("wrong_format", f"is not a record of the {fmt} format (looks like {name})")
        for n, name in enumerate(records, 1) if name != fmt}
    assert said[4][0] == ("missing_field" if fmt == "ctpipe" else "wrong_format")  # ours, short of a field


@pytest.mark.parametrize("name", ["logs.jsonl", "logs.jsonl.gz"])  # cut in place, or read through
def test_an_otlp_export_of_log_records_past_a_records_size_is_read_as_exports_of_them(tmp_path, monkeypatch, name):
    """The Collector batches log records as it batches spans, 8,192 to a line: such a line, of the
    content of the spans beside it, was one record_too_large item and every span no_content."""
    monkeypatch.setattr(sources, "MAX_RECORD_BYTES", 4000)
    monkeypatch.setattr(sources, "_EXPORT_BYTES", 2000)
    monkeypatch.setattr(sources, "BLOCK_BYTES", 3000)
    spans = [_genai_span(i) for i in range(120)]
    for span in spans:
        span["attributes"] = [kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "m")]
    records = [r for i in range(120) for r in _log_records(i, f"What is {i} plus 1?", str(i + 1))]
    export = {"resourceLogs": [{"resource": {"attributes": [kv("service.name", "chat")]}, "scopeLogs": [
        {"scope": {"name": "openai_v2"}, "logRecords": records[:100]}, {"scope": {"name": "openai_v2"}, "logRecords": records[100:]}]}]}
    src = tmp_path / "src"
    src.mkdir()
    data = lines(export)
    assert len(data) > 25 * 4000
    (src / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    (src / "spans.jsonl").write_bytes(lines(*(_export({"7": [spans[j:j + 5]]}) for j in range(0, 120, 5))))
    m = run(src, tmp_path / "out")
    assert accounted(m) and m.counts["traces"] == 120 and not m.quarantine_reasons
    assert sorted(r["completion"] for r in table(m, "traces")) == sorted(str(i + 1) for i in range(120))


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz"])  # cut in place, or read through
def test_an_otlp_export_of_ten_megabytes_is_read_by_the_workers(tmp_path, monkeypatch, name):
    """At full size, in two workers: an export line past 8 MB (9,000 spans with a 1 KB answer each)
    goes through either cutter and is split where it is read."""
    monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    spans = [_genai_span(i) for i in range(9000)]
    for i, span in enumerate(spans):
        span["attributes"][2] = kv("gen_ai.output.messages", json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": f"{'so ' * 330}{i + 1}"}]}]))
    export = json.dumps(_export({"7": [spans]})).encode()
    assert len(export) > sources.MAX_RECORD_BYTES
    src = tmp_path / "src"
    src.mkdir()
    data = lines(export, trace(1, "What is 1000 plus 1?", "1001"))
    (src / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    m = run(src, tmp_path / "out", dataset=DatasetConfig(workers=2))
    assert accounted(m) and m.counts["traces"] == 9001 and m.counts["quarantined"] == 0
    assert [r["source_line"] for r in m.read("traces").select(["source_line"]).to_pylist()] == [1] * 9000 + [2]


@pytest.mark.parametrize("records", [[OPENAI], [_OTEL, _OTEL_FLAT], _LANGFUSE, [trace(1, "What is 103 plus 3?", "106")]],
                         ids=["openai", "otel", "langfuse", "ctpipe"])
def test_a_value_of_any_type_anywhere_in_a_record_is_quarantined_or_read_never_fatal(tmp_path, records):
    """Each field of a record of every format, replaced by a value of another type or range (or
    removed), one field at a time: every mutant is a trace or a quarantined item with its line, and
    the run goes on."""
    src = tmp_path / "src"
    src.mkdir()
    mutants = [m for r in records for m in mutated(r)]
    (src / "a.jsonl").write_bytes(lines(*records, *mutants))
    created = OPENAI["response"]["created"]
    m = run(src, tmp_path / "out", at(min(created, 1795340000)) - HOUR, T0 + 2 * HOUR)
    assert accounted(m) and m.counts["traces"] >= len(records) - (records == _LANGFUSE) * 2
    assert m.counts["quarantined"] >= len(mutants) // 4
    assert all(q["source_line"] >= 1 for q in table(m, "quarantine"))
    assert not [q["detail"] for q in table(m, "quarantine") if "does not map" in q["detail"]]  # the field is named


@pytest.mark.parametrize("workers", [1, 2])
def test_json_nested_deeper_than_the_parser_goes_is_quarantined_in_any_format(tmp_path, monkeypatch, workers):
    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    src = tmp_path / "src"
    src.mkdir()
    deep = "[" * 100_000 + "]" * 100_000
    (src / "a.jsonl").write_bytes(lines(
        trace(1, "What is 1 plus 1?", "2"), ('{"trace_id": "t2", "scores": ' + deep + "}").encode(), deep.encode(),
        json.dumps({**OPENAI, "metadata": "@"}).replace('"@"', deep).encode(), trace(3, "What is 2 plus 1?", "3")))
    m = run(src, tmp_path / "out", dataset=DatasetConfig(workers=workers))
    assert accounted(m) and m.counts["traces"] == 2 and m.quarantine_reasons == {"too_deeply_nested": 3}
    assert [q["source_line"] for q in table(m, "quarantine")] == [2, 3, 4]


@pytest.mark.parametrize("workers", [1, 2])
def test_the_fast_paths_change_nothing_but_the_speed(tmp_path, monkeypatch, workers):
    """Our schema's lines, OpenAI logs and OTLP exports, good and bad, interleaved with other formats
    in blocks of a few lines, and Parquet files of our schema in columns of many types: the same
    version, rows and quarantine with the fast paths as without them."""
    from tests.test_columns import BATCHES, LINES, OPENAI_LINES, OTEL_LINES

    monkeypatch.setattr(sources, "BLOCK_BYTES", 4096)
    src = tmp_path / "src"
    src.mkdir()
    others = [json.dumps(_OTEL).encode(), b"{broken", json.dumps(_LANGFUSE[0]).encode()]
    mixed = [x for group in itertools.zip_longest(LINES.values(), OPENAI_LINES.values(), OTEL_LINES.values(), others)
             for x in group if x]
    (src / "a.jsonl").write_bytes(b"\n".join(mixed) + b"\n")
    for i, batch in enumerate(BATCHES.values()):
        pq.write_table(pa.Table.from_batches([batch]), src / f"b{i:02d}.parquet")
    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    created = OPENAI["response"]["created"]
    start, end = at(created) - 3 * HOUR, T0 + 2 * HOUR
    fast = run(src, tmp_path / "fast", start, end, dataset=DatasetConfig(workers=workers))
    assert all(fast.source["formats"][name] > 10 for name in ("ctpipe", "openai", "otel"))
    monkeypatch.setattr(mat, "_FAST", ())  # in this process: the exact run takes no workers
    monkeypatch.setattr(mat, "_FAST_PARQUET", None)
    exact = run(src, tmp_path / "exact", start, end, dataset=DatasetConfig(workers=1))
    assert fast.version == exact.version and fast.counts == exact.counts and fast.source == exact.source
    for name in ("traces", "quarantine", "grpo", "dpo"):
        assert table(fast, name) == table(exact, name), name


def test_pairing_buckets_are_cut_by_what_a_compressed_source_held_not_by_its_size(tmp_path, monkeypatch):
    """A long system prompt makes gzip many times smaller than its text, more than the listing's
    estimate counts on: the buckets it chose are cut again by the bytes the blocks held."""
    system = {"role": "system", "content": " ".join(f"rule {i}: answer briefly." for i in range(300))}
    records = [trace(i, messages=[system, {"role": "user", "content": f"What is {i // 2} plus 1?"}],
                     completion=str(i // 2 + 1 + i % 2), reference_answer=str(i // 2 + 1),
                     feedback={"thumb": "down" if i % 2 else "up", "rating": None}) for i in range(1200)]
    text = lines(*records)
    for folder, name, data in (("plain", "a.jsonl", text), ("gz", "a.jsonl.gz", gzip.compress(text))):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_bytes(data)
    fs, files, _ = sources.list_files(str(tmp_path / "gz"))
    held = len(text)
    assert files.held < held / 2
    monkeypatch.setattr(mat, "_BUCKET_BYTES", 64 * 1024)
    paired = []
    pair = mat._pair
    monkeypatch.setattr(mat, "_pair", lambda index, table: paired.append(table.nbytes) or pair(index, table))
    gz = run(tmp_path / "gz", tmp_path / "out-gz")
    assert sum(paired) > held / 4 and max(paired) < 2 * mat._BUCKET_BYTES, (sum(paired), max(paired))
    plain = run(tmp_path / "plain", tmp_path / "out-plain")
    assert gz.counts == plain.counts and gz.counts["dpo_pairs"] == gz.counts["grpo_prompts"] == 600
    for name in ("grpo", "dpo"):  # the same rows, though cut into other buckets
        assert unordered(gz, name) == unordered(plain, name)


def test_the_empty_tables_of_a_block_are_let_go_as_they_come_not_gathered(monkeypatch):
    """Each file whose every item is quarantined (or joined) gives an empty table, some 24 KB of
    memory with the RAW schema, and a piece gathered them all, since they weigh no bytes: 60,000 files
    of one unreadable line peaked at 2,008 MB."""
    empty, rows = pa.table({"n": pa.array([], pa.int64())}), pa.table({"n": pa.array([1, 2], pa.int64())})
    assert [t.to_pydict() for t in mat._gathered([empty, empty])] == [{"n": []}]  # a part of no row keeps one
    held = []
    runs = mat._runs
    monkeypatch.setattr(mat, "_runs", lambda items, size: (held.append(len(run)) or run for run in runs(items, size)))
    gathered = list(mat._gathered([empty, *[empty] * 20_000, rows, *[empty] * 20_000, rows]))
    assert [t.to_pydict() for t in gathered] == [{"n": [1, 2, 1, 2]}] and held == [3]


def test_small_files_the_fast_paths_took_nothing_of_get_no_slice_of_their_rows(tmp_path, monkeypatch):
    """A slice of the fast paths' rows is a few KB of objects whatever its rows: 60,000 small files of
    bad lines gathered with a large file's rows made the worker of their block 666 MB."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a-good.jsonl").write_bytes(lines(trace(1), trace(2, "What is 4 plus 4?", "8")))
    for i in range(30):
        (src / f"b-{i:02d}.jsonl").write_bytes(b"oops\n")
    (src / "c-good.jsonl").write_bytes(lines(trace(3, "What is 5 plus 5?", "10")))
    shares = []
    fast_members = mat._fast_members
    monkeypatch.setattr(mat, "_fast_members", lambda *a: shares.append(got := fast_members(*a)) or got)
    m = run(src, tmp_path / "out")
    assert m.counts["traces"] == 3 and m.quarantine_reasons == {"invalid_json": 30}
    [share] = shares
    assert [rows is None for _, rows, _ in share] == [False] + [True] * 30 + [False]


def test_rows_taken_batch_by_batch_are_the_rows_a_table_take_gives():
    """_take_rows copies only the rows asked for, in their order, from batches of any sizes (some empty)."""
    rng = np.random.default_rng(0)
    schema = pa.schema([("n", pa.int64()), ("text", pa.string())])
    for _ in range(200):
        sizes = rng.integers(0, 6, rng.integers(1, 6))
        batches = [pa.record_batch([pa.array(rng.integers(0, 100, k), pa.int64()),
                                    pa.array([f"t{j}" for j in range(k)], pa.string())], schema=schema) for k in sizes]
        rows = rng.permutation(int(sizes.sum()))[:rng.integers(0, int(sizes.sum()) + 1)]
        want = pa.Table.from_batches(batches, schema=schema).take(pa.array(rows, pa.int64()))
        assert mat._take_rows(batches, rows.astype(np.uint64), schema).to_pylist() == want.to_pylist()


def test_workers_keep_pandas_out(tmp_path):
    """pyarrow imports pandas at the first Python list it is given, only to ask whether it is a pandas
    object: 0.36 s and 30 MB a worker, for a library the workers never use."""
    job = mat.Job(T0, T0 + HOUR, TaskConfig(), RewardConfig(), DatasetConfig(), (),
                  datasets.Output(tmp_path / "out").staging(), str(tmp_path), 1)
    pool = mat._Pool(job, 2)
    try:
        asked = "__import__('pyarrow').array([1, 2]) is not None and 'pandas' in __import__('sys').modules"
        assert [worker.submit(eval, asked).result() for worker in pool.workers] == [False, False]
    finally:
        pool.close()


@pytest.mark.parametrize("shared", [True, False])
def test_workers_map_the_evaluation_ngrams_of_a_large_set_the_main_process_built_once(tmp_path, monkeypatch, shared):
    """Built by each worker, the n-grams of 100,000 eval items took as much memory again per worker;
    the main process builds those of a large set while the workers import, and each maps its files.
    A small set's, each worker builds: the main process would import pandas for it."""
    if shared:
        monkeypatch.setattr(mat, "_SHARED_EVAL_CHARS", 100)
    item = "A farmer has seventeen sheep and all but nine run away through the broken fence, how many are left?"
    job = mat.Job(T0, T0 + HOUR, TaskConfig(), RewardConfig(), DatasetConfig(), (item, "What is 57 plus 38?"),
                  datasets.Output(tmp_path / "out").staging(), str(tmp_path), 1)
    pool = mat._Pool(job, 2)
    try:
        index = "__import__('ctpipe.materialize').materialize._eval_index()"
        asked = (f"(type({index}._keys).__name__, {index}.overlaps_many(['Well: {item} Go', 'what is 57 plus 38', "
                 "'what is 57 plus 39']), len(__import__('ctpipe.materialize').materialize._JOB.eval_items))")
        assert [worker.submit(eval, asked).result() for worker in pool.workers] == [
            ("memmap" if shared else "ndarray", [True, True, False], 0 if shared else 2)] * 2
        assert (tmp_path / "eval-ngrams" / "keys.npy").is_file() == shared
    finally:
        pool.close()


def test_evaluation_ngrams_that_fail_to_build_stop_the_workers_started(tmp_path, monkeypatch):
    def fail(index, folder):
        raise MemoryError

    monkeypatch.setattr(mat.dedup.NgramIndex, "save", fail)
    monkeypatch.setattr(mat, "_SHARED_EVAL_CHARS", 0)
    processes = []
    close = mat._Pool.close
    monkeypatch.setattr(mat._Pool, "close", lambda pool, stop=False: processes.extend(
        p for worker in pool.workers for p in worker._processes.values()) or close(pool, stop))
    job = mat.Job(T0, T0 + HOUR, TaskConfig(), RewardConfig(), DatasetConfig(), ("What is 57 plus 38?",),
                  datasets.Output(tmp_path / "out").staging(), str(tmp_path), 1)
    with pytest.raises(MemoryError):
        mat._Pool(job, 2)
    assert len(processes) == 2 and not any(p.is_alive() for p in processes)


@pytest.mark.parametrize("workers", [1, 2])  # pandas is installed here, and kept out of the workers
def test_parquet_times_in_nanoseconds_are_read_to_the_microsecond_whether_pandas_is_installed_or_not(
        tmp_path, monkeypatch, workers):
    """pyarrow makes pandas Timestamps of nanosecond times where pandas is installed (which the typed
    reader refused: valid traces quarantined) and datetimes, or an error, where it is not."""
    starts = np.array([columns.micros(T0) * 1000 + 1_999, columns.micros(T0) * 1000 + 5 * 10**9])
    in_ns = pa.timestamp("ns", tz="UTC")
    rows = pa.Table.from_pylist([trace(1), trace(2, "What is 4 plus 4?", "8")])
    rows = rows.set_column(1, "start_time", pa.array(starts).cast(in_ns))
    rows = rows.set_column(2, "end_time", pa.array(starts + 10**9).cast(in_ns))
    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(rows, src / "traces.parquet")
    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    m = run(src, tmp_path / "out", dataset=DatasetConfig(workers=workers))
    assert m.counts["traces"] == 2 and m.quarantine_reasons == {}
    assert [r["start_time"] for r in table(m, "traces")] == [T0 + timedelta(microseconds=1), T0 + timedelta(seconds=5)]


def test_otlp_times_are_cut_to_the_microsecond_never_rounded_into_another_hour(tmp_path, monkeypatch):
    """As float seconds (a quarter of a microsecond apart in this century) and rounded, a span a
    nanosecond before the hour was read in the next hour, and one a nanosecond before this one in it."""
    hour = int(T0.timestamp()) * 10**9
    spans = [_genai_span(i) for i in range(4)]
    for span, ns in zip(spans, (hour + 3600 * 10**9 - 500, hour + 3600 * 10**9 - 1, hour - 1, hour + 3600 * 10**9)):
        span["startTimeUnixNano"], span["endTimeUnixNano"] = str(ns), str(ns + 250_000_000)
    src = tmp_path / "src"
    src.mkdir()
    (src / "otel.jsonl").write_bytes(lines(_export({"3": [spans]})))
    fast = run(src, tmp_path / "fast")
    monkeypatch.setattr(mat, "_FAST", ())
    exact = run(src, tmp_path / "exact")
    for m in (fast, exact):
        assert m.counts["traces_in"] == 2 and m.counts["outside_interval"] == 2
        assert [r["start_time"] for r in table(m, "traces")] == [T0 + HOUR - timedelta(microseconds=1)] * 2
    assert fast.source["formats"] == exact.source["formats"] == {"otel": 4}


@pytest.mark.parametrize("workers", [1, 2])
def test_answers_cut_off_at_their_token_limit_are_quarantined_where_the_run_says(tmp_path, monkeypatch, workers):
    """truncated_answers=quarantine: in the workers too, on the fast path as on the reader's; the
    process's readers keep them again after the run."""
    from ctpipe import formats

    if workers > 1:
        monkeypatch.setattr(mat, "_IN_PROCESS_BYTES", 0)
    logs = []
    for i in range(40):
        log = json.loads(json.dumps(OPENAI))
        log["response"].update(id=f"chatcmpl-{i}", created=OPENAI["response"]["created"] + i)
        log["request"]["messages"][-1]["content"] = f"What is {i} plus 1?"
        log["response"]["choices"][0]["message"]["content"] = str(i + 1) if i % 4 else "The sum of"
        log["response"]["choices"][0]["finish_reason"] = "stop" if i % 4 else "length"
        logs.append(log)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "log.jsonl").write_bytes(lines(*logs))
    start = datetime.fromtimestamp(OPENAI["response"]["created"], timezone.utc) - HOUR
    kept = run(tmp_path / "src", tmp_path / "kept", start, start + 2 * HOUR, dataset=DatasetConfig(workers=workers))
    assert kept.counts["traces"] == 40 and not kept.quarantine_reasons
    refused = run(tmp_path / "src", tmp_path / "refused", start, start + 2 * HOUR,
                  dataset=DatasetConfig(workers=workers, truncated_answers="quarantine"))
    assert refused.counts["traces"] == 30 and refused.quarantine_reasons == {"truncated_answer": 10} and accounted(refused)
    assert "cut off at its token limit (finish reason 'length')" in table(refused, "quarantine")[0]["detail"]
    assert formats.REFUSE_TRUNCATED.get() is False


@pytest.mark.parametrize("verifier", ["arith", "exact", "regex", "math"])
def test_an_answer_of_thousands_of_digits_is_labeled_and_the_interval_published(tmp_path, verifier):
    """int() refuses a text past 4,300 digits: one answer of a model repeating a digit stopped the whole
    interval, run after run."""
    big = "7" * 4301
    (tmp_path / "a.jsonl").write_bytes(lines(trace(1), trace(2, completion=big, reference_answer="5"),
                                             trace(3, completion=f"#### {big}", reference_answer="5"),
                                             trace(4, "Which number is it?", "5", reference_answer=big)))
    m = run(tmp_path / "a.jsonl", tmp_path / "out", reward=RewardConfig(verifier=verifier))
    assert m.counts["traces"] == 4 and accounted(m)
    assert [r["verifiable_reward"] for r in table(m, "traces")][1:3] == [0.0, 0.0]
