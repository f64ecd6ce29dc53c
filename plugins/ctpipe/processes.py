"""Long-running helper processes we start and find again through a pid file."""

from __future__ import annotations

import os
from pathlib import Path


def running_pid(pid_file: Path) -> int | None:
    """The pid in ``pid_file`` if that process is alive, else None (no file, garbage, or gone)."""
    try:
        pid = int(Path(pid_file).read_text())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None
