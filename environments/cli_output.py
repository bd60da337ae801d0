"""Command-line output into a pipe whose reader may stop early (`... | head`)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable


def reader_went_away() -> int:
    """stdout's reader closed the pipe: the reader wanted no more, so no traceback.

    stdout is pointed at /dev/null so that the interpreter's own flush at exit does not fail
    a second time ("Exception ignored ... BrokenPipeError"), and the exit status is what a
    shell reports for a process that SIGPIPE ended (128 + 13), as `seq 1000000 | head` gives.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + int(getattr(signal, "SIGPIPE", 13))


def run_quietly_into_pipes(command: Callable[[], int]) -> int:
    """Run a command's body; a reader that stops early ends it quietly with status 141."""
    try:
        status = command()
        sys.stdout.flush()  # inside the try: a closed pipe shows up at this flush too
        return status
    except BrokenPipeError:
        return reader_went_away()
