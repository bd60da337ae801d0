"""The sandbox contains hostile code and reports each attempt as an error with a reason."""

from __future__ import annotations

import json
import os
import socket
import statistics
import threading
import time
import uuid
from pathlib import Path

import pytest

from environments.sandbox import (
    BWRAP,
    RLIMITS_ONLY,
    UNSHARE,
    SandboxLimits,
    SandboxPool,
    _mode_works,
    available_isolation,
    run_in_sandbox,
)

FAST = SandboxLimits(wall_seconds=1.0, cpu_seconds=5, memory_mb=256)
FALLBACK_MODES = [m for m in (UNSHARE, RLIMITS_ONLY) if _mode_works(m) or m == RLIMITS_ONLY]
NAMESPACED_MODES = [m for m in (BWRAP, UNSHARE) if _mode_works(m)]
needs_bwrap = pytest.mark.skipif(available_isolation() != BWRAP, reason="bubblewrap not usable")


def descendant_pids() -> set[int]:
    """Every live process below this test process (sandbox workers included)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


_BASELINE: set[int] = set()


@pytest.fixture(autouse=True)
def _baseline_descendants():
    """Processes that existed before the test (other tests' warm pools) are not its leftovers."""
    _BASELINE.clear()
    _BASELINE.update(descendant_pids())
    yield


def wait_for_no_descendants(timeout: float = 5.0) -> set[int]:
    """Processes this test started that are still alive after `timeout`."""
    deadline = time.monotonic() + timeout
    while (left := descendant_pids() - _BASELINE) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


# --- ordinary behaviour ---------------------------------------------------------------


def test_returns_value_and_captures_output():
    code = "import sys\ndef double(x):\n    print('to stdout')\n    print('to stderr', file=sys.stderr)\n    return {'v': x * 2}"
    result = run_in_sandbox(code, "double", [21])
    assert result.ok, result.error
    assert result.value == {"v": 42}
    assert result.stdout_tail == "to stdout\n"
    assert result.stderr_tail == "to stderr\n"
    assert result.reason is None and result.error is None
    assert result.isolation == available_isolation()


@needs_bwrap
def test_bwrap_is_used_when_installed():
    assert run_in_sandbox("def f(): return 1", "f", []).isolation == BWRAP


def test_syntax_error_names_the_line():
    result = run_in_sandbox("x = 1\ndef verify(:\n    pass\n", "verify", [])
    assert not result.ok
    assert result.reason == "exception"
    assert "SyntaxError" in result.error and "line 2" in result.error


def test_missing_entrypoint_says_what_to_define():
    result = run_in_sandbox("def other(): return 1", "verify", [])
    assert result.reason == "exception"
    assert "no function named 'verify'" in result.error


def test_exception_traceback_shows_user_code_only():
    result = run_in_sandbox("def f(d):\n    return d['missing']\n", "f", [{}])
    assert result.reason == "exception"
    assert "KeyError: 'missing'" in result.error
    assert '"<verifier>", line 2' in result.error
    assert "_sandbox_runner" not in result.error


@pytest.mark.parametrize(
    "expression", ["{1, 2}", "object()", "float('nan')", "{'a': float('inf')}"]
)
def test_non_json_result_is_bad_result(expression):
    result = run_in_sandbox(f"def f():\n    return {expression}\n", "f", [])
    assert not result.ok
    assert result.reason == "bad_result"
    assert "not JSON-serialisable" in result.error


def test_os_exit_is_reported_as_crash():
    result = run_in_sandbox("import os\ndef f():\n    os._exit(3)\n", "f", [])
    assert result.reason == "crashed"
    assert "status 3" in result.error


def test_arguments_must_be_json():
    with pytest.raises(ValueError, match="plain JSON"):
        run_in_sandbox("def f(x): return x", "f", [{1, 2}])


def test_unknown_isolation_mode_is_rejected():
    with pytest.raises(ValueError, match="unknown isolation mode"):
        run_in_sandbox("def f(): return 1", "f", [], isolation="chroot")


# --- hostile code -----------------------------------------------------------------------


def test_infinite_loop_times_out_and_is_killed():
    started = time.monotonic()
    result = run_in_sandbox("def f():\n    while True:\n        pass\n", "f", [], limits=FAST)
    assert result.reason == "timeout"
    assert "1.0 s" in result.error
    assert time.monotonic() - started < 4
    assert wait_for_no_descendants() == set()


def test_sleeping_code_times_out():
    result = run_in_sandbox("import time\ndef f():\n    time.sleep(60)\n", "f", [], limits=FAST)
    assert result.reason == "timeout"


@pytest.mark.parametrize("mode", list(dict.fromkeys([available_isolation(), *FALLBACK_MODES])))
def test_cpu_limit_stops_busy_code_before_the_wall_clock(mode):
    """Every mode, bwrap or not, reports "cpu". Without bwrap, `unshare --pid --fork` made
    the runner PID 1 of its namespace, and the kernel drops SIGXCPU for a PID 1 without a
    handler, so busy code always ran on to the wall clock ("timeout").

    Depends on: the sandbox getting about 1.5 s of CPU (start-up plus the 1 s limit)
    within the 30 s wall clock, which holds even on a heavily loaded machine.
    """
    limits = SandboxLimits(cpu_seconds=1, wall_seconds=30)
    started = time.monotonic()
    code = "def f():\n    while True:\n        pass\n"
    result = run_in_sandbox(code, "f", [], limits=limits, isolation=mode)
    assert (result.reason, result.isolation) == ("cpu", mode), result.error
    assert time.monotonic() - started < limits.wall_seconds


def test_memory_bomb_is_reported_as_memory():
    code = "def f():\n    hog = []\n    while True:\n        hog.append(bytearray(10**7))\n"
    result = run_in_sandbox(code, "f", [], limits=SandboxLimits(memory_mb=128))
    assert result.reason == "memory"


def test_fork_bomb_is_capped_by_nproc_and_cleaned_up():
    code = (
        "import os, time\n"
        "def f():\n"
        "    started = 0\n"
        "    try:\n"
        "        while started < 500:\n"
        "            if os.fork() == 0:\n"
        "                time.sleep(60)\n"
        "                os._exit(0)\n"
        "            started += 1\n"
        "    except OSError:\n"
        "        pass\n"
        "    return started\n"
    )
    result = run_in_sandbox(code, "f", [], limits=SandboxLimits(max_processes=8))
    assert result.ok, result.error
    assert result.value < 8
    assert wait_for_no_descendants() == set()


def test_spinning_fork_bomb_is_killed_with_its_children():
    code = (
        "import os\n"
        "def f():\n"
        "    while True:\n"
        "        try:\n"
        "            os.fork()\n"
        "        except OSError:\n"
        "            pass\n"
    )
    result = run_in_sandbox(code, "f", [], limits=FAST)
    assert not result.ok
    assert result.reason in {"timeout", "cpu"}
    assert wait_for_no_descendants() == set()


def test_huge_output_is_cut_off():
    code = "def f():\n    while True:\n        print('x' * 10000)\n"
    limits = SandboxLimits(max_output_bytes=100_000, wall_seconds=10)
    result = run_in_sandbox(code, "f", [], limits=limits)
    assert result.reason == "output_limit"
    assert 0 < len(result.stdout_tail) <= 4000


def test_huge_return_value_is_cut_off():
    result = run_in_sandbox(
        "def f():\n    return 'x' * 5_000_000\n", "f", [], limits=SandboxLimits()
    )
    assert result.reason == "output_limit"


@needs_bwrap
def test_writes_outside_private_tmp_fail_and_leave_nothing(tmp_path):
    targets = [
        str(tmp_path / "escaped.txt"),
        f"/usr/escaped-{uuid.uuid4().hex}",
        f"/escaped-{uuid.uuid4().hex}",
    ]
    code = "def f(path):\n    with open(path, 'w') as out:\n        out.write('pwned')\n"
    for target in targets:
        result = run_in_sandbox(code, "f", [target])
        assert result.reason == "exception", target
        assert "Error" in result.error
        assert not os.path.exists(target)


def test_private_tmp_is_writable_and_invisible_to_the_host():
    name = f"/tmp/sandbox-private-{uuid.uuid4().hex}"
    code = (
        "def f(path):\n"
        "    with open(path, 'w') as out:\n"
        "        out.write('scratch')\n"
        "    return open(path).read()\n"
    )
    result = run_in_sandbox(code, "f", [name])
    if result.isolation != BWRAP:
        pytest.skip("only bwrap gives the sandbox its own /tmp")
    assert result.value == "scratch"
    assert not os.path.exists(name)


def test_file_size_limit_stops_large_writes():
    code = (
        "def f():\n    with open('/tmp/big', 'wb') as out:\n        out.write(b'x' * (3 * 2**20))\n"
    )
    result = run_in_sandbox(code, "f", [], limits=SandboxLimits(file_size_mb=1))
    assert result.reason == "exception"
    assert "File too large" in result.error


READ_ALL_ENVIRONMENTS = (
    "import os\n"
    "def f():\n"
    "    seen = [dict(os.environ)]\n"
    "    for pid in os.listdir('/proc'):\n"
    "        if pid.isdigit():\n"
    "            try:\n"
    "                seen.append(open(f'/proc/{pid}/environ', 'rb').read().decode('latin-1'))\n"
    "            except OSError:\n"
    "                pass\n"
    "    return seen\n"
)


@pytest.mark.parametrize("mode", [available_isolation(), *FALLBACK_MODES])
def test_host_secrets_are_not_visible(monkeypatch, mode):
    secret = f"hunter2-{uuid.uuid4().hex}"
    monkeypatch.setenv("CRUCIBLE_TEST_SECRET", secret)
    result = run_in_sandbox(READ_ALL_ENVIRONMENTS, "f", [], isolation=mode)
    assert result.ok, result.error
    assert set(result.value[0]) <= {"PATH", "LANG", "PWD"}
    assert secret not in json.dumps(result.value)


@pytest.mark.parametrize("mode", NAMESPACED_MODES)
def test_socket_to_host_port_fails_and_server_sees_nothing(mode):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        code = (
            "import socket\n"
            "def f(port):\n"
            "    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
            "    client.settimeout(2)\n"
            "    client.connect(('127.0.0.1', port))\n"
            "    client.sendall(b'leak')\n"
            "    return 'connected'\n"
        )
        result = run_in_sandbox(code, "f", [port], isolation=mode)
        assert result.reason == "exception"
        assert "ConnectionRefusedError" in result.error or "Network is unreachable" in result.error
        server.settimeout(0.2)
        with pytest.raises(TimeoutError):
            server.accept()


@pytest.mark.parametrize("mode", FALLBACK_MODES)
def test_fallback_modes_still_time_out_and_cap_memory(mode):
    loop = run_in_sandbox(
        "def f():\n    while True:\n        pass\n", "f", [], limits=FAST, isolation=mode
    )
    assert (loop.reason, loop.isolation) == ("timeout", mode)
    hog = "def f():\n    return bytearray(2**31)\n"
    assert run_in_sandbox(hog, "f", [], limits=FAST, isolation=mode).reason == "memory"
    assert wait_for_no_descendants() == set()


# --- warm pool --------------------------------------------------------------------------

COUNTER = (
    "calls = 0\n"
    "def count(hang):\n"
    "    global calls\n"
    "    calls += 1\n"
    "    while hang:\n"
    "        pass\n"
    "    return calls\n"
)


@pytest.fixture
def pool():
    with SandboxPool(max_idle_workers=2) as pool:
        yield pool
    assert wait_for_no_descendants() == set()


def test_pool_keeps_the_code_loaded_between_calls(pool):
    values = [pool.call(COUNTER, "count", [False], limits=FAST).value for _ in range(3)]
    assert values == [1, 2, 3]
    assert pool.worker_count() == 1


def test_pool_replaces_a_worker_after_a_timeout(pool):
    assert pool.call(COUNTER, "count", [False], limits=FAST).value == 1
    hung = pool.call(COUNTER, "count", [True], limits=FAST)
    assert hung.reason == "timeout"
    assert pool.worker_count() == 0
    assert pool.call(COUNTER, "count", [False], limits=FAST).value == 1


def test_pool_discards_worker_after_any_failure(pool):
    code = "state = []\ndef f(fail):\n    state.append(1)\n    if fail:\n        raise ValueError('no')\n    return len(state)\n"
    assert pool.call(code, "f", [False]).value == 1
    assert pool.call(code, "f", [True]).reason == "exception"
    assert pool.call(code, "f", [False]).value == 1


def test_pool_keys_workers_by_code_and_evicts_least_recent(pool):
    codes = [f"def f():\n    return {n}\n" for n in range(3)]
    assert [pool.call(code, "f", []).value for code in codes] == [0, 1, 2]
    assert pool.worker_count() == 2
    assert pool.call(codes[2], "f", []).value == 2


def test_pool_serves_concurrent_callers(pool):
    results: list = []

    def call() -> None:
        results.append(pool.call("def f(x):\n    return x + 1\n", "f", [1]).value)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [2, 2, 2, 2]


def test_warm_calls_cost_a_fraction_of_a_cold_start(pool):
    code = "def f(x):\n    return x\n"
    cold = [run_in_sandbox(code, "f", [n]).duration_ms for n in range(3)]
    pool.call(code, "f", [0])
    warm = [pool.call(code, "f", [n]).duration_ms for n in range(20)]
    assert statistics.median(warm) * 5 < statistics.median(cold)
    assert statistics.median(warm) < 10


def test_worker_outlives_the_thread_that_started_it(pool):
    thread = threading.Thread(target=pool.call, args=(COUNTER, "count", [False]))
    thread.start()
    thread.join()
    time.sleep(0.2)
    assert pool.call(COUNTER, "count", [False]).value == 2


def test_dead_idle_worker_is_replaced(pool):
    assert pool.call(COUNTER, "count", [False]).value == 1
    [worker] = pool._idle
    os.killpg(worker.process.pid, 9)
    worker.process.wait()
    assert pool.call(COUNTER, "count", [False]).value == 1


def test_forked_child_gets_its_own_workers_and_leaves_the_parents_alone(pool):
    assert pool.call(COUNTER, "count", [False]).value == 1
    child = os.fork()
    if child == 0:
        value = pool.call(COUNTER, "count", [False]).value
        pool.close()
        os._exit(0 if value == 1 else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert pool.call(COUNTER, "count", [False]).value == 2


@pytest.mark.parametrize("field", ["cpu_seconds", "memory_mb", "wall_seconds", "max_processes"])
def test_limits_must_be_positive(field):
    with pytest.raises(ValueError, match=field):
        SandboxLimits(**{field: 0})


@pytest.mark.parametrize(
    ("module_code", "reason", "message"),
    [
        ("import sys\nsys.exit(2)\n", "exception", "SystemExit: 2"),
        ("hog = bytearray(2**31)\n", "memory", "MemoryError"),
        ("import os\nos.fork()\n", None, None),
    ],
)
def test_module_level_surprises_are_contained(module_code, reason, message):
    result = run_in_sandbox(module_code + "def f():\n    return 'ran'\n", "f", [], limits=FAST)
    if reason is None:
        assert result.value == "ran"
    else:
        assert (result.reason, message in result.error) == (reason, True)
    assert wait_for_no_descendants() == set()
