"""Run user-written verifier code in a locked-down child process.

Why: a `python` verifier is arbitrary code written by a project member and fed
model output; it must not reach the network, the host's files, the host's
secrets or enough CPU, memory or processes to hurt the machine, and its failure
must be reported as an error, never as a reward.

Layers, strongest available first (the result's `isolation` says which ran):
- "bwrap": bubblewrap with new network, pid, ipc and uts namespaces; the
  filesystem is /usr and the Python install mounted read-only plus a private
  size-capped /tmp; as root, the runner then drops to a random unprivileged uid
  of its own, so RLIMIT_NPROC applies and /proc of other processes is closed.
  Without root, bwrap runs in a user namespace of its own and, where bwrap has
  --disable-userns (0.8+), the code cannot create further user namespaces.
- "unshare": util-linux unshare (network and pid namespaces) when bwrap is
  missing; the host filesystem stays visible (read-only only through file modes).
- "rlimits-only": a plain child process; only the limits below apply.
In every mode the child gets an empty environment (PATH and LANG only), rlimits
on address space, file size, processes and CPU, a seccomp filter that makes
namespace, mount, ptrace, keyring, BPF, module and similar syscalls fail with
EPERM (see _sandbox_runner.SYSCALL_NUMBERS), a wall-clock timeout that kills
its whole process group, and a cap on captured output; its answer is read back
as one JSON line and validated.

`SandboxPool` keeps one warm worker per (code, entrypoint, limits), which loads
the code once and serves calls over a pipe, so a cheap verifier costs well under
a millisecond instead of a process start. Any failed call discards its worker.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import functools
import hashlib
import itertools
import json
import logging
import math
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

BWRAP = "bwrap"
UNSHARE = "unshare"
RLIMITS_ONLY = "rlimits-only"
ISOLATION_MODES = (BWRAP, UNSHARE, RLIMITS_ONLY)

REASONS = frozenset(
    {"timeout", "memory", "cpu", "output_limit", "crashed", "bad_result", "exception"}
)

RUNNER_PATH = Path(__file__).resolve().with_name("_sandbox_runner.py")
RUNNER_IN_SANDBOX = "/sandbox/runner.py"
CHILD_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
TAIL_BYTES = 4000
STARTUP_GRACE_SECONDS = 5.0
LIFETIME_CPU_FACTOR = 20
# Sandbox uids come from a range no real account uses; each worker draws its own so
# that RLIMIT_NPROC counts only that worker's processes.
SANDBOX_UID_BASE = 1_000_000_000
SANDBOX_UID_SPAN = 1_000_000_000


@dataclass(frozen=True)
class SandboxLimits:
    """Per-call resource limits (the worker's lifetime CPU is a multiple of cpu_seconds)."""

    cpu_seconds: float = 5.0
    memory_mb: int = 512
    wall_seconds: float = 10.0
    max_output_bytes: int = 1_000_000
    max_processes: int = 16
    file_size_mb: int = 16

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive number, got {value!r}")

    @property
    def lifetime_cpu_seconds(self) -> int:
        return math.ceil(self.cpu_seconds * LIFETIME_CPU_FACTOR) + 5


@dataclass
class SandboxResult:
    """One call's outcome. `reason` is set exactly when ok is False (see REASONS)."""

    ok: bool
    value: Any = None
    error: str | None = None
    reason: str | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    duration_ms: float = 0.0
    isolation: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_in_sandbox(
    code: str,
    entrypoint: str,
    args: list[Any],
    *,
    limits: SandboxLimits = SandboxLimits(),  # noqa: B008 - frozen, safe as a default
    isolation: str | None = None,
) -> SandboxResult:
    """Start a fresh sandbox, call `entrypoint(*args)` once, and tear it down."""
    started = time.monotonic()
    worker = _Worker(code, entrypoint, limits, isolation or available_isolation())
    try:
        result = worker.start() or worker.call(args)
    finally:
        worker.close()
    result.duration_ms = (time.monotonic() - started) * 1000
    return result


class SandboxPool:
    """Warm sandboxed workers keyed by (code hash, entrypoint, limits).

    A worker is reused only after a successful call; a failed, timed-out or
    killed one is discarded and the next call transparently starts a new one.
    At most `max_idle_workers` idle workers are kept (least recently used go first).
    Thread-safe: concurrent calls for the same code get separate workers.
    """

    def __init__(
        self,
        *,
        max_idle_workers: int = 8,
        max_calls_per_worker: int = 10_000,
        isolation: str | None = None,
    ) -> None:
        self.max_idle_workers = max_idle_workers
        self.max_calls_per_worker = max_calls_per_worker
        self.isolation = isolation or available_isolation()
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._owner_pid = os.getpid()

    def call(
        self,
        code: str,
        entrypoint: str,
        args: list[Any],
        *,
        limits: SandboxLimits = SandboxLimits(),  # noqa: B008 - frozen, safe as a default
    ) -> SandboxResult:
        """Call `entrypoint(*args)` in a warm worker for this code, starting one if needed."""
        started = time.monotonic()
        key = _worker_key(code, entrypoint, limits)
        worker = self._take_idle(key)
        if worker is None:
            worker = _Worker(code, entrypoint, limits, self.isolation)
            failed_start = worker.start()
            if failed_start is not None:
                worker.close()
                failed_start.duration_ms = (time.monotonic() - started) * 1000
                return failed_start
        result = worker.call(args)
        result.duration_ms = (time.monotonic() - started) * 1000
        self._release(worker, healthy=result.ok)
        return result

    def worker_count(self) -> int:
        """Idle warm workers right now."""
        with self._lock:
            return len(self._idle)

    def close(self) -> None:
        """Kill the idle workers (only in the process that started them)."""
        with self._lock:
            workers, self._idle = self._idle, []
        if os.getpid() != self._owner_pid:
            return
        for worker in workers:
            worker.close()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _take_idle(self, key: tuple) -> _Worker | None:
        """A live idle worker for this key; dead ones found on the way are closed."""
        dead: list[_Worker] = []
        found = None
        with self._lock:
            if os.getpid() != self._owner_pid:
                # A forked copy of the pool: those workers belong to the parent process.
                self._idle, self._owner_pid = [], os.getpid()
            for index in range(len(self._idle) - 1, -1, -1):
                worker = self._idle[index]
                if worker.key == key and worker.alive():
                    found = self._idle.pop(index)
                    break
                if not worker.alive():
                    dead.append(self._idle.pop(index))
        for worker in dead:
            worker.close()
        return found

    def _release(self, worker: _Worker, *, healthy: bool) -> None:
        reusable = (
            healthy
            and worker.alive()
            and worker.calls < self.max_calls_per_worker
            and worker.has_cpu_left()
        )
        if not reusable:
            worker.close()
            return
        with self._lock:
            self._idle.append(worker)
            evicted = self._idle[: -self.max_idle_workers] if self.max_idle_workers else self._idle
            self._idle = self._idle[len(evicted) :]
        for old in evicted:
            old.close()


_shared_pool: SandboxPool | None = None
_shared_pool_lock = threading.Lock()


def shared_pool() -> SandboxPool:
    """The process-wide pool verifiers use by default (closed at interpreter exit)."""
    global _shared_pool
    with _shared_pool_lock:
        if _shared_pool is None:
            _shared_pool = SandboxPool()
            atexit.register(_shared_pool.close)
        return _shared_pool


@functools.cache
def available_isolation() -> str:
    """The strongest isolation mode that actually works here (probed once per process)."""
    for mode in (BWRAP, UNSHARE):
        if _mode_works(mode):
            break
    else:
        mode = RLIMITS_ONLY
    if mode != BWRAP:
        logger.warning(
            "sandbox: bubblewrap is not usable here, user code runs with %r isolation; "
            "install bubblewrap (Debian package 'bubblewrap') for network, filesystem "
            "and pid isolation",
            mode,
        )
    return mode


def _mode_works(mode: str) -> bool:
    if mode == UNSHARE and os.geteuid() != 0:
        return False
    if shutil.which(mode) is None:
        return False
    command = _isolation_prefix(mode, SandboxLimits()) + [_python(), "-I", "-S", "-c", "pass"]
    try:
        probe = subprocess.run(command, env=CHILD_ENV, capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def _warn_without_syscall_filter(status: Any) -> None:
    """Say once per process when the runner could not install its seccomp filter:
    the code still runs (the other layers hold), but an operator should know."""
    global _warned_about_syscall_filter
    if status == "installed" or _warned_about_syscall_filter:
        return
    _warned_about_syscall_filter = True
    logger.warning("sandbox: no seccomp syscall filter in the sandbox (%s)", status)


_warned_about_syscall_filter = False


def _python() -> str:
    return os.path.realpath(sys.executable)


def _worker_key(code: str, entrypoint: str, limits: SandboxLimits) -> tuple:
    return (hashlib.sha256(code.encode()).hexdigest(), entrypoint, limits)


def _isolation_prefix(mode: str, limits: SandboxLimits) -> list[str]:
    """The command words that wrap the runner in the given isolation mode."""
    if mode == BWRAP:
        return _bwrap_prefix(limits)
    if mode == UNSHARE:
        return [
            "unshare",
            "--net",
            "--pid",
            "--ipc",
            "--uts",
            "--fork",
            "--kill-child",
            "--mount-proc",
        ]
    if mode == RLIMITS_ONLY:
        return []
    raise ValueError(f"unknown isolation mode {mode!r}; use one of {ISOLATION_MODES}")


def _bwrap_prefix(limits: SandboxLimits) -> list[str]:
    tmp_bytes = str(limits.file_size_mb * 2 * 1024 * 1024)
    options = [
        ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts"],
        ["--unshare-cgroup-try", "--die-with-parent", "--new-session"],
        ["--hostname", "sandbox"],
        ["--ro-bind", "/usr", "/usr"],
    ]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            options.append(["--symlink", os.readlink(top), top])
        elif os.path.isdir(top):
            options.append(["--ro-bind", top, top])
    for path in _python_roots():
        options += _mkdirs_for(path) + [["--ro-bind", path, path]]
    options += [
        ["--perms", "0755", "--dir", "/sandbox"],
        ["--ro-bind", str(RUNNER_PATH), RUNNER_IN_SANDBOX],
        ["--proc", "/proc", "--dev", "/dev"],
        ["--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/tmp"],
        ["--chdir", "/tmp", "--clearenv"],
    ]
    options += [["--setenv", name, value] for name, value in CHILD_ENV.items()]
    options.append(_bwrap_user_options())
    return ["bwrap", *itertools.chain.from_iterable(options)]


def _bwrap_user_options() -> list[str]:
    """How the sandbox gets rid of root, and whether nested user namespaces are closed.

    As root there is no user namespace: the runner keeps just enough privilege to drop
    to a uid of its own (so RLIMIT_NPROC counts only its processes), and the seccomp
    filter alone stops it from creating namespaces. Otherwise bwrap makes a user
    namespace, and --disable-userns (where this bwrap has it) also closes the nested
    ones at the kernel's level, a second layer under the filter.
    """
    if os.geteuid() == 0:
        return ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    if _bwrap_can_disable_userns():
        return ["--unshare-user", "--disable-userns"]
    return ["--unshare-user"]


@functools.cache
def _bwrap_can_disable_userns() -> bool:
    """Whether --disable-userns works here, tried once. Why try rather than read the
    version: bwrap before 0.8.0 refuses the unknown option, and some setups cannot
    apply it; either way bwrap must stay usable, with the seccomp filter as the guard."""
    probe = ["bwrap", "--unshare-user", "--disable-userns", "--ro-bind", "/", "/", "true"]
    try:
        return subprocess.run(probe, env=CHILD_ENV, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _python_roots() -> list[str]:
    """Directories the interpreter needs that /usr does not already cover."""
    roots = {os.path.realpath(sys.base_prefix), os.path.dirname(_python())}
    kept = sorted(r for r in roots if r != "/usr" and not r.startswith("/usr/"))
    return [r for r in kept if not any(r.startswith(o + "/") for o in kept if o != r)]


def _mkdirs_for(path: str) -> list[list[str]]:
    """Traversable parents for a bind mount (bwrap would create them mode 0700)."""
    parents = list(reversed(Path(path).parents))[1:]
    return [["--perms", "0755", "--dir", str(parent)] for parent in parents]


def _runner_command(mode: str, limits: SandboxLimits) -> list[str]:
    runner = RUNNER_IN_SANDBOX if mode == BWRAP else str(RUNNER_PATH)
    return _isolation_prefix(mode, limits) + [_python(), "-I", "-S", "-B", "-u", runner]


# Children are spawned from one long-lived thread: bwrap's --die-with-parent follows
# the thread that forked it, and a worker must outlive the request thread that started it.
_spawner = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox")


def _reset_after_fork() -> None:
    """A forked child (e.g. a Celery prefork worker) has no spawner thread and must not
    share the parent's warm workers: give it fresh ones."""
    global _spawner, _shared_pool, _shared_pool_lock
    _spawner = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox")
    _shared_pool, _shared_pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


class _Worker:
    """One sandboxed runner process and the pipes to it."""

    def __init__(self, code: str, entrypoint: str, limits: SandboxLimits, isolation: str) -> None:
        if isolation not in ISOLATION_MODES:
            raise ValueError(f"unknown isolation mode {isolation!r}; use one of {ISOLATION_MODES}")
        self.code = code
        self.entrypoint = entrypoint
        self.limits = limits
        self.isolation = isolation
        self.key = _worker_key(code, entrypoint, limits)
        self.calls = 0
        self.cpu_used = 0.0
        self.process: subprocess.Popen[bytes] | None = None
        self._response_read: int | None = None
        self._buffers: dict[int, bytearray] = {}

    def start(self) -> SandboxResult | None:
        """Start the process and load the code; None when ready, else the failure."""
        response_read, response_write = os.pipe()
        try:
            self.process = _spawner.submit(self._spawn, response_write).result()
        finally:
            os.close(response_write)
        self._response_read = response_read
        for fd in (response_read, self.process.stdout.fileno(), self.process.stderr.fileno()):
            os.set_blocking(fd, False)
        os.set_blocking(self.process.stdin.fileno(), False)
        uid = SANDBOX_UID_BASE + secrets.randbelow(SANDBOX_UID_SPAN) if os.geteuid() == 0 else None
        config = {
            "code": self.code,
            "entrypoint": self.entrypoint,
            "uid": uid,
            "preload": self.isolation != BWRAP,
            "limits": {
                "cpu_seconds": self.limits.cpu_seconds,
                "memory_mb": self.limits.memory_mb,
                "file_size_mb": self.limits.file_size_mb,
                "max_processes": self.limits.max_processes,
                "lifetime_cpu_seconds": self.limits.lifetime_cpu_seconds,
            },
        }
        deadline = time.monotonic() + self.limits.wall_seconds + STARTUP_GRACE_SECONDS
        answer = self._exchange(config, deadline)
        if isinstance(answer, SandboxResult):
            return answer
        if answer.get("ready") is True:
            _warn_without_syscall_filter(answer.get("syscall_filter"))
            return None
        return self._result_from_answer(answer)

    def call(self, args: list[Any]) -> SandboxResult:
        """Run the entrypoint once; a failed result leaves the worker unusable."""
        try:
            json.dumps(args, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"sandbox arguments must be plain JSON values: {exc}") from exc
        self.calls += 1
        deadline = time.monotonic() + self.limits.wall_seconds
        answer = self._exchange({"args": args}, deadline)
        if isinstance(answer, SandboxResult):
            return answer
        return self._result_from_answer(answer)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def has_cpu_left(self) -> bool:
        return self.cpu_used + 2 * self.limits.cpu_seconds < self.limits.lifetime_cpu_seconds

    def close(self) -> None:
        """Kill the whole process group and release the pipes."""
        if self.process is None:
            return
        self._kill()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        if self._response_read is not None:
            os.close(self._response_read)
            self._response_read = None
        self.process = None

    def _spawn(self, response_write: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            _runner_command(self.isolation, self.limits) + [str(response_write)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=CHILD_ENV,
            cwd="/",
            start_new_session=True,
            pass_fds=(response_write,),
        )

    def _kill(self) -> None:
        """SIGKILL the process group while its leader is unreaped (so its pid is not reused)."""
        assert self.process is not None
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def _wait_without_reaping(self, timeout: float) -> None:
        """Let the leader exit on its own (keeping its status) but stay a zombie, so that
        the process-group kill that follows cannot hit a reused pid."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        while self.process.returncode is None and time.monotonic() < deadline:
            if os.waitid(os.P_PID, self.process.pid, flags) is not None:
                return
            time.sleep(0.005)

    def _exchange(self, message: dict[str, Any], deadline: float) -> dict[str, Any] | SandboxResult:
        """Send one line, then collect output until the answer line, a limit, or death."""
        assert self.process is not None and self._response_read is not None
        out_fd, err_fd = self.process.stdout.fileno(), self.process.stderr.fileno()
        self._buffers = {out_fd: bytearray(), err_fd: bytearray(), self._response_read: bytearray()}
        received = 0
        pending = json.dumps(message).encode() + b"\n"
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdin.fileno(), selectors.EVENT_WRITE)
            for fd in self._buffers:
                selector.register(fd, selectors.EVENT_READ)
            while True:
                line = self._answer_line()
                if line is not None:
                    self._drain_output(selector)
                    return self._parse_answer(line)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._kill()
                    return self._failure(
                        "timeout",
                        f"the code did not finish within {self.limits.wall_seconds} s "
                        "(wall clock); make it faster or raise timeout_seconds",
                    )
                for key, _ in selector.select(remaining):
                    if key.events & selectors.EVENT_WRITE:
                        pending = self._write_some(selector, key.fd, pending)
                        continue
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fd)
                        if key.fd == self._response_read:
                            return self._died()
                        continue
                    received += len(chunk)
                    self._append(key.fd, chunk)
                    if received > self.limits.max_output_bytes:
                        self._kill()
                        return self._failure(
                            "output_limit",
                            f"the code wrote more than {self.limits.max_output_bytes} bytes "
                            "(stdout, stderr and result together); print less",
                        )

    def _write_some(self, selector: selectors.BaseSelector, fd: int, pending: bytes) -> bytes:
        try:
            written = os.write(fd, pending)
        except BrokenPipeError:
            written = len(pending)
        pending = pending[written:]
        if not pending:
            selector.unregister(fd)
        return pending

    def _append(self, fd: int, chunk: bytes) -> None:
        buffer = self._buffers[fd]
        buffer += chunk
        if fd != self._response_read and len(buffer) > 2 * TAIL_BYTES:
            del buffer[:-TAIL_BYTES]

    def _answer_line(self) -> bytes | None:
        buffer = self._buffers[self._response_read]
        end = buffer.find(b"\n")
        return None if end < 0 else bytes(buffer[:end])

    def _drain_output(self, selector: selectors.BaseSelector) -> None:
        """Read what the code printed before answering (it is already in the pipes)."""
        readable = {self.process.stdout.fileno(), self.process.stderr.fileno()}
        for key, _ in selector.select(0):
            if key.fd in readable:
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                self._append(key.fd, chunk)

    def _parse_answer(self, line: bytes) -> dict[str, Any] | SandboxResult:
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            self._kill()
            return self._failure(
                "bad_result", "the sandbox answered with something that is not a JSON object"
            )
        return answer

    def _result_from_answer(self, answer: dict[str, Any]) -> SandboxResult:
        """Validate the runner's answer: {"ok": true, "value"} or {"ok": false, "reason", "error"}."""
        if answer.get("ok") is True and "value" in answer:
            cpu_used = answer.get("cpu_used")
            if isinstance(cpu_used, int | float):
                self.cpu_used = float(cpu_used)
            return SandboxResult(
                ok=True,
                value=answer["value"],
                stdout_tail=self._tail(self.process.stdout.fileno()),
                stderr_tail=self._tail(self.process.stderr.fileno()),
                isolation=self.isolation,
            )
        reason = answer.get("reason")
        error = answer.get("error")
        if answer.get("ok") is False and reason in REASONS and isinstance(error, str):
            return self._failure(reason, error)
        self._kill()
        return self._failure("bad_result", "the sandbox answered with an unexpected message")

    def _died(self) -> SandboxResult:
        """The answer pipe closed: the runner exited or was killed mid-call."""
        self._wait_without_reaping(timeout=2.0)
        self._kill()
        code = self.process.returncode
        signum = -code if code < 0 else code - 128 if code > 128 else None
        if signum == signal.SIGXCPU:
            return self._failure(
                "cpu",
                f"the code used more than {self.limits.cpu_seconds} s of CPU; "
                "make it faster or raise the CPU limit",
            )
        cause = f"exited with status {code}"
        if signum is not None:
            with contextlib.suppress(ValueError):
                cause = f"was killed by {signal.Signals(signum).name}"
        return self._failure(
            "crashed",
            f"the sandboxed process {cause} before answering "
            "(os._exit, a crash in native code, or the kernel killing it)",
        )

    def _failure(self, reason: str, error: str) -> SandboxResult:
        return SandboxResult(
            ok=False,
            error=error,
            reason=reason,
            stdout_tail=self._tail(self.process.stdout.fileno()) if self.process else "",
            stderr_tail=self._tail(self.process.stderr.fileno()) if self.process else "",
            isolation=self.isolation,
        )

    def _tail(self, fd: int) -> str:
        return bytes(self._buffers.get(fd, b"")[-TAIL_BYTES:]).decode("utf-8", errors="replace")
