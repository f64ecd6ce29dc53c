"""Reading trace sources by URI in bounded blocks, every failure kept with its place.

A source is a file or a folder of files behind any fsspec URI: a local path, ``s3://``,
``gs://`` (install ``s3fs``/``gcsfs``; credentials come from the usual places: environment,
config files, instance metadata, never from code). Files are read as:

* ``*.jsonl``, ``*.ndjson``, ``*.json`` (one document per line; gzip when the name ends in ``.gz``), in
  blocks of whole lines of about :data:`BLOCK_BYTES`;
* ``*.parquet`` (one document per row), in record batches.

Other files in a source folder are skipped and listed by name, except hidden ones and markers
(``.*``, ``_*``: ``_SUCCESS``, checksums), which writers leave beside their data.

Nothing is held beyond a block, so memory stays flat whatever the file size; a line longer than
:data:`MAX_RECORD_BYTES` is skipped through, not loaded. Damage that ends a file (``truncated_gzip``,
``unreadable_parquet``) and oversized lines (``record_too_large``) come as :class:`Item`\\ s with the
file and line or row, so the caller can quarantine them and keep counts exact. Decoding a line
(``invalid_utf8``, ``invalid_json``, ``non_finite_number``) is left to the caller, which may run it in
another process. A missing source is an error naming the URI.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ctpipe.errors import PipelineError
from ctpipe.traces import InvalidTrace, loads

SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz", ".parquet")
MAX_RECORD_BYTES = 8 * 1024 * 1024  # one line above this is quarantined unparsed, not loaded
BLOCK_BYTES = 6 * 1024 * 1024
_BATCH_ROWS = 2048


class SourceError(PipelineError):
    pass


@dataclass(frozen=True)
class Item:
    file: str
    position: int  # 1-based line (JSONL) or row (Parquet)
    doc: Any = None
    reason: str | None = None  # set when the item could not be read
    detail: str = ""
    raw: str = ""  # the undecoded text (capped), for the quarantine


@dataclass(frozen=True)
class Block:
    """Consecutive lines (``data``: whole lines, ``\\n``-separated) or rows (``batch``) of one file.

    A block of a plain local file comes as its place in the file (``at``, ``size``) and no data:
    :meth:`load` reads it where it is processed, from the page cache, which costs far less than
    sending megabytes to a worker process through a pipe.
    """

    file: str
    first: int  # line or row number of the first item
    data: bytes = b""
    batch: Any = None  # a pyarrow RecordBatch
    damage: Item | None = None  # an item that could not be read at all, in its place after the block
    at: int | None = None  # where the lines start in the file
    size: int = 0  # their length, while they are still there

    def load(self) -> Block:
        """This block with its data."""
        if not self.size:
            return self
        try:
            with open(self.file, "rb") as f:
                f.seek(self.at)
                data = f.read(self.size)
        except OSError as e:
            raise SourceError(f"{self.file} could not be read again: {e}") from None
        if len(data) != self.size:
            raise SourceError(f"{self.file} changed while it was read")
        return replace(self, data=data, size=0)


def filesystem(uri: str) -> tuple[Any, str]:
    """(filesystem, path) of any fsspec URI, as the store is now. fsspec shares one filesystem object
    per kind of URI within a process, and an object store's keeps the listings it made: a process
    that runs interval after interval would miss the files added since, and versions published since."""
    from fsspec.core import url_to_fs

    fs, path = url_to_fs(uri)
    fs.invalidate_cache()
    return fs, path


def reachable(fs, path: str, what: str, error: type[PipelineError] = PipelineError) -> bool:
    """Whether ``path`` exists; ``error`` naming ``what`` when the store refuses to say (credentials,
    permissions, network), rather than the client's own exception, which names neither. (``exists``
    would not do: s3fs answers False for a bucket it could not ask about.)"""
    try:
        fs.info(path)
        return True
    except FileNotFoundError:
        return False
    except Exception as e:  # noqa: BLE001 - each filesystem raises its own types
        raise error(f"{what} could not be reached: {type(e).__name__}: {e}") from e


def list_files(uri: str, what: str = "source") -> tuple[Any, list[str], list[str]]:
    """(filesystem, the source's files to read, the other files of a source folder), each in a stable
    order; SourceError, naming the source as ``what``, when there is nothing. A file named as the
    source is read whatever its name."""
    try:
        fs, path = filesystem(uri)
    except (ImportError, ValueError) as e:
        raise SourceError(f"{what} {uri!r}: {e}") from None
    if not reachable(fs, path, f"{what} {uri!r}", SourceError):
        raise SourceError(f"{what} {uri!r} does not exist")
    if not fs.isdir(path):
        return fs, [path], []
    found = sorted(fs.find(path))
    skipped = [p for p in found if not p.endswith(SUFFIXES) and not p.rsplit("/", 1)[-1].startswith((".", "_"))]
    return fs, [p for p in found if p.endswith(SUFFIXES)], skipped


def _gunzip(f) -> Iterator[bytes]:
    """Decompressed pieces of a gzip stream (members one after another), up to any damage."""
    d, started = zlib.decompressobj(16 + zlib.MAX_WBITS), False
    while piece := f.read(1 << 20):
        while piece:
            started = True
            if out := d.decompress(piece):
                yield out
            piece = b""
            if d.eof:  # a member ended; another may follow
                piece, d, started = d.unused_data, zlib.decompressobj(16 + zlib.MAX_WBITS), False
    if started:
        if tail := d.flush():
            yield tail
        raise EOFError("compressed file ended before the end-of-stream marker was reached")


def _jsonl_blocks(fs, file: str) -> Iterator[Block]:
    """The blocks of a JSONL file behind any filesystem, gzip or not, with their lines."""
    with fs.open(file, "rb") as f:
        pieces = _gunzip(f) if file.endswith(".gz") else iter(lambda: f.read(BLOCK_BYTES), b"")
        yield from _cut(file, ((piece, len(piece)) for piece in pieces), keep=True)


def _plain_blocks(file: str) -> Iterator[Block]:
    """The blocks of a plain local file as places in the file, for :meth:`Block.load` to read where
    they are processed: the file is only scanned for newlines here, into one reused buffer."""
    buf = bytearray(BLOCK_BYTES)
    with open(file, "rb") as f:
        yield from _cut(file, iter(lambda: (buf, f.readinto(buf)), (buf, 0)), keep=False)


def _cut(file: str, chunks: Iterator[tuple[bytes | bytearray, int]], keep: bool) -> Iterator[Block]:
    """Blocks of whole lines from a file's successive chunks (a chunk's first n bytes): a block ends at
    the last newline of a chunk; a line longer than :data:`MAX_RECORD_BYTES` is read through unloaded
    and given as a ``record_too_large`` item; a gzip stream's damage ends the file as a
    ``truncated_gzip`` item. With ``keep``, a block carries its lines; without, only their place."""
    line, at, pos = 1, 0, 0  # the first line not handed out and its offset; the offset of the chunk
    pending: list[bytes] | None = None  # the start of a line not ended yet, in pieces (only kept with `keep`)
    head = b""  # the first bytes of the first pending piece, for a record_too_large item
    skipping = False  # through an oversized line, which started at `at`
    while True:
        try:
            data, n = next(chunks, (b"", 0))
        except (EOFError, zlib.error) as e:
            # Every whole line before the damage was handed out; the cut one is the damaged item.
            raw = head if skipping else b"".join(pending or [])[:2000]
            yield Block(file, line, damage=Item(file, line, reason="truncated_gzip", detail=f"{type(e).__name__}: {e}",
                                                raw=raw.decode("utf-8", "replace")))
            return
        if not n:
            break
        count = int(np.count_nonzero(np.frombuffer(data, np.uint8, n) == 10))  # thrice bytes.count's speed
        start = 0  # where the chunk's unread part begins
        if skipping:
            if not count:
                pos += n
                continue
            end = data.find(b"\n", 0, n)
            yield Block(file, line, damage=_too_large(file, line, pos - at + end, head))
            line, at, skipping, start, count = line + 1, pos + end + 1, False, end + 1, count - 1
        if count:
            cut = data.rfind(b"\n", 0, n)
            if keep:
                yield Block(file, line, data=b"".join([*(pending or []), data[start:cut]]))
            else:
                yield Block(file, line, at=at, size=pos + cut - at)
            line, at, head = line + count, pos + cut + 1, bytes(data[cut + 1:min(cut + 201, n)])
            pending = [data[cut + 1:n]] if keep else []
        elif start < n:
            if pending is None:
                pending, head = [], bytes(data[start:min(start + 200, n)])
            if keep:
                pending.append(data[start:n])
            if pos + n - at > MAX_RECORD_BYTES:
                pending, skipping = None, True
        pos += n
    if skipping:
        yield Block(file, line, damage=_too_large(file, line, pos - at, head))
    elif pending is not None:
        yield Block(file, line, data=b"".join(pending)) if keep else Block(file, line, at=at, size=pos - at)


def _too_large(file: str, line: int, size: int, head: bytes) -> Item:
    """The item of a line of ``size`` bytes over :data:`MAX_RECORD_BYTES`, which starts with ``head``."""
    return Item(file, line, reason="record_too_large", detail=f"{size} bytes > {MAX_RECORD_BYTES}",
                raw=head[:200].decode("utf-8", "replace"))


def _parquet_blocks(fs, file: str) -> Iterator[Block]:
    import pyarrow.parquet as pq

    row = 1
    try:
        with fs.open(file, "rb") as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=_BATCH_ROWS):
                yield Block(file, row, batch=batch)
                row += batch.num_rows
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        yield Block(file, row, damage=Item(file, row, reason="unreadable_parquet", detail=f"{type(e).__name__}: {e}"))


def blocks(fs, files: list[str]) -> Iterator[Block]:
    """Every file's blocks, in order."""
    local = "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))
    for file in files:
        if file.endswith(".parquet"):
            yield from _parquet_blocks(fs, file)
        elif local and not file.endswith(".gz"):
            yield from _plain_blocks(file)
        else:
            yield from _jsonl_blocks(fs, file)


def oversized(file: str, n: int, raw: bytes) -> Item | None:
    return _too_large(file, n, len(raw), raw) if len(raw) > MAX_RECORD_BYTES else None


def decode_line(file: str, n: int, raw: bytes) -> Item:
    """One line as a decoded document, or the reason it is not one."""
    text = raw.decode("utf-8", "replace")
    try:
        return Item(file, n, doc=loads(raw), raw=text)
    except InvalidTrace as e:
        return Item(file, n, reason=e.reason, detail=e.detail, raw=text[:2000])


def entries(block: Block, lines: list[bytes] | None = None,
            taken: np.ndarray | None = None) -> Iterator[tuple[int, Any]]:
    """(line or row, content) of a block in order, blank lines skipped: a dict per Parquet row, the bytes
    of a JSONL line, or an :class:`Item` for what cannot be read (an oversized line, the block's damage).

    ``lines`` is the block's data split at newlines, when the caller has it already; ``taken``
    (a mask over those lines) the lines it read another way, which are left out.
    """
    if block.batch is not None:
        for i, row in enumerate(block.batch.to_pylist()):
            yield block.first + i, row
    else:
        lines = block.data.split(b"\n") if lines is None else lines
        for i in range(len(lines)) if taken is None else np.flatnonzero(~taken).tolist():
            raw = lines[i]
            if raw.strip():
                n, raw = block.first + i, raw.rstrip(b"\r")
                yield n, oversized(block.file, n, raw) or raw
    if block.damage is not None:
        yield block.damage.position, block.damage


def items(block: Block) -> Iterator[Item]:
    """A block's lines or rows one by one, decoded (numbering kept), then its damage."""
    for n, content in entries(block):
        if isinstance(content, Item):
            yield content
        elif isinstance(content, dict):
            yield Item(block.file, n, doc=content)
        else:
            yield decode_line(block.file, n, content)


def read(uri: str, what: str = "source") -> Iterator[Item]:
    """Every line or row of every file under ``uri``, in order (see :func:`list_files` for ``what``)."""
    fs, files, _ = list_files(uri, what)
    for block in blocks(fs, files):
        yield from items(block.load())
