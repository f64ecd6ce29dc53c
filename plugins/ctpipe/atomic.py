"""Publishing files and directories so that readers see all of them or nothing.

Writers fill a hidden temporary sibling and rename it into place; a rename is
atomic on one filesystem. Readers that list directories skip the hidden names.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_dir(final: Path, *, replace: bool = False) -> Iterator[Path]:
    """Yield an empty temporary directory that becomes ``final`` when the block succeeds.

    If ``final`` already exists, it is kept (another writer published the same content
    first) unless ``replace`` is set. On error nothing is published.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if replace:
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:
            pass  # final exists and is not empty: the first writer wins
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_text(path: Path, text: str, *, exclusive: bool = False) -> None:
    """Write ``path`` whole or not at all; with ``exclusive``, only where it is not yet
    (FileExistsError): a link of the written file, which never replaces one."""
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    try:
        tmp.write_text(text)
        if not exclusive:
            os.replace(tmp, path)
            return
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # linked, or half written on a full disk: never left beside ``path``
