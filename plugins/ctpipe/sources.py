"""Reading trace sources by URI, one decoded document at a time, every failure kept with its place.

A source is a file or a folder of files behind any fsspec URI: a local path, ``s3://``,
``gs://`` (install ``s3fs``/``gcsfs``; credentials come from the usual places: environment,
config files, instance metadata, never from code). Files are read as:

* ``*.jsonl``, ``*.json`` (one document per line; gzip when the name ends in ``.gz``);
* ``*.parquet`` (one document per row, in bounded batches).

Nothing is held beyond one batch, so memory stays flat whatever the file size. Every line or row
yields an :class:`Item`: a document, or the machine-readable reason it could not be decoded
(``invalid_utf8``, ``invalid_json``, ``non_finite_number``, ``record_too_large``,
``truncated_gzip``, ``unreadable_parquet``) with the file and line or row, so the caller can
quarantine it and keep counts exact. A missing source is an error naming the URI.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ctpipe.errors import PipelineError
from ctpipe.traces import InvalidTrace, loads

SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".parquet")
MAX_RECORD_BYTES = 64 * 1024 * 1024  # one line above this is quarantined unparsed, not loaded
_BATCH_ROWS = 4096


class SourceError(PipelineError):
    pass


@dataclass(frozen=True)
class Item:
    file: str
    position: int  # 1-based line (JSONL) or row (Parquet)
    doc: Any = None
    reason: str | None = None  # set when the item could not be decoded
    detail: str = ""
    raw: str = ""  # the undecoded text (capped), for the quarantine


def list_files(uri: str) -> tuple[Any, list[str]]:
    """(filesystem, the source's readable files in a stable order); SourceError when there is nothing."""
    from fsspec.core import url_to_fs

    try:
        fs, path = url_to_fs(uri)
    except (ImportError, ValueError) as e:
        raise SourceError(f"source {uri!r}: {e}") from None
    if not fs.exists(path):
        raise SourceError(f"source {uri!r} does not exist")
    if fs.isdir(path):
        files = sorted(p for p in fs.find(path) if p.endswith(SUFFIXES))
    else:
        files = [path]
    return fs, files


def _decode(file: str, n: int, raw: bytes) -> Item:
    if len(raw) > MAX_RECORD_BYTES:
        return Item(file, n, reason="record_too_large", detail=f"{len(raw)} bytes > {MAX_RECORD_BYTES}",
                    raw=raw[:200].decode("utf-8", "replace"))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return Item(file, n, reason="invalid_utf8", detail=str(e), raw=raw[:2000].decode("utf-8", "replace"))
    try:
        return Item(file, n, doc=loads(text), raw=text)
    except InvalidTrace as e:
        return Item(file, n, reason=e.reason, detail=e.detail, raw=text[:2000])


def _lines(fs, file: str) -> Iterator[Item]:
    n = 0
    with fs.open(file, "rb") as f:
        stream = gzip.GzipFile(fileobj=f) if file.endswith(".gz") else f
        try:
            for raw in stream:
                n += 1
                raw = raw.rstrip(b"\r\n")
                if raw.strip():
                    yield _decode(file, n, raw)
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            # Everything before the damage was yielded; what follows it cannot be read.
            yield Item(file, n + 1, reason="truncated_gzip", detail=f"{type(e).__name__}: {e}")


def _rows(fs, file: str) -> Iterator[Item]:
    import pyarrow.parquet as pq

    n = 0
    try:
        with fs.open(file, "rb") as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=_BATCH_ROWS):
                for row in batch.to_pylist():
                    n += 1
                    yield Item(file, n, doc=row)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        yield Item(file, n + 1, reason="unreadable_parquet", detail=f"{type(e).__name__}: {e}")


def read(uri: str) -> Iterator[Item]:
    """Every line or row of every file under ``uri``, in order."""
    fs, files = list_files(uri)
    for file in files:
        yield from (_rows if file.endswith(".parquet") else _lines)(fs, file)
