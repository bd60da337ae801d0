"""The `python` verifier: a user-written `verify(task, trajectory)` run in the sandbox.

The code is written by a project member, not by the model, but it still runs only in
the sandbox (see sandbox.py): it sees the task and the trajectory as plain dicts
(`Task.to_dict()`, `Trajectory.to_dict()`), may import only the standard library, and
cannot reach the network or the host's files. A warm worker keeps the code loaded,
so scoring a GRPO batch costs a pipe round trip per trajectory, not a process start.

`verify` returns either a number (the reward; passed when reward >= pass_threshold)
or a dict with any of: reward, passed, components, failure_bucket, flags, info.
Everything it returns is validated; a bad value or a crash is a verifier error
(reward None), never a reward of 0.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from environments.base import Verifier
from environments.sandbox import SandboxLimits, SandboxPool, SandboxResult, shared_pool
from environments.types import FailureBucket, Task, Trajectory, VerifyResult

ENTRYPOINT = "verify"
VERDICT_KEYS = ("reward", "passed", "components", "failure_bucket", "flags", "info")
EXAMPLE_CODE = '''def verify(task, trajectory):
    """Pass when the last assistant message mentions the expected answer."""
    answer = str(task["ground_truth"])
    last = [t for t in trajectory["turns"] if t["role"] == "assistant"][-1]
    return 1.0 if answer in (last.get("content") or "") else 0.0
'''


class VerdictError(ValueError):
    """`verify` returned something that is not a valid verdict; the message says what."""


class PythonVerifier(Verifier):
    """Runs your own `def verify(task, trajectory) -> float | dict` in a sandbox."""

    name: ClassVar[str] = "python"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "User-written Python verify(task, trajectory), run in a sandbox."
    config_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "code": {
                "type": "string",
                "minLength": 1,
                "description": (
                    "Python source defining def verify(task, trajectory) -> float | dict. "
                    "task and trajectory are plain dicts; standard library only."
                ),
                "default": EXAMPLE_CODE,
            },
            "timeout_seconds": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": 300,
                "default": 10,
                "description": "Wall-clock and CPU limit for one verify call.",
            },
            "memory_mb": {
                "type": "integer",
                "minimum": 64,
                "maximum": 16384,
                "default": 512,
                "description": "Address-space limit of the sandboxed process.",
            },
            "pass_threshold": {
                "type": "number",
                "default": 1.0,
                "description": "A returned reward at or above this passes (when passed is not given).",
            },
        },
        "required": ["code"],
        "additionalProperties": False,
    }

    def __init__(self, config: dict[str, Any] | None = None, *, pool: SandboxPool | None = None):
        super().__init__(config)
        code = self.config.get("code")
        if not isinstance(code, str) or not code.strip():
            raise ValueError(
                "config 'code' must be Python source defining def verify(task, trajectory)"
            )
        self.code = code
        timeout = float(self.config.get("timeout_seconds", 10))
        self.limits = SandboxLimits(
            cpu_seconds=timeout,
            wall_seconds=timeout,
            memory_mb=int(self.config.get("memory_mb", 512)),
        )
        self.pass_threshold = float(self.config.get("pass_threshold", 1.0))
        self.pool = pool

    def verify(self, task: Task, trajectory: Trajectory) -> VerifyResult:
        pool = self.pool or shared_pool()
        try:
            result = pool.call(
                self.code, ENTRYPOINT, [task.to_dict(), trajectory.to_dict()], limits=self.limits
            )
        except ValueError as exc:
            return VerifyResult.failure(
                f"cannot pass this task or trajectory to verify(): {exc}", reason="bad_input"
            )
        if not result.ok:
            return VerifyResult.failure(
                f"verify() failed ({result.reason}): {result.error}",
                reason=result.reason,
                sandbox=_sandbox_info(result),
            )
        try:
            verdict = verdict_from_value(result.value, pass_threshold=self.pass_threshold)
        except VerdictError as exc:
            return VerifyResult.failure(
                f"verify() returned {exc}",
                reason="bad_result",
                returned=repr(result.value)[:500],
                sandbox=_sandbox_info(result),
            )
        verdict.info.setdefault("sandbox", _sandbox_info(result))
        return verdict


def verdict_from_value(value: Any, *, pass_threshold: float = 1.0) -> VerifyResult:
    """Turn what `verify` returned into a VerifyResult, or raise VerdictError saying why not."""
    if isinstance(value, bool):
        raise VerdictError("a bool; return a number (1.0 pass, 0.0 fail) or a dict with 'passed'")
    if isinstance(value, int | float):
        reward = _finite(value, "the reward")
        return VerifyResult(reward=reward, passed=reward >= pass_threshold)
    if isinstance(value, dict):
        return _verdict_from_dict(value, pass_threshold)
    raise VerdictError(
        f"a {type(value).__name__}; return a number or a dict with keys {', '.join(VERDICT_KEYS)}"
    )


def _verdict_from_dict(value: dict[str, Any], pass_threshold: float) -> VerifyResult:
    unknown = sorted(set(value) - set(VERDICT_KEYS))
    if unknown:
        raise VerdictError(
            f"a dict with unknown key(s) {', '.join(map(repr, unknown))}; "
            f"allowed: {', '.join(VERDICT_KEYS)}"
        )
    if value.get("reward") is None and value.get("passed") is None:
        raise VerdictError("a dict with neither 'reward' nor 'passed'; give at least one")
    passed = value.get("passed")
    if passed is not None and not isinstance(passed, bool):
        raise VerdictError(f"'passed' = {passed!r}; it must be true or false")
    if value.get("reward") is None:
        reward = 1.0 if passed else 0.0
    else:
        reward = _finite(value["reward"], "'reward'")
    if passed is None:
        passed = reward >= pass_threshold
    bucket = _failure_bucket(value.get("failure_bucket"), passed)
    return VerifyResult(
        reward=reward,
        passed=passed,
        components=_components(value.get("components")),
        failure_bucket=bucket,
        flags=_flags(value.get("flags")),
        info=_info(value.get("info")),
    )


def _finite(number: Any, what: str) -> float:
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise VerdictError(f"{what} = {number!r}; it must be a number")
    if not math.isfinite(number):
        raise VerdictError(f"{what} = {number!r}; it must be a finite number")
    return float(number)


def _components(components: Any) -> dict[str, float]:
    if components is None:
        return {}
    if not isinstance(components, dict):
        raise VerdictError(
            f"'components' = {components!r:.100}; it must be a dict of name -> number"
        )
    return {str(name): _finite(part, f"component {name!r}") for name, part in components.items()}


def _failure_bucket(bucket: Any, passed: bool) -> FailureBucket | None:
    if bucket is None:
        return None
    values = [b.value for b in FailureBucket]
    if bucket not in values:
        raise VerdictError(f"'failure_bucket' = {bucket!r:.100}; use one of: {', '.join(values)}")
    if passed:
        raise VerdictError(
            f"'failure_bucket' = {bucket!r} for a passing trajectory; "
            "omit it or return passed false"
        )
    return FailureBucket(bucket)


def _flags(flags: Any) -> list[str]:
    if flags is None:
        return []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise VerdictError(f"'flags' = {flags!r:.100}; it must be a list of strings")
    return flags


def _info(info: Any) -> dict[str, Any]:
    if info is None:
        return {}
    if not isinstance(info, dict):
        raise VerdictError(f"'info' = {info!r:.100}; it must be a dict")
    return info


def _sandbox_info(result: SandboxResult) -> dict[str, Any]:
    """What the inspector shows about the run: isolation mode and the code's output."""
    return {
        "isolation": result.isolation,
        "stdout_tail": result.stdout_tail,
        "stderr_tail": result.stderr_tail,
    }
