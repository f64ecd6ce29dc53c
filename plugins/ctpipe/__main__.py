"""The ``ctpipe`` command (and ``python -m ctpipe``): :func:`ctpipe.cli.main`, loaded here so that a
Ctrl-C while its modules load is the command's one line too, not Python's traceback."""

import signal
import sys


def main() -> int:
    try:
        from ctpipe.cli import main as command
    except BaseException as e:
        from ctpipe.errors import interrupted

        if not interrupted(e):
            raise
        print("ctpipe: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    return command()


if __name__ == "__main__":
    sys.exit(main())
