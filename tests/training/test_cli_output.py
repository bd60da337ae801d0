"""`python -m training` output into a pipe whose reader stops early (`schema | head`)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def read_a_little_then_close(*args: str) -> tuple[bytes, int, bytes]:
    """Run `python -m training ARGS` into a one-page pipe, read 64 bytes, close it.

    The pipe holds 4 KiB, so the command is still writing when its reader goes away and its
    next write fails, as with `| head` on a long output; no timing luck involved.
    """
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen([sys.executable, "-m", "training", *args], cwd=ROOT, stdout=write_end,
                            stderr=subprocess.PIPE)
    os.close(write_end)
    first = os.read(read_end, 64)
    os.close(read_end)
    _, stderr = proc.communicate(timeout=120)
    return first, proc.returncode, stderr


@pytest.mark.skipif(not hasattr(fcntl, "F_SETPIPE_SZ"), reason="needs Linux pipes (F_SETPIPE_SZ)")
def test_schema_into_a_pipe_closed_early_exits_quietly():
    first, status, stderr = read_a_little_then_close("schema")
    assert first.startswith(b"{")
    assert stderr == b"", stderr.decode(errors="replace")
    assert status == 141  # 128 + SIGPIPE, what a shell reports for `seq 1000000 | head`


def test_schema_still_prints_whole(tmp_path):
    done = subprocess.run([sys.executable, "-m", "training", "schema"], cwd=ROOT, capture_output=True, check=True)
    assert done.stdout.rstrip().endswith(b"}") and done.stderr == b""
