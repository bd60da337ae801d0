"""The child side of the sandbox: loads user code once, then serves calls.

Runs as a script (`python -I -S _sandbox_runner.py`) inside the sandbox, so it
imports only the standard library and nothing from this package.

Protocol (all lines are JSON objects):
- fd 0, first line: {"code", "entrypoint", "limits": {...}, "uid": int | null,
  "preload": bool}.
- the fd named by the first argument: the runner answers {"ready": true,
  "syscall_filter": "installed" | "unavailable: why"} or a failure, then one answer per call.
- fd 0, later lines: {"args": [...]}; answer {"ok": true, "value": ..., "cpu_used": s}
  or {"ok": false, "reason": "exception" | "memory" | "bad_result", "error": "..."}.
- fd 1 / fd 2 are the user's stdout / stderr; the host captures and caps them.

Limits and a seccomp syscall filter are applied here, before any user code runs,
so that every isolation mode (bwrap, unshare, none) gets the same rlimits and the
same denied syscalls.
"""

import contextlib
import json
import linecache
import math
import os
import resource
import signal
import struct
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

# --- seccomp filter ------------------------------------------------------------------
# Syscalls a verifier never needs and that widen the kernel's attack surface: making or
# entering namespaces (unshare(CLONE_NEWUSER) would hand the code every capability in a
# fresh user namespace, where it could then mount), mounting, reaching into other
# processes, the kernel keyring, BPF, perf, userfaultfd and io_uring, module loading and
# host administration. Numbers per architecture: (x86_64, aarch64); None = not there.
SYSCALL_NUMBERS = {
    "clone": (56, 220),  # denied only with a CLONE_NEW* flag
    # clone3 answers ENOSYS: its flags sit in memory BPF cannot read; libc falls back to clone.
    "clone3": (435, 435),
    "unshare": (272, 97),
    "setns": (308, 268),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "open_tree": (428, 428),
    "open_tree_attr": (467, 467),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "process_madvise": (440, 440),
    "pidfd_getfd": (438, 438),
    "kcmp": (312, 272),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "fanotify_init": (300, 262),
    "open_by_handle_at": (304, 265),
    "name_to_handle_at": (303, 264),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "reboot": (169, 142),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "acct": (163, 89),
    "syslog": (103, 116),
    "quotactl": (179, 60),
    "quotactl_fd": (443, 443),
    "vhangup": (153, 58),
    "settimeofday": (164, 170),
    "clock_settime": (227, 112),
    "sethostname": (170, 161),
    "setdomainname": (171, 162),
    "iopl": (172, None),
    "ioperm": (173, None),
    "uselib": (134, None),
}
DENIED_SYSCALLS = tuple(name for name in SYSCALL_NUMBERS if name not in ("clone", "clone3"))
# The architecture column in SYSCALL_NUMBERS and the AUDIT_ARCH_* value the kernel
# reports for it; a syscall made through any other ABI is denied outright.
ARCHITECTURES = {"x86_64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7)}
X32_SYSCALL_BIT = 0x40000000  # x86_64's x32 ABI: same arch value, numbers offset by this
CLONE_NEW_FLAGS = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
EPERM, ENOSYS = 1, 38
# Classic BPF opcodes and seccomp constants (linux/filter.h, linux/seccomp.h).
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_JSET_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
SECCOMP_DATA_NR, SECCOMP_DATA_ARCH, SECCOMP_DATA_ARG0 = 0, 4, 16  # arg0's low half (LE)
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


def main() -> None:
    leave_pid_one()
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
    syscall_filter = install_syscall_filter()
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
    send(responses, {"ready": True, "syscall_filter": syscall_filter})
    for line in iter(requests.readline, b""):
        args = json.loads(line)["args"]
        set_cpu_budget(config["limits"]["cpu_seconds"])
        answer = call_user_function(function, args)
        if os.getpid() != owner_pid:
            # A process the user code forked has returned here: it must not answer.
            os._exit(0)
        flush_user_streams()
        send(responses, answer)


def leave_pid_one() -> None:
    """Do the work in a child when this process is PID 1 of a new pid namespace.

    Why: `unshare --pid --fork` (the fallback without bubblewrap) makes the runner
    the namespace's init, and the kernel drops every signal init has no handler for,
    SIGXCPU included: busy code would then run on to the wall clock instead of being
    stopped by the CPU limit. This process stays behind as init, reaps orphans, and
    exits with the worker's status (128 + signal when it was killed), which the host
    reads as the sandbox's own exit status.
    """
    if os.getpid() != 1:
        return
    worker = os.fork()
    if worker == 0:
        return
    while True:
        pid, status = os.wait()
        if pid == worker:
            signalled = os.WIFSIGNALED(status)
            os._exit(128 + os.WTERMSIG(status) if signalled else os.WEXITSTATUS(status))


def install_syscall_filter() -> str:
    """Deny the syscalls in SYSCALL_NUMBERS for this process and all it starts.

    Why: namespaces, mounts and the rest are attack surface a verifier never needs;
    the filter holds in every isolation mode, whatever the kernel lets unprivileged
    users do. Returns "installed", or "unavailable: why" (an architecture without a
    table, or a kernel without seccomp) so that the host can warn instead of failing.
    """
    machine = os.uname().machine
    if machine not in ARCHITECTURES or struct.calcsize("P") != 8:
        return f"unavailable: no syscall table for {machine} ({struct.calcsize('P') * 8}-bit)"
    try:
        import ctypes  # here, so that a Python without ctypes still runs verifiers
    except ImportError as exc:
        return f"unavailable: {exc}"
    program = seccomp_program(machine)
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    if prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"unavailable: PR_SET_NO_NEW_PRIVS: {os.strerror(ctypes.get_errno())}"

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
    if prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        return f"unavailable: PR_SET_SECCOMP: {os.strerror(ctypes.get_errno())}"
    return "installed"


def seccomp_program(machine: str) -> bytes:
    """The classic BPF program for `machine` (see SYSCALL_NUMBERS for the why).

    The architecture is checked first because the same number means another syscall
    under another ABI (i386 through int 0x80, or x32 on x86_64): those are denied.
    clone is denied only with a namespace flag, since fork and threads use it.
    """
    column, audit_arch = ARCHITECTURES[machine]
    numbers = {name: row[column] for name, row in SYSCALL_NUMBERS.items()}
    code = [(BPF_LD_W_ABS, SECCOMP_DATA_ARCH), (BPF_JEQ_K, audit_arch, None, "deny")]
    code.append((BPF_LD_W_ABS, SECCOMP_DATA_NR))
    if machine == "x86_64":
        code.append((BPF_JGE_K, X32_SYSCALL_BIT, "deny", None))
    code.append((BPF_JEQ_K, numbers["clone3"], "enosys", None))
    code.append((BPF_JEQ_K, numbers["clone"], "clone", None))
    code += [(BPF_JEQ_K, numbers[n], "deny", None) for n in DENIED_SYSCALLS if numbers[n]]
    code += [(BPF_RET_K, SECCOMP_RET_ALLOW), "clone", (BPF_LD_W_ABS, SECCOMP_DATA_ARG0)]
    code += [(BPF_JSET_K, CLONE_NEW_FLAGS, "deny", None), (BPF_RET_K, SECCOMP_RET_ALLOW)]
    code += ["enosys", (BPF_RET_K, SECCOMP_RET_ERRNO | ENOSYS)]
    code += ["deny", (BPF_RET_K, SECCOMP_RET_ERRNO | EPERM)]
    return assemble_bpf(code)


def assemble_bpf(code: list) -> bytes:
    """Pack (opcode, k[, jump-if-true label, jump-if-false label]) tuples into
    struct sock_filter entries; a bare string marks the position of a label and a
    None label falls through. Labels keep the jump offsets right as the list grows."""
    labels, position = {}, 0
    for item in code:
        if isinstance(item, str):
            labels[item] = position
        else:
            position += 1
    packed, position = [], 0
    for item in code:
        if isinstance(item, str):
            continue
        opcode, k, *jumps = item
        jt, jf = (0 if j is None else labels[j] - position - 1 for j in jumps or (None, None))
        packed.append(struct.pack("=HBBI", opcode, jt, jf, k))
        position += 1
    return b"".join(packed)


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
