"""Hostile code inside the sandbox cannot reach the syscalls the sandbox does not need.

Each test runs code that calls the kernel directly through ctypes (libc.syscall), the way
an attacker would, in every isolation mode this machine has: the seccomp filter the runner
installs must answer EPERM whatever the namespaces and the uid would have allowed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from environments import _sandbox_runner as runner
from environments import sandbox
from environments.sandbox import (
    RLIMITS_ONLY,
    UNSHARE,
    SandboxLimits,
    _mode_works,
    available_isolation,
    run_in_sandbox,
)

MACHINE = os.uname().machine
COLUMN = {"x86_64": 0, "aarch64": 1}.get(MACHINE)
needs_table = pytest.mark.skipif(COLUMN is None, reason=f"no syscall table for {MACHINE}")
FALLBACK_MODES = [m for m in (UNSHARE, RLIMITS_ONLY) if _mode_works(m) or m == RLIMITS_ONLY]
MODES = list(dict.fromkeys([available_isolation(), *FALLBACK_MODES]))
LIMITS = SandboxLimits(wall_seconds=10, memory_mb=256)
EPERM, ENOSYS = 1, 38

# The syscalls issue 23 names; the runner may deny more (see SYSCALL_NUMBERS).
NAMED_IN_THE_ISSUE = (
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "kexec_load",
    "init_module",
    "finit_module",
    "delete_module",
    "open_by_handle_at",
    "name_to_handle_at",
)

# Only ctypes and os: in the fallback modes as root, the sandbox uid cannot import modules
# from a Python installed under /root, and the runner has already loaded these two.
SYSCALL_HELPER = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.syscall.restype = ctypes.c_long\n"
    "def call(number, *args):\n"
    "    '''[return value, errno] of the raw syscall, six long arguments.'''\n"
    "    words = [ctypes.c_long(a) for a in (list(args) + [0] * 6)[:6]]\n"
    "    ctypes.set_errno(0)\n"
    "    rc = libc.syscall(ctypes.c_long(number), *words)\n"
    "    if rc == 0 and os.getpid() != PARENT:\n"
    "        os._exit(0)  # an unfiltered clone: the child must not go on\n"
    "    return [rc, ctypes.get_errno()]\n"
    "PARENT = os.getpid()\n"
)


def number(name: str) -> int:
    return runner.SYSCALL_NUMBERS[name][COLUMN]


def run_hostile(body: str, args: list, mode: str):
    code = SYSCALL_HELPER + "def f(numbers):\n" + body
    result = run_in_sandbox(code, "f", args, limits=LIMITS, isolation=mode)
    assert result.ok, (result.reason, result.error, result.stderr_tail)
    return result.value


def test_the_issue_syscalls_are_all_denied():
    assert set(NAMED_IN_THE_ISSUE) <= set(runner.DENIED_SYSCALLS)
    assert {"clone", "clone3"} <= set(runner.SYSCALL_NUMBERS)


@needs_table
@pytest.mark.parametrize("mode", MODES)
def test_each_denied_syscall_returns_eperm(mode):
    numbers = {name: number(name) for name in runner.DENIED_SYSCALLS if number(name) is not None}
    body = "    return {name: call(nr, 0x10000000) for name, nr in numbers.items()}\n"
    answers = run_hostile(body, [numbers], mode)
    not_denied = {name: answer for name, answer in answers.items() if answer != [-1, EPERM]}
    assert not_denied == {}


@needs_table
@pytest.mark.parametrize("mode", MODES)
def test_no_nested_namespace_and_no_mount_inside_it(mode):
    """The issue's path: a new user namespace, then a mount namespace, then mount()."""
    body = (
        "    tmpfs = ctypes.c_char_p(b'tmpfs')\n"
        "    target = ctypes.c_char_p(b'/tmp')\n"
        "    return {\n"
        "        'unshare_user': call(numbers['unshare'], 0x10000000),\n"
        "        'unshare_mount': call(numbers['unshare'], 0x00020000),\n"
        "        'mount': call(numbers['mount'], ctypes.cast(tmpfs, ctypes.c_void_p).value,\n"
        "                      ctypes.cast(target, ctypes.c_void_p).value,\n"
        "                      ctypes.cast(tmpfs, ctypes.c_void_p).value, 0, 0),\n"
        "        'clone_user': call(numbers['clone'], 0x10000000 | 17),\n"
        "        'clone_net': call(numbers['clone'], 0x40000000 | 17),\n"
        "        'setns': call(numbers['setns'], 0, 0),\n"
        "    }\n"
    )
    numbers = {name: number(name) for name in ("unshare", "mount", "clone", "setns")}
    answers = run_hostile(body, [numbers], mode)
    assert answers == {name: [-1, EPERM] for name in answers}


@needs_table
@pytest.mark.parametrize("mode", MODES)
def test_ordinary_code_still_forks_and_starts_threads(mode):
    """clone3 answers ENOSYS, so libc falls back to clone; fork and threads still work."""
    body = (
        "    import _thread\n"
        "    done = _thread.allocate_lock()\n"
        "    done.acquire()\n"
        "    _thread.start_new_thread(done.release, ())\n"
        "    thread_ran = done.acquire(timeout=5)\n"
        "    child = os.fork()\n"
        "    if child == 0:\n"
        "        os._exit(7)\n"
        "    status = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])\n"
        "    return {'clone3': call(numbers['clone3'], 0, 0), 'thread': thread_ran,\n"
        "            'fork': status}\n"
    )
    answers = run_hostile(body, [{"clone3": number("clone3")}], mode)
    assert answers == {"clone3": [-1, ENOSYS], "thread": True, "fork": 7}


@pytest.mark.skipif(MACHINE != "x86_64", reason="the x32 and i386 ABIs exist on x86_64 only")
@pytest.mark.parametrize("mode", MODES)
def test_other_syscall_abis_cannot_go_around_the_filter(mode):
    """unshare through the x32 numbering and through int 0x80 (i386: number 310)."""
    body = (
        "    x32 = call(0x40000000 | numbers['unshare'], 0x10000000)\n"
        "    mmap = libc.mmap\n"
        "    mmap.restype = ctypes.c_void_p\n"
        "    mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,\n"
        "                     ctypes.c_int, ctypes.c_long]\n"
        "    page = mmap(None, 4096, 7, 0x22, -1, 0)\n"
        "    # push rbx; mov eax, 310; mov ebx, CLONE_NEWUSER; int 0x80; pop rbx; ret\n"
        "    shellcode = bytes.fromhex('53b836010000bb00000010cd805bc3')\n"
        "    ctypes.memmove(page, shellcode, len(shellcode))\n"
        "    i386 = ctypes.CFUNCTYPE(ctypes.c_int)(page)()\n"
        "    if os.getpid() != PARENT:\n"
        "        os._exit(0)\n"
        "    return {'x32': x32, 'i386': i386}\n"
    )
    code = SYSCALL_HELPER + "def f(numbers):\n" + body
    result = run_in_sandbox(code, "f", [{"unshare": 272}], limits=LIMITS, isolation=mode)
    if result.reason == "crashed" and "SIGSEGV" in (result.error or ""):
        pytest.skip("this kernel has no i386 emulation (int 0x80 faults)")
    assert result.ok, (result.reason, result.error)
    assert result.value == {"x32": [-1, EPERM], "i386": -EPERM}


@pytest.mark.parametrize(
    ("header", "column"),
    [
        ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", 0),
        ("/usr/include/asm-generic/unistd.h", 1),
    ],
)
def test_syscall_numbers_match_the_kernel_headers(header, column):
    path = Path(header)
    if not path.is_file():
        pytest.skip(f"{header} is not installed (Debian package linux-libc-dev)")
    defined = dict(re.findall(r"#define __NR_(\w+)\s+(\d+)\b", path.read_text()))
    checked = 0
    for name, row in runner.SYSCALL_NUMBERS.items():
        if row[column] is not None and name in defined:
            assert row[column] == int(defined[name]), name
            checked += 1
    assert checked >= len(runner.SYSCALL_NUMBERS) - 5


def test_seccomp_program_checks_the_architecture_first():
    program = runner.seccomp_program("aarch64")
    instructions = [program[i : i + 8] for i in range(0, len(program), 8)]
    load_arch, check_arch = instructions[0], instructions[1]
    assert load_arch == bytes.fromhex("2000") + b"\0\0" + (4).to_bytes(4, "little")
    assert int.from_bytes(check_arch[4:], "little") == 0xC00000B7
    last = int.from_bytes(instructions[-1][4:], "little")
    assert last == runner.SECCOMP_RET_ERRNO | EPERM


def test_runner_without_a_syscall_table_says_so_instead_of_failing(monkeypatch):
    uname = os.uname()
    fake = os.uname_result(uname[:4] + ("riscv64",))
    monkeypatch.setattr(runner.os, "uname", lambda: fake)
    assert runner.install_syscall_filter().startswith("unavailable: no syscall table for riscv64")


def test_host_warns_once_when_the_filter_is_missing(monkeypatch, caplog):
    monkeypatch.setattr(sandbox, "_warned_about_syscall_filter", False)
    sandbox._warn_without_syscall_filter("installed")
    sandbox._warn_without_syscall_filter("unavailable: test")
    sandbox._warn_without_syscall_filter("unavailable: test")
    warnings = [r for r in caplog.records if "seccomp" in r.getMessage()]
    assert len(warnings) == 1 and "unavailable: test" in warnings[0].getMessage()


# --- bubblewrap's own layer: no nested user namespaces ---------------------------------


def test_bwrap_without_root_disables_nested_user_namespaces(monkeypatch):
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sandbox, "_bwrap_can_disable_userns", lambda: True)
    prefix = sandbox._bwrap_prefix(SandboxLimits())
    assert "--unshare-user" in prefix and "--disable-userns" in prefix
    assert prefix.index("--unshare-user") < prefix.index("--disable-userns")


def test_older_bwrap_without_disable_userns_still_gets_a_user_namespace(monkeypatch):
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sandbox, "_bwrap_can_disable_userns", lambda: False)
    prefix = sandbox._bwrap_prefix(SandboxLimits())
    assert "--unshare-user" in prefix and "--disable-userns" not in prefix


def test_bwrap_as_root_keeps_no_user_namespace_and_relies_on_the_filter(monkeypatch):
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 0)
    prefix = sandbox._bwrap_prefix(SandboxLimits())
    assert "--unshare-user" not in prefix and "--disable-userns" not in prefix


@pytest.mark.parametrize(
    ("returncode", "stderr", "expected"),
    [(0, "", True), (1, "bwrap: Unknown option --disable-userns", False)],
)
def test_disable_userns_is_tried_once_and_older_bwrap_goes_without(
    monkeypatch, returncode, stderr, expected
):
    def fake_run(command, **_):
        assert command[:3] == ["bwrap", "--unshare-user", "--disable-userns"]
        return subprocess.CompletedProcess(command, returncode, stdout=b"", stderr=stderr.encode())

    monkeypatch.setattr(sandbox.subprocess, "run", fake_run)
    assert sandbox._bwrap_can_disable_userns.__wrapped__() is expected


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_disable_userns_probe_agrees_with_this_bwrap():
    help_text = subprocess.run(["bwrap", "--help"], capture_output=True, text=True).stdout
    if "--disable-userns" not in help_text:
        assert sandbox._bwrap_can_disable_userns.__wrapped__() is False
    elif sandbox._bwrap_can_disable_userns.__wrapped__() is False:
        pytest.skip("this bwrap lists --disable-userns but cannot use it here")
