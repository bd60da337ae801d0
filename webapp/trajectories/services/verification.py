"""Verifying stored trajectories with a chosen verifier version (production rows, re-scoring)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from environments.parsing import calls_from_trajectory
from environments.types import Task as EnvTask
from environments.types import Trajectory as EnvTrajectory
from environments.types import VerifyResult
from webapp.trajectories.models import FAILURE_BUCKETS, Trajectory
from webapp.verifiers.models import VerifierVersion
from webapp.verifiers.services.judge import build_verifier


def env_task_of(trajectory: Trajectory) -> EnvTask | None:
    """The task a trajectory answered: its dataset task, else the snapshot the producer sent."""
    if trajectory.task_id is not None:
        task = trajectory.task
        return EnvTask(id=task.external_id, messages=task.messages, tools=task.tools, ground_truth=task.ground_truth,
                       category=task.category, split=task.split, metadata=task.metadata)
    snap = trajectory.task_snapshot
    if not snap:
        return None
    return EnvTask(id=trajectory.task_key, messages=snap.get("messages") or [], tools=snap.get("tools") or [],
                   ground_truth=snap.get("ground_truth"), category=snap.get("category", ""), split="production",
                   metadata=snap.get("metadata") or {})


def env_trajectory_of(trajectory: Trajectory) -> EnvTrajectory:
    return EnvTrajectory(turns=trajectory.turns, truncated="truncated" in (trajectory.flags or []))


def verify_one(verifier_version: VerifierVersion, trajectory: Trajectory) -> VerifyResult:
    """Run the verifier; anything that goes wrong is a verifier error with no reward, never 0."""
    task = env_task_of(trajectory)
    if task is None:
        return VerifyResult.failure("the trajectory has no task to verify against (send `task` when logging it)")
    try:
        verifier = build_verifier(verifier_version.verifier.kind, verifier_version.config,
                                  project=verifier_version.verifier.project)
        return verifier.verify(task, env_trajectory_of(trajectory))
    except Exception as exc:  # a verifier bug must not lose the trajectory
        return VerifyResult.failure(f"{type(exc).__name__}: {exc}")


def bucket_of(result: VerifyResult) -> str:
    bucket = str(result.failure_bucket) if result.failure_bucket else ""
    return bucket if bucket in FAILURE_BUCKETS else ""


@dataclass
class VerifyReport:
    verified: int = 0
    errors: int = 0


def verify_and_store(
    *, trajectory_ids: Iterable[int], verifier_version: VerifierVersion, should_stop: Callable[[], bool] = lambda: False
) -> VerifyReport:
    """Score unscored (e.g. production) trajectories in place, recording which version scored them."""
    report = VerifyReport()
    for trajectory in Trajectory.objects.filter(pk__in=list(trajectory_ids)).select_related("task"):
        if should_stop():
            break
        result = verify_one(verifier_version, trajectory)
        trajectory.reward = result.reward
        trajectory.passed = result.passed
        trajectory.components = result.components
        trajectory.failure_bucket = bucket_of(result)
        trajectory.flags = sorted(set(trajectory.flags or []) | set(result.flags))
        trajectory.tool_calls = _calls(trajectory)
        trajectory.verifier_version = verifier_version
        trajectory.save(update_fields=["reward", "passed", "components", "failure_bucket", "flags", "tool_calls",
                                       "verifier_version"])
        report.verified += 1
        report.errors += result.error is not None
    return report


def _calls(trajectory: Trajectory) -> list[dict]:
    parsed = calls_from_trajectory(env_trajectory_of(trajectory), None, mode="lenient")
    return [call.to_dict() for call in parsed.calls]
