"""Reading trace sources by URI in bounded blocks, every failure kept with its place.

A source is a file or a folder of files behind any fsspec URI: a local path, ``s3://``,
``gs://`` (install ``s3fs``/``gcsfs``; credentials come from the usual places: environment,
config files, instance metadata, never from code). Files are read as:

* ``*.jsonl``, ``*.ndjson``, ``*.json`` (one document per line, a byte order mark before one ignored;
  gzip when the name ends in ``.gz``, zstd in ``.zst``, unless its first bytes say otherwise, with a
  warning), in blocks of whole lines of about :data:`BLOCK_BYTES`; a ``*.json`` file may also hold
  one document of up to :data:`MAX_RECORD_BYTES` over many lines (an array of records, or a single
  one: a request body saved as it came), read as a line per record, or JSON values one after
  another (with no delimiter, as Kinesis Data Firehose joins records by default, or
  pretty-printed), read a value to a line by the process that cuts the file;
* ``*.parquet`` (one document per row), in record batches;
* ``*.csv`` (plain, ``.gz`` or ``.zst``: a document per row under the header, each value a text, as
  Langfuse's exports write them), in record batches.

A file whose name ends otherwise (Firehose gives its objects no suffix, or a bare ``.gz``) is
read as its first bytes say: Parquet, or JSON text (as a ``*.json`` file), plain or gzip or zstd.
Other files in a source folder are skipped and listed by name, except hidden ones and markers
(``.*``, ``_*``: ``_SUCCESS``, checksums), which writers leave beside their data; so is the
``data/`` folder of an hour of Amazon Bedrock's invocation logs, whose bodies are read with the
records that name them (:func:`read_object`).

A plain file on a local disk or an object store is cut where it lies, reading only around each
cut, and each block is read where it is processed (see :class:`Block`); a compressed file has to
be read through in order, by the process that cuts it, which can leave each block in a file of its
own for the process that takes it (:func:`spilled`).

Nothing is held beyond a block, so memory stays flat whatever the file size; a line longer than
:data:`MAX_RECORD_BYTES` is skipped through, not loaded, but for an OTLP export, read through as
exports of its spans. Damage that ends a file (``truncated_gzip``,
``corrupt_gzip``, ``truncated_zstd``, ``corrupt_zstd``, ``unreadable_csv``) or a Parquet row group
(``unreadable_parquet``), CSV rows of another number of values than the header (``invalid_csv``)
and oversized lines or rows (``record_too_large``) come as :class:`Item`\\ s with
the file and line or row, so the caller can quarantine them and keep counts exact. Decoding a line
(``invalid_utf8``, ``invalid_json``, ``non_finite_number``) is left to the caller, which may run it
in another process. A missing source is an error naming the URI.
"""

from __future__ import annotations

import codecs
import csv
import functools
import hashlib
import io
import itertools
import json
import logging
import math
import os
import re
import tempfile
import zlib
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from isal import isal_zlib  # ISA-L: gzip decompressed twice as fast as with zlib, the same API

from ctpipe.errors import PipelineError
from ctpipe.formats import BEDROCK_DATA
from ctpipe.traces import InvalidTrace, loads

log = logging.getLogger(__name__)

_COMPRESSED = (".gz", ".zst")  # gzip, zstd
SUFFIXES = (".jsonl", ".ndjson", ".json", ".parquet", ".csv",
            *(s + c for c in _COMPRESSED for s in (".jsonl", ".ndjson", ".json", ".csv")))
_JSON = (".json", *(".json" + c for c in _COMPRESSED))  # may hold one document over many lines
_CSV = (".csv", *(".csv" + c for c in _COMPRESSED))  # rows under a header, each value a text (Langfuse's exports)
NOT_READ = (f"its name ends in none of {' '.join(SUFFIXES)}, and its first bytes are not those of JSON text "
            "(plain, gzip or zstd) or Parquet")  # why a file is not read, as a run says of each
MAX_RECORD_BYTES = 8 * 1024 * 1024  # one line above this is quarantined unparsed, not loaded
# But for an OTLP JSON export, a line of the OpenTelemetry Collector's file or S3 exporter: its batch
# processor sends 8,192 spans at once by default (more, unless send_batch_max_size says otherwise),
# tens or hundreds of MB of GenAI spans with their messages. Such a line is read through where it
# is cut, as exports of a megabyte of spans each (see _Exports), whatever its length; so is an
# export of log records, which the Collector batches alike.
# Each block costs some 20 ms of fixed work (dozens of Arrow calls, two Parquet files written): 12 MB
# blocks took a million bench traces 6-7% less time, but OTLP and Langfuse sources peaked 50 to 60 MB
# higher (Langfuse at up to 944 MB), too close to the 1 GB bound.
# With a window (see _places), below MAX_RECORD_BYTES: a longer line runs over a cut with no newline
# in the window before it, and is read through where it is cut (see _long_line).
BLOCK_BYTES = 6 * 1024 * 1024
_BATCH_ROWS = 2048  # Parquet rows to a block at most; fewer where rows are large (see _parquet_blocks)
_PROBE_ROWS = 64  # read first, to learn how large a file's rows are once decoded
# A Parquet file is read a megabyte at a time per column: pyarrow's default reads a row group's column
# chunks whole, and a row group of a hundred thousand traces held 40 MB of them in the reading process.
_PARQUET_READS = 1 << 20
_GZIP_STEP = 1 << 16  # compressed bytes of a gzip file decompressed at a time
# Bytes of a zstd file's lines decompressed at a time (Arrow's reader gives no more whatever the
# ratio): as with gzip, a file ending early fails the read it is in, and that much of the lines before it.
_ZSTD_STEP = 1 << 18
# Decompressed bytes held in memory until their checksum is checked (see _Held); more wait on disk.
_HELD_IN_MEMORY = 4 * BLOCK_BYTES
# About how many bytes of records a byte of a compressed file (gzip, zstd, Parquet) holds: text
# compresses four to eight times in each. It sizes what a run will hold (see Files.held) without
# reading any file, to choose its workers and pairing buckets; pairing cuts the buckets again by what
# the files held, so an estimate too low costs a pass over the spilled rows, not memory.
_EXPANSION = 10
# Windows tools start a UTF-8 file with a byte order mark, and files joined with cat carry theirs into
# the middle: ignored at the start of a line (RFC 8259 lets a parser do so), as in the file's first.
_BOM = b"\xef\xbb\xbf"
_BLANK = b" \t\r\n" + _BOM  # what may come before a file's first value


def _text(head: bytes) -> bytes:
    """The first bytes of a file or line from its first value on: after a byte order mark and white space."""
    return head.removeprefix(_BOM).lstrip()


def _json_text(head: bytes) -> bool:
    """Whether a file's first bytes (decompressed) begin JSON text a source may hold: an object or an array."""
    return _text(head)[:1] in (b"{", b"[")


# Object stores whose plain files are cut by ranged reads and loaded by each worker's own ranged GET.
# Others (a memory:// filesystem lives in one process; an HTTP server may ignore ranges) are read
# through by the process that cuts them (see :func:`spilled`).
_RANGED = frozenset({"s3", "s3a", "gs", "gcs"})
_PEEK = 1 << 16  # bytes of a .json file read to tell JSON Lines from one document over many lines
_SPILLED_BATCH = ".arrow"  # how a spilled block's file says it holds a record batch, not lines


class SourceError(PipelineError):
    pass


class SourceChanged(SourceError):
    """A file read before could not be read again as it was (it changed, or its store failed for a
    moment): a retry reads the source anew."""

    retried = True


# A quarantined record's raw text is published cut to RAW_CHARS characters. Until it is scrubbed, it
# is kept a little longer, so that an e-mail address, a number or a token the cut splits is scrubbed
# whole, not left in part ("+1 415-555-01").
RAW_CHARS = 2000
RAW_KEPT = RAW_CHARS + 1024


@dataclass(frozen=True)
class Item:
    file: str
    position: int  # 1-based line (JSONL) or row (Parquet)
    doc: Any = None
    reason: str | None = None  # set when the item could not be read
    detail: str = ""
    raw: str = ""  # the undecoded text (up to RAW_KEPT), for the quarantine


@dataclass(frozen=True)
class Block:
    """Consecutive lines (``data``: whole lines, ``\\n``-separated) or rows (``batch``) of one file.

    A block of a plain file on a local disk or an object store (see :data:`_RANGED`) comes as its
    place in the file (``at``, ``size``) and no data: :meth:`load` reads it where it is processed
    (from the page cache, or with a ranged GET of its own), which costs far less than one process
    reading every byte and writing it again for each worker (:func:`spilled`). Such a block does not
    know its first line number either (``first`` is None): its lines are counted only where it is
    loaded, and whoever takes the blocks in order adds the lines of the blocks before it
    (:func:`numbered`).
    """

    file: str
    first: int | None  # line or row number of the first item; None: not counted (then items number from 1)
    data: bytes = b""
    batch: Any = None  # a pyarrow RecordBatch
    damage: Item | None = None  # an item that could not be read at all, in its place after the block
    at: int | None = None  # where the lines start in the file
    size: int = 0  # their length, while they are still there
    fs: Any = None  # the object store of a place in a file (None: the local disk)
    version: tuple = ()  # what the store said of the object when it was cut, to notice it replaced since
    # A file of its own holding its data or batch (see :func:`spilled`); with ``at`` and ``size``,
    # the place of its lines in a file it shares with the other places of its gathered block.
    spilled: str | None = None
    # Small whole files gathered into one block (see :func:`gathered`): before it is loaded, a block
    # of each (a place in it, its lines, or a spilled file); once loaded, each file and the length of
    # its lines in ``data``, one after the other, each ending with a newline (so that the block's
    # lines split at once are those of its files). Parquet files gathered so are each file and its
    # rows in ``batch``, their rows put together as they were read.
    places: tuple[Block, ...] = ()
    files: tuple[tuple[str, int], ...] = ()
    # The line of the file each of its lines stands for, as offsets from ``first``, where a line
    # became several (see :class:`_SplitExport`); None: each line stands for itself.
    offsets: Any = None
    # A block after the first of a line split so: it covers no line of its own, and goes on with
    # the line before it (where lines are not counted, the last one of the blocks before it).
    continued: bool = False
    # Exports split from a long line of a plain file (see _SplitExport), before it is loaded: each as
    # what it has before its spans, and where they begin and end in its place (at, size).
    exports: tuple[tuple[bytes, int, int], ...] = ()

    def numbers(self, i):
        """The line numbers in the file of the block's lines ``i`` (an index, or an array of them, into
        its data split at newlines)."""
        return self.first + (i if self.offsets is None else self.offsets[i])

    def load(self) -> Block:
        """This block with its data."""
        if self.spilled is not None:
            return self._unspilled()
        if self.places:
            store = next((p.fs for p in self.places if p.fs is not None), None)
            loaded = [d if d.endswith(b"\n") or not d else d + b"\n"
                      for d in _in_turn(lambda place: place.load().data, self.places, store)]
            for path in {p.spilled for p in self.places if p.spilled is not None}:  # read once, by this process
                os.remove(path)
            return replace(self, data=b"".join(loaded), places=(),
                           files=tuple((place.file, len(d)) for place, d in zip(self.places, loaded)))
        if not self.size:
            return self
        try:
            if self.fs is None:
                with open(self.file, "rb") as f:
                    f.seek(self.at)
                    data = f.read(self.size)
                changed = len(data) != self.size
            else:
                data = self.fs.cat_file(self.file, start=self.at, end=self.at + self.size)
                self.fs.invalidate_cache(self.file)  # what the store says now, not what a listing said
                changed = len(data) != self.size or _version(self.fs.info(self.file)) != self.version
        except Exception as e:  # noqa: BLE001 - OSError locally; each object store raises its own types
            raise SourceChanged(f"{self.file} could not be read again: {type(e).__name__}: {e}") from None
        if changed:
            raise SourceChanged(f"{self.file} changed while it was read")
        if self.exports:
            data = b"\n".join(_an_export_of(prefix, data[lo:hi]) for prefix, lo, hi in self.exports)
        return replace(self, data=data, size=0, exports=())

    def _unspilled(self) -> Block:
        try:
            if self.at is not None:  # its piece of the file of its gathered block's pieces, removed by that block
                with open(self.spilled, "rb") as f:
                    f.seek(self.at)
                    return replace(self, data=f.read(self.size), spilled=None, at=None, size=0)
            if self.spilled.endswith(_SPILLED_BATCH):
                with pa.OSFile(self.spilled) as f:
                    block = replace(self, batch=pa.ipc.open_stream(f).read_next_batch(), spilled=None)
            else:
                with open(self.spilled, "rb") as f:
                    block = replace(self, data=f.read(), spilled=None)
            os.remove(self.spilled)  # read once, by the one process that takes the block
        except OSError as e:
            raise SourceChanged(f"{self.file}: a block read from it earlier could not be read back: {e}") from None
        return block

    @property
    def lines(self) -> int:
        """The lines of its file a loaded block of a plain file covers (it ends before a newline,
        or at the end of the file); an oversized line's block covers that line, as does the first
        block of a line split into exports (see :attr:`continued`)."""
        if self.offsets is not None or self.damage is not None:
            return int(not self.continued)
        return int(np.count_nonzero(np.frombuffer(self.data, np.uint8) == ord("\n"))) + 1  # 6x bytes.count

    def members(self) -> list[Block]:
        """A loaded block as blocks of one file each: itself, or each file gathered into it, from its
        first line or row."""
        if not self.files:
            return [self]
        ends = np.cumsum([size for _, size in self.files]).tolist()
        if self.batch is not None:
            return [Block(file, 1, batch=self.batch.slice(end - rows, rows))
                    for (file, rows), end in zip(self.files, ends)]
        return [Block(file, 1, data=self.data[end - size:end]) for (file, size), end in zip(self.files, ends)]

    def numbered_from(self, first: int) -> Block:
        """This block, not counted, with its items numbered from ``first`` on."""
        first -= self.continued
        damage = self.damage and replace(self.damage, position=self.damage.position + first - 1)
        return replace(self, first=first, damage=damage)


def filesystem(uri: str, what: str | None = None, error: type[PipelineError] = PipelineError) -> tuple[Any, str]:
    """(filesystem, path) of any fsspec URI, as the store is now. fsspec shares one filesystem object
    per kind of URI within a process, and an object store's keeps the listings it made: a process
    that runs interval after interval would miss the files added since, and versions published since.
    With ``what``, a URI no filesystem takes (an unknown protocol, s4://) is ``error`` naming it as
    ``what``, not the client's own exception."""
    from fsspec.core import url_to_fs

    try:
        fs, path = url_to_fs(uri)
    except (ImportError, ValueError, OSError) as e:  # OSError: a client that cannot start, as HDFS's without a JVM
        if what is None:
            raise
        raise error(f"{what} {uri!r}: {e}") from None
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
        said = error(f"{what} could not be reached: {type(e).__name__}: {e}")
        # A network's failure may pass on a retry; credentials and permissions will not.
        said.retried = not isinstance(e, PermissionError) and not _REFUSED.search(f"{type(e).__name__} {e}")
        raise said from e


_REFUSED = re.compile(r"Credential|Auth|Forbidden|AccessDenied|Permission|InvalidAccessKey|Signature|Expired|\b40[13]\b")


def list_files(uri: str, what: str = "source",
               keep: Callable[[str, str], bool] = lambda folder, root: True) -> tuple[Any, Files, dict[str, str]]:
    """(filesystem, the source's files to read, the other files of a source folder, each with why it is
    not read), each in a stable order (of their paths), in the folders ``keep`` keeps (it is given
    each folder's path and the source folder's, both ending in "/"; a folder it refuses is not listed,
    nor any folder in it); SourceError, naming the source as ``what``, when there is nothing. The
    files' :attr:`Files.root` is the source folder's path (a file's own, when the source is one).

    Each file to read comes with the name it is read by: its own, or, for a file whose name ends in
    none of :data:`SUFFIXES`, a name with the suffix its first bytes call for (see :func:`_sniffed`),
    so that only kept files are opened. A file named as the source is read whatever its name says:
    as JSON Lines, unless its first bytes call for more. Files whose names start with "." or "_" (a
    writer's temporary files, markers) are left out. On a local disk, an entry that is neither a file
    nor a folder once links are followed (a dangling link, a pipe), or whose name is not UTF-8, is
    not read either, nor a folder that cannot be listed: one such entry stopped the run, or hung it."""
    fs, path = filesystem(uri, what, SourceError)
    if _local(fs):  # one file however its path is spelled (a//b, a/../a/b): its name is in every row read from it
        path = os.path.normpath(path)
    if not reachable(fs, path, f"{what} {uri!r}", SourceError):
        raise SourceError(f"{what} {uri!r} does not exist")
    files, skipped = Files(fs), {}
    if not fs.isdir(path):
        if _local(fs) and not os.path.isfile(path):
            raise SourceError(f"{what} {uri!r} is neither a file nor a folder")
        cut = path.rfind("/") + 1
        files.add(path[:cut], [path[cut:]], None, skipped, as_named=True)
        files.root = path
        return fs, files, skipped
    files.root = root = path.rstrip("/") + "/"
    for folder, names, infos in _listing(fs, root, lambda folder: keep(folder, root), set(), skipped):
        if _IN_BEDROCK_BODIES.search(folder):
            files.witness(folder, names, infos)
        else:
            files.add(folder, names, infos, skipped)
    return fs, files, dict(sorted(skipped.items()))  # a folder's unreadable entries came before its files


class Files:
    """A source's files to read, in the order of their paths, each with the name it is read by (see
    :func:`list_files`): iterated as paths, or as (path, name) by :meth:`items`. Each folder's names
    are held joined and compressed, a few bytes a file: the dict of paths and names this replaces
    took the main process 181 MB at a million files. What else a run needs of them, the bytes they
    hold (:attr:`held`) and a digest of their names and keys (:attr:`digest`), is summed as they are
    listed."""

    _CHUNK = 1 << 16  # names joined and compressed together

    def __init__(self, fs):
        self._fs = fs
        self._runs: list[tuple[str, bytes | tuple[str, ...]]] = []  # (folder, names of files listed one after another)
        self._keys: list[bytes | None] = []  # of each run of local files, their keys as listed (see changed)
        self._renamed: dict[str, str] = {}  # the few read by another name than their own
        self._digest = hashlib.sha256()
        self._count = 0
        self.held = 0  # about how many bytes of records the files hold (see _EXPANSION)
        self.root = ""  # the source folder's path, partitions are named below it (see list_files)

    def add(self, folder: str, names: list[str], infos: dict[str, dict] | None, skipped: dict[str, str],
            as_named: bool = False) -> None:
        """Files of ``folder`` that follow the last ones added (``infos``: their details as an object
        store listed them); those read by no name go to ``skipped``. ``as_named``: read as JSON
        Lines whatever their names say, unless their first bytes call for more (a file named as the
        source)."""
        for lo in range(0, len(names), self._CHUNK):
            kept, lines, keys, chunk = [], [], [], names[lo:lo + self._CHUNK]
            unnamed = [name for name in chunk if not name.endswith(SUFFIXES)]  # their first bytes say
            said = dict(zip(unnamed, _in_turn(lambda name: _sniffed(self._fs, folder + name), unnamed, self._fs)))
            for name in chunk:
                path = folder + name
                read_as = (said[name] if name in said else path) or (path if as_named else None)
                if read_as is None:
                    skipped[path] = NOT_READ
                    continue
                size, key, line = self._keyed(path, infos[name] if infos else None)
                if read_as != path:
                    self._renamed[path] = read_as
                self.held += size * (_EXPANSION if read_as.endswith((*_COMPRESSED, ".parquet")) else 1)
                lines.append(line)
                keys.append(key)
                kept.append(name)
            if kept:
                self._digest.update("".join(lines).encode())
                joined = "\0".join(kept)  # "\0" is in no local name; an object's may hold it
                self._runs.append((folder, zlib.compress(os.fsencode(joined), 1) if joined.count("\0") == len(kept) - 1
                                   else tuple(kept)))
                self._keys.append(zlib.compress("\0".join(keys).encode(), 1) if _local(self._fs) else None)
                self._count += len(kept)

    def witness(self, folder: str, names: list[str], infos: dict[str, dict] | None) -> None:
        """Files of ``folder`` read only where records name them (Bedrock's bodies kept apart), not as
        records: in the digest all the same, so that a body that lands after its record (a copy job's
        order) has the interval built again, not the version that lacked it given back."""
        self._digest.update("".join(self._keyed(folder + name, infos[name] if infos else None)[2] for name in names).encode())

    def _keyed(self, path: str, info: dict | None) -> tuple[int, str, str]:
        """(size, what changes when the file does (:func:`file_key`), the digest's line: its path and that)."""
        size, key = file_key(self._fs, path, info)
        quote = json.encoder.encode_basestring_ascii  # what json.dumps writes of a string
        return size, key, f"[{quote(path)}, {quote(key)}]\n"

    def changed(self) -> list[str]:
        """The local files replaced (another inode), cut shorter, or written again in place (another
        modification time, the same size) since they were listed, or gone: asked once they are read. A
        file replaced while its blocks were read gave rows of two files that never were one (blocks cut
        at the old one's offsets, read from the new one), and only one that got shorter was caught. One
        that grew is being appended to (the hour a log shipper still writes, read for late arrivals): its
        bytes as listed are read, as they were. An object is read at the version it was listed with, or
        refused (see :class:`Block`)."""
        found = []
        for (folder, names), keys in zip(self._runs, self._keys):
            if keys is None:
                continue
            for path, key in zip((folder + name for name in _names(names)), _keys(keys)):
                size, mtime, inode = map(int, key.split(":"))
                try:
                    st = os.stat(path)
                except OSError:
                    found.append(path)
                    continue
                if st.st_ino != inode or st.st_size < size or (st.st_size == size and st.st_mtime_ns != mtime):
                    found.append(path)
        return found

    @property
    def digest(self) -> str:
        """SHA-256 of the files' names and what changes when one does (:func:`file_key`), one after
        another: what tells a run its source is as it was."""
        return self._digest.hexdigest()

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        for folder, names in self._runs:
            for name in _names(names):
                yield folder + name

    def folders(self) -> list[str]:
        """The folders the files are in (a folder's files may come as several runs: it may repeat)."""
        return [folder for folder, _ in self._runs]

    def items(self) -> Iterator[tuple[str, str]]:
        for path in self:
            yield path, self._renamed.get(path, path)

    def sizes(self) -> Iterator[int | None]:
        """Each local file's size as listed, in the order of :meth:`__iter__` (None for an object's)."""
        for (_, names), keys in zip(self._runs, self._keys):
            if keys is None:
                yield from itertools.repeat(None, len(_names(names)))
            else:
                yield from (int(key.partition(":")[0]) for key in _keys(keys))


def _names(names: bytes | tuple[str, ...]) -> list[str] | tuple[str, ...]:
    """A folder's names as :class:`Files` holds them: joined by NUL and compressed, or (an object's
    name holding a NUL) as they are."""
    return os.fsdecode(zlib.decompress(names)).split("\0") if isinstance(names, bytes) else names


def _keys(keys: bytes) -> list[str]:
    """A folder's local files' keys (:func:`file_key`), as :class:`Files` holds them, joined and compressed."""
    return zlib.decompress(keys).decode().split("\0")


# Amazon Bedrock's invocation logging keeps a body over 100 KB apart, in a data folder of the hour
# of its record, which names it (formats.with_offloaded_bodies reads it there): not a record.
_BEDROCK_BODIES = re.compile(BEDROCK_DATA + "$")
_IN_BEDROCK_BODIES = re.compile(BEDROCK_DATA)  # the folder, or one in it
_BEDROCK_BODIES_NOT_READ = "the bodies Bedrock's log keeps apart (over 100 KB): read with the records that name them"
# Langfuse's scheduled export writes a manifest of each run (its window and files, JSON) to a
# manifests/ folder beside its tables, of which scores/ is in every export: not records.
_LANGFUSE_MANIFESTS_NOT_READ = "the manifests of Langfuse's export runs (beside its scores/): not records"


def _hidden(name: str) -> bool:
    """Whether a file or folder is passed over, as Spark passes it over: a marker (_SUCCESS), a
    writer's attempts not committed (_temporary/, .hive-staging_*/), a table's log (_delta_log/); but
    a partition whose column's name begins with "_" (_region=eu/)."""
    return name.startswith(".") or (name.startswith("_") and "=" not in name)


def _listing(fs, folder: str, keep: Callable[[str], bool], seen: set,
             skipped: dict[str, str]) -> Iterator[tuple[str, list[str], dict | None]]:
    """(folder, the names of files in it that come one after another, their details on an object
    store) under ``folder`` (ending in "/"), at any depth, in the order of their paths: a folder "a/"
    comes after a file "a.jsonl", but :func:`_hidden` ones. The folders ``keep`` refuses are not listed; local entries that cannot be
    read go to ``skipped``, with why (see :func:`_unreadable`).

    A local folder is listed with ``os.scandir``: fsspec's ``find`` made a dict of details of each
    file, 2.4 s and 172 MB for 200,000 files. A link to a local folder is followed (``find`` lists it
    as a file, which no read could open), once: a link to a folder above it is not."""
    if not keep(folder):
        return
    if _BEDROCK_BODIES.search(folder):  # listed, for the digest alone (see Files.witness)
        skipped[folder] = _BEDROCK_BODIES_NOT_READ
    infos = None
    if _local(fs):
        st = os.stat(folder)
        if (st.st_dev, st.st_ino) in seen:
            return
        seen.add((st.st_dev, st.st_ino))
        try:
            with os.scandir(folder) as entries:
                listed = list(entries)
        except OSError as e:
            skipped[folder] = f"the folder cannot be listed: {e.strerror}"
            return
        names = []
        for e in listed:
            if _hidden(e.name):
                continue
            if why := _unreadable(e):
                skipped[e.path] = why
                continue
            names.append(e.name + "/" if e.is_dir() else e.name)  # known: _unreadable asked
        names.sort()
    else:
        infos, here = {}, folder.rstrip("/")
        for info in fs.ls(here, detail=True):
            full = info["name"].rstrip("/")
            name = full.rsplit("/", 1)[-1]
            if full != here and not _hidden(name):  # not a store's marker of the folder itself
                infos[name + "/" if info["type"] == "directory" else name] = info
        names = sorted(infos)
    run: list[str] = []
    for name in names:
        if name.endswith("/"):
            if run:
                yield folder, run, infos
                run = []
            if name == "manifests/" and "scores/" in names:
                skipped[folder + name] = _LANGFUSE_MANIFESTS_NOT_READ
                continue
            yield from _listing(fs, folder + name, keep, seen, skipped)
        else:
            run.append(name)
    if run:
        yield folder, run, infos


def _unreadable(entry: os.DirEntry) -> str | None:
    """Why a local folder's entry is read neither as a file nor as a folder, or None."""
    try:
        entry.name.encode()
    except UnicodeEncodeError:
        return "its name is not UTF-8, which the dataset's source_file column holds"
    try:
        if entry.is_dir() or entry.is_file():
            return None
        os.stat(entry.path)
    except OSError as e:  # a dangling link is neither, a link loop raises
        return f"a link to nothing that can be read: {e.strerror}" if entry.is_symlink() else e.strerror
    return "neither a file nor a folder (a pipe, a socket or a device)"


def _local(fs) -> bool:
    return "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))


def _in_turn(fn: Callable[[Any], Any], items: Iterable, fs=None) -> Iterator:
    """``fn`` of each item, in the items' order: on an object store (``fs``), up to :data:`_AHEAD` at
    once in threads, since each call waits a round trip or more; elsewhere one after another. A
    thousand one-trace objects at 20 ms a request took 54 s one after another (two requests each)."""
    if fs is None or _local(fs):
        yield from map(fn, items)
        return
    pool, pending = ThreadPoolExecutor(_AHEAD), deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) == _AHEAD:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def file_key(fs, file: str, info: dict | None = None) -> tuple[int, str]:
    """(size, what changes when the file does): a local file's size, modification time and inode, from
    one ``stat`` (fsspec's local ``size`` and ``ukey`` are each a whole ``info()``, and its ukey hashes
    every field of it, 2.2 s for 200,000 files); an object's details, as its listing gives them
    (``info``; its ETag or generation among them), hashed."""
    if _local(fs):
        st = os.stat(file)
        return st.st_size, f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
    info = info or fs.info(file)
    return info.get("size") or 0, hashlib.sha256(json.dumps(info, sort_keys=True, default=str).encode()).hexdigest()


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# The first bytes of a compressed file, and the suffix that says so.
_MAGIC = ((b"\x1f\x8b", ".gz"), (_ZSTD_MAGIC, ".zst"))
_KINDS = {".gz": "gzip", ".zst": "zstd", "": "plain text"}  # what a warning calls each


def _compressed(head: bytes) -> str:
    """The compression a file's first bytes say (a suffix of :data:`_COMPRESSED`), or "" for none: a
    magic number, or a zstd frame's after the length of the frame (see :class:`_Framed`)."""
    framed = ".zst" if head[4:8] == _ZSTD_MAGIC else ""
    return next((suffix for start, suffix in _MAGIC if head.startswith(start)), framed)


def _sniffed(fs, file: str) -> str | None:
    """``file`` with the suffix its first bytes call for (it ends in none of :data:`SUFFIXES`), or None
    when they are of none of those: Parquet's magic number, or JSON text (a JSON value's first
    character, after a byte order mark or white space), plain or gzip or zstd compressed. JSON text
    is read as a ``.json`` file is (see :func:`_json_layout`).

    Kinesis Data Firehose names its objects ``<stream>-<version>-<time>-<uuid>``, with ``.gz`` when it
    compresses them; other shippers name theirs ``.log``, ``.txt`` or nothing at all."""
    try:
        first = fs.cat_file(file, start=0, end=_PEEK)  # opening it would ask the store for its details
        if first.startswith(b"PAR1"):
            return file + ".parquet"
        compression = _compressed(first)
        # Read as its lines are, up to any damage: a gzip object smaller than the peek and cut short
        # holds its first bytes all the same, its damage reported where it is read.
        head = next(_pieces(io.BytesIO(first), compression), b"")[:64]
    except Exception:  # noqa: BLE001 - unreadable, as by damage right at the start: named as not read
        return None
    return file + ".json" + compression if _json_text(head) else None


def _compression(f, name: str) -> str:
    """How to decompress the file object ``f`` (at its start, and left there) of a file read by
    ``name``: as its name says (a suffix of :data:`_COMPRESSED`, or "" for none), unless it is named
    compressed and its first bytes say another compression, or are JSON text. ``gcloud storage cp``
    saves an object stored gzipped with decompressive transcoding as plain text under its ``.gz``
    name: read as its name says, all its lines were lost as one ``corrupt_gzip`` item. Bytes that
    say nothing are read as named, for their damage to be reported as it is."""
    named = next((c for c in _COMPRESSED if name.endswith(c)), "")
    if not named:
        return ""
    at = f.tell()
    head = f.read(_PEEK)
    f.seek(at)
    return _compressed(head) or ("" if _json_text(head) else named)


def _misnamed(file: str, name: str, compression: str) -> None:
    """Warn once a file is read as ``compression``, where its name says another (see :func:`_compression`)."""
    named = next((c for c in _COMPRESSED if name.endswith(c)), "")
    if compression != named:
        log.warning("%s is named as %s, but its first bytes are %s: read as they say", file, _KINDS[named],
                    _KINDS[compression])


def _opened(raw, compression: str):
    """A file object of what the file object ``raw`` holds, decompressed as it is read (``compression``:
    a suffix of :data:`_COMPRESSED`, or "" for none)."""
    from isal import igzip

    return igzip.IGzipFile(fileobj=raw) if compression == ".gz" else _zstd_stream(raw) if compression == ".zst" else raw


def read_object(uri: str, limit: int = MAX_RECORD_BYTES) -> bytes:
    """What the file at ``uri`` holds, decompressed as its first bytes say (gzip, zstd, or none);
    ValueError when that is more than ``limit`` bytes, OSError (or the store's error) when it cannot
    be read."""
    fs, path = filesystem(uri)
    with fs.open(path, "rb") as raw:
        compression = _compressed(raw.read(8))
        raw.seek(0)
        data = _opened(raw, compression).read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"it holds more than {limit} bytes")
    return data


class _Damage(Exception):
    """A compressed stream's damage (the reason of its item, and what the decompressor said), or a
    part of a long OTLP export that cannot be read (see :class:`_Exports`)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


class _Held:
    """Decompressed bytes held until their stream's checksum is checked, then handed out a block's
    worth at a time, across members and frames: damaged compressed bytes may decode as other text,
    which reads as good lines (one flipped bit published hundreds of wrong prompts). Past
    :data:`_HELD_IN_MEMORY` they wait in a file of the system's temporary directory, as big as the
    stream, not in memory."""

    def __init__(self):
        self.pieces: list[bytes] = []
        self.size, self.disk = 0, None
        # Checked, less than a block: the start of the next piece. Its pieces, joined once a block is
        # whole: a file of a gzip member a line copied the carry at each member's end (19 times slower).
        self.carry: list[bytes] = []
        self.carried = 0  # their size

    def add(self, data: bytes) -> None:
        if self.disk is None and self.size + len(data) > _HELD_IN_MEMORY:
            self.disk = tempfile.TemporaryFile(prefix="ctpipe-held-")
            self.disk.writelines(self.pieces)
            self.pieces = []
        if self.disk is not None:
            self.disk.write(data)
        elif data:
            self.pieces.append(data)
        self.size += len(data)

    def checked(self) -> Iterator[bytes]:
        """What is held, checked: in pieces of a block's worth, what is left short of one kept for the next."""
        disk, pieces = self.disk, self.pieces
        self.pieces, self.size, self.disk = [], 0, None
        if disk is not None:
            disk.seek(0)
            pieces = iter(lambda: disk.read(BLOCK_BYTES), b"")
        try:
            for piece in pieces:
                self.carry.append(piece)
                self.carried += len(piece)
                if self.carried >= BLOCK_BYTES:
                    data = b"".join(self.carry)
                    whole = len(data) - len(data) % BLOCK_BYTES
                    self.carry, self.carried = [data[whole:]], len(data) - whole
                    yield from (data[at:at + BLOCK_BYTES] for at in range(0, whole, BLOCK_BYTES))
        finally:
            if disk is not None:
                disk.close()

    def ending(self, checked: bool) -> Iterator[bytes]:
        """The last pieces, once the stream has ended: what is held, if ``checked`` (a file cut short
        damaged none of it; damage did), and what was carried short of a block (never an empty piece,
        which ends the file for its reader)."""
        if checked:
            yield from self.checked()
        self.drop()
        if carried := b"".join(self.carry):
            yield carried
        self.carry, self.carried = [], 0

    def drop(self) -> None:
        """What is held and not checked: it is not handed out."""
        if self.disk is not None:
            self.disk.close()
        self.pieces, self.size, self.disk = [], 0, None


def _gunzip(f) -> Iterator[bytes]:
    """Decompressed pieces of a gzip stream (members one after another), a block's worth each, up to
    any damage, which is raised once the pieces before it are handed out. A member's bytes come once
    its end has checked its CRC and size; where the file ends in the middle of one, what it holds up
    to there comes (damage never cut it short: only the bytes after it are missing).

    A piece is a block's worth whatever the compression: a megabyte read of a chat log whose 8 KB
    system prompt repeats held 12 MB, and made a block twice the size of a plain file's."""
    start = functools.partial(isal_zlib.decompressobj, 16 + isal_zlib.MAX_WBITS)
    d, started, ended, held = start(), False, False, _Held()
    try:
        while piece := f.read(_GZIP_STEP):
            filled = True
            # ISA-L may take in all of a piece and hold back what the room left of its output (zlib
            # leaves that input in unconsumed_tail): asked again while a call fills the room.
            while piece or filled:
                if ended and not started:  # zero bytes after a member are padding, which gzip -t and Python's reader skip
                    piece = piece.lstrip(b"\0")
                started = started or bool(piece)
                out = d.decompress(piece, BLOCK_BYTES)
                held.add(out)
                filled = len(out) == BLOCK_BYTES
                piece = d.unconsumed_tail
                if d.eof and not filled:  # a member ended, all of it out and checked; another may follow
                    yield from held.checked()
                    piece, d, started, ended = d.unused_data, start(), False, True
        if started:
            held.add(d.flush())
            raise EOFError("compressed file ended before the end-of-stream marker was reached")
    except EOFError as e:
        yield from held.ending(checked=True)
        raise _Damage("truncated_gzip", f"{type(e).__name__}: {e}") from None
    except isal_zlib.error as e:
        yield from held.ending(checked=False)
        raise _Damage("corrupt_gzip", f"{type(e).__name__}: {e} (the member it is in not read)") from None
    finally:
        held.drop()  # on any other error too (the store's): no file left behind
    yield from held.ending(checked=True)


def _unzstd(f) -> Iterator[bytes]:
    """Decompressed pieces of a zstd stream (frames one after another, or each after its length: see
    :class:`_Framed`), a block's worth each, up to any damage, which is raised once the pieces before
    it are handed out. A frame's checksum (the zstd tool writes one) is checked before its bytes
    come (see :class:`_Held`): those of frames each after its length once each ends, the others once
    the stream does, since Arrow's reader does not say where its frames end. A frame without a
    checksum cannot tell damaged bytes from others. Where the file ends early, what came before comes."""
    stream, held = _zstd_stream(f), _Held()
    try:
        while piece := stream.read(_ZSTD_STEP):
            held.add(piece)
            if getattr(stream, "at_frame_end", False):
                yield from held.checked()
        yield from held.checked()  # the stream's end: its last frame's checksum is checked
    except OSError as e:
        # Arrow's own errors are plain OSErrors; the file's (a network error) keep their type and end the run.
        if type(e) is not OSError:
            raise
        truncated = str(e).startswith("Truncated")
        yield from held.ending(checked=truncated)
        # A frame of a window past Arrow's 128 MB (zstd --long=28 or more) is not damaged: it would
        # take that much memory to read.
        why = ("written with a window past 128 MB, zstd --long=28 or more, which takes as much memory to read: "
               "recompress it with --long=27 or less; " if "too much memory" in str(e) else "")
        raise _Damage("truncated_zstd" if truncated else "corrupt_zstd",
                      f"zstd: {e}" if truncated else f"zstd: {e} ({why}the frames it is in not read)") from None
    finally:
        held.drop()
    yield from held.ending(checked=True)


def _zstd_stream(f):
    """A file object of what the zstd file object ``f`` (at its start) holds, decompressed as it is
    read: one stream of frames, or frames each after its length (see :class:`_Framed`)."""
    at = f.tell()
    framed = f.read(8)[4:] == _ZSTD_MAGIC  # no frame's header holds the magic number again
    f.seek(at)
    return _Framed(f) if framed else _zstd_frames(f)


def _zstd_frames(f):
    return pa.CompressedInputStream(pa.PythonFile(f, mode="r"), "zstd")


class _Framed:
    """A file object of what a file of zstd frames each after its length (4 bytes, big-endian) holds,
    each frame's text on a line of its own, decompressed as it is read. The OpenTelemetry Collector's
    file exporter writes ``format: json`` with ``compression: zstd`` so (one frame an export, with no
    newline: see its ``exportMessageAsBuffer``), unless its ``exporter.file.nativeCompression``
    feature gate is on; read as one stream, the whole file was one ``corrupt_zstd`` item.

    Damage raises OSError as Arrow's reader does ("Truncated" first where the file ends early), after
    a read that gives the frames before it: a read's worth of them is not lost with it."""

    def __init__(self, f):
        self.f, self.frame, self.stream, self.failure = f, None, None, None
        self.at_frame_end = False  # whether the last read ended where a frame does: all it gave is checked

    def read(self, n: int) -> bytes:
        if self.failure is not None:
            raise self.failure
        out: list[bytes] = []
        self.at_frame_end = False
        try:
            while n > 0 and self._next():
                piece = self.stream.read(n)
                if not piece:  # the frame ended: where its length says it ends?
                    if self.frame.left:
                        raise OSError(f"Truncated frame: {self.frame.left} bytes of it missing")
                    out.append(b"\n")
                    self.stream, self.at_frame_end = None, True
                    break
                out.append(piece)
                n -= len(piece)
        except OSError as e:
            if not out:
                raise
            self.failure = e
        return b"".join(out)

    def _next(self) -> bool:
        """Whether a frame is open to read, the next one opened if need be (False: the file ended)."""
        if self.stream is None:
            size = self.f.read(4)
            if not size:
                return False
            if len(size) < 4:
                raise OSError("Truncated frame length")
            self.frame = _Bounded(self.f, int.from_bytes(size, "big"))
            self.stream = _zstd_frames(self.frame)
        return True


class _Bounded:
    """The next ``left`` bytes of the file object ``f``, as a file object of their own."""

    closed = False  # as Arrow asks of a file it reads

    def __init__(self, f, left: int):
        self.f, self.left = f, left

    def close(self) -> None:
        """Arrow closes it once its frame is read: ``f`` stays open, for the frames after it."""

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(self.left if n is None or n < 0 else min(n, self.left))
        self.left -= len(data)
        return data


def _pieces(f, compression: str) -> Iterator[bytes]:
    """What the file object ``f`` holds, decompressed as ``compression`` says, a block's worth at a
    time, up to any damage, which is raised (:class:`_Damage`) once the pieces before it are given."""
    return (_gunzip(f) if compression == ".gz" else _unzstd(f) if compression == ".zst"
            else iter(lambda: f.read(BLOCK_BYTES), b""))


def _jsonl_blocks(fs, file: str, name: str, layout: str = "lines") -> Iterator[Block]:
    """The blocks of a JSONL file behind any filesystem, compressed or not (as its ``name`` says), with
    their lines; of a file of JSON values one after another (``layout`` "stream"), or of one array
    ("array"), a value to a line (see :func:`_a_value_a_line`)."""
    with fs.open(file, "rb") as f:
        compression = _compression(f, name)
        _misnamed(file, name, compression)
        pieces = _pieces(f, compression)
        values = _a_value_a_line(pieces, layout == "array") if layout != "lines" else pieces
        yield from _last_line_joined(_cut(file, values))


# Bytes that shape a stream of JSON values: brackets open and close values, newlines (and carriage
# returns) outside strings are white space within or between them.
_BRACKETS, _LINE_ENDS = b"{[}]", b"\n\r"
_OPENS, _CLOSES, _NEWLINES = (np.isin(np.arange(256), list(chars))
                              for chars in (_BRACKETS[:2], _BRACKETS[2:], _LINE_ENDS))
_SHAPING = _BRACKETS + _LINE_ENDS


class _Brackets:
    """Where a stream of JSON text, given a piece at a time, opens and closes values: its brackets and
    newlines (and carriage returns) outside strings, with the depth before and after each. What a
    piece leaves open is carried into the next: a string, backslashes at its end, brackets. A
    closing bracket with none open is passed over (its depth stays 0)."""

    def __init__(self, shaping: bytes = _SHAPING):
        self.shaping = shaping  # what counts as a mark: brackets, and newlines unless told otherwise
        self.in_string, self.backslashes, self.depth = False, 0, 0
        # Where a piece's bytes are one of several, written over for each piece: a fresh megabyte for
        # each comparison cost more in page faults than the comparing (a third of an export's scan).
        self.scratch = np.zeros((2, 0), bool)

    def state(self) -> tuple[bool, int, int]:
        """What is carried into the next piece, to :meth:`restore` when a piece is read again shorter."""
        return self.in_string, self.backslashes, self.depth

    def restore(self, state: tuple[bool, int, int]) -> None:
        self.in_string, self.backslashes, self.depth = state

    def marks(self, piece: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(positions, bytes, depth before, depth after) of each mark of ``piece``, the next of the stream."""
        b = np.frombuffer(piece, np.uint8)
        if self.scratch.shape[1] < len(b):
            self.scratch = np.zeros((2, len(b)), bool)
        found, other = self.scratch[:, :len(b)]
        np.equal(b, 34, out=found)
        # A quote is escaped by an odd run of backslashes before it. The runs are found from the
        # backslashes, fewer than the quotes (JSON text inside a string, as GenAI attributes hold,
        # escapes thousands of quotes a megabyte, among tens of thousands); a run from the piece's
        # start goes on in the piece before.
        slashes = np.flatnonzero(np.equal(b, 92, out=other))
        if len(slashes):
            breaks = np.flatnonzero(np.diff(slashes) != 1)
            starts, ends = slashes[np.r_[0, breaks + 1]], slashes[np.r_[breaks, len(slashes) - 1]]
            lengths = ends - starts + 1
            lengths[0] += self.backslashes if starts[0] == 0 else 0
            escaped = ends[lengths % 2 == 1] + 1
            found[escaped[escaped < len(b)]] = False
        if self.backslashes % 2 and len(b) and b[0] != 92:
            found[0] = False
        quotes = np.flatnonzero(found)
        np.equal(b, self.shaping[0], out=found)
        for c in self.shaping[1:]:  # a comparison a byte is 3x as fast as a lookup table
            found |= np.equal(b, c, out=other)
        marks = np.flatnonzero(found)
        marks = marks[(np.searchsorted(quotes, marks) + self.in_string) % 2 == 0]  # outside strings
        kind = b[marks]
        total = self.depth + np.cumsum(_OPENS[kind].astype(np.int64) - _CLOSES[kind])
        after = total - np.minimum(np.minimum.accumulate(total), 0) if len(total) else total  # never below 0
        before = np.concatenate([[self.depth], after[:-1]])
        self.in_string = (self.in_string + len(quotes)) % 2 == 1
        trailing = len(piece) - len(piece.rstrip(b"\\"))
        self.backslashes = trailing + (self.backslashes if trailing == len(piece) else 0)
        self.depth = int(after[-1]) if len(after) else self.depth
        return marks, kind, before, after


def _a_value_a_line(pieces: Iterator[bytes], array: bool = False) -> Iterator[bytes]:
    """Pieces of a stream of JSON values written one after another, as Kinesis Data Firehose writes
    records by default (``{"a":1}{"a":2}``, no delimiter), or pretty-printed ones, as pieces of JSON
    Lines: each newline outside a string made a space, and one put before every object or array that
    begins at the top level, but the first (see :class:`_Brackets`). A value that never closes takes
    the rest of the stream into its line, which is quarantined (as too large, past 8 MB), unless
    another value opens where no JSON text holds one (see :func:`_reopened`): the open one was cut
    short, and the stream is read on from there.

    With ``array``, of the elements of one array: its brackets made spaces, and the commas between its
    elements newlines (a string or a number among objects is an element of its own), and a newline put
    before an object or array that follows a closing bracket with no comma (an array after an array,
    as a writer that appends one a flush leaves them). An array too large to be a record (Langfuse's
    JSON export writes a window's rows as one) was one ``record_too_large`` item, all its records lost."""
    brackets, begun, last = _Brackets(_SHAPING + b"," if array else _SHAPING), False, ord(",")
    mark_before = ord(",")  # of an array's elements: the last bracket or comma outside strings, the pieces before
    for whole in pieces:
        queue = [whole]
        while queue:
            piece = queue.pop()
            if array and not begun and piece.strip(_BLANK):  # the array's opening bracket, the first value's
                at = len(piece) - len(piece.lstrip(_BLANK))
                piece = piece[:at] + b" " + piece[at + 1:]
            state = brackets.state()
            marks, kind, before, _ = brackets.marks(piece)
            cut = None if array else _reopened(piece, marks, kind, before, last)
            if cut is not None:  # rare: read up to the value that opens there, then again from it
                brackets.restore(state)
                piece, rest = piece[:cut], piece[cut:]
                # The rest a little at a time: read again whole after each cut, a piece of many values
                # cut short took time quadratic in their number (8,000 in 10 s).
                queue += [rest[i:i + _AFTER_A_CUT] for i in range(0, len(rest), _AFTER_A_CUT)][::-1]
                marks, kind, before, _ = brackets.marks(piece)
            out = np.frombuffer(piece, np.uint8).copy()
            out[marks[_NEWLINES[kind]]] = ord(" ")
            if array:  # an element a line, whatever it is: a newline for each comma between two, a
                # space for the closing bracket (one with none open)
                out[marks[(before == 0) & _CLOSES[kind]]] = ord(" ")
                out[marks[(before == 0) & (kind == ord(","))]] = ord("\n")
                solid = ~_NEWLINES[kind]
                marked, shaped = marks[solid], kind[solid]
                after = np.concatenate([[mark_before], shaped[:-1]]).astype(np.uint8)
                starts = marked[_OPENS[shaped] & (before[solid] == 0) & _CLOSES[after]]
                mark_before = int(shaped[-1]) if len(shaped) else mark_before
            else:
                starts = marks[_OPENS[kind] & (before == 0)]
            if not begun:
                if len(starts) and not piece[:int(starts[0])].strip(_BLANK):
                    starts = starts[1:]  # the first value, after nothing but white space
                begun = bool(piece.strip(_BLANK))
            last = _last_solid(piece, last)
            if cut is not None:
                brackets.depth = 0
            yield np.insert(out, starts, ord("\n")).tobytes()


_BLANKS = np.isin(np.arange(256), list(_BLANK))
_AFTER_A_CUT = 1 << 12  # bytes read at a time after a value cut short (see _a_value_a_line)
_BEFORE_A_VALUE = np.isin(np.arange(256), list(b":,["))  # what may come before a value within one


def _reopened(piece: bytes, marks: np.ndarray, kind: np.ndarray, before: np.ndarray, last: int) -> int | None:
    """Where in ``piece`` a value opens within another after anything but ``:``, ``,`` or ``[`` (white
    space aside), which no JSON text holds (``}{``, ``"a": 1 {``): the one open was cut short, and
    the stream goes on there. None where none does (the usual: a few operations on the marks);
    ``last``: the stream's last byte before the piece that is not white space."""
    opens = marks[_OPENS[kind] & (before > 0)]
    if not len(opens):
        return None
    b = np.frombuffer(piece, np.uint8)
    prior, waiting = np.full(len(opens), last), np.arange(len(opens))
    for back in range(1, 65):  # the byte before each, then before those that are white space
        at = opens[waiting] - back
        prior[waiting] = np.where(at >= 0, b[np.maximum(at, 0)], last)
        waiting = waiting[_BLANKS[prior[waiting]]]  # before the piece: `last`, not white space
        if not len(waiting):
            break
    else:  # white space that long is rare: the last byte before it that is not
        solid = np.flatnonzero(~_BLANKS[b])
        at = np.searchsorted(solid, opens[waiting]) - 1
        prior[waiting] = np.where(at >= 0, b[solid[np.maximum(at, 0)]], last)
    wrong = np.flatnonzero(~_BEFORE_A_VALUE[prior])
    return int(opens[wrong[0]]) if len(wrong) else None


def _last_solid(piece: bytes, last: int) -> int:
    """The last byte of ``piece`` that is not white space, or ``last`` where there is none (see :func:`_reopened`)."""
    end = len(piece)
    while end and piece[end - 1] in _BLANK:  # not rstrip: a copy of the piece, for its last byte
        end -= 1
    return piece[end - 1] if end else last


def _version(info: dict) -> tuple:
    """What changes when an object is written again: its size, and its ETag (S3) or generation (GCS)."""
    return info.get("size"), info.get("ETag") or info.get("etag"), info.get("generation")


def _plain_blocks(file: str, listed: int | None = None) -> Iterator[Block]:
    """The blocks of a plain local file as places in the file (see :func:`_places`), up to its size as
    ``listed``: a file appended to since (the hour a log shipper still writes) is read as it was."""
    with open(file, "rb") as f:
        def read(ranges: list[tuple[int, int]]) -> list[bytes]:
            out = []
            for lo, hi in ranges:
                f.seek(lo)
                out.append(f.read(hi - lo))
            return out

        size = os.fstat(f.fileno()).st_size  # less than listed: cut shorter, which Files.changed() tells
        yield from _places(file, size if listed is None else min(size, listed), read)


def _ranged_blocks(fs, file: str, info: dict) -> Iterator[Block]:
    """The blocks of a plain file on an object store as places in the file (see :func:`_places`), the
    windows around its cuts fetched many at once, and pinned to the object as ``info`` (its details)
    says it is."""

    def read(ranges: list[tuple[int, int]]) -> list[bytes]:
        return fs.cat_ranges([file] * len(ranges), [lo for lo, _ in ranges], [hi for _, hi in ranges], on_error="raise")

    yield from _places(file, info["size"], read, fs, _version(info))


_WINDOW = 1 << 16  # read before each nominal cut to find its newline: lines are rarely longer
_AHEAD = 64  # windows read at once (concurrently, on an object store: a round trip each would cap the rate)


def _places(file: str, size: int, read_many: Callable[[list[tuple[int, int]]], list[bytes]], fs=None,
            version: tuple = ()) -> Iterator[Block]:
    """The blocks of a plain file of ``size`` bytes as places in it, for :meth:`Block.load` to read
    where they are processed; ``read_many`` gives its bytes in each of several ranges ``[lo, hi)``.

    Only a window before each multiple of :data:`BLOCK_BYTES` is read here, where a block ends at its
    last newline: counting lines would mean reading every byte in this process as well as in the one
    that loads the block, which cost the driver of a million traces more CPU than deciding their
    duplicates, and bounds what any number of workers can read to what one process copies (or
    downloads). Cuts at fixed places let the windows be read ahead, before the cuts before them are
    known. A line running over a cut with no newline in its window is a block of its own (see
    :func:`_long_line`); so a block holds at most ``BLOCK_BYTES`` plus a window, or a single line of
    up to :data:`MAX_RECORD_BYTES`."""
    def read(lo: int, hi: int) -> bytes:
        return read_many([(lo, hi)])[0]

    window = min(_WINDOW, BLOCK_BYTES)
    cuts = range(BLOCK_BYTES, size, BLOCK_BYTES)
    at = 0  # where the next block starts
    for first in range(0, len(cuts), _AHEAD):
        batch = cuts[first:first + _AHEAD]
        for cut, before in zip(batch, read_many([(cut - window, cut) for cut in batch])):
            if cut <= at:  # a line running over it was a block of its own
                continue
            lo = cut - window
            i = before.rfind(b"\n", max(at - lo, 0))
            if i >= 0:
                yield Block(file, None, at=at, size=lo + i - at, fs=fs, version=version)
                at = lo + i + 1
                continue
            end = _newline(read, at, max(at, lo), last=True)  # the lines before the long one
            if end is not None:
                yield Block(file, None, at=at, size=end - at, fs=fs, version=version)
                at = end + 1
            at = (yield from _long_line(file, at, cut, size, read_many, fs, version)) + 1
    if at < size:
        yield Block(file, None, at=at, size=size - at, fs=fs, version=version)


_EXPORT_READS = 1 << 20  # bytes of a long line in a file read at a time, _EXPORT_AHEAD reads at once
_EXPORT_AHEAD = 8  # concurrently, on an object store


def _long_line(file: str, at: int, cut: int, size: int, read_many: Callable[[list[tuple[int, int]]], list[bytes]],
               fs=None, version: tuple = ()) -> Iterator[Block]:
    """The blocks of a line of a plain file that starts at ``at`` and runs over ``cut`` with no
    newline near it (see :func:`_places`): a place, when it is up to :data:`MAX_RECORD_BYTES` long;
    past that, its ``record_too_large`` item, or, when it is an OTLP export, read through here, the
    places of its exports' spans (see :class:`_SplitExport`). Returns where the line ends."""
    head = read_many([(at, min(at + 200, size))])[0]
    if not _an_export(head):
        end = _newline(lambda lo, hi: read_many([(lo, hi)])[0], cut, size, last=False)
        end = size if end is None else end
        yield (Block(file, None, damage=_too_large(file, 1, end - at, head)) if end - at > MAX_RECORD_BYTES
               else Block(file, None, at=at, size=end - at, fs=fs, version=version))
        return end
    held: list[bytes] = []  # until the line is known to be long
    split = None
    for first in range(at, size, _EXPORT_AHEAD * _EXPORT_READS):
        ranges = [(lo, min(lo + _EXPORT_READS, size))
                  for lo in range(first, min(first + _EXPORT_AHEAD * _EXPORT_READS, size), _EXPORT_READS)]
        for (lo, hi), piece in zip(ranges, read_many(ranges)):
            i = piece.find(b"\n")
            end = hi if i < 0 else lo + i
            piece = piece if i < 0 else piece[:i]
            if split is None:
                held.append(piece)
                if end - at > MAX_RECORD_BYTES:
                    split = _SplitExport(file, None, head, Block(file, None, at=at, fs=fs, version=version))
                    yield from split.feed(*held)
                    held = []
            else:
                yield from split.feed(piece)
            if i >= 0 or hi == size:
                if split is None:
                    yield Block(file, None, at=at, size=end - at, fs=fs, version=version)
                else:
                    yield from split.end()
                return end
    return size


def _newline(read: Callable[[int, int], bytes], start: int, end: int, last: bool) -> int | None:
    """The offset of the last (or first) newline in ``[start, end)``, reading a window at a time from
    that end; None when there is none."""
    window = _WINDOW
    while start < end:
        lo, hi = (max(start, end - window), end) if last else (start, min(end, start + window))
        data = read(lo, hi)
        i = data.rfind(b"\n") if last else data.find(b"\n")
        if i >= 0:
            return lo + i
        if last:
            end = lo
        else:
            start = hi
        window = min(window * 2, 1 << 22)
    return None


def _cut(file: str, chunks: Iterator[bytes]) -> Iterator[Block]:
    """Blocks of whole lines, counted, from a file's successive chunks: a block ends at the last
    newline of a chunk; a line longer than :data:`MAX_RECORD_BYTES` is read through unkept and
    given as a ``record_too_large`` item, or, when it is an OTLP export, as blocks of exports of its
    spans (see :class:`_SplitExport`); a compressed stream's damage ends the file as a
    ``truncated_gzip``/``truncated_zstd`` item (it ends early) or a ``corrupt_gzip``/``corrupt_zstd``
    one (its bytes are not such a stream's, or fail its checks)."""
    line, at, pos = 1, 0, 0  # the first line not handed out and its offset; the offset of the chunk
    pending: list[bytes] | None = None  # the start of a line not ended yet, in pieces
    head = b""  # the first bytes of the first pending piece, for a record_too_large item
    skipping = False  # through an oversized line, which started at `at`
    split: _SplitExport | None = None  # what reads an oversized line that is an OTLP export
    while True:
        try:
            data = next(chunks, b"")
            n = len(data)
        except _Damage as e:
            # Every whole line before the damage was handed out; the cut one is the damaged item.
            raw = head if skipping or split else b"".join(pending or [])[:RAW_KEPT]
            damage = Item(file, line, reason=e.reason, detail=str(e), raw=raw.decode("utf-8", "replace"))
            yield from split.end(damage) if split else [Block(file, line, damage=damage)]
            return
        if not n:
            break
        count = int(np.count_nonzero(np.frombuffer(data, np.uint8) == 10))  # thrice bytes.count's speed
        start = 0  # where the chunk's unread part begins
        if pending is not None and count and _an_export(head) and pos + data.find(b"\n") - at > MAX_RECORD_BYTES:
            split = _SplitExport(file, line, head)  # an export too long for a record that ends in this chunk
            yield from split.feed(*pending)
            pending = None
        if skipping:
            if not count:
                pos += n
                continue
            end = data.find(b"\n")
            yield Block(file, line, damage=_too_large(file, line, pos - at + end, head))
            line, at, skipping, start, count = line + 1, pos + end + 1, False, end + 1, count - 1
        elif split:
            if not count:
                yield from split.feed(data)
                pos += n
                continue
            end = data.find(b"\n")
            yield from split.feed(data[:end])
            yield from split.end()
            line, at, split, start, count = line + 1, pos + end + 1, None, end + 1, count - 1
        if count:
            cut = data.rfind(b"\n")
            yield Block(file, line, data=b"".join([*(pending or []), memoryview(data)[start:cut]]))
            line, at, head = line + count, pos + cut + 1, data[cut + 1:min(cut + 201, n)]
            pending = [data[cut + 1:n]]
        elif start < n:
            if pending is None:
                pending, head = [], b""
            pending.append(data[start:n])
            if len(head) < 200:  # a line begun at the very end of the chunk before: its head, whole
                head += data[start:start + 200 - len(head)]
            if pos + n - at > MAX_RECORD_BYTES:
                if _an_export(head):
                    split = _SplitExport(file, line, head)
                    yield from split.feed(*pending)
                else:
                    skipping = True
                pending = None
        pos += n
    if skipping:
        yield Block(file, line, damage=_too_large(file, line, pos - at, head))
    elif split:
        yield from split.end()
    elif pending is not None:
        yield Block(file, line, data=b"".join(pending))


def _last_line_joined(blocks: Iterator[Block]) -> Iterator[Block]:
    """``blocks`` of a file, its last line (after the last newline, which :func:`_cut` gives as a block
    of its own) joined to the block of lines before it, as where a file is cut in place: an
    unreadable line takes the interval of the record before it in its block."""
    held: list[Block] = []
    for block in blocks:
        held.append(block)
        if len(held) > 2:
            yield held.pop(0)
    if len(held) == 2 and all(b.damage is None and b.offsets is None for b in held):
        held = [replace(held[0], data=b"\n".join([held[0].data, held[1].data]))]
    yield from held


def _too_large(file: str, line: int, size: int, head: bytes) -> Item:
    """The item of a line of ``size`` bytes, past :data:`MAX_RECORD_BYTES`, that starts with ``head``."""
    return Item(file, line, reason="record_too_large", detail=f"{size} bytes > {MAX_RECORD_BYTES}",
                raw=head[:200].decode("utf-8", "replace"))


# The lists of an OTLP JSON export of spans or of log records: its resources', each resource's scopes',
# each scope's records'.
_SIGNALS = {"resourceSpans": ("scopeSpans", "spans"), "resourceLogs": ("scopeLogs", "logRecords")}


def _an_export(head: bytes) -> str | None:
    """Whether a line starting with ``head`` is an OTLP JSON export, as far as its first member says:
    the name of that member (``resourceSpans`` or ``resourceLogs``), or None."""
    text = _text(head)
    return next((signal for signal in _SIGNALS if text.startswith(b'{"%s"' % signal.encode())), None)


def exports_of(line: bytes) -> tuple[list[bytes], list[tuple[str, str]]] | None:
    """The exports of about a megabyte of spans each that a line beginning as an OTLP export and cut
    short holds, read as one past :data:`MAX_RECORD_BYTES` is (see :class:`_Exports`): the spans
    before its break. With them (reason, detail) of each part not read: a span too large, the rest
    of the line. None where the line is no export, or one that closes (what makes it no JSON is
    elsewhere: after it, say)."""
    signal = _an_export(line[:64])
    if signal is None:
        return None
    exports = _Exports(signal=signal)
    made = exports.feed(line)
    if exports.done:
        return None
    rest, why = exports.end()
    made += rest
    failures = [(m.reason, str(m)) for m in made if isinstance(m, _Damage)] + ([(why.reason, str(why))] if why else [])
    return [m for m in made if not isinstance(m, _Damage)], failures


# The key before the list a resource or a scope holds, at the end of the members before it.
_LIST_KEYS = {inner: re.compile(rb'"%s"\s*:\s*$' % inner.encode()) for lists in _SIGNALS.values() for inner in lists}
_EXPORT_BYTES = MAX_RECORD_BYTES // 8  # of spans to an export split from a longer one: a megabyte
_EXPORT_TAIL = b"]}]}]}"  # what closes an export made of a run of spans (see _export_prefix)


def _an_export_of(prefix: bytes, spans: bytes) -> bytes:
    """The export line of a run of spans (their bytes, comma-separated) under ``prefix``."""
    return prefix + spans + _EXPORT_TAIL


def _export_prefix(signal: str, frames: dict[str, bytes]) -> bytes:
    """What an export of spans (or log records) split from a longer one has before them: its
    resource's and its scope's members (each with the key of the list that follows them)."""
    return b'{"%s":[' % signal.encode() + frames["resource"] + b"[" + frames["scope"] + b"["


class _Exports:
    """An OTLP export on one line, fed a piece at a time, as exports of about a megabyte of spans each
    (:data:`_EXPORT_BYTES`), made as its spans are read: whatever the export's size, no more than
    that is held, and every export made is a line of at most :data:`MAX_RECORD_BYTES` (a span too
    large for one is quarantined alone).

    Each export holds a run of one scope's spans, under that scope's members and its resource's
    that come before them. The OpenTelemetry Collector writes them first (OTLP's field order:
    resource, then scopeSpans; scope, then spans). An object or a list after a resource's or a
    scope's spans (JSON allows any order) ends the reading: the spans before it were read without
    it, and the rest of the line is quarantined. Brackets outside strings give the structure (see
    :class:`_Brackets`): only the outer seven levels, down to the spans' own, are walked in Python.

    Without ``keep``, the spans' bytes are not held, and each export is given as (what it has before
    its spans, where they begin and end in the line), for a reader that can read the line again
    (see :attr:`Block.exports`)."""

    def __init__(self, keep: bool = True, signal: str = "resourceSpans"):
        self.keep, self.signal, (self.scopes, self.records) = keep, signal, _SIGNALS[signal]
        self.brackets = _Brackets(_BRACKETS)
        # Each open bracket down to a span's: its role (export, resources, resource, scopes, scope,
        # spans, span, or other) and whether the list it holds (resourceSpans, scopeSpans, spans) has closed.
        self.open: list[list] = []
        self.done = False  # the export has closed
        self.listed = False  # its resourceSpans is a list
        self.frames = {"resource": b"", "scope": b""}  # their members before their list, with its key
        self.prefix = _export_prefix(signal, self.frames)  # what an export has before its spans
        # What is being captured ("resource" or "scope": its members; "spans"; or nothing), from
        # where in the line: the bytes before the piece being read, and where it begins in that piece.
        self.capturing, self.start, self.held, self.at = "", 0, bytearray(), 0
        self.complete = 0  # where the last whole span captured ends in the line (0: none)
        self.span_at = 0  # where the open span begins in the line
        self.skipping = False  # through a span too large for an export
        self.read = 0  # bytes fed before the piece being read
        self.failure: _Damage | None = None  # why the rest of the line is not read

    def feed(self, piece: bytes) -> list[bytes | tuple[bytes, int, int] | _Damage]:
        """The exports ``piece`` completes, and spans too large to read (as :class:`_Damage`)."""
        out: list = []
        if self.failure is None:
            marks, kind, before, after = self.brackets.marks(piece)
            walked = np.minimum(before, after) < 7
            for p, k, b in zip(marks[walked].tolist(), kind[walked].tolist(), before[walked].tolist()):
                why = self._open(piece, p, k == ord("[")) if _OPENS[k] else self._close(piece, p, b, out)
                if why:
                    self.failure = _Damage("invalid_field", f"at byte {self.read + p}: {why}")
                    self._flush(piece, out)
                    break
            else:
                self._carry(piece, out)
        self.read += len(piece)
        return out

    def end(self) -> tuple[list, _Damage | None]:
        """Once the line has ended (or its stream broke off): exports of the whole spans read since the
        last, and why the rest of the line was not read (None: it was all read)."""
        out: list = []
        if self.failure is None and not self.done:
            self.failure = _Damage("invalid_json", f"the export breaks off after {self.read} bytes")
            self._flush(b"", out)
        elif self.failure is None and not self.listed:
            self.failure = _Damage("invalid_field", f"{self.signal} is not a list")
        return out, self.failure

    def _open(self, piece: bytes, p: int, is_list: bool) -> str | None:
        parent = self.open[-1] if self.open else None
        role = "other"
        if parent is None:
            if self.done:
                return "a second value after the export"
            role = "export"
        elif parent == ["export", False]:  # its first member, resourceSpans or resourceLogs (see _an_export)
            if not is_list:
                return f"{self.signal} is not a list"
            role, self.listed = "resources", True
        elif parent[0] in ("resources", "scopes"):
            role = parent[0][:-1]
            if is_list:
                return f"an item of {self.signal if role == 'resource' else self.scopes} is a list"
            self._capture(role, self.read + p)
        elif parent[0] in ("resource", "scope"):
            inner = self.scopes if parent[0] == "resource" else self.records
            if parent[1]:
                return (f"a {parent[0]} has a member after its {inner}: an export past {MAX_RECORD_BYTES} bytes "
                        "is read with its members in OTLP's field order")
            members = self._bytes(piece, self.start, self.read + p)
            if is_list and _LIST_KEYS[inner].search(members[-64:]):
                role = "scopes" if inner == self.scopes else "spans"
                self.frames[parent[0]], self.capturing = members, ""
                self.prefix = _export_prefix(self.signal, self.frames)
        elif parent[0] == "spans":
            role = "span"
            self.span_at = self.read + p
            if not self.capturing:
                self._capture("spans", self.span_at)
        self.open.append([role, False])
        return None

    def _close(self, piece: bytes, p: int, depth: int, out: list) -> str | None:
        if not depth:
            return "a closing bracket with none open"
        role = self.open.pop()[0]
        end = self.read + p + 1
        if role == "span":
            room = self._room()
            if self.skipping or end - self.span_at > room:
                if self.complete and not self.skipping:  # the whole spans before it
                    self._export(piece, self.start, self.complete, out)
                record = "span" if self.records == "spans" else "log record"
                out.append(_Damage("record_too_large", f"a {record} of {end - self.span_at} bytes in an OTLP export, "
                                                       f"> {room} with its resource and scope"))
                self.capturing, self.skipping = "", False
            elif end - self.start > room:  # the spans before it in one export, it in another
                self._export(piece, self.start, self.complete, out)
                self._export(piece, self.span_at, end, out)
                self.capturing = ""
            else:
                self.complete = end
                if end - self.start >= _EXPORT_BYTES:
                    self._export(piece, self.start, end, out)
                    self.capturing = ""
        elif role in ("resources", "scopes", "spans"):
            if role == "spans":
                self._flush(piece, out)
            self.open[-1][1] = True
        if role in ("resource", "scope", "spans"):
            self.capturing = ""  # a resource or scope without its list has nothing to export
        self.done = not self.open
        return None

    def _room(self) -> int:
        """Bytes of spans an export can hold within MAX_RECORD_BYTES, with its resource's and scope's members."""
        return MAX_RECORD_BYTES - len(self.frames["resource"]) - len(self.frames["scope"]) - 64

    def _capture(self, what: str, start: int) -> None:
        self.capturing, self.start, self.held, self.at, self.complete = what, start, bytearray(), start - self.read, 0

    def _bytes(self, piece: bytes, lo: int, hi: int) -> bytes:
        """The captured bytes of the line from ``lo`` to ``hi``."""
        n = len(self.held)  # from self.start on
        a, b = lo - self.start, hi - self.start
        taken = bytes(self.held[max(a, 0):min(b, n)])
        return taken + piece[self.at + max(a - n, 0):self.at + b - n] if b > n else taken

    def _flush(self, piece: bytes, out: list) -> None:
        """An export of the whole spans captured, if any; the capture ends (a scope's spans have, or the line)."""
        if self.capturing == "spans" and self.complete:
            self._export(piece, self.start, self.complete, out)
        self.capturing = ""

    def _export(self, piece: bytes, lo: int, hi: int, out: list) -> None:
        out.append(_an_export_of(self.prefix, self._bytes(piece, lo, hi)) if self.keep else (self.prefix, lo, hi))

    def _carry(self, piece: bytes, out: list) -> None:
        """Keep what the capture took of the piece; a span too large for an export is skipped through."""
        if not self.capturing:
            return
        if self.keep or self.capturing != "spans":
            self.held += piece[self.at:]
        self.at = len(piece)  # held has all of it (of the spans, when it keeps them)
        self._bound(piece, out)
        self.at = 0  # where the capture goes on in the next piece

    def _bound(self, piece: bytes, out: list) -> None:
        if self.capturing != "spans":
            if len(self.held) > MAX_RECORD_BYTES // 4:
                self.failure = _Damage("invalid_field", f"the members of a {self.capturing} before its list pass "
                                                        f"{MAX_RECORD_BYTES // 4} bytes")
        elif self.read + len(piece) - self.start > self._room():  # captured to the piece's end
            if self.complete:  # the whole spans before the open one
                self._export(piece, self.start, self.complete, out)
            if self.read + len(piece) - self.span_at > self._room():
                self.capturing, self.held, self.skipping = "", bytearray(), True
            else:
                del self.held[:self.span_at - self.start]
                self.start, self.complete = self.span_at, 0


class _SplitExport:
    """A line that begins as an OTLP export (see :func:`_an_export`), longer than
    :data:`MAX_RECORD_BYTES`, fed a piece at a time: blocks of its exports (see :class:`_Exports`),
    about :data:`BLOCK_BYTES` each, every one numbered as that line, ``first`` (None: not counted, see
    :attr:`Block.continued`). What could not be read of it is an item at the end of a block.

    A line of a plain file, which starts at ``place.at`` in it, is not held: its blocks are places
    in the file again, which say where each export's spans are (see :attr:`Block.exports`)."""

    def __init__(self, file: str, first: int | None, head: bytes, place: Block | None = None):
        self.file, self.first, self.head, self.place = file, first, head, place
        self.exports = _Exports(keep=place is None, signal=_an_export(head))
        self.held: list = []  # exports, or where their spans are in the line
        self.size = 0  # of the exports held
        self.blocks = 0  # given so far

    def feed(self, *pieces: bytes) -> Iterator[Block]:
        """Blocks of the exports completed by ``pieces``, the line's next bytes (several: those a cutter
        held before it knew the line was long)."""
        for piece in pieces:
            yield from self._take(self.exports.feed(piece))

    def _take(self, exports: list[bytes | _Damage]) -> Iterator[Block]:
        for made in exports:
            if isinstance(made, _Damage):
                yield self._block(made)
                continue
            size = len(made) if self.place is None else len(made[0]) + made[2] - made[1] + len(_EXPORT_TAIL)
            if self.held and self.size + size > BLOCK_BYTES:
                yield self._block()
            self.held.append(made)
            self.size += size

    def end(self, damage: Item | None = None) -> Iterator[Block]:
        """The last block, with the item of ``damage`` (which ended the file's stream) or of whatever
        was not read: the whole line, past a record's size, when none of it was."""
        exports, why = self.exports.end()
        yield from self._take(exports)
        if damage is not None:
            why = None  # the stream's damage says why
        elif why is not None and not self.blocks and not self.held:
            why, damage = None, _too_large(self.file, 1, self.exports.read, self.head)
        if damage is not None or why is not None or self.held or not self.blocks:
            yield self._block(why, damage)

    def _block(self, why: _Damage | None = None, damage: Item | None = None) -> Block:
        position = self.first or 1
        if why is not None:
            damage = Item(self.file, position, reason=why.reason, detail=f"an OTLP export past {MAX_RECORD_BYTES} "
                          f"bytes, not read from here: {why}", raw=self.head[:200].decode("utf-8", "replace"))
        elif damage is not None:
            damage = replace(damage, position=position)
        held = {"data": b"\n".join(self.held)} if self.place is None else self._place_of_held()
        block = Block(self.file, self.first, damage=damage, offsets=np.zeros(len(self.held), np.int64),
                      continued=self.blocks > 0, **held)
        self.blocks += 1
        self.held, self.size = [], 0
        return block

    def _place_of_held(self) -> dict:
        """The place of the exports held (none: there is none): the bytes from the first one's spans
        to the last one's, read where the block is loaded."""
        if not self.held:
            return {}
        lo, hi = self.held[0][1], self.held[-1][2]
        return {"at": self.place.at + lo, "size": hi - lo, "fs": self.place.fs, "version": self.place.version,
                "exports": tuple((prefix, a - lo, b - lo) for prefix, a, b in self.held)}


def _parquet_blocks(fs, file: str) -> Iterator[Block]:
    """A Parquet file's rows in blocks of about :data:`BLOCK_BYTES` once decoded.

    The size of a decoded row is measured on the file's first rows, and taken as at least what the
    metadata says of each row group's rows. The metadata alone would not do: it gives sizes as
    encoded, where a dictionary-encoded column (a system prompt in every row) takes a few bytes a
    row and its full length once read. But it does see rows that grow in a later row group, which
    are then read in batches as small as they need, not in batches sized for the first rows (and
    :func:`_row_blocks` slices one that is still too large).

    A damaged row group is one ``unreadable_parquet`` item at its first row not read, and the file
    goes on with the next group; damage that leaves no group readable (the footer) is one item for
    the file."""
    import pyarrow.parquet as pq

    row = 1
    try:
        with fs.open(file, "rb") as f:
            # A file smaller than a read is read whole at once (one request to an object store, not
            # one per column chunk), and decoded without threads, whose hand-offs cost more than its
            # few rows: 0.37 ms a file of ten traces, against 0.55 through the file.
            f.seek(0, os.SEEK_END)
            if not f.tell():  # an empty file contributes nothing, as an empty file of lines does
                return
            small = f.tell() <= _PARQUET_READS
            f.seek(0)
            reader = pq.ParquetFile(pa.BufferReader(f.read()) if small else f, pre_buffer=False,
                                    buffer_size=0 if small else _PARQUET_READS)
            try:
                probe = next(reader.iter_batches(batch_size=_PROBE_ROWS, use_threads=not small), None)
            except Exception:  # noqa: BLE001 - a damaged first row group: sized by the metadata, reported below
                probe = None
            probed = probe.nbytes // probe.num_rows if probe is not None and probe.num_rows else 0
            # A file of a few rows is all in its probe: read once, not twice (half of reading it).
            whole = probe is not None and 0 < probe.num_rows == reader.metadata.num_rows
            batches = [probe] if whole else (batch for rows, groups in _batch_sizes(reader.metadata, probed)
                                             for batch in _group_batches(reader, rows, groups))
            for batch in batches:
                if isinstance(batch, tuple):  # a damaged row group
                    unread, detail = batch
                    yield Block(file, row, damage=Item(file, row, reason="unreadable_parquet", detail=detail))
                    row += unread
                    continue
                row = yield from _row_blocks(file, row, batch)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        yield Block(file, row, damage=Item(file, row, reason="unreadable_parquet", detail=f"{type(e).__name__}: {e}"))


def _row_blocks(file: str, row: int, batch) -> Generator[Block, None, int]:
    """The blocks of a record batch of ``file``'s rows from ``row`` on, the row after them returned.
    Its rows are read as Python holds them (:func:`_binary_text`, :func:`_in_microseconds`), and each
    that is not UTF-8 or is too large is an item in its place (:func:`_utf8_runs`,
    :func:`_runs_within_limit`); a batch still past twice the block size (rows that grew within a
    Parquet row group) is given in slices, so no worker gets more at once."""
    for run in _runs_within_limit(_utf8_runs(_in_microseconds(_binary_text(batch)))):
        if isinstance(run, Item):
            yield Block(file, row, damage=replace(run, file=file, position=row))
            row += 1
            continue
        pieces = math.ceil(run.nbytes / BLOCK_BYTES) if run.nbytes > 2 * BLOCK_BYTES else 1
        step = max(1, math.ceil(run.num_rows / pieces))
        for start in range(0, run.num_rows, step):
            piece = run.slice(start, step)  # spilled, a slice takes only its own rows' bytes
            yield Block(file, row, batch=piece)
            row += piece.num_rows
    return row


# What pyarrow's CSV reader parses at once: a row must fit in it, or the file's reading stops there. A
# row past MAX_RECORD_BYTES (and within this) is read, to be record_too_large, and the rows after it too.
_CSV_BLOCK_BYTES = 4 * MAX_RECORD_BYTES
csv.field_size_limit(max(csv.field_size_limit(), _CSV_BLOCK_BYTES))  # the stdlib's reader takes as much (128 KB by default)


def _csv_blocks(fs, file: str, name: str) -> Iterator[Block]:
    """A CSV file's rows (under its header, numbered from 1), plain or compressed as its name says, in
    blocks of about :data:`BLOCK_BYTES`: each value a text, an empty one null, as Langfuse's exports
    write them (its readers read the texts of numbers and of JSON). A value may span lines within
    its quotes. A row of another number of values than the header's is an ``invalid_csv`` item in
    its place; damage that stops the reading (a gzip file cut short) one ``unreadable_csv`` item
    after the rows before it."""
    import pyarrow.csv as pcsv

    row, refused = 1, []  # rows the parser refused, as it meets them: (number, why, text)

    def refuse(bad) -> str:
        """pyarrow's handler of a row of another number of values than the header's (an ``InvalidRow``)."""
        refused.append((bad.number, f"{bad.actual_columns} values where the header has {bad.expected_columns}",
                        bad.text))
        return "skip"

    def refused_before(end: float | None = None) -> Iterator[Block]:
        """The items of the rows refused before ``end`` (None: the next row, as each given moves it on)."""
        nonlocal row
        while refused and (refused[0][0] is None or refused[0][0] < (row + 1 if end is None else end)):  # None: where the parser is
            _, why, text = refused.pop(0)
            yield Block(file, row, damage=Item(file, row, reason="invalid_csv", detail=why, raw=text[:RAW_KEPT]))
            row += 1

    def in_python(names: list[str] | None = None) -> Iterator[Block]:
        """The rows from ``row`` on, as the stdlib's reader reads them (see :class:`_NotUtf8`), under
        ``names`` or, where the header is what is not UTF-8, its own reading of the header."""
        nonlocal row
        with fs.open(file, "rb") as raw:
            stream = _Raw(_pieces(raw, _compression(raw, name)))
            text = io.TextIOWrapper(io.BufferedReader(stream, 1 << 20), "utf-8", "surrogateescape", newline="")
            header = text.readline().removeprefix("\ufeff").rstrip("\r\n")
            names = names or next(csv.reader([header.encode("utf-8", "surrogateescape").decode("utf-8", "replace")]), [])
            held, size, n = [], 0, 0
            for values in csv.reader(text):
                if not values:  # a blank line, as pyarrow's reader skips it
                    continue
                n += 1
                if n < row:
                    continue
                if len(values) == len(names):
                    held.append(values)
                    size += sum(map(len, values))
                if held and (len(values) != len(names) or size > BLOCK_BYTES):
                    row = yield from _row_blocks(file, row, _texts_batch(names, held))
                    held, size = [], 0
                if len(values) != len(names):  # refused as pyarrow's reader refuses it, its text as written again
                    line = io.StringIO()
                    csv.writer(line, lineterminator="").writerow(values)
                    refuse(pcsv.InvalidRow(len(names), len(values), row,
                                           line.getvalue().encode("utf-8", "surrogateescape").decode("utf-8", "replace")))
                    yield from refused_before()
            if held:
                row = yield from _row_blocks(file, row, _texts_batch(names, held))
            if stream.damage is not None:
                raise stream.damage

    try:
        with fs.open(file, "rb") as raw:
            compression = _compression(raw, name)
            _misnamed(file, name, compression)
            stream = _Raw(_utf8_checked(_pieces(raw, compression)))
            f = io.BufferedReader(stream, 1 << 20)
            header = f.readline().removeprefix(_BOM).decode("utf-8", "replace").rstrip("\r\n")
            if not header or not f.peek(1):  # no header, or no row under it
                if isinstance(stream.damage, _NotUtf8):
                    yield from in_python()
                elif stream.damage is not None:
                    raise stream.damage
                return
            names = next(csv.reader([header]))
            reader = pcsv.open_csv(
                f, read_options=pcsv.ReadOptions(column_names=names, block_size=_CSV_BLOCK_BYTES, use_threads=False),
                parse_options=pcsv.ParseOptions(newlines_in_values=True, invalid_row_handler=refuse),
                convert_options=pcsv.ConvertOptions(column_types=dict.fromkeys(names, pa.string()), null_values=[""],
                                                    strings_can_be_null=True, check_utf8=False))  # "NA" is a text
            for batch in reader:
                at = 0
                while at < batch.num_rows:
                    yield from refused_before()  # the parser numbers rows from 1, as we do
                    upto = refused[0][0] if refused and refused[0][0] is not None else row + batch.num_rows - at
                    take = min(batch.num_rows - at, max(upto - row, 1))
                    row = yield from _row_blocks(file, row, batch.slice(at, take))
                    at += take
            if isinstance(stream.damage, _NotUtf8):  # read again from the row it got to
                refused.clear()
                yield from in_python(names)
                return
            yield from refused_before(math.inf)
            if stream.damage is not None:
                raise stream.damage
    except Exception as e:  # noqa: BLE001 - the decompressors and the parser raise several types
        yield from refused_before(math.inf)
        why = (f"a value of row {row} or after is over {_CSV_BLOCK_BYTES >> 20} MB, past which a CSV row is not read: "
               "it and the rows after it are not read" if "straddl" in str(e) or "field larger than field limit" in str(e)
               else str(e) if isinstance(e, _Damage) else f"{type(e).__name__}: {e}")
        yield Block(file, row, damage=Item(file, row, reason="unreadable_csv", detail=why))


class _NotUtf8(Exception):
    """A CSV file holds bytes that are not UTF-8. pyarrow's reader takes them in a value (the row is
    then ``invalid_utf8``), but not in a row of another number of values than the header's: its
    handler of such rows is given the row as text, decoding it fails, and the reading stopped there,
    the rest of the file lost with a traceback. Such a file is read from the row it got to by the
    stdlib's reader, which keeps each byte that is not UTF-8 as it is."""


def _utf8_checked(pieces: Iterator[bytes]) -> Iterator[bytes]:
    """``pieces``, up to one that holds bytes that are not UTF-8, where :class:`_NotUtf8` is raised."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    for piece in pieces:
        try:
            decoder.decode(piece)
        except UnicodeDecodeError:
            raise _NotUtf8() from None
        yield piece
    try:  # a sequence the file ends within
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise _NotUtf8() from None


def _texts_batch(names: list[str], rows: list[list[str]]) -> pa.RecordBatch:
    """Rows of texts (bytes that are not UTF-8 kept as the stdlib's surrogate escapes) as pyarrow's
    reader makes them with ``check_utf8=False``: a string column each, an empty value null."""
    columns = [pa.array([v.encode("utf-8", "surrogateescape") if v else None for v in values], pa.binary()).view(pa.string())
               for values in zip(*rows)]
    return pa.RecordBatch.from_arrays(columns, names=names)


class _Raw(io.RawIOBase):
    """The pieces of a CSV file (see :func:`_pieces`) as a raw stream an ``io.BufferedReader`` takes,
    read up to their damage (a compressed file cut short), kept in ``damage``: given in whole rows,
    up to a newline outside quotes, so that the rows before the damage are read (pyarrow's reader
    parses 32 MB at once, and lost all of a smaller file's rows with the error), and the row the
    damage cut is left to its item (cut at a newline within a quoted value, the row was read as a
    good one, its value short)."""

    def __init__(self, pieces: Iterator[bytes]):
        self.pieces, self.damage = pieces, None
        self.ready, self.held, self.done = memoryview(b""), b"", False  # a view: given out a buffer at a time
        self.quoted = False  # whether ``held`` ends within quotes

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self.ready and not self.done:
            try:
                piece = next(self.pieces, b"")
            except Exception as e:  # noqa: BLE001 - the decompressors raise several types
                self.damage, self.held, self.done = e, b"", True
                break
            if not piece:  # the end: its last line whole, with its newline or without
                self.ready, self.held, self.done = memoryview(self.held), b"", True
                break
            cut = self._row_end(piece)
            if cut:
                self.ready, self.held = memoryview(self.held + piece[:cut]), piece[cut:]
            else:
                self.held += piece
            if len(self.held) > _CSV_BLOCK_BYTES:  # a value past what the reader parses at once: its to refuse
                self.ready, self.held = memoryview(bytes(self.ready) + self.held), b""
        n = min(len(self.ready), len(b))
        b[:n] = self.ready[:n]
        self.ready = self.ready[n:]
        return n

    def _row_end(self, piece: bytes) -> int:
        """Where in ``piece`` the last row that ends in it ends (0: none does), ``quoted`` kept for what
        follows. A quote opens or closes a quoted value (one doubled within it does both)."""
        data = np.frombuffer(piece, np.uint8)
        quotes, newlines = np.flatnonzero(data == ord('"')), np.flatnonzero(data == ord("\n"))
        outside = newlines[(np.searchsorted(quotes, newlines) + self.quoted) % 2 == 0]
        cut = int(outside[-1]) + 1 if len(outside) else 0
        self.quoted = bool((self.quoted * (not cut) + np.count_nonzero(quotes >= cut)) % 2)
        return cut


def _runs_within_limit(runs: Iterable[Any]) -> Iterator[Any]:
    """``runs`` (batches of rows, or items in the place of rows), with each row past
    :data:`MAX_RECORD_BYTES` decoded in its place as a ``record_too_large`` item (its file and row
    left to fill), as a line past it is: a 50 MB completion is as much a record too large in a
    Parquet file as in JSON Lines. A batch within the limit, nearly all, is passed on as it is;
    another is halved until its halves are, or are one row."""
    for run in runs:
        if isinstance(run, Item) or _decoded_bytes(run) <= MAX_RECORD_BYTES:
            yield run
        elif run.num_rows > 1:
            half = run.num_rows // 2
            yield from _runs_within_limit([run.slice(0, half), run.slice(half)])
        else:
            yield Item("", 0, reason="record_too_large", detail=f"{_decoded_bytes(run)} bytes decoded > {MAX_RECORD_BYTES}",
                       raw=_row_raw(run.schema.names, run.columns, lambda column: column.to_pylist()[0])[:200])


def _row_raw(names: list[str], row: list[pa.Array], value: Callable[[pa.Array], Any]) -> str:
    """A row of a Parquet batch (its columns of one row each) as JSON text for its quarantine: each
    column's ``value``, of a text past :data:`RAW_KEPT` bytes its first bytes, of another column past
    them its size alone. Turned into Python's objects whole, then JSON, one 400 MB value took a run
    to 2.6 GB, to keep 200 characters."""
    def kept(column: pa.Array) -> Any:
        column = _decoded(column)
        if column.nbytes <= RAW_KEPT:
            return value(column)
        if column.type in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary()):
            return value(pc.binary_slice(column.view(_as_binary(column.type)), 0, RAW_KEPT))
        return f"<{column.nbytes} bytes>"

    return json.dumps({name: kept(column) for name, column in zip(names, row)},
                      default=lambda b: b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b))


def _decoded_bytes(rows) -> int:
    """What ``rows`` take decoded: of a dictionary column, their values, not the whole dictionary."""
    return sum(_decoded(c).nbytes for c in rows.columns)


def _decoded(column: pa.Array) -> pa.Array:
    """``column``, a dictionary column as its values."""
    return column.dictionary_decode() if pa.types.is_dictionary(column.type) else column


def _utf8_runs(batch) -> Iterator[Any]:
    """The rows of a Parquet batch in runs whose strings are all UTF-8, and in their place an
    ``invalid_utf8`` item (its file and row left to fill) for each row that holds other bytes.
    Parquet's reader does not check, and a row's strings turned into Python's failed the run where
    they were (13 GB/s checked, so the check is free)."""
    try:
        batch.validate(full=True)
    except pa.ArrowInvalid:
        pass
    else:
        yield batch
        return
    start = 0
    for i in range(batch.num_rows):
        # A copy (a view of a struct array's slice loses its offset), its dictionaries decoded: a
        # dictionary column's row keeps the whole dictionary, bad values of other rows and all.
        row = [_decoded(c) for c in batch.take([i]).columns]
        bad = [name for name, column in zip(batch.schema.names, row) if not _valid(column)]
        if bad:
            if i > start:
                yield batch.slice(start, i - start)
            raw = _row_raw(batch.schema.names, row, lambda column: column.view(_as_binary(column.type)).to_pylist()[0])
            yield Item("", 0, reason="invalid_utf8", detail=f"{', '.join(bad)}: not UTF-8 text", raw=raw[:RAW_KEPT])
            start = i + 1
    if start < batch.num_rows:
        yield batch.slice(start)


def _valid(column: pa.Array) -> bool:
    try:
        column.validate(full=True)
        return True
    except pa.ArrowInvalid:
        return False


def _as_binary(t: pa.DataType) -> pa.DataType:
    """``t`` with its strings as bytes: the same layout, which an array is viewed as without a check."""
    def binary(leaf: pa.DataType) -> pa.DataType:
        if pa.types.is_string(leaf) or pa.types.is_large_string(leaf):
            return pa.large_binary() if pa.types.is_large_string(leaf) else pa.binary()
        return leaf

    return _retyped(t, binary)


def _binary_text(batch):
    """``batch`` with each binary column (at any depth) most of whose values are UTF-8 read as text:
    writers that do not mark their strings as UTF-8 store text so (older Hive and Impala, for which
    Spark has ``binaryAsString``), and every row of ours was refused for holding bytes. A value of
    other bytes in such a column is its row's ``invalid_utf8`` (see :func:`_utf8_runs`); where all
    but one were, all of the batch's rows were refused as bytes. A column that holds other bytes (a
    digest, an image) stays as it is."""
    def text(leaf: pa.DataType) -> pa.DataType:
        if pa.types.is_binary(leaf) or pa.types.is_large_binary(leaf):
            return pa.large_string() if pa.types.is_large_binary(leaf) else pa.string()
        return leaf

    columns, changed = list(batch.columns), False
    for i, (column, f) in enumerate(zip(batch.columns, batch.schema)):
        as_text = _retyped(f.type, text)
        if as_text.equals(f.type):
            continue
        try:
            viewed = column.view(as_text)  # the same layout: no copy
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError):
            continue
        if _valid(viewed) or _mostly_text(viewed):  # UTF-8 throughout, checked at some 13 GB/s
            columns[i], changed = viewed, True
    if not changed:
        return batch
    schema = pa.schema([f.with_type(c.type) for f, c in zip(batch.schema, columns)], metadata=batch.schema.metadata)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _mostly_text(column: pa.Array, looked_at: int = 64) -> bool:
    """Whether more than half of the first ``looked_at`` values of ``column`` (a binary one viewed as
    text) are UTF-8: each is looked at alone, and a column of digests or images is one to pass over."""
    present = np.flatnonzero(column.is_valid().to_numpy(zero_copy_only=False))[:looked_at].tolist()
    return 2 * sum(_valid(column.take([i])) for i in present) > len(present)


def _in_microseconds(batch):
    """``batch`` with its nanosecond times, times of day and durations (at any depth) cut to
    microseconds, all that Python's datetime, time and timedelta hold. pyarrow makes pandas objects
    of them where pandas is installed, which the typed readers refused (a valid trace quarantined as
    ``invalid_field``), and Python's, or an error, where it is not: a row was read as what else was
    installed said."""
    def micro(leaf: pa.DataType) -> pa.DataType:
        if getattr(leaf, "unit", None) != "ns":
            return leaf
        if pa.types.is_timestamp(leaf):
            return pa.timestamp("us", leaf.tz)
        return pa.duration("us") if pa.types.is_duration(leaf) else pa.time64("us")  # (a time64 has no other unit)

    schema = pa.schema([f.with_type(_retyped(f.type, micro)) for f in batch.schema], metadata=batch.schema.metadata)
    if schema.equals(batch.schema):
        return batch
    try:
        return batch.cast(schema, safe=False)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # a nesting Arrow cannot cast: read as it is
        return batch


def _retyped(t: pa.DataType, leaf: Callable[[pa.DataType], pa.DataType]) -> pa.DataType:
    """``t`` with ``leaf`` of each type in it that holds no other (in structs, lists and maps)."""
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_retyped(f.type, leaf)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_retyped(t.key_type, leaf), t.item_field.with_type(_retyped(t.item_type, leaf)))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return (pa.large_list if pa.types.is_large_list(t) else pa.list_)(t.value_field.with_type(_retyped(t.value_type, leaf)))
    return leaf(t)


def _group_batches(reader, rows: int, groups: list[int]) -> Iterator[Any]:
    """The record batches of consecutive row ``groups`` of a Parquet file, ``rows`` to a batch. A
    batch spans groups, so a damaged group fails the batches of its neighbours too: once one fails,
    the groups not given whole yet are read again one by one, and each that fails still comes as
    (its rows not read, what failed)."""
    given = 0  # rows of these groups given so far
    try:
        for batch in reader.iter_batches(batch_size=rows, row_groups=groups):
            yield batch
            given += batch.num_rows
        return
    except Exception:  # noqa: BLE001 - as in _parquet_blocks
        pass
    for group in groups:
        size = reader.metadata.row_group(group).num_rows
        skip, given = min(given, size), given - min(given, size)  # its rows given before the failure
        at = 0  # rows of this group read
        try:
            for batch in reader.iter_batches(batch_size=rows, row_groups=[group]):
                if at + batch.num_rows > skip:
                    yield batch.slice(max(0, skip - at))
                at += batch.num_rows
        except Exception as e:  # noqa: BLE001 - as in _parquet_blocks
            unread = size - max(at, skip)
            yield unread, f"row group {group} ({unread} of its {size} rows not read): {type(e).__name__}: {e}"


def _batch_sizes(meta, probed: int) -> list[tuple[int, list[int]]]:
    """(rows to a batch, the row groups read so) for a Parquet file whose first rows take ``probed``
    bytes each once decoded. Consecutive row groups share a batch size while their rows stay within
    a factor of two of the first's, since batches span row groups, and a file of many small ones
    would otherwise come in many small blocks."""
    runs: list[tuple[int, list[int]]] = []
    for group in range(meta.num_row_groups):
        stored = meta.row_group(group)
        per_row = max(1, probed, stored.total_byte_size // max(1, stored.num_rows))
        rows = max(1, min(_BATCH_ROWS, BLOCK_BYTES // per_row))
        if runs and runs[-1][0] / 2 <= rows <= runs[-1][0] * 2:
            runs[-1][1].append(group)
        else:
            runs.append((rows, [group]))
    return runs


def blocks(fs, files: Files | dict[str, str]) -> Iterator[Block]:
    """Every file's blocks, in order (``files``: each with the name it is read by, see :func:`list_files`).
    A store's small objects are read whole here, ahead of their turn, many at once (see :func:`_in_turn`)."""
    protocols = set(fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))
    local, ranged = _local(fs), bool(protocols & _RANGED)

    def fetched(item: tuple[str, str, dict]) -> tuple[str, str, dict, Any]:
        """(file, name, details, what to open it from): its bytes when it is a small object."""
        file, name, info = item
        try:
            if info.get("size") is not None and info["size"] <= _FETCHED:
                data = fs.cat_file(file)
                if len(data) == info["size"]:  # else written again since it was listed: read in its turn, which says so
                    return file, _as_compressed(file, name, lambda: data[:8]), info, _Fetched(data)
        except Exception:  # noqa: BLE001 - read again in its turn, which reports what fails
            pass
        return file, _as_compressed(file, name, lambda: fs.cat_file(file, start=0, end=8)), info, fs

    def opened(item: tuple[str, str], size: int | None) -> tuple[str, str, dict, Any]:
        file, name = item
        return file, _as_compressed(file, name, lambda: _head(file)), {"size": size}, fs

    sizes = files.sizes() if isinstance(files, Files) else itertools.repeat(None)
    read = (map(opened, files.items(), sizes) if local
            else _in_turn(fetched, _listed(fs, files.items(), not ranged), fs))
    for file, name, info, src in read:
        layout, records = _json_layout(src, file, name) if name.endswith(_JSON) else ("lines", b"")
        if layout == "document":
            yield Block(file, 1, data=records)
        elif layout in ("stream", "array"):
            yield from _jsonl_blocks(src, file, name, layout)
        elif name.endswith(".parquet"):
            yield from _parquet_blocks(src, file)
        elif name.endswith(_CSV):
            yield from _csv_blocks(src, file, name)
        elif name.endswith(_COMPRESSED):
            yield from _jsonl_blocks(src, file, name)
        elif local:
            yield from _plain_blocks(file, info["size"])
        elif ranged and src is fs:
            yield from _ranged_blocks(fs, file, info or fs.info(file))
        else:
            yield from _jsonl_blocks(src, file, name)


def _head(file: str) -> bytes:
    """A local file's first bytes, enough to tell its compression (see :func:`_compressed`)."""
    with open(file, "rb") as f:
        return f.read(8)


def _as_compressed(file: str, name: str, head: Callable[[], bytes]) -> str:
    """``name``, where it says its file is JSON or CSV text compressed by none of :data:`_COMPRESSED`,
    with the suffix of the compression its first bytes (``head()``, only then asked for) say, with a
    warning: an object stored with ``Content-Encoding: gzip`` and downloaded as it is stored keeps its
    plain name, and read as named, every line of it was quarantined as not UTF-8. A file that cannot
    be read keeps its name, for its reading to report."""
    if name.endswith((*_COMPRESSED, ".parquet")):
        return name
    try:
        compression = _compressed(head())
    except Exception:  # noqa: BLE001 - OSError locally; each object store raises its own types
        return name
    _misnamed(file, name, compression)
    return name + compression


def _listed(fs, items: Iterable[tuple[str, str]], ask: bool) -> Iterator[tuple[str, str, dict]]:
    """Each (file, name) of a store with its details as its folder's listing gave them ({} where there
    is none). s3fs and gcsfs find an object's in the listing they keep by going through it: 6.8 ms an
    object in a folder of 100,000, 11 minutes a pass over them. Indexed by name here, one folder at a
    time, as the files come in the order of their paths: the listings the store keeps, and with
    ``ask``, the folder listed where it keeps none (not an object store's: a source that is one object
    would list its whole folder)."""
    folder, by_name = None, {}
    for file, name in items:
        here, _, own = file.rpartition("/")
        if here != folder:
            folder = here
            try:
                listing = fs.dircache.get(here) or (fs.ls(here, detail=True) if ask else [])
                by_name = {i["name"].rstrip("/").rpartition("/")[2]: i for i in listing}
            except Exception:  # noqa: BLE001 - none to go by: each is asked for in its turn
                by_name = {}
        yield file, name, by_name.get(own, {})


# An object fetched ahead whole at most, by this process (a larger plain one is cut where it lies, its
# blocks loaded by the workers): a round trip is worth about this much transfer, and with _AHEAD
# fetched at once, this process holds 16 MB of them at most. A small plain object loaded by a worker
# cost two requests there (its bytes, and its details, to see it unchanged), one after another.
_FETCHED = 1 << 18


class _Fetched:
    """A file's bytes, fetched ahead of its turn, opened as :func:`blocks` reads a file (``open``)."""

    def __init__(self, data: bytes):
        self.data = data

    def open(self, file: str, mode: str = "rb", **kwargs) -> io.BytesIO:
        return io.BytesIO(self.data)


def _json_layout(fs, file: str, name: str) -> tuple[str, bytes]:
    """How a ``.json`` file holds its records: ("lines", b"") for JSON Lines (the first line a whole
    document, or longer than a peek); ("stream", b"") for JSON values one after another with no
    newline between them, or pretty-printed (see :func:`_a_value_a_line`); ("document", its records,
    a line each) for one document: the elements of an array (numbered by their place in it), or the
    document itself; ("array", b"") for an array past :data:`MAX_RECORD_BYTES` whose first line is
    no record, read an element at a time, as is a pretty-printed one that does not parse whole.
    Another document that does not parse or is past :data:`MAX_RECORD_BYTES` is read as lines, and
    quarantined so."""
    lines, compression = ("lines", b""), ""
    try:
        with fs.open(file, "rb", block_size=_PEEK) as raw:  # an object store's read-ahead: 5 MB by default
            compression = _compression(raw, name)
            f = _opened(raw, compression)
            head, damaged = _read_or_damaged(f, _PEEK)
            if damaged:  # what the decompressor held when it failed went with the error: read up to the damage
                head = _before_damage(fs, file, compression, MAX_RECORD_BYTES + 1)
            text = _text(head)
            first, newline, _ = text.partition(b"\n")
            if not (text.startswith(b"[") or (text.startswith(b"{") and not _parses(first))):
                return lines
            if text.startswith(b"{"):
                if _values_follow(text):
                    return "stream", b""
                if not newline:  # one line that does not parse: a bad line, not a document
                    return lines
            if not damaged:
                more, damaged = _read_or_damaged(f, MAX_RECORD_BYTES + 1 - len(head))
                head += more
    except Exception:  # noqa: BLE001 - damage (and its report) is left to reading the lines
        return lines
    # An array cut short (damaged), past the record size, or that does not parse whole (a comma after
    # its last element, as Helicone's export tool writes one; an element cut short) gives its elements
    # one by one, each read or quarantined.
    if damaged or len(head) > MAX_RECORD_BYTES:
        return ("array", b"") if _an_array(text, first) else lines
    try:  # NaN and Infinity let through: each record's line is then refused for it, as any line is
        doc = json.loads(head.removeprefix(_BOM))
    except (ValueError, RecursionError):
        return ("array", b"") if _an_array(text, first) else lines
    _misnamed(file, name, compression)  # lines are told so where they are read
    return "document", "\n".join(map(json.dumps, doc if isinstance(doc, list) else [doc])).encode()


_LOOKED_AT = 8  # lines looked at for the first non-blank one after a .json file's first


def _an_array(text: bytes, first: bytes) -> bool:
    """Whether a .json file beginning with ``text`` (its first line ``first``) that is not one whole
    document holds an array, not JSON Lines: its first line is the bracket alone (as JSONStream
    writes one: "[", then an element a line), or no whole value, nor is the next line (JSON Lines
    whose first line is broken go on with whole ones; a pretty-printed array from "[{" does not)."""
    if not text.startswith(b"["):
        return False
    if first.strip() == b"[":
        return True
    following = next((line for line in text[len(first) + 1:].split(b"\n", _LOOKED_AT)[:_LOOKED_AT] if line.strip()), b"")
    return not _parses(first) and not _parses(following)


def _read_or_damaged(f, size: int) -> tuple[bytes, bool]:
    """(``size`` bytes of the decompressing reader ``f``, fewer at its end, False), or (none, True)
    where damage stops the read (a gzip or zstd file cut short or corrupt): what the decompressor
    held then goes with the error, and :func:`_before_damage` reads all that comes before it."""
    try:
        return f.read(size), False
    except Exception:  # noqa: BLE001 - the decompressors raise EOFError, OSError, zlib.error, zstd's own
        return b"", True


def _before_damage(fs, file: str, compression: str, size: int) -> bytes:
    """Up to ``size`` bytes of what the compressed ``file`` holds before its damage, all of them: read
    a piece at a time (see :func:`_gunzip`), as its lines are."""
    got, held = [], 0
    with fs.open(file, "rb") as raw:
        try:
            for piece in _gunzip(raw) if compression == ".gz" else _unzstd(raw):
                got.append(piece)
                held += len(piece)
                if held >= size:
                    break
        except _Damage:
            pass
    return b"".join(got)[:size]


def _values_follow(text: bytes) -> bool:
    """Whether ``text`` (the start of a file) holds JSON values one after another, not a line each:
    several, split as :func:`_a_value_a_line` splits them, of which one parses (the last may be cut
    short), and not each alone on its line."""
    values = b"".join(_a_value_a_line(iter([text]))).split(b"\n")
    return (len(values) > 1 and any(map(_parses, values[:-1]))
            and [v.strip() for v in values] != [line.strip() for line in text.split(b"\n") if line.strip()])


def _parses(line: bytes) -> bool:
    try:
        loads(line.rstrip(b"\r"))
        return True
    except InvalidTrace:
        return False


def gathered(blocks: Iterable[Block]) -> Iterator[Block]:
    """``blocks`` with runs of small files, each whole in one undamaged block, gathered into blocks of
    up to :data:`BLOCK_BYTES` (see :attr:`Block.places`), so that a source of many small files is not
    processed, and written, in as many small parts: 2,000 files of ten traces took 17 s, and gave a
    version 2,000 parts of each table (2,000 Parquet files of ten rows, 14.6 s). A run holds files of
    lines, or Parquet files of one schema, whose rows become one batch (see :attr:`Block.files`), so
    that they are spilled, and parsed, at once; a run of one file stays the block it was."""
    run: list[Block] = []
    held = 0  # bytes of the run

    def flush() -> Iterator[Block]:
        nonlocal held
        if len(run) > 1 and run[0].batch is not None:
            rows = pa.Table.from_batches([b.batch for b in run]).combine_chunks().to_batches()
            yield Block(run[0].file, 1, batch=rows[0], files=tuple((b.file, b.batch.num_rows) for b in run))
        elif len(run) > 1:
            yield Block(run[0].file, 1, places=tuple(run))
        else:
            yield from run
        run.clear()
        held = 0

    def size(block: Block) -> int:
        return block.batch.nbytes if block.batch is not None else len(block.data) or block.size

    def kind(block: Block) -> pa.Schema | None:
        return None if block.batch is None else block.batch.schema

    previous: Block | None = None  # held until the next block shows whether it ends its file
    before = ""  # the file of the block before it
    for block in itertools.chain(blocks, [None]):
        if previous is not None:
            whole = (previous.file != before and (block is None or block.file != previous.file)
                     and previous.damage is None and (previous.batch is None or previous.batch.num_rows))
            if whole and (n := size(previous)) <= BLOCK_BYTES // 2:  # a small file, whole
                if held + n > BLOCK_BYTES or (run and kind(run[0]) != kind(previous)):
                    yield from flush()
                run.append(previous)
                held += n
            else:
                yield from flush()
                yield previous
            before = previous.file
        previous = block
    yield from flush()


def spilled(blocks: Iterable[Block], folder: str) -> Iterator[Block]:
    """``blocks`` with the data or batch this process read (gzip, Parquet, a file on a store without
    ranged reads) written to a file of their own under ``folder``, for the process that takes a block
    to load (and remove); places in plain files and damage come as they are.

    Sent through a pipe instead, each block was copied into a pickle, and held in this process until
    its worker was done with it, a few blocks per worker: megabytes that came and went by the
    thousand, and fragmented this process's heap (600,000 gzip traces of 10 KB grew it to 457 MB).
    Written here, a block is gone from this process once the page cache has it."""
    os.makedirs(folder, exist_ok=True)
    for n, block in enumerate(blocks):
        if block.places:
            pieces = os.path.join(folder, f"block-{n:09d}-pieces.jsonl")
            block = replace(block, places=_spilled_pieces(block.places, pieces))
        yield _spilled(block, os.path.join(folder, f"block-{n:09d}"))


def _spilled_pieces(places: tuple[Block, ...], path: str) -> tuple[Block, ...]:
    """The places of a gathered block, the lines of those read here written one after another to one
    file, each place where its own are in it (``at``, ``size``). A file each cost this process some
    0.2 ms to create, and set the pace of a source of 200,000 one-trace files, every fourth gzipped."""
    read = [p for p in places if p.data]
    if not read:
        return places
    with open(path, "wb") as f:
        f.writelines(p.data for p in read)
    starts = iter(itertools.accumulate((len(p.data) for p in read), initial=0))
    return tuple(replace(p, data=b"", spilled=path, at=next(starts), size=len(p.data)) if p.data else p for p in places)


def _spilled(block: Block, name: str) -> Block:
    if block.batch is not None:
        path = name + _SPILLED_BATCH
        with pa.OSFile(path, "wb") as f, pa.ipc.new_stream(f, block.batch.schema) as stream:
            stream.write_batch(block.batch)
        return replace(block, batch=None, spilled=path)
    if block.data:
        with open(name + ".jsonl", "wb") as f:
            f.write(block.data)
        return replace(block, data=b"", spilled=name + ".jsonl")
    return block


def oversized(file: str, n: int, raw: bytes) -> Item | None:
    """The item of a line past :data:`MAX_RECORD_BYTES` (in a block only where :func:`_cut` read it
    through a stream whole: it ended in the chunk after the one it began in)."""
    return _too_large(file, n, len(raw), raw) if len(raw) > MAX_RECORD_BYTES else None


def decode_line(file: str, n: int, raw: bytes) -> Item:
    """One line as a decoded document, or the reason it is not one."""
    text = raw.decode("utf-8", "replace")
    try:
        return Item(file, n, doc=loads(raw), raw=text)
    except InvalidTrace as e:
        return Item(file, n, reason=e.reason, detail=e.detail, raw=text[:RAW_KEPT])


def entries(block: Block, lines: list[bytes] | None = None,
            taken: np.ndarray | None = None) -> Iterator[tuple[int, Any]]:
    """(line or row, content) of a block in order, blank lines skipped: a dict per Parquet row, the bytes
    of a JSONL line, or an :class:`Item` for what cannot be read (an oversized line, the block's damage).

    ``lines`` is the block's data split at newlines, when the caller has it already; ``taken``
    (a mask over those lines) the lines it read another way, which are left out.
    """
    if block.batch is not None:
        left = np.arange(block.batch.num_rows) if taken is None else np.flatnonzero(~taken)
        # Runs of consecutive rows, as slices: take has no kernel for some types (string views).
        for run in np.split(left, np.flatnonzero(np.diff(left) != 1) + 1) if len(left) else ():
            first = block.first + int(run[0])
            yield from enumerate(_documents(block.batch.slice(run[0], len(run)), block.file, first), first)
    else:
        lines = block.data.split(b"\n") if lines is None else lines
        for i in range(len(lines)) if taken is None else np.flatnonzero(~taken).tolist():
            raw = lines[i]
            text = raw.removeprefix(_BOM)
            if not blank(text):  # its size counts a mark and a carriage return before its newline, as cutting does
                n = int(block.numbers(i))
                yield n, oversized(block.file, n, raw) or text.rstrip(b"\r")
    if block.damage is not None:
        yield block.damage.position, block.damage


def blank(line: bytes) -> bool:
    """Whether a line holds no item (:func:`entries` skips it)."""
    return not line.removeprefix(_BOM).strip()


# What pyarrow raises for a value it cannot make a Python object of: a timestamp past the year 9999
# (OverflowError) or before the year 1 (ValueError), a map with a key twice (KeyError), for instance.
_NO_PYTHON_VALUE = (ArithmeticError, ValueError, KeyError, pa.ArrowException)
# A map is a dict, as the same object read from JSON is (Langfuse's Parquet export writes its usage
# so), not pyarrow's default list of (key, value) pairs.
_MAPS = "strict"


def _documents(batch, file: str, first: int) -> list[dict | Item]:
    """The rows of a record batch (numbered from ``first``) as dicts; a row holding a value Python
    cannot hold as the ``invalid_field`` item naming its columns, the row as JSON text with those
    values as pyarrow writes them."""
    try:
        return batch.to_pylist(maps_as_pydicts=_MAPS)
    except _NO_PYTHON_VALUE:  # the rare batch: its rows one by one, to say which value of which is at fault
        return [_document(batch, i, file, first + i) for i in range(batch.num_rows)]


def _document(batch, i: int, file: str, n: int) -> dict | Item:
    row, wrong = {}, []
    for name, column in zip(batch.schema.names, batch.columns):
        try:
            row[name] = column[i].as_py(maps_as_pydicts=_MAPS)
        except _NO_PYTHON_VALUE as e:
            wrong.append(f"`{name}`: {e}")
            try:
                row[name] = pc.cast(column.slice(i, 1), pa.string(), safe=False)[0].as_py()
            except pa.ArrowException:  # a nested one, which has no text form
                row[name] = None
    if not wrong:
        return row
    return Item(file, n, reason="invalid_field", detail="; ".join(wrong), raw=json.dumps(row, default=str)[:RAW_KEPT])


def items(block: Block) -> Iterator[Item]:
    """A block's lines or rows one by one, decoded (numbering kept), then its damage."""
    for n, content in entries(block):
        if isinstance(content, Item):
            yield content
        elif isinstance(content, dict):
            yield Item(block.file, n, doc=content)
        else:
            yield decode_line(block.file, n, content)


class LinesBefore:
    """Where blocks whose lines were not counted start (see :class:`Block`), told their files'
    blocks in order and the lines each covers."""

    def __init__(self):
        self._file, self._seen = "", 0  # a file's blocks come one after another: only its count is kept

    def take(self, file: str, lines: int) -> int:
        """The lines of ``file`` before its next block, which covers ``lines`` of them."""
        if file != self._file:
            self._file, self._seen = file, 0
        before = self._seen
        self._seen += lines
        return before


def numbered(blocks: Iterable[Block]) -> Iterator[Block]:
    """``blocks`` of files in order, loaded, each numbered from its first line (see :class:`Block`)."""
    before = LinesBefore()
    for block in blocks:
        block = block.load()
        yield block if block.first is not None else block.numbered_from(before.take(block.file, block.lines) + 1)


def read(uri: str, what: str = "source") -> Iterator[Item]:
    """Every line or row of every file under ``uri``, in order (see :func:`list_files` for ``what``)."""
    fs, files, _ = list_files(uri, what)
    for block in numbered(blocks(fs, files)):
        yield from items(block)
