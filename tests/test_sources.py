"""Reading trace sources: gzip, zstd, Parquet, and every kind of damage kept with its file and line."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import re

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctpipe.sources import SourceError, read
from tests.conftest import damage_row_group, fastest, trace, zstd


def packed(name: str, data: bytes) -> bytes:
    """``data`` as a file named ``name`` holds it: gzip, zstd or plain."""
    return gzip.compress(data, mtime=0) if name.endswith(".gz") else zstd(data) if name.endswith(".zst") else data


def test_jsonl_gzip_and_parquet_are_read_in_order(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"n": 1}\n\n{"n": 2}\n')
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as f:
        f.write('{"n": 3}\n')
    pq.write_table(pa.table({"n": [4, 5]}), tmp_path / "c.parquet")
    (tmp_path / "notes.txt").write_text("not a trace file")
    items = list(read(str(tmp_path)))
    assert [i.doc["n"] for i in items] == [1, 2, 3, 4, 5]
    assert [(i.file.rsplit("/", 1)[-1], i.position) for i in items][:3] == [("a.jsonl", 1), ("a.jsonl", 3), ("b.jsonl.gz", 1)]


def test_a_file_whose_name_says_nothing_is_read_as_its_first_bytes_say(tmp_path):
    """Firehose's objects have no suffix, or a bare .gz; shippers write .log files. Parquet, and JSON
    text plain or compressed (JSON Lines, or one document over many lines), are read; anything else,
    an empty file, or a compressed one damaged at its start, is named as not read."""
    import ctpipe.sources as sources

    lines = b'\xef\xbb\xbf {"n": 1}\n{"n": 2}\n'
    files = {"a-1-2026-11-22-10-00-00-uuid": lines, "b-1-2026-11-22-10-05-00-uuid.gz": gzip.compress(lines),
             "c.zst": zstd(b'[{"n": 3},\n {"n": 4}]'), "d.log": b'\n  {"n": 5}\n', "e.csv.gz": gzip.compress(b"n\n6\n"),
             "f": b"", "g.bin": bytes(range(256)), "h.gz": b"\x1f\x8b\x08",
             "i.txt": b"n=7\n", "j.data": b"\x28\xb5\x2f\xfd\x00"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    pq.write_table(pa.table({"n": [8]}), tmp_path / "k")
    fs, found, skipped = sources.list_files(str(tmp_path))
    names = {f.rsplit("/", 1)[-1]: name.rsplit("/", 1)[-1] for f, name in found.items()}
    assert names == {"a-1-2026-11-22-10-00-00-uuid": "a-1-2026-11-22-10-00-00-uuid.json",
                     "b-1-2026-11-22-10-05-00-uuid.gz": "b-1-2026-11-22-10-05-00-uuid.gz.json.gz",
                     "c.zst": "c.zst.json.zst", "d.log": "d.log.json", "e.csv.gz": "e.csv.gz", "k": "k.parquet"}
    assert [f.rsplit("/", 1)[-1] for f in skipped] == ["f", "g.bin", "h.gz", "i.txt", "j.data"]
    assert [(i.file.rsplit("/", 1)[-1], i.position, i.doc["n"]) for i in read(str(tmp_path))] == [
        ("a-1-2026-11-22-10-00-00-uuid", 1, 1), ("a-1-2026-11-22-10-00-00-uuid", 2, 2),
        ("b-1-2026-11-22-10-05-00-uuid.gz", 1, 1), ("b-1-2026-11-22-10-05-00-uuid.gz", 2, 2),
        ("c.zst", 1, 3), ("c.zst", 2, 4), ("d.log", 2, 5), ("e.csv.gz", 1, "6"), ("k", 1, 8)]
    plain = ("a-1-2026-11-22-10-00-00-uuid", "d.log")
    assert found.held == sum((tmp_path / f).stat().st_size * (1 if f in plain else 10) for f in names)
    # A file named as the source is read whatever it holds: as its bytes say, or as JSON Lines.
    assert [i.doc["n"] for i in read(str(tmp_path / "b-1-2026-11-22-10-05-00-uuid.gz"))] == [1, 2]
    assert [i.reason for i in read(str(tmp_path / "i.txt"))] == ["invalid_json"]
    # A gzip object smaller than the peek and cut short: named as not JSON, all its lines unread.
    whole = gzip.compress(b"".join(json.dumps({"n": n, "text": "words " * 20}).encode() + b"\n" for n in range(300)))
    cut = tmp_path / "cut" / "stream-1-2026-11-22-10-10-00-uuid"
    cut.parent.mkdir()
    cut.write_bytes(whole[: len(whole) * 3 // 4])
    items = list(read(str(cut.parent)))
    assert len(items) > 100 and [i.doc["n"] for i in items[:-1]] == list(range(len(items) - 1))
    assert items[-1].reason == "truncated_gzip"


def test_a_local_folder_is_listed_as_fsspec_finds_it_and_a_changed_file_gets_another_key(tmp_path, monkeypatch):
    import ctpipe.sources as sources

    monkeypatch.setattr(sources.Files, "_CHUNK", 2)  # names held joined two by two
    src = tmp_path / "src"
    for path in ("date=2026-11-22/hour=10/a.jsonl", "date=2026-11-22/hour=10/minute=05/b.jsonl.gz", "c.parquet",
                 ".hidden/d.jsonl", "_tmp.jsonl", "e f/g.jsonl", "e f.jsonl", "e-f/g.jsonl",
                 "date=2026-11-22/hour=11/.part.jsonl"):
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_bytes(b'{"n": 1}\n')
    (src / "empty").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "h.jsonl").write_bytes(b'{"n": 2}\n')
    os.symlink(tmp_path / "elsewhere", src / "linked")
    os.symlink(src, src / "e f" / "up")  # a loop
    fs, found, _ = sources.list_files(str(src))
    # fsspec's find lists a link to a folder as a file, which no read could open.
    links = (f"{src}/linked", f"{src}/e f/up")
    expected = sorted([p for p in fsspec.filesystem("file").find(str(src)) if p not in links] + [f"{src}/linked/h.jsonl"])
    assert list(found) == [p for p in expected if not any(part.startswith((".", "_"))
                                                          for part in p[len(str(src)):].split("/"))]
    assert f"{src}/.hidden/d.jsonl" not in list(found) and f"{src}/e f/g.jsonl" in list(found)
    file = f"{src}/c.parquet"
    key = sources.file_key(fs, file)
    assert sources.file_key(fs, file) == key
    assert sources.list_files(str(src))[1].digest == found.digest
    (src / "c.parquet").write_bytes(b'{"n": 3}\n')
    assert sources.file_key(fs, file) != key
    assert sources.list_files(str(src))[1].digest != found.digest


@pytest.mark.parametrize("protocol", ["file", "memory"])
def test_the_manifests_of_a_langfuse_export_are_not_read(tmp_path, protocol):
    """Langfuse's scheduled export writes each run's manifest (JSON, no record) to manifests/, beside
    its tables, of which scores/ is in every export; a manifests/ folder elsewhere is read."""
    import ctpipe.sources as sources

    fs = fsspec.filesystem(protocol)
    root = str(tmp_path) if protocol == "file" else f"/lf-{tmp_path.name}"
    for path in ("p/observations_v2/2026-11-22T10-00.jsonl", "p/scores/2026-11-22T10-00.jsonl",
                 "p/manifests/2026-11-22T10-00.json", "q/manifests/a.jsonl"):
        fs.makedirs(f"{root}/{path.rsplit('/', 1)[0]}", exist_ok=True)
        fs.pipe(f"{root}/{path}", b'{"n": 1}\n')
    _, found, skipped = sources.list_files(root if protocol == "file" else f"memory://{root}")
    assert [f[len(root):] for f in found] == ["/p/observations_v2/2026-11-22T10-00.jsonl", "/p/scores/2026-11-22T10-00.jsonl",
                                              "/q/manifests/a.jsonl"]
    assert {f[len(root):]: why for f, why in skipped.items()} == {"/p/manifests/": sources._LANGFUSE_MANIFESTS_NOT_READ}
    # each file's size as listed, in the same order: a local one's, and none for an object's
    assert list(found.sizes()) == ([9, 9, 9] if protocol == "file" else [None, None, None])


@pytest.mark.parametrize("protocol", ["file", "memory"])
def test_a_writers_uncommitted_attempts_and_a_tables_log_are_not_read(tmp_path, protocol):
    """Spark and Hive write a job's attempts under _temporary/ and .hive-staging_*/ and move them
    into place on commit; Delta keeps its log in _delta_log/: none of them is the source's data, as
    Spark reads sources; a partition of a column named with a "_" is. A hidden source given itself
    is read."""
    import ctpipe.sources as sources

    fs = fsspec.filesystem(protocol)
    root = str(tmp_path / "src") if protocol == "file" else f"/hidden-{tmp_path.name}"
    for path in ("date=2026-11-22/hour=10/part-0.jsonl", "date=2026-11-22/hour=10/_temporary/0/attempt_1/part-0.jsonl",
                 "date=2026-11-22/hour=10/.hive-staging_hive_2026/-ext-10000/part-0.jsonl",
                 "_delta_log/00000000000000000000.json", "date=2026-11-22/hour=10/_SUCCESS", "_hidden/a.jsonl",
                 "date=2026-11-22/hour=11/_region=eu/part-0.jsonl"):
        fs.makedirs(f"{root}/{path.rsplit('/', 1)[0]}", exist_ok=True)
        fs.pipe(f"{root}/{path}", b'{"n": 1}\n')
    url = root if protocol == "file" else f"memory://{root}"
    _, found, skipped = sources.list_files(url)
    assert [f[len(root):] for f in found] == ["/date=2026-11-22/hour=10/part-0.jsonl",
                                              "/date=2026-11-22/hour=11/_region=eu/part-0.jsonl"] and not skipped
    assert [f[len(root):] for f in sources.list_files(f"{url}/_hidden")[1]] == ["/_hidden/a.jsonl"]


def test_an_object_name_holding_a_nul_is_listed_whole():
    """Names are held joined by NUL, which no local name holds; an object's may."""
    import ctpipe.sources as sources

    fs = fsspec.filesystem("memory")
    for name in ("a\0b.jsonl", "c.jsonl"):
        fs.pipe(f"/nul/{name}", b'{"n": 1}\n')
    assert list(sources.list_files("memory://nul")[1]) == ["/nul/a\0b.jsonl", "/nul/c.jsonl"]


@pytest.mark.parametrize("name", ["firehose-1-2026-11-22-10-00-00-uuid", "firehose-1-2026-11-22-10-00-00-uuid.gz", "a.json.zst"])
def test_json_values_one_after_another_are_read_a_value_a_line(tmp_path, monkeypatch, name):
    """Firehose joins records with no delimiter by default; others pretty-print them one after another.
    Each value is an item numbered by its place in the file, however the pieces read cut it; strings
    holding brackets, quotes, backslashes and newlines are left whole."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 256)
    monkeypatch.setattr(sources, "MAX_RECORD_BYTES", 4000)  # the file is no document: its values are each a record
    rng = random.Random(0)
    texts = ['say "}{"', "c:\\", "[{", "]", "\\\"", "a\nb", ""]
    records = [{"n": i, "text": rng.choice(texts) * rng.randrange(4) + "x" * rng.randrange(300), "nested": {"list": [{"m": i}]}}
               for i in range(300)]
    data = b"".join(json.dumps(r, indent=rng.choice([None, 2])).encode() + rng.choice([b"", b" ", b"\n", b"\r\n"]) for r in records)
    (tmp_path / name).write_bytes(packed(name, b"\xef\xbb\xbf" + data))
    items = list(read(str(tmp_path)))
    assert [(i.position, i.doc) for i in items] == list(enumerate(records, 1))


def test_brackets_outside_strings_are_found_wherever_the_pieces_are_cut():
    """The marks of text fed a piece at a time (brackets and newlines outside strings, with the depth
    before and after each) are those of reading it a character at a time, whatever runs of
    backslashes the pieces cut."""
    import numpy as np

    import ctpipe.sources as sources

    def one_by_one(text: bytes) -> list[tuple[int, int, int, int]]:
        out, in_string, escaped, depth = [], False, False, 0
        for at, c in enumerate(text):  # a quote after an odd run of backslashes is escaped, in a string or not
            if c == ord('"') and not escaped:
                in_string = not in_string
            elif c in sources._SHAPING and not in_string:
                after = depth + 1 if c in b"{[" else max(depth - 1, 0) if c in b"}]" else depth
                out.append((at, c, depth, after))
                depth = after
            escaped = not escaped and c == ord("\\")
        return out

    rng = random.Random(0)
    for _ in range(2000):
        text = bytes(rng.choice(b'\\\\""{}[]a \n') for _ in range(rng.randrange(80)))
        cuts = sorted(rng.sample(range(len(text) + 1), rng.randrange(min(5, len(text) + 1))))
        brackets, found, read_so_far = sources._Brackets(), [], 0
        for a, b in zip([0, *cuts], [*cuts, len(text)]):
            marks, kind, before, after = brackets.marks(text[a:b])
            found += zip((marks + a).tolist(), kind.tolist(), before.tolist(), after.tolist())
        assert found == one_by_one(text), (text, cuts)


def test_a_value_cut_short_in_a_stream_is_quarantined_with_what_follows_it(tmp_path):
    """A stray closing bracket is passed over; a value left open takes the rest of the stream into its
    item. JSON Lines whose first line does not parse are still read line by line."""
    (tmp_path / "a.json").write_bytes(b'{"n": 1}}{"n": 2}{"n": 3, "text": "cut{"n": 4}{"n": 5}')
    (tmp_path / "b.json").write_bytes(b'{"n": NaN}\n\n{"n": 6}\n')
    assert [(i.file[-6:], i.position, i.reason, i.doc) for i in read(str(tmp_path))] == [
        ("a.json", 1, "invalid_json", None), ("a.json", 2, None, {"n": 2}), ("a.json", 3, "invalid_json", None),
        ("b.json", 1, "non_finite_number", None), ("b.json", 3, None, {"n": 6})]


@pytest.mark.parametrize("name", ["firehose-1-2026-11-22-10-00-00-uuid", "a.json.gz"])
def test_a_value_cut_short_before_the_next_loses_only_itself(tmp_path, monkeypatch, name):
    """A value whose last bytes are missing, followed by the next (``}{``, ``[1 {``: what no JSON text
    holds within a value), is one ``invalid_json`` item, and the values after it are read, however
    the pieces read cut the stream."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 256)
    monkeypatch.setattr(sources, "MAX_RECORD_BYTES", 4000)
    rng = random.Random(1)
    records = [{"n": i, "text": rng.choice(['}{', "a\nb", ""]) + "x" * rng.randrange(200),
                "nested": {"list": [{"m": i}, {"m": [i]}]}} for i in range(300)]
    cut = set(rng.sample(range(299), 40))  # never the last: nothing follows it
    # 40: white space past 64 bytes. The first pretty-printed: a first line that parses is JSON Lines'.
    texts = [json.dumps(r, indent=rng.choice([None, 2, 40]) if r["n"] else 2) for r in records]
    shorter = {i: rng.choice([texts[i][:-1], texts[i].rstrip("}] \n"), texts[i].rstrip("}] \n")[:-1]]) for i in cut}
    data = "".join(shorter.get(i, t) + rng.choice(["", " ", "\n"]) for i, t in enumerate(texts))
    (tmp_path / name).write_bytes(packed(name, data.encode()))
    assert [(i.position, i.reason, i.doc) for i in read(str(tmp_path))] == [
        (n, "invalid_json", None) if n - 1 in cut else (n, None, r) for n, r in enumerate(records, 1)]


def test_values_cut_short_one_after_another_are_split_in_linear_time():
    """Each cut read the rest of its piece again: 8,000 values cut short in a row took 10 s, 4,000 2 s."""
    import time

    import ctpipe.sources as sources

    def took(n: int) -> float:
        data = "".join(json.dumps({"n": i, "list": [{"m": i}]})[:-1] for i in range(n)).encode()
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            assert b"".join(sources._a_value_a_line(iter([data]))).count(b"\n") == n - 1
            best = min(best, time.perf_counter() - start)
        return best

    assert took(8_000) / took(1_000) < 32  # 8 linear, 64 quadratic


def _export_of(spans: list, resource: dict | None = None) -> bytes:
    return json.dumps({"resourceSpans": [{"resource": resource or {}, "scopeSpans": [{"scope": {"name": "s"},
                                                                                      "spans": spans}]}]}).encode()


def _span_ids(blocks) -> list[str]:
    return [span["spanId"] for b in blocks for line in b.data.split(b"\n") if line
            for span in json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]]


def test_an_otlp_export_longer_than_a_record_is_split_wherever_the_reads_cut_it(monkeypatch):
    """A line is an OTLP export by its first bytes, however few of them the read that began it held:
    past a record's size, the cutter reads it through as exports of a few spans each, in blocks
    numbered as that line, whatever the reads' sizes. Any other line that long is quarantined."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "MAX_RECORD_BYTES", 1000)
    monkeypatch.setattr(sources, "_EXPORT_BYTES", 200)
    monkeypatch.setattr(sources, "BLOCK_BYTES", 700)
    export = _export_of([{"spanId": str(i), "name": "x" * 40} for i in range(60)])
    data = b'{"n": 1}\n' + export + b"\n" + b'{"n": 2, "pad": "' + b"x" * 5000 + b'"}\n{"n": 3}\n'
    for cut in [*range(1, 40), 700]:  # the export begins `cut` bytes before the end of the first read
        for step in (7, 1500):
            chunks = [data[:9 + cut], *(data[i:i + step] for i in range(9 + cut, len(data), step))]
            blocks = list(sources._cut("a.jsonl", iter(chunks)))
            assert [(b.damage.position, b.damage.detail) for b in blocks if b.damage] == [(3, "5019 bytes > 1000")]
            split = [b for b in blocks if b.offsets is not None]
            assert [(b.first, b.continued) for b in split] == [(2, False)] + [(2, True)] * (len(split) - 1)
            assert len(split) > 2 and _span_ids(split) == [str(i) for i in range(60)], (cut, step)
            assert [b.first for b in blocks if b.offsets is None and b.data] == [1, 4]


def test_a_long_otlp_export_of_a_plain_file_comes_as_places_of_its_spans(tmp_path, monkeypatch):
    """The process that cuts a plain file holds none of a long export's spans: its blocks say where
    each export's spans lie in the file, under which resource and scope, and loaded (where they are
    processed) they are the exports that reading the same line through makes."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "MAX_RECORD_BYTES", 1000)
    monkeypatch.setattr(sources, "_EXPORT_BYTES", 200)
    monkeypatch.setattr(sources, "BLOCK_BYTES", 500)
    monkeypatch.setattr(sources, "_EXPORT_READS", 300)
    export = json.dumps({"resourceSpans": [
        {"resource": {"attributes": [{"key": "r", "value": {"stringValue": str(r)}}]},
         "scopeSpans": [{"scope": {"name": f"s{s}"}, "spans": [{"spanId": f"{r}{s}{i}", "name": "x" * 40}
                                                                for i in range(10)]} for s in range(2)]}
        for r in range(2)]}).encode()
    data = b'{"n": 1}\n' + export + b'\n{"n": 2}\n'
    (tmp_path / "a.jsonl").write_bytes(data)
    placed = [b for b in sources._plain_blocks(str(tmp_path / "a.jsonl")) if b.offsets is not None]
    assert len(placed) > 2 and all(b.exports and not b.data and b.size < 500 for b in placed)
    streamed = [b for b in sources._cut("a.jsonl", iter(data[i:i + 300] for i in range(0, len(data), 300)))
                if b.offsets is not None]
    assert [b.load().data for b in placed] == [b.data for b in streamed]
    exports = [json.loads(line) for b in placed for line in b.load().data.split(b"\n")]
    assert [(e["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"],
             e["resourceSpans"][0]["scopeSpans"][0]["scope"]["name"], span["spanId"][2:])
            for e in exports for span in e["resourceSpans"][0]["scopeSpans"][0]["spans"]] == [
        (str(r), f"s{s}", str(i)) for r in range(2) for s in range(2) for i in range(10)]


def test_what_cannot_be_read_of_a_long_otlp_export_is_quarantined_in_its_place(tmp_path, monkeypatch):
    """Cut in place or read through (gzip), a long export's spans are read up to where it breaks off,
    and that is an item of the export's line; a span too large for an export of its own is an item
    alone, the spans around it read; a resource whose members follow its spans (no export can hold
    them) stops the reading there; and a long line that only begins as an export is one item."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "MAX_RECORD_BYTES", 1000)
    monkeypatch.setattr(sources, "_EXPORT_BYTES", 200)
    monkeypatch.setattr(sources, "BLOCK_BYTES", 500)  # with its window, within a record, as they are (see _places)
    monkeypatch.setattr(sources, "_EXPORT_READS", 300)
    spans = [{"spanId": str(i), "name": "x" * (2000 if i == 7 else 140)} for i in range(20)]
    late = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [dict(s, name="y" * 100) for s in spans[10:]]}],
                                          "resource": {}}]}).encode()
    broken = _export_of([dict(s, name="z" * 300) for s in spans[:5]])[:-10]
    data = b"\n".join([broken, b'{"n": 1}', _export_of(spans[5:10]), late,
                       b'{"resourceSpans": "' + b"x" * 2000 + b'"}', b'{"n": 2}']) + b"\n"
    (tmp_path / "a.jsonl").write_bytes(data)
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(data))
    for name in ("a.jsonl", "b.jsonl.gz"):
        got = [(i.position, i.reason, i.doc and (i.doc.get("n") or [s["spanId"] for s in i.doc["resourceSpans"][0][
            "scopeSpans"][0]["spans"]])) for i in read(str(tmp_path / name))]
        assert [(n, reason) for n, reason, _ in got if reason] == [
            (1, "invalid_json"), (3, "record_too_large"), (4, "invalid_field"), (5, "record_too_large")], name
        assert [(n, doc) for n, reason, doc in got if not reason] == [
            *((1, [str(i)]) for i in range(4)), (2, 1), (3, ["5", "6"]), (3, ["8", "9"]),
            *((4, [str(i), str(i + 1)]) for i in range(10, 20, 2)), (6, 2)], name
    items = {i.position: i for i in read(str(tmp_path / "a.jsonl")) if i.reason}
    assert items[1].detail == ("an OTLP export past 1000 bytes, not read from here: the export breaks off after "
                               f"{len(broken)} bytes")
    assert "a resource has a member after its scopeSpans" in items[4].detail
    assert items[5].detail == "2021 bytes > 1000" and items[5].raw.startswith('{"resourceSpans": "xxx')


def test_a_json_file_may_hold_one_document_over_many_lines(tmp_path, monkeypatch):
    """An array of records or one record, pretty-printed (gzip or not): a record per element, each
    refused for its own faults. JSON Lines and a document that does not parse are read line by line;
    an array past the record size an element at a time."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "MAX_RECORD_BYTES", 4000)
    array = '[\n  {"n": 1},\n  {"n": NaN},\n  "text",\n  {"n": 2, "text": "caf\u00e9"}\n]\n'
    (tmp_path / "a.json").write_text(array)
    with gzip.open(tmp_path / "b.json.gz", "wt") as f:
        f.write(json.dumps({"n": 3, "nested": {"a": [1, 2]}}, indent=2))
    (tmp_path / "c.json").write_bytes(b'\xef\xbb\xbf{"n": 4}\n{"n": 5}\n')  # JSON Lines
    (tmp_path / "d.json").write_text('[\n{"n": 6},\n{"n": 7}\n')  # the closing bracket missing: its elements whole
    (tmp_path / "g.json").write_text('[\n  {\n    "n": 11\n  },\n  {"n": 12},\n]\n')  # a comma after the last, as Helicone's tool writes
    (tmp_path / "h.json").write_text('[{"n": 13}, {"n": \n{"n": 14}\n')  # JSON Lines, the first line broken: not an array
    (tmp_path / "e.json").write_text(json.dumps([{"n": 8, "text": "x" * 5000}], indent=2))
    (tmp_path / "f.json").write_text('[{"n": 9}, {"n": 10}]')  # on one line, with no newline at its end
    (tmp_path / "i.json").write_text('[{"n": 15}, {"n": 16},]\n')  # on one line that does not parse whole: was one item
    (tmp_path / "j.json").write_text('[{"n": 17}, {"n": 18}')
    (tmp_path / "k.json").write_text('[{\n  "n": 19\n},\n{"n": 20},\n]\n')  # pretty-printed from "[{": was read as lines
    (tmp_path / "l.json").write_text('[{"n": 21}, "text", {"n": 22},]')  # a text among objects: was glued to the one before
    (tmp_path / "m.json").write_text('[\n{"n": 23}\n,\n{"n": 24}\n,\n')  # as JSONStream writes one, cut short
    (tmp_path / "n.json").write_text('[{"n": 25},\n{"n": 26}][{"n": 27},\n{"n": 28}]')  # an array a flush
    items = [(i.file.rsplit("/", 1)[-1], i.position, i.reason, i.doc) for i in read(str(tmp_path))]
    assert items[:8] == [
        ("a.json", 1, None, {"n": 1}), ("a.json", 2, "non_finite_number", None), ("a.json", 3, None, "text"),
        ("a.json", 4, None, {"n": 2, "text": "caf\u00e9"}), ("b.json.gz", 1, None, {"n": 3, "nested": {"a": [1, 2]}}),
        ("c.json", 1, None, {"n": 4}), ("c.json", 2, None, {"n": 5}), ("d.json", 1, None, {"n": 6})]
    assert [(p, d) for f, p, _, d in items if f in ("d.json", "g.json")] == [(1, {"n": 6}), (2, {"n": 7}), (1, {"n": 11}),
                                                                            (2, {"n": 12})]
    assert [(p, r, d) for f, p, r, d in items if f == "h.json"] == [(1, "invalid_json", None), (2, None, {"n": 14})]
    assert [(p, r) for f, p, r, _ in items if f == "e.json"] == [(1, "record_too_large")]
    assert [(p, d) for f, p, _, d in items if f == "f.json"] == [(1, {"n": 9}), (2, {"n": 10})]
    assert [(f, p, d) for f, p, _, d in items if f in ("i.json", "j.json")] == [
        ("i.json", 1, {"n": 15}), ("i.json", 2, {"n": 16}), ("j.json", 1, {"n": 17}), ("j.json", 2, {"n": 18})]
    assert [(f, p, d) for f, p, _, d in items if f in ("k.json", "l.json")] == [
        ("k.json", 1, {"n": 19}), ("k.json", 2, {"n": 20}), ("l.json", 1, {"n": 21}), ("l.json", 2, "text"), ("l.json", 3, {"n": 22})]
    assert [(f, p, d) for f, p, _, d in items if f in ("m.json", "n.json")] == [
        ("m.json", 1, {"n": 23}), ("m.json", 2, {"n": 24}), ("n.json", 1, {"n": 25}), ("n.json", 2, {"n": 26}),
        ("n.json", 3, [{"n": 27}, {"n": 28}])]


@pytest.mark.parametrize("name", ["export.json", "export.json.gz"])
def test_an_array_past_the_record_size_is_read_an_element_at_a_time(tmp_path, monkeypatch, name):
    """Langfuse's JSON export writes a window's rows as one array on one line; pretty-printed ones
    span many. Past the record size, each element is a record numbered by its place in the array,
    however the pieces read cut it, commas and brackets in strings left whole."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 256)
    monkeypatch.setattr(sources, "MAX_RECORD_BYTES", 4000)
    monkeypatch.setattr(sources, "_PEEK", 1000)  # less than a record, as 64 KB is of 8 MB
    rng = random.Random(1)
    texts = ['say "],["', "c:\\", "[{,", "]", "a\nb", ""]
    records = [{"n": i, "text": rng.choice(texts) * rng.randrange(4) + "x" * rng.randrange(200), "nested": [{"m": i}, [1, 2]]}
               for i in range(200)]
    records[7], records[8], records[100] = None, "a text", 42  # each an element of its own, not glued to the one before
    for indent in (None, 2):
        (tmp_path / name).write_bytes(packed(name, b"\xef\xbb\xbf " + json.dumps(records, indent=indent).encode()))
        items = list(read(str(tmp_path / name)))
        assert [(i.position, i.doc) for i in items] == list(enumerate(records, 1)), indent
    (tmp_path / name).write_bytes(packed(name, json.dumps(records).encode()[:-200]))  # cut short: the rest quarantined
    items = list(read(str(tmp_path / name)))
    assert [i.doc for i in items[:-1]] == records[:len(items) - 1] and items[-1].reason == "invalid_json"


def test_damaged_records_are_reported_with_their_place_and_good_ones_kept(tmp_path, monkeypatch):
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "MAX_RECORD_BYTES", 1000)
    lines = [b'{"n": 1}', b'{"n": \xff}', b'{"n": NaN}', b'{"n": ', b'{"big": "' + b"x" * 2000 + b'"}', b'{"n": 2}']
    (tmp_path / "a.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    items = list(read(str(tmp_path / "a.jsonl")))
    assert [(i.position, i.reason) for i in items] == [
        (1, None), (2, "invalid_utf8"), (3, "non_finite_number"), (4, "invalid_json"), (5, "record_too_large"), (6, None)]


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz", "a.jsonl.zst"])
def test_a_byte_order_mark_before_a_line_is_ignored(tmp_path, name):
    """As a Windows tool starts a file, and as files joined with cat carry it into the middle."""
    bom = b"\xef\xbb\xbf"
    data = bom + b'{"n": 1}\r\n{"n": 2}\n' + bom + b'{"n": 3}\n' + bom + b"\n" + b'{"n": \xef\xbb\xbf4}\n'
    (tmp_path / name).write_bytes(packed(name, data))
    items = list(read(str(tmp_path / name)))
    assert [(i.position, i.doc, i.reason) for i in items] == [
        (1, {"n": 1}, None), (2, {"n": 2}, None), (3, {"n": 3}, None), (5, None, "invalid_json")]  # a mark only starts a line


def test_zero_bytes_after_a_gzip_member_are_padding_not_damage(tmp_path):
    """As gzip -t and Python's reader take them (a tape's or a block device's padding): they were a
    corrupt_gzip item, one more in than the file held."""
    member = gzip.compress(b"".join(json.dumps({"n": i}).encode() + b"\n" for i in range(3)))
    (tmp_path / "t.jsonl.gz").write_bytes(member + b"\0" * 70_000 + member + b"\0" * 512)
    assert [(i.doc["n"], i.reason) for i in read(str(tmp_path / "t.jsonl.gz"))] == [(n, None) for n in [0, 1, 2] * 2]
    (tmp_path / "t.jsonl.gz").write_bytes(member + b"\0" * 3 + b"garbage of no member")
    assert [i.reason for i in read(str(tmp_path / "t.jsonl.gz"))][3:] == ["corrupt_gzip"]


def test_a_truncated_gzip_keeps_what_came_before_the_damage(tmp_path):
    whole = gzip.compress(b"".join(json.dumps({"n": i}).encode() + b"\n" for i in range(2000)))
    (tmp_path / "t.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    items = list(read(str(tmp_path / "t.jsonl.gz")))
    good = [i for i in items if i.reason is None]
    assert good and [i.doc["n"] for i in good] == list(range(len(good)))
    assert items[-1].reason == "truncated_gzip" and items[-1].position == len(good) + 1


@pytest.mark.parametrize("layout", ["array", "stream"])
def test_a_truncated_gzip_of_one_document_keeps_its_records_before_the_damage(tmp_path, layout):
    """A pretty-printed array, or values one after another, cut short: read as the plain file is, a
    record at a time up to the damage, not a line of the text at a time (nor all as one item)."""
    records = [{"n": i, "text": "words " * 20} for i in range(400)]
    text = json.dumps(records, indent=1) if layout == "array" else "".join(json.dumps(r) for r in records)
    whole = gzip.compress(text.encode())
    (tmp_path / "t.json.gz").write_bytes(whole[: len(whole) * 3 // 4])
    items = list(read(str(tmp_path / "t.json.gz")))
    good = [i.doc["n"] for i in items if i.reason is None]
    assert len(good) > 200 and good == list(range(len(good)))
    assert [i.reason for i in items if i.reason] == ["truncated_gzip"]


@pytest.mark.parametrize("name", ["t.jsonl.gz", "t.jsonl.zst"])
def test_every_truncation_of_a_compressed_file_is_reported(tmp_path, monkeypatch, name):
    """Cut after any byte, a file keeps the lines before the cut (up to a read's worth), and says it
    was cut. One gzip cut in fifteen, within the header or just after a full block, read as a shorter
    file or an empty one."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 256)
    monkeypatch.setattr(sources, "_ZSTD_STEP", 128)
    monkeypatch.setattr(sources, "_HELD_IN_MEMORY", 4096)  # what waits for its checksum, on disk past that
    whole = packed(name, b"".join(json.dumps({"n": i, "text": "words " * 5}).encode() + b"\n" for i in range(300)))
    reason = "truncated_gzip" if name.endswith(".gz") else "truncated_zstd"
    path = tmp_path / name
    for cut in range(1, len(whole)):
        path.write_bytes(whole[:cut])
        items = list(read(str(path)))
        good = [i.doc["n"] for i in items if i.reason is None]
        assert items and items[-1].reason == reason and good == list(range(len(good))), cut


@pytest.mark.parametrize("name", ["gzip.jsonl.gz", "zstd.jsonl.zst"])
def test_a_damaged_file_is_told_from_a_truncated_one_and_none_of_its_damaged_stream_is_read(tmp_path, name):
    """Damaged bytes decode as other text, and much of it reads as good lines: one flipped bit
    published hundreds of wrong prompts. A gzip member, or a zstd stream, is read only once its
    checksum holds; the members before a damaged one are kept, and nothing after it is read."""
    lines = [json.dumps({"n": i, "h": hashlib.sha256(str(i).encode()).hexdigest()}).encode() + b"\n"
             for i in range(20000)]  # 0.8 MB compressed: a dozen steps of the gzip reader
    whole = packed(name, b"".join(lines))
    at = len(whole) * 3 // 4
    crc = slice(-8, -4) if name.endswith(".gz") else slice(-4, None)  # gzip's CRC-32, zstd's XXH64 checksum
    checksum = bytearray(whole)
    checksum[crc] = bytes(b ^ 1 for b in whole[crc])
    # Text that is not JSON under a compressed name is damage too (JSON text is read as it is: see
    # test_a_file_named_compressed_is_read_as_its_first_bytes_say).
    files = {"flipped": whole[:at] + bytes([whole[at] ^ 0xFF]) + whole[at + 1:], "checksum": bytes(checksum),
             "plain": b"n,h\n" + b"".join(lines[:3])}
    reason, detail = ("corrupt_gzip", "IsalError") if name.endswith(".gz") else ("corrupt_zstd", "zstd: ZSTD decompress failed")
    for damage in files:
        (tmp_path / name).write_bytes(files[damage])
        assert [(i.position, i.reason) for i in read(str(tmp_path / name))] == [(1, reason)], damage
        assert detail in list(read(str(tmp_path / name)))[0].detail
    if name.endswith(".gz"):  # members, as `cat a.gz b.gz` makes them: those before the damaged one are read
        first = gzip.compress(b"".join(lines[:500]))
        (tmp_path / name).write_bytes(first + files["flipped"] + first)
        items = list(read(str(tmp_path / name)))
        assert [i.doc["n"] for i in items[:-1]] == list(range(500)) and (items[-1].position, items[-1].reason) == (501, reason)


@pytest.mark.parametrize("name", ["gzip.jsonl.gz", "zstd.jsonl.zst"])
def test_no_flipped_bit_of_a_compressed_file_gives_a_line_it_does_not_hold(tmp_path, name):
    words = [f"w{k}" for k in range(300)]  # 0.6 MB compressed: damage early in it comes many reads before its end
    lines = [json.dumps({"n": i, "text": " ".join(random.Random(i).choices(words, k=20))}).encode() + b"\n"
             for i in range(20000)]
    whole = packed(name, b"".join(lines))
    rng = random.Random(0)
    for _ in range(20):
        damaged = bytearray(whole)
        at = rng.randrange(len(whole) // 4, len(whole) * 3 // 4)
        damaged[at] ^= 1 << rng.randrange(8)
        (tmp_path / name).write_bytes(damaged)
        items = list(read(str(tmp_path / name)))
        assert all(i.reason or i.doc == json.loads(lines[i.position - 1]) for i in items), at
        assert items[-1].reason in ("corrupt_gzip", "corrupt_zstd", "truncated_gzip", "truncated_zstd"), at


@pytest.mark.parametrize("kind", ["gzip members", "zstd frames each after its length"])
def test_members_and_frames_checked_one_by_one_still_come_a_block_at_a_time(monkeypatch, kind):
    """A member (or frame) is handed out once its checksum holds: each alone made a block of one line
    of a file of many small ones (bgzip, `cat`, a Collector's frame per export), 70 times slower."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 4096)
    lines = [json.dumps({"n": i}).encode() + b"\n" for i in range(2000)]
    if kind == "gzip members":
        pieces = list(sources._gunzip(io.BytesIO(b"".join(gzip.compress(line) for line in lines))))
    else:  # each frame's text on a line of its own
        pieces = list(sources._unzstd(io.BytesIO(_framed(*(line.rstrip(b"\n") for line in lines)))))
    assert b"".join(pieces) == b"".join(lines)
    assert [len(p) for p in pieces[:-1]] == [4096] * (len(pieces) - 1) and 0 < len(pieces[-1]) <= 4096


def test_a_zstd_frame_of_a_window_past_128_mb_is_said_to_be_one_not_only_corrupt():
    """zstd --long=30 writes frames that ask for a window of 1 GiB, which Arrow's reader refuses: the
    file is valid, and the item says how to make it readable."""
    import ctpipe.sources as sources

    text = b'{"n": 1}\n'
    # A frame with no content size, whose window descriptor asks for 2**30 bytes, of one raw block.
    frame = b"\x28\xb5\x2f\xfd" + bytes([0x00, 20 << 3]) + (1 | len(text) << 3).to_bytes(3, "little") + text
    with pytest.raises(sources._Damage) as e:
        list(sources._unzstd(io.BytesIO(frame)))
    assert e.value.reason == "corrupt_zstd" and "zstd --long=28 or more" in str(e.value) and "--long=27 or less" in str(e.value)


def test_a_gzip_member_a_line_is_read_in_time_linear_in_its_lines():
    """What was carried short of a block was copied at each member's end: a file of a member a line
    (a writer that compresses each record it appends) took 130 s for 100,000 traces, 19 times one
    member's."""
    import ctpipe.sources as sources

    def took(n: int) -> float:
        data = b"".join(gzip.compress(json.dumps({"n": i, "text": "x" * 100}).encode() + b"\n", 1) for i in range(n))
        assert sum(p.count(b"\n") for p in sources._gunzip(io.BytesIO(data))) == n
        return fastest(lambda: list(sources._gunzip(io.BytesIO(data))))

    assert took(32_000) / took(2_000) < 48  # 16 linear, 256 quadratic


def test_gzip_comes_in_blocks_of_the_block_size_however_much_it_compresses(tmp_path, monkeypatch):
    """Two members, as ``cat a.gz b.gz`` makes, of lines that compress a hundred times: the blocks are
    a block's size (and a line), not what each megabyte read holds; damage keeps all before it."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 4096)
    line = lambda i: json.dumps({"n": i, "system": "be brief. " * 100}).encode() + b"\n"  # noqa: E731
    members = [gzip.compress(b"".join(map(line, range(k, k + 500)))) for k in (0, 500)]
    packed = b"".join(members)
    assert len(packed) * 100 < 1000 * len(line(0))
    (tmp_path / "a.jsonl.gz").write_bytes(packed)
    fs, files, _ = sources.list_files(str(tmp_path))
    assert max(len(b.data) for b in sources.blocks(fs, files)) < 4096 + 2 * len(line(999))
    assert [i.doc["n"] for i in read(str(tmp_path))] == list(range(1000))
    (tmp_path / "a.jsonl.gz").write_bytes(packed[: len(members[0]) + len(members[1]) // 2])
    assert max(len(b.data) for b in sources.blocks(fs, files)) < 4096 + 2 * len(line(999))  # 45 KB before
    items = list(read(str(tmp_path)))
    good = [i.doc["n"] for i in items if i.reason is None]
    assert len(good) > 500 and good == list(range(len(good))) and items[-1].reason == "truncated_gzip"


def test_zstd_is_read_as_its_lines_frames_one_after_another_in_blocks_of_the_block_size(tmp_path, monkeypatch):
    """As the zstd tool and OpenTelemetry's file exporter write it: frames (``cat a.zst b.zst``) of
    lines that compress a hundred times come in blocks of a block's size; a .json.zst file may hold
    one document."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(sources, "_ZSTD_STEP", 1024)
    line = lambda i: json.dumps({"n": i, "system": "be brief. " * 100}).encode() + b"\n"  # noqa: E731
    frames = [zstd(b"".join(map(line, range(k, k + 500)))) for k in (0, 500)]
    assert sum(map(len, frames)) * 100 < 1000 * len(line(0))
    (tmp_path / "a.ndjson.zst").write_bytes(b"".join(frames))
    (tmp_path / "b.json.zst").write_bytes(zstd(json.dumps([{"n": 1000}, {"n": 1001}], indent=2).encode()))
    fs, files, _ = sources.list_files(str(tmp_path))
    assert max(len(b.data) for b in sources.blocks(fs, files)) < 4096 + 2 * len(line(999))
    assert [(i.doc["n"], i.position) for i in read(str(tmp_path))] == [(n, n % 1000 + 1) for n in range(1002)]
    assert files.held == 10 * sum(fs.size(f) for f in files)  # sized as compressed, unopened


def test_an_error_reading_a_zstd_file_is_not_taken_for_damage(tmp_path):
    """A network error under the decompressor ends the run, as it does for any file, rather than cut the file short."""
    import ctpipe.sources as sources

    class Dropped(io.BytesIO):
        def read(self, n=-1):
            if self.tell():  # after the first read
                raise ConnectionResetError("connection reset by peer")
            return super().read(n)

    text = b"".join(json.dumps({"n": i, "h": hashlib.sha256(str(i).encode()).hexdigest()}).encode() + b"\n"
                    for i in range(20000))
    with pytest.raises(ConnectionResetError):
        list(sources._unzstd(Dropped(zstd(text))))


def _framed(*exports: bytes) -> bytes:
    """``exports`` as the OpenTelemetry Collector's file exporter writes them with ``format: json`` and
    ``compression: zstd`` (its exporter.file.nativeCompression gate off): each one zstd frame after
    its length (4 bytes, big-endian), with no newline (see its exportMessageAsBuffer)."""
    return b"".join(len(frame).to_bytes(4, "big") + frame for frame in map(zstd, exports))


_EXPORTS = [_export_of([{"spanId": f"{k}{i}", "name": "x" * 40} for i in range(3)]) for k in range(4)]


def _spans(items) -> list:
    """Each item's span ids (an export), or its (position, reason) where it could not be read."""
    return [[s["spanId"] for s in i.doc["resourceSpans"][0]["scopeSpans"][0]["spans"]] if i.reason is None
            else (i.position, i.reason) for i in items]


def test_zstd_frames_each_after_its_length_are_read_an_export_a_line(tmp_path, caplog):
    """As the Collector's file exporter writes compressed JSON: named .zst (.json.zst: JSON Lines,
    not one document), or with no suffix and sniffed; each frame one line."""
    import ctpipe.sources as sources

    for name in ("a.jsonl.zst", "b.json.zst", "otel-traces"):
        (tmp_path / name).write_bytes(_framed(*_EXPORTS))
    fs, found, skipped = sources.list_files(str(tmp_path))
    assert not skipped and [name.rsplit("/", 1)[-1] for _, name in found.items()] == [
        "a.jsonl.zst", "b.json.zst", "otel-traces.json.zst"]
    items = list(read(str(tmp_path)))
    assert [(i.file.rsplit("/", 1)[-1], i.position) for i in items] == [
        (name, n) for name in ("a.jsonl.zst", "b.json.zst", "otel-traces") for n in range(1, 5)]
    assert _spans(items) == [[f"{k}{i}" for i in range(3)] for k in range(4)] * 3
    assert not caplog.records  # each named as it is


def test_zstd_frames_each_after_its_length_keep_the_frames_before_their_damage(tmp_path):
    """A file cut anywhere in its last frame (its length, or the frame) keeps the frames before it
    and ends in truncated_zstd; a frame that is not zstd ends it in corrupt_zstd, as do bytes past
    a frame within its length. The frames before are kept, though a read asks for more than all of
    them (a zstd step: 256 KB)."""
    exports = _EXPORTS
    whole = _framed(*exports)
    last = len(whole) - len(_framed(exports[-1]))
    path = tmp_path / "a.jsonl.zst"
    kept = [[f"{k}{i}" for i in range(3)] for k in range(3)]
    for cut in range(last + 1, len(whole)):
        path.write_bytes(whole[:cut])
        assert _spans(read(str(path))) == [*kept, (4, "truncated_zstd")], cut
    path.write_bytes(whole[:last])  # cut where a frame starts: a file of fewer frames
    assert _spans(read(str(path))) == kept
    second = zstd(exports[1])
    for damaged in (b"x" * len(second), second + b"more"):  # its length says so
        path.write_bytes(_framed(exports[0]) + len(damaged).to_bytes(4, "big") + damaged + _framed(exports[2]))
        [first, bad] = read(str(path))
        assert _spans([first, bad]) == [kept[0], (2, "corrupt_zstd")]
        assert bad.detail.startswith("zstd: ZSTD decompress failed"), bad.detail


def test_a_file_named_compressed_is_read_as_its_first_bytes_say(tmp_path, caplog):
    """``gcloud storage cp`` saves an object stored gzipped with decompressive transcoding as plain
    text under its .gz name: its lines are read, with a warning naming it once (a .json.gz document
    as well as JSON Lines), as is zstd under a .gz name. A gzip file damaged after its magic number
    is still damage, with no warning."""
    import logging

    lines = b'\xef\xbb\xbf{"n": 1}\n\n{"n": 2}\n'
    gz = gzip.compress(b"".join(b'{"n": %d}\n' % i for i in range(3, 300)), mtime=0)
    files = {"a.jsonl.gz": lines, "b.json.gz": b'[\n  {"n": 3},\n  {"n": 4}\n]\n', "c.ndjson.gz": zstd(lines),
             "d.jsonl.zst": lines, "e.jsonl.gz": gz[:len(gz) // 2], "f.jsonl.gz": gz[:40] + b"\xff" * 8 + gz[48:]}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with caplog.at_level(logging.WARNING, logger="ctpipe.sources"):
        items = [(i.file.rsplit("/", 1)[-1], i.position, i.reason or i.doc["n"]) for i in read(str(tmp_path))]
    damaged = {f: [i for i in items if i[0] == f] for f in ("e.jsonl.gz", "f.jsonl.gz")}
    assert [i for i in items if i[0] not in damaged] == [
        ("a.jsonl.gz", 1, 1), ("a.jsonl.gz", 3, 2), ("b.json.gz", 1, 3), ("b.json.gz", 2, 4),
        ("c.ndjson.gz", 1, 1), ("c.ndjson.gz", 3, 2), ("d.jsonl.zst", 1, 1), ("d.jsonl.zst", 3, 2)]
    for name, reason in (("e.jsonl.gz", "truncated_gzip"), ("f.jsonl.gz", "corrupt_gzip")):
        *good, (_, position, last) = damaged[name]
        assert [n for _, _, n in good] == list(range(3, 3 + len(good))) and (position, last) == (len(good) + 1, reason)
    assert sorted(r.getMessage().split(" ", 1)[1] for r in caplog.records) == [
        "is named as gzip, but its first bytes are plain text: read as they say",  # a.jsonl.gz
        "is named as gzip, but its first bytes are plain text: read as they say",  # b.json.gz
        "is named as gzip, but its first bytes are zstd: read as they say",
        "is named as zstd, but its first bytes are plain text: read as they say"]
    assert sorted(r.getMessage().split(" ", 1)[0].rsplit("/", 1)[1] for r in caplog.records) == [
        "a.jsonl.gz", "b.json.gz", "c.ndjson.gz", "d.jsonl.zst"]


@pytest.mark.parametrize("where", ["local", "memory"])
def test_a_file_named_plain_is_read_as_its_compressed_first_bytes_say(tmp_path, caplog, where):
    """An object stored with ``Content-Encoding: gzip`` and downloaded as stored keeps its plain name:
    read as its first bytes say (JSON Lines, a document, CSV; gzip or zstd, framed or not), with a
    warning naming it once. Before, every line of it was quarantined as not UTF-8."""
    import logging

    lines = b"".join(b'{"n": %d}\n' % i for i in range(1, 300))
    files = {"a.jsonl": gzip.compress(lines, mtime=0), "b.json": zstd(b'[\n  {"n": 1},\n  {"n": 2}\n]\n'),
             "c.csv": gzip.compress(b"n\n1\n2\n", mtime=0), "d.ndjson": lines[:9] + lines[9:18],
             "e.jsonl": gzip.compress(lines, mtime=0)[:200]}
    if where == "local":
        root = str(tmp_path)
        for name, data in files.items():
            (tmp_path / name).write_bytes(data)
    else:
        root = f"memory://{tmp_path.name}"
        for name, data in files.items():
            fsspec.filesystem("memory").pipe_file(f"{root}/{name}", data)
    with caplog.at_level(logging.WARNING, logger="ctpipe.sources"):
        items = [(i.file.rsplit("/", 1)[-1], i.position, i.reason or i.doc["n"]) for i in read(root)]
    by_file = {f: [(p, n) for g, p, n in items if g == f] for f in files}
    assert by_file["a.jsonl"] == [(i, i) for i in range(1, 300)]
    assert by_file["b.json"] == [(1, 1), (2, 2)] and by_file["c.csv"] == [(1, "1"), (2, "2")]
    assert by_file["d.ndjson"] == [(1, 1), (2, 2)]
    *good, last = by_file["e.jsonl"]  # damage is still damage, after the lines before it
    assert [n for _, n in good] == list(range(1, len(good) + 1)) and last == (len(good) + 1, "truncated_gzip")
    assert sorted(r.getMessage().rsplit("/", 1)[1] for r in caplog.records) == [
        "a.jsonl is named as plain text, but its first bytes are gzip: read as they say",
        "b.json is named as plain text, but its first bytes are zstd: read as they say",
        "c.csv is named as plain text, but its first bytes are gzip: read as they say",
        "e.jsonl is named as plain text, but its first bytes are gzip: read as they say"]


def test_spilled_blocks_load_as_they_were_and_leave_nothing_behind(tmp_path, monkeypatch):
    """What this process read (gzip lines, damage aside) waits in a file per block; places in a plain
    file and damage come as they are. Each file is gone once its block is loaded."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 4096)
    text = b"".join(json.dumps({"n": i, "text": "words " * 20}).encode() + b"\n" for i in range(400))
    (tmp_path / "a.jsonl").write_bytes(text)
    packed = gzip.compress(text)
    (tmp_path / "b.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    fs, files, _ = sources.list_files(str(tmp_path))
    blocks = list(sources.blocks(fs, files))
    spilled = list(sources.spilled(blocks, str(tmp_path / "spill")))
    assert [b.spilled is not None for b in spilled] == [bool(b.data) for b in blocks]
    assert sum(b.size > 0 for b in spilled) > 5 and blocks[-1].damage.reason == "truncated_gzip"
    assert len(os.listdir(tmp_path / "spill")) == sum(bool(b.data) for b in blocks) > 5
    assert [b.load() for b in spilled] == [b.load() for b in blocks]
    assert os.listdir(tmp_path / "spill") == []
    with pytest.raises(sources.SourceError, match=r"b\.jsonl\.gz: a block read from it earlier could not be read back"):
        next(b for b in spilled if b.spilled).load()  # its file removed meanwhile


def test_an_empty_file_yields_nothing_and_a_missing_source_is_named(tmp_path):
    for name in ("empty.jsonl", "empty.parquet"):  # a Parquet file of no bytes was one unreadable_parquet item
        (tmp_path / name).write_text("")
        assert list(read(str(tmp_path / name))) == []
    with pytest.raises(SourceError, match=r"source '.*/nope' does not exist"):
        list(read(str(tmp_path / "nope")))


def test_a_source_whose_client_cannot_start_or_whose_scheme_is_unknown_is_named():
    """HDFS's client needs a JVM and says only "Unable to load libjvm"; the error names the source."""
    with pytest.raises(SourceError, match=r"source 'nosuch://b/x': .*nosuch"):
        list(read("nosuch://b/x"))
    with pytest.raises(SourceError, match=r"source 'hdfs://namenode/traces': "):
        list(read("hdfs://namenode/traces"))


def _items(blocks) -> list[tuple]:
    from ctpipe.sources import items, numbered

    return [(i.position, i.reason, i.doc, i.detail) for b in numbered(blocks) for i in items(b)]


@pytest.mark.parametrize("block_bytes", [7, 64, 1 << 20])
def test_a_plain_local_file_comes_as_places_in_the_file_numbered_where_they_are_loaded(tmp_path, monkeypatch,
                                                                                       block_bytes):
    import pickle

    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "MAX_RECORD_BYTES", 100)
    monkeypatch.setattr(sources, "BLOCK_BYTES", block_bytes)
    big = b'{"big": "' + b"x" * 200 + b'"}'
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"n": 1}\r\n' + big + b'\n{"n": 2}\n\n\n{"n": 3}\n' + big + b'\n{"n": 4}')
    fs, files, _ = sources.list_files(str(path))
    places = list(sources.blocks(fs, files))
    assert all(not b.data and b.first is None for b in places) and any(b.size for b in places)
    got = _items(pickle.loads(pickle.dumps(b)) for b in places)  # as a worker gets them
    assert got == _items(sources._jsonl_blocks(fs, str(path), str(path)))
    assert [(n, reason) for n, reason, *_ in got] == [(1, None), (2, "record_too_large"), (3, None), (6, None),
                                                      (7, "record_too_large"), (8, None)]
    too_large = [i for b in sources.numbered(places) for i in sources.items(b) if i.reason]
    assert [i.raw for i in too_large] == [big[:200].decode()] * 2  # its start, whatever the block size
    path.write_bytes(b"")
    with pytest.raises(SourceError, match="changed while it was read"):
        next(b for b in places if b.size).load()
    path.unlink()
    with pytest.raises(SourceError, match="could not be read again"):
        next(b for b in places if b.size).load()


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz", "a.jsonl.zst"])
def test_lines_after_an_oversized_line_ending_with_a_read_are_kept(tmp_path, monkeypatch, name):
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "MAX_RECORD_BYTES", 100)
    monkeypatch.setattr(sources, "BLOCK_BYTES", 64)
    monkeypatch.setattr(sources, "_ZSTD_STEP", 64)
    data = b"x" * 191 + b"\n" + b'{"n": 1}\n{"n": 2}\n'  # the long line's newline is the last byte of a 64-byte read
    path = tmp_path / name
    path.write_bytes(packed(name, data))  # compressed files come in pieces of a block's size too: the same cut
    items = list(read(str(path)))
    assert [(i.position, i.reason, i.doc) for i in items] == [(1, "record_too_large", None), (2, None, {"n": 1}),
                                                              (3, None, {"n": 2})]


def test_plain_and_general_readers_read_random_files_alike(tmp_path, monkeypatch):
    import random

    import ctpipe.sources as sources

    rng = random.Random(0)
    path = tmp_path / "a.jsonl"
    fs, _, _ = sources.list_files(str(tmp_path))
    for _ in range(2000):
        monkeypatch.setattr(sources, "BLOCK_BYTES", rng.choice([1, 2, 3, 7, 16, 64, 200]))
        monkeypatch.setattr(sources, "MAX_RECORD_BYTES", rng.choice([5, 30, 100, 1000]))
        monkeypatch.setattr(sources, "_WINDOW", rng.choice([1, 3, 16, 1 << 16]))
        monkeypatch.setattr(sources, "_AHEAD", rng.choice([1, 2, 64]))
        lines = [rng.choice([b"", b"y" * rng.randrange(50, 400), b'{"n": %d}' % rng.randrange(10**6), b'{"n": 1}\r'])
                 for _ in range(rng.randrange(0, 12))]
        path.write_bytes(b"\n".join(lines) + rng.choice([b"", b"\n"]))
        plain = list(sources._plain_blocks(str(path)))
        assert _items(plain) == _items(sources._jsonl_blocks(fs, str(path), str(path)))
        # A block is at most a block and a window long, or one line, never over the limit then.
        longest = sources.BLOCK_BYTES + min(sources._WINDOW, sources.BLOCK_BYTES)
        assert all(b.size <= longest or b"\n" not in path.read_bytes()[b.at:b.at + b.size] for b in plain)
        assert all(b.size <= sources.MAX_RECORD_BYTES or b.size <= longest for b in plain)


def test_the_parent_reads_a_plain_file_only_around_its_cuts(tmp_path, monkeypatch):
    import io

    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 1 << 20)
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"".join(b'{"n": %d, "pad": "%s"}\n' % (i, b"x" * (i % 500)) for i in range(40_000)))
    bytes_read = []

    class Counting(io.FileIO):
        def read(self, n=-1):
            data = super().read(n)
            bytes_read.append(len(data))
            return data

    monkeypatch.setattr(sources, "open", lambda path, mode: Counting(path), raising=False)
    places = list(sources._plain_blocks(str(path)))
    size = path.stat().st_size
    assert len(places) > 8 and sum(bytes_read) < size / 10
    # The blocks tile the file, each ending before a newline, and their lines are all of the file's.
    assert places[0].at == 0 and places[-1].at + places[-1].size == size
    assert [b.at for b in places[1:]] == [b.at + b.size + 1 for b in places[:-1]]
    monkeypatch.undo()
    assert sum(b.load().lines for b in places) == path.read_bytes().count(b"\n") + 1
    assert [i.doc["n"] for b in sources.numbered(places) for i in sources.items(b)] == list(range(40_000))


def test_a_compressed_files_records_are_not_counted_below_their_size(tmp_path):
    """What a run holds is sized from the listing: a gzip or Parquet file of traces counts at least
    the bytes of the records it holds (the pairing buckets are cut from that count)."""
    import ctpipe.sources as sources

    rng = random.Random(0)
    words = [f"{w}{i}" for w in ("tank", "rate", "price", "hours", "store") for i in range(40)]
    records = [trace(i, " ".join(rng.choices(words, k=100)) + f" What is {i} plus 1?", " ".join(rng.choices(words, k=150)))
               for i in range(2000)]
    plain = tmp_path / "a.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "a.parquet", compression="zstd")
    held = plain.stat().st_size
    assert sources.list_files(str(plain))[1].held == held
    for name in ("a.jsonl.gz", "a.parquet"):
        _, files, _ = sources.list_files(str(tmp_path / name))
        assert (tmp_path / name).stat().st_size < held / 4 and files.held >= held, name


def test_parquet_rows_come_in_blocks_of_about_the_block_size_once_decoded(tmp_path, monkeypatch):
    """Rows of 4 KB whose text repeats (a system prompt): a few KB as stored, blocks of a few rows.
    Rows that grow later in the file come as slices of their batch, each holding only its own rows."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 64 * 1024)
    system = "You are a careful assistant. " * 140  # about 4 KB, the same in every row
    rows = [{"n": i, "system": system, "question": f"What is {i} plus 1?"} for i in range(200)]
    rows += [{"n": 200 + i, "system": system * 8, "question": "long"} for i in range(100)]  # 32 KB each
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "a.parquet", compression="zstd")
    assert (tmp_path / "a.parquet").stat().st_size < 64 * 1024  # all of it stored in less than a block

    blocks = list(sources.blocks(fsspec.filesystem("file"), {str(tmp_path / "a.parquet"): "a.parquet"}))
    assert [b.first for b in blocks] == [1] + [1 + sum(b.batch.num_rows for b in blocks[:i]) for i in range(1, len(blocks))]
    assert [n for b in blocks for n in b.batch.column("n").to_pylist()] == list(range(300))
    assert len(blocks) > 20 and all(b.batch.nbytes <= 2 * sources.BLOCK_BYTES for b in blocks)
    for block, left in zip(blocks, sources.spilled(blocks, str(tmp_path / "spill"))):  # as workers get them
        assert os.path.getsize(left.spilled) < block.batch.nbytes + 4096  # its own rows only
        assert left.batch is None and left.load() == block


def test_parquet_rows_that_grow_in_a_later_row_group_are_read_in_batches_sized_for_them(tmp_path, monkeypatch):
    """Small rows, then a row group of 64 KB ones: read in batches of a row or two, not in a batch sized
    for the first rows (13 MB held at once, then sliced), while many small row groups still make one block."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 64 * 1024)
    small = pa.table({"n": range(600), "text": ["short"] * 600})
    large = pa.table({"n": range(600, 800), "text": [os.urandom(32 * 1024).hex() for _ in range(200)]})
    # Pages of 8 rows: a reader decodes a page whole, and pyarrow checks a page's size only every
    # write_batch_size rows, so by default all 200 large rows would be one 13 MB page.
    with pq.ParquetWriter(tmp_path / "a.parquet", small.schema, compression="zstd", write_batch_size=8) as w:
        w.write_table(small, row_group_size=10)  # 60 row groups
        w.write_table(large, row_group_size=200)
    before, held = pa.total_allocated_bytes(), 0
    seen = []  # each block's rows and size, the block itself dropped, as once sent to a worker
    for block in sources.blocks(fsspec.filesystem("file"), {str(tmp_path / "a.parquet"): "a.parquet"}):
        held = max(held, pa.total_allocated_bytes() - before)  # what the reader holds, this block included
        seen.append((block.batch.column("n").to_pylist(), block.batch.nbytes))
    assert [n for rows, _ in seen for n in rows] == list(range(800))
    assert len(seen[0][0]) == 600  # 60 row groups, one batch
    assert all(len(rows) <= 2 for rows, _ in seen[1:]) and all(size <= 2 * 64 * 1024 for _, size in seen)
    assert held < 4 * 1024 * 1024, held  # 16.5 MB when the large rows came in one batch


@pytest.mark.parametrize("name", ["a.csv", "a.csv.gz", "a.csv.zst"])
def test_a_csv_file_s_rows_are_texts_under_its_header_and_a_bad_row_is_one_item_in_its_place(tmp_path, monkeypatch, name):
    """As Langfuse's exports write them: a value quoted where it holds a comma, a quote or a newline, an
    empty one null. Blocks of a few rows, so that rows refused fall between and within them."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 64)
    text = ('\ufeffid,value,input\r\n1,0.5,"[{""role"": ""user"", ""content"": ""a, b""}]"\r\n2,,"two\nlines"\r\n'
            '3,x\r\n' + "".join(f"{n},{n},t\r\n" for n in range(4, 9)) + "9,9,t,extra\r\n10,10,t\r\n")
    (tmp_path / name).write_bytes(packed(name, text.encode()))
    items = list(read(str(tmp_path / name)))
    assert [i.position for i in items] == list(range(1, 11))
    assert [(i.position, i.reason, i.detail, i.raw) for i in items if i.reason] == [
        (3, "invalid_csv", "2 values where the header has 3", "3,x"),
        (9, "invalid_csv", "4 values where the header has 3", "9,9,t,extra")]
    docs = [i.doc for i in items if i.reason is None]
    assert docs[:2] == [{"id": "1", "value": "0.5", "input": '[{"role": "user", "content": "a, b"}]'},
                        {"id": "2", "value": None, "input": "two\nlines"}]
    assert [d["id"] for d in docs] == ["1", "2", "4", "5", "6", "7", "8", "10"]


@pytest.mark.parametrize("name", ["a.csv", "a.csv.gz"])
@pytest.mark.parametrize("where", ["a refused row", "a row", "the header"])
def test_bytes_that_are_not_utf8_in_a_csv_file_lose_only_their_row(tmp_path, monkeypatch, name, where):
    """pyarrow's reader gives its handler of a refused row the row as text: one holding such bytes
    stopped the reading, and a 30,000-row file was one unreadable_csv item, with a traceback. Read
    from where it got to by the stdlib's reader, the file gives what it holds: the refused row an
    item, a row of such bytes invalid_utf8, a header of them its names with the bytes replaced."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 64)  # pieces of a few rows: the bytes come after some rows are read
    rows = [b'1,0.5,"[{""role"": ""user"", ""content"": ""a, b""}]"', b'2,,"two\nlines"', b"3,x"] + [
        b"%d,%d,t" % (n, n) for n in range(4, 9)] + [b"9,9,t,extra", b"10,10,t"]
    header = b"id,value,input"
    if where == "a refused row":
        rows[8] = b"9,9,t,\xff\xfe"
    elif where == "a row":
        rows[4] = b"5,\xff,t"
    else:
        header = b"id,value,in\xffput"
    (tmp_path / name).write_bytes(packed(name, header + b"\r\n" + b"\r\n".join(rows) + b"\r\n"))
    items = list(read(str(tmp_path / name)))
    assert [i.position for i in items] == list(range(1, 11))
    bad = {(i.position, i.reason) for i in items if i.reason}
    assert bad == {(3, "invalid_csv"), (9, "invalid_csv")} | ({(5, "invalid_utf8")} if where == "a row" else set())
    docs = [i.doc for i in items if i.reason is None]
    key = "in\ufffdput" if where == "the header" else "input"
    assert docs[1] == {"id": "2", "value": None, key: "two\nlines"}
    assert [d["id"] for d in docs] == ["1", "2", "4", *(["5"] if where != "a row" else []), "6", "7", "8", "10"]
    if where == "a refused row":
        assert [i.raw for i in items if i.position == 9] == ["9,9,t,\ufffd\ufffd"]


def test_csv_rows_are_cut_from_the_stream_where_they_end_not_at_a_newline_within_quotes(tmp_path, monkeypatch):
    """A file cut short (or read on by the stdlib's reader from where pyarrow's got to) within a quoted
    value of many lines published the row as good, its value short. Refused rows in a row are
    numbered in turn, and bytes that are not UTF-8 where the file ends are one row's item."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 64)
    value = "".join(f"line {i}\n" for i in range(200))
    text = b'id,text\n1,"' + value.encode() + b'"\n2,b,extra\n3,c,extra\n4,d\n'
    whole = gzip.compress(text)
    for cut in range(40, len(whole), 7):
        (tmp_path / "a.csv.gz").write_bytes(whole[:cut])
        assert all(i.reason or i.doc["text"] == value for i in read(str(tmp_path / "a.csv.gz")) if i.position == 1), cut
    (tmp_path / "b.csv").write_bytes(text + b"5,\xff\n")  # read on by the stdlib's reader from row 2 or so
    assert [(i.position, i.reason, i.doc) for i in read(str(tmp_path / "b.csv"))] == [
        (1, None, {"id": "1", "text": value}), (2, "invalid_csv", None), (3, "invalid_csv", None),
        (4, None, {"id": "4", "text": "d"}), (5, "invalid_utf8", None)]
    (tmp_path / "c.csv").write_bytes(b"id,text\n1,a\n2,b,\xc3")  # a refused row ending within a sequence
    assert [(i.position, i.reason) for i in read(str(tmp_path / "c.csv"))] == [(1, None), (2, "invalid_csv")]


@pytest.mark.parametrize("name", ["a.csv.gz", "a.csv.zst"])
def test_a_csv_file_cut_short_keeps_its_rows_before_the_damage_and_says_so(tmp_path, name):
    """pyarrow's reader parses 32 MB at once: a smaller file cut short lost all its rows with the error."""
    text = "id,text\n" + "".join(f"{n},{'words ' * 20}{n}\n" for n in range(2000))
    whole = packed(name, text.encode())
    (tmp_path / name).write_bytes(whole[: len(whole) // 2])
    items = list(read(str(tmp_path / name)))
    good = [int(i.doc["id"]) for i in items if i.reason is None]
    assert good == list(range(len(good))) and [i.reason for i in items[len(good):]] == ["unreadable_csv"]
    assert len(good) > 500 or name.endswith(".zst")  # pyarrow's zstd reader drops the buffer it fails in: the README's limit
    assert items[-1].position == len(good) + 1
    (tmp_path / "na.csv").write_bytes(b'id,text\n1,NA\n2,"N/A"\n3,null\n4,\n')  # texts, and an empty value
    assert [i.doc["text"] for i in read(str(tmp_path / "na.csv"))] == ["NA", "N/A", "null", None]
    (tmp_path / "b.csv").write_bytes(b"id,text\n")  # a header alone, an empty file: no rows
    (tmp_path / "c.csv").write_bytes(b"")
    assert list(read(str(tmp_path / "b.csv"))) == list(read(str(tmp_path / "c.csv"))) == []


def test_a_csv_value_past_the_record_limit_is_that_rows_item_and_the_rows_after_it_are_read(tmp_path, monkeypatch):
    """pyarrow's CSV reader stops a file at a row its block cannot hold: 1,998 rows after a 12 MB
    value were neither read nor counted. A row past the record limit is record_too_large, as a line is."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "MAX_RECORD_BYTES", 1 << 20)
    monkeypatch.setattr(sources, "_CSV_BLOCK_BYTES", 4 << 20)
    big = "word\n" * ((3 << 20) // 5)
    text = f'id,input\n1,small\n2,"{big}"\n' + "".join(f"{n},row {n}\n" for n in range(3, 1003))
    (tmp_path / "a.csv").write_text(text)
    items = list(read(str(tmp_path / "a.csv")))
    assert [i.position for i in items] == list(range(1, 1003))
    assert [(i.position, i.reason) for i in items if i.reason] == [(2, "record_too_large")]
    (tmp_path / "b.csv").write_text(text.replace(big, big * 4))  # past what a block holds: said, not silent
    items = list(read(str(tmp_path / "b.csv")))
    assert items[-1].reason == "unreadable_csv" and "a value of row 2 or after is over 4 MB" in items[-1].detail
    # A value of no newline past what a block holds: said the same, without holding the whole value.
    (tmp_path / "c.csv").write_text("id,input\n1,small\n2," + "x" * (9 << 20) + "\n3,after\n")
    items = list(read(str(tmp_path / "c.csv")))
    assert [(i.position, i.reason) for i in items] == [(1, None), (2, "unreadable_csv")]
    assert "a value of row 2 or after is over 4 MB" in items[-1].detail


def test_parquet_text_stored_as_bytes_is_read_as_text_and_other_bytes_stay_bytes(tmp_path):
    """Writers that do not mark their strings as UTF-8 (older Hive and Impala) store text as bytes, at any
    depth: read as text. A column of other bytes (a digest) stays bytes, and the rows are read."""
    messages = pa.list_(pa.struct([("role", pa.binary()), ("content", pa.binary())]))
    table = pa.table({"trace_id": pa.array([b"t1", b"t2"]), "digest": pa.array([b"\xff\x00", b"\x01"]),
                      "messages": pa.array([[{"role": b"user", "content": "caf\u00e9?".encode()}], []], messages)})
    pq.write_table(table, tmp_path / "a.parquet")
    docs = [i.doc for i in read(str(tmp_path / "a.parquet"))]
    assert docs == [{"trace_id": "t1", "digest": b"\xff\x00", "messages": [{"role": "user", "content": "caf\u00e9?"}]},
                    {"trace_id": "t2", "digest": b"\x01", "messages": []}]


def test_a_value_of_other_bytes_in_parquet_text_stored_as_bytes_is_its_rows_item_alone(tmp_path):
    """A column of text as bytes with one value that is not UTF-8 stayed bytes whole, and every row
    of its batch was refused for holding bytes; at any depth."""
    messages = pa.list_(pa.struct([("role", pa.binary()), ("content", pa.binary())]))
    contents = [f"question {n}".encode() for n in range(6)]
    contents[4] = b"\xff question"
    table = pa.table({"n": list(range(6)), "completion": pa.array([b"fine"] * 2 + [b"\xfe"] + [b"fine"] * 3),
                      "messages": pa.array([[{"role": b"user", "content": c}] for c in contents], messages)})
    pq.write_table(table, tmp_path / "a.parquet")
    items = list(read(str(tmp_path / "a.parquet")))
    assert [(i.position, i.reason) for i in items if i.reason] == [(3, "invalid_utf8"), (5, "invalid_utf8")]
    assert [i.doc for i in items if not i.reason][-1] == {"n": 5, "completion": "fine",
                                                          "messages": [{"role": "user", "content": "question 5"}]}


@pytest.mark.parametrize("dictionary", [False, True])
def test_a_parquet_row_past_the_record_limit_is_too_large_as_its_line_would_be(tmp_path, dictionary):
    """Its rows before and after it are read; a dictionary column's row is sized by its own value."""
    import ctpipe.sources as sources

    texts = ["short"] * 5 + ["x" * (sources.MAX_RECORD_BYTES + 1)] + ["short"] * 4
    column = pa.array(texts).dictionary_encode() if dictionary else pa.array(texts)
    pq.write_table(pa.table({"n": list(range(10)), "text": column}), tmp_path / "a.parquet")
    items = list(read(str(tmp_path / "a.parquet")))
    assert [(i.position, i.reason) for i in items if i.reason] == [(6, "record_too_large")]
    assert [i.doc["n"] for i in items if i.reason is None] == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    (big,) = [i for i in items if i.reason]
    assert big.detail.endswith(f"bytes decoded > {sources.MAX_RECORD_BYTES}") and big.raw.startswith('{"n": 5, "text": "xxx')


def test_a_parquet_row_past_the_record_limit_keeps_its_head_not_its_whole_values(tmp_path):
    """Its quarantine keeps 200 characters: a text's first bytes, and of a nested value past them its
    size, not the whole row turned into Python's objects and JSON (a 400 MB value took 2.6 GB so)."""
    import ctpipe.sources as sources

    size = sources.MAX_RECORD_BYTES + 1
    pq.write_table(pa.table({"messages": [[{"role": "user", "content": "y" * size}]], "n": [1], "text": ["x" * size]}),
                   tmp_path / "a.parquet")
    (big,) = read(str(tmp_path / "a.parquet"))
    assert big.reason == "record_too_large"
    assert re.fullmatch(r'\{"messages": "<\d+ bytes>", "n": 1, "text": "x{100,}', big.raw)


@pytest.mark.parametrize("damaged", [0, 4])
def test_a_damaged_parquet_row_group_is_one_item_and_the_other_groups_are_read(tmp_path, monkeypatch, damaged):
    """Eight row groups of 250 rows, one damaged: the first, where the reader measures the rows, or
    the fifth. Batches of 300 rows span groups, so the batch that meets the fifth also held rows of
    the fourth, and some of them were given already."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "_BATCH_ROWS", 300)
    rng = random.Random(0)
    table = pa.table({"n": range(2000), "text": ["".join(rng.choices("abcdef", k=200)) for _ in range(2000)]})
    path = tmp_path / "a.parquet"
    pq.write_table(table, path, row_group_size=250, compression="zstd", use_dictionary=False)
    damage_row_group(path, damaged)

    items = list(read(str(path)))
    first = damaged * 250
    assert [i.doc["n"] for i in items if i.reason is None] == list(range(first)) + list(range(first + 250, 2000))
    [bad] = [i for i in items if i.reason is not None]
    assert (bad.reason, bad.position) == ("unreadable_parquet", first + 1)
    assert bad.detail.startswith(f"row group {damaged} (250 of its 250 rows not read): ")
    assert [i.position for i in items] == sorted(i.position for i in items)
    path.write_bytes(path.read_bytes()[:-20])  # the footer gone: one item for the whole file
    assert [(i.position, i.reason) for i in read(str(path))] == [(1, "unreadable_parquet")]


def test_small_whole_files_are_gathered_into_blocks_and_loaded_as_they_were(tmp_path, monkeypatch):
    """Runs of files each whole in one block are gathered, places and lines read here apart, and the
    rows of Parquet files of one schema put together; a file of several blocks, damage, another
    schema and a run of one file come as they were."""
    import ctpipe.sources as sources

    monkeypatch.setattr(sources, "BLOCK_BYTES", 4096)
    line = lambda i: json.dumps({"n": i, "text": "words " * 10}).encode() + b"\n"  # noqa: E731
    for i in range(6):  # 15 lines each: three to a block
        (tmp_path / f"a{i}.jsonl").write_bytes(b"".join(map(line, range(15 * i, 15 * i + 15))))
    (tmp_path / "a6.jsonl").write_bytes(line(90).rstrip())  # no newline at its end
    (tmp_path / "b.jsonl").write_bytes(b"".join(map(line, range(200))))  # several blocks
    for i in range(3):
        (tmp_path / f"c{i}.jsonl.gz").write_bytes(gzip.compress(line(i)))
    (tmp_path / "d.jsonl.gz").write_bytes(gzip.compress(line(0))[:-6])  # cut: lines, then damage
    for i in range(3):
        pq.write_table(pa.table({"n": [i, i + 1]}), tmp_path / f"e{i}.parquet")
    pq.write_table(pa.table({"n": ["other"]}), tmp_path / "e3.parquet")  # another schema
    (tmp_path / "f.jsonl").write_bytes(line(0))  # a run of one
    fs, files, _ = sources.list_files(str(tmp_path))
    blocks = list(sources.blocks(fs, files))
    gathered = list(sources.gathered(blocks))

    def name(block):
        return block.file.rsplit("/", 1)[-1]

    assert [[name(p) for p in b.places] or [f.rsplit("/", 1)[-1] for f, _ in b.files] or name(b) for b in gathered] == [
        ["a0.jsonl", "a1.jsonl", "a2.jsonl"], ["a3.jsonl", "a4.jsonl", "a5.jsonl", "a6.jsonl"],
        *["b.jsonl"] * sum(name(b) == "b.jsonl" for b in blocks), ["c0.jsonl.gz", "c1.jsonl.gz", "c2.jsonl.gz"],
        *["d.jsonl.gz"] * sum(name(b) == "d.jsonl.gz" for b in blocks), ["e0.parquet", "e1.parquet", "e2.parquet"],
        "e3.parquet", "f.jsonl"]
    assert all(len(b.load().data) <= 4096 for b in gathered if b.places or b.files)

    def loaded(bs):  # each file's lines and damage, as one-file blocks numbered from their first line
        out = []
        for block in sources.numbered(bs):
            for member in block.members():
                out += [(name(member), i.position, i.reason, i.doc) for i in sources.items(member)]
        return out

    assert loaded(gathered) == loaded(blocks)
    assert [(p, d["n"]) for f, p, _, d in loaded(gathered) if f == "a6.jsonl"] == [(1, 90)]
    spilled = list(sources.spilled(gathered, str(tmp_path / "spill")))  # the gzip run's lines wait in a file
    assert loaded(spilled) == loaded(blocks) and os.listdir(tmp_path / "spill") == []


def test_an_object_stores_small_objects_are_read_many_at_once(tmp_path, monkeypatch):
    """Each read of an object waits a round trip: objects named by nothing are sniffed, small ones read
    whole here fetched, and a gathered block's places loaded, several at once, and come as the same
    files on a local disk do."""
    import threading
    import time

    import ctpipe.sources as sources

    fs = fsspec.filesystem("memory")
    line = lambda i: json.dumps({"n": i}).encode() + b"\n"  # noqa: E731
    named = {**{f"firehose-{i:02d}": line(i) for i in range(16)},  # sniffed, then read whole
             **{f"g{i:02d}.jsonl.gz": gzip.compress(line(100 + i)) for i in range(16)}}
    for name, data in named.items():
        fs.pipe(f"/store/{name}", data)
        (tmp_path / name).write_bytes(data)
    active, most, lock = 0, 0, threading.Lock()

    def waiting(call):  # a round trip of 50 ms, counting how many wait at once
        def wait(*args, **kwargs):
            nonlocal active, most
            with lock:
                active += 1
                most = max(most, active)
            time.sleep(0.05)
            with lock:
                active -= 1
            return call(*args, **kwargs)
        return wait

    for method in ("open", "cat_file"):
        monkeypatch.setattr(fs, method, waiting(getattr(fs, method)))

    def read(uri):
        return [(i.file.rsplit("/", 1)[-1], i.position, i.doc) for i in sources.read(uri)]

    assert read("memory://store") == read(str(tmp_path)) and most >= 4
    files = [f"/store/firehose-{i:02d}" for i in range(16)]  # as places of a ranged store's gathered block
    block = sources.Block(files[0], 1, places=tuple(sources.Block(f, None, at=0, size=fs.size(f), fs=fs,
                                                                  version=sources._version(fs.info(f))) for f in files))
    most = 0
    assert block.load().data == b"".join(fs.cat_file(f) for f in files) and most >= 4


def test_local_entries_that_cannot_be_read_are_named_with_why_and_the_rest_read(tmp_path):
    """A dangling link, a link loop, a pipe, a name that is not UTF-8: each stopped the run (a pipe
    hung it); now each is named with why, and the files beside them are read."""
    import ctpipe.sources as sources

    (tmp_path / "a.jsonl").write_bytes(b'{"n": 1}\n')
    (tmp_path / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    (tmp_path / "loop.jsonl").symlink_to(tmp_path / "loop.jsonl")
    os.mkfifo(tmp_path / "pipe.jsonl")
    (tmp_path / "_pipe.jsonl").symlink_to(tmp_path / "nowhere.jsonl")  # a marker: passed over in silence
    (tmp_path / ".loop").symlink_to(tmp_path / ".loop")  # hidden, and a loop: passed over in silence too
    with open(os.path.join(os.fsencode(tmp_path), b"caf\xe9.jsonl"), "wb") as f:
        f.write(b'{"n": 2}\n')
    _, files, skipped = sources.list_files(str(tmp_path))
    assert [f.rsplit("/", 1)[-1] for f in files] == ["a.jsonl"]
    assert {path.rsplit("/", 1)[-1]: why.split(":")[0] for path, why in skipped.items()} == {
        "caf\udce9.jsonl": "its name is not UTF-8, which the dataset's source_file column holds",
        "gone.jsonl": "a link to nothing that can be read", "loop.jsonl": "a link to nothing that can be read",
        "pipe.jsonl": "neither a file nor a folder (a pipe, a socket or a device)"}
    assert [i.doc for i in read(str(tmp_path))] == [{"n": 1}]
    with pytest.raises(SourceError, match="is neither a file nor a folder"):
        sources.list_files(str(tmp_path / "pipe.jsonl"))


def test_a_stores_objects_are_read_by_their_folders_listing_not_asked_for_one_by_one(monkeypatch):
    """s3fs and gcsfs find an object's details in the listing they keep by going through all of it:
    asked for each object of a folder of 100,000, 11 minutes a pass."""
    import ctpipe.sources as sources

    fs = fsspec.filesystem("memory")
    for i in range(40):
        fs.pipe(f"/many/part-{i:03d}.jsonl" + ".gz" * (i % 2), packed(".gz" * (i % 2), json.dumps({"n": i}).encode() + b"\n"))
    asked = []
    monkeypatch.setattr(fs, "info", lambda path, **kw: asked.append(path) or fsspec.AbstractFileSystem.info(fs, path, **kw))
    assert [i.doc["n"] for i in read("memory://many")] == list(range(40)) and len(asked) <= 2  # the source itself


def test_nanosecond_values_of_a_parquet_batch_become_python_values_cut_to_the_microsecond():
    """As Python's datetime, time and timedelta, whether pandas is installed (which pyarrow made
    pandas objects of them with) or not (an error, below a microsecond), at any depth."""
    from datetime import datetime, time, timedelta, timezone

    from ctpipe import sources

    batch = pa.record_batch({
        "at": pa.array([1_999], pa.timestamp("ns", tz="UTC")),
        "took": pa.array([5_999], pa.duration("ns")),
        "served": pa.array([5_001], pa.time64("ns")),
        "nested": pa.array([{"at": [2_000]}], pa.struct([("at", pa.list_(pa.timestamp("ns")))])),
        "kept": pa.array([7], pa.timestamp("ms", tz="UTC")),
    })
    (row,) = sources._documents(sources._in_microseconds(batch), "f", 1)
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    assert row == {"at": epoch + timedelta(microseconds=1), "took": timedelta(microseconds=5), "served": time(0, 0, 0, 5),
                   "nested": {"at": [datetime(1970, 1, 1, 0, 0, 0, 2)]}, "kept": epoch + timedelta(milliseconds=7)}
    assert {type(row["at"]), type(row["took"]), type(row["nested"]["at"][0])} == {datetime, timedelta}


def test_a_parquet_map_is_a_dict_and_one_with_a_key_twice_is_named():
    """A map column reads as the JSON object it stands for (Langfuse's Parquet export writes its
    usage as one); a dict holds a key once, so a map holding one twice is an invalid_field item."""
    import ctpipe.sources as sources

    usage = pa.array([[("input", 10), ("output", 1)], [("input", 10), ("input", 11)]], pa.map_(pa.string(), pa.uint64()))
    batch = pa.record_batch({"id": ["g1", "g2"], "usage_details": usage})
    good, twice = sources._documents(batch, "observations.parquet", 1)
    assert good == {"id": "g1", "usage_details": {"input": 10, "output": 1}}
    assert (twice.position, twice.reason) == (2, "invalid_field") and "`usage_details`" in twice.detail
