"""Both command lines stop quietly when the reader of their output goes away (`... | head`)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOUD = ("from environments.cli_output import run_quietly_into_pipes\n"
        "def body():\n    for i in range(200000):\n        print('row', i)\n    return 0\n"
        "raise SystemExit(run_quietly_into_pipes(body))\n")


@pytest.mark.skipif(not hasattr(fcntl, "F_SETPIPE_SZ"), reason="needs Linux pipes (F_SETPIPE_SZ)")
def test_a_long_output_into_a_pipe_closed_early_ends_with_status_141_and_no_traceback():
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen([sys.executable, "-c", LOUD], cwd=ROOT, stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    assert os.read(read_end, 16).startswith(b"row")
    os.close(read_end)
    _, stderr = proc.communicate(timeout=60)
    assert stderr == b"", stderr.decode(errors="replace")
    assert proc.returncode == 141


def test_a_command_that_finishes_keeps_its_status():
    done = subprocess.run([sys.executable, "-m", "environments", "list"], cwd=ROOT, capture_output=True)
    assert done.returncode == 0 and done.stdout and done.stderr == b""
