"""Long-running helper processes we start and find again through a pid file."""

from __future__ import annotations

import os
from pathlib import Path


def running_pid(pid_file: Path) -> int | None:
    """The pid in ``pid_file`` if that process is alive, else None (no file, garbage, gone, or a zombie of ours)."""
    try:
        pid = int(Path(pid_file).read_text())
        _reap(pid)
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def _reap(pid: int) -> None:
    """Collect ``pid`` if it is our own exited child: a zombie still answers kill(pid, 0)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child, or already collected
