"""The child side of the sandbox: loads user code once, then serves calls.

Runs as a script (`python -I -S _sandbox_runner.py`) inside the sandbox, so it
imports only the standard library and nothing from this package.

Protocol (all lines are JSON objects):
- fd 0, first line: {"code", "entrypoint", "limits": {...}, "uid": int | null,
  "preload": bool}.
- the fd named by the first argument: the runner answers {"ready": true} or a failure, then one answer per call.
- fd 0, later lines: {"args": [...]}; answer {"ok": true, "value": ..., "cpu_used": s}
  or {"ok": false, "reason": "exception" | "memory" | "bad_result", "error": "..."}.
- fd 1 / fd 2 are the user's stdout / stderr; the host captures and caps them.

Limits are applied here, before any user code runs, so that every isolation
mode (bwrap, unshare, none) gets the same rlimits.
"""

import contextlib
import json
import linecache
import math
import os
import resource
import signal
import sys
import traceback

USER_FILENAME = "<verifier>"
MAX_ERROR_CHARS = 4000
# Modules a verifier commonly needs. Without bwrap (which mounts the Python install
# where the sandbox uid can read it) they are imported before privileges are dropped,
# so that they load even when the install lies under a directory like /root. socket is
# among them so that network attempts fail on the network namespace, as under bwrap.
PRELOADED_MODULES = (
    "ast",
    "bisect",
    "collections",
    "copy",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "enum",
    "fractions",
    "functools",
    "heapq",
    "itertools",
    "math",
    "operator",
    "random",
    "re",
    "socket",
    "statistics",
    "string",
    "textwrap",
    "typing",
    "unicodedata",
)


def main() -> None:
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    # User code gets an empty stdin so it cannot read (or steal) the host's requests.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    responses = os.fdopen(int(sys.argv[1]), "wb", buffering=0)
    config = json.loads(requests.readline())
    apply_limits(config["limits"])
    if config.get("preload"):
        for name in PRELOADED_MODULES:
            __import__(name)
    if config.get("uid") is not None:
        drop_privileges(config["uid"])
    owner_pid = os.getpid()
    try:
        function = load_entrypoint(config["code"], config["entrypoint"])
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything while loading
        answer_load_failure(responses, exc, owner_pid)
        return
    if os.getpid() != owner_pid:
        os._exit(0)
    send(responses, {"ready": True})
    for line in iter(requests.readline, b""):
        args = json.loads(line)["args"]
        set_cpu_budget(config["limits"]["cpu_seconds"])
        answer = call_user_function(function, args)
        if os.getpid() != owner_pid:
            # A process the user code forked has returned here: it must not answer.
            os._exit(0)
        flush_user_streams()
        send(responses, answer)


def apply_limits(limits: dict) -> None:
    """Address space, file size, process count, and a lifetime CPU ceiling."""
    memory = int(limits["memory_mb"]) * 1024 * 1024
    file_size = int(limits["file_size_mb"]) * 1024 * 1024
    processes = int(limits["max_processes"])
    lifetime_cpu = int(limits["lifetime_cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (lifetime_cpu, lifetime_cpu))
    # An oversized write then fails with EFBIG inside user code instead of killing us.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def drop_privileges(uid: int) -> None:
    """Become an unprivileged uid of our own: no capabilities, own RLIMIT_NPROC count."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def set_cpu_budget(cpu_seconds: float) -> None:
    """Let this call use `cpu_seconds` more CPU before SIGXCPU ends the process."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = usage.ru_utime + usage.ru_stime
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = min(hard, math.ceil(used + cpu_seconds))
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def load_entrypoint(code: str, entrypoint: str):
    linecache.cache[USER_FILENAME] = (len(code), None, code.splitlines(True), USER_FILENAME)
    namespace = {"__name__": "verifier", "__builtins__": __builtins__}
    exec(compile(code, USER_FILENAME, "exec"), namespace)  # noqa: S102 - this is the sandbox
    function = namespace.get(entrypoint)
    if not callable(function):
        raise LookupError(
            f"the code defines no function named {entrypoint!r}; define `def {entrypoint}(...)`"
        )
    return function


def answer_load_failure(responses, exc: BaseException, owner_pid: int) -> None:
    if os.getpid() != owner_pid:
        os._exit(0)
    reason = "memory" if isinstance(exc, MemoryError) else "exception"
    send(responses, {"ok": False, "reason": reason, "error": describe_load_error(exc)})


def describe_load_error(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return (
            f"SyntaxError in verifier code, line {exc.lineno}: {exc.msg}\n"
            f"    {(exc.text or '').rstrip()}"
        )
    return describe_exception(exc)


def call_user_function(function, args: list) -> dict:
    try:
        value = function(*args)
    except MemoryError:
        return {"ok": False, "reason": "memory", "error": "the code ran out of memory"}
    except BaseException as exc:  # noqa: BLE001 - SystemExit and friends are user errors too
        return {"ok": False, "reason": "exception", "error": describe_exception(exc)}
    try:
        encoded = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return {
            "ok": False,
            "reason": "bad_result",
            "error": f"the return value is not JSON-serialisable ({exc}); "
            "return numbers, strings, lists, dicts, booleans or None",
        }
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"ok": True, "value": json.loads(encoded), "cpu_used": usage.ru_utime + usage.ru_stime}


def describe_exception(exc: BaseException) -> str:
    """The traceback from the first user-code frame on: the runner's frames are noise."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != USER_FILENAME:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    return text[-MAX_ERROR_CHARS:]


def flush_user_streams() -> None:
    """Anything the user printed reaches the host before the answer does."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def send(responses, message: dict) -> None:
    responses.write(json.dumps(message).encode() + b"\n")


if __name__ == "__main__":
    main()
