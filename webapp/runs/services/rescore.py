"""Re-scoring: a new verifier version over a run's stored trajectories, compared with the old verdicts.

The trajectories keep their original reward and bucket; the new verdicts live in
RescoreResult rows, so two versions can be compared side by side.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable

from django.db import transaction

from webapp.runs.models import Run
from webapp.runs.services.jobs import job_create
from webapp.trajectories.models import Rescore, RescoreResult, Trajectory
from webapp.trajectories.services.verification import bucket_of, verify_one
from webapp.verifiers.models import VerifierVersion

BATCH = 500


@transaction.atomic
def rescore_start(*, run: Run, verifier_version: VerifierVersion, actor) -> Rescore:
    if verifier_version.verifier.project_id != run.project_id:
        raise ValueError("The verifier belongs to another project.")
    rescore = Rescore.objects.create(project=run.project, run=run, verifier_version=verifier_version, created_by=actor)
    job = job_create(project=run.project, kind="rescore", payload={"rescore_id": rescore.pk})
    Rescore.objects.filter(pk=rescore.pk).update(job=job)
    rescore.job = job
    return rescore


def _disagrees(trajectory: Trajectory, reward: float | None, passed: bool) -> bool:
    if trajectory.passed != passed:
        return True
    if (trajectory.reward is None) != (reward is None):
        return True
    return reward is not None and abs(trajectory.reward - reward) > 1e-9


def rescore_execute(*, rescore_id: int, should_stop: Callable[[], bool] = lambda: False,
                    progress: Callable[[float], None] = lambda _f: None) -> dict:
    """Verify every trajectory of the run again (idempotent: finished rows are skipped) and summarise."""
    rescore = Rescore.objects.select_related("verifier_version__verifier").get(pk=rescore_id)
    done = set(rescore.results.values_list("trajectory_id", flat=True))
    todo = Trajectory.objects.filter(run_id=rescore.run_id).exclude(pk__in=done).select_related("task").order_by("pk")
    total = len(done) + todo.count()
    batch: list[RescoreResult] = []
    for i, trajectory in enumerate(todo.iterator(chunk_size=BATCH)):
        if should_stop():
            break
        result = verify_one(rescore.verifier_version, trajectory)
        batch.append(RescoreResult(
            rescore=rescore, trajectory=trajectory, reward=result.reward, passed=result.passed,
            failure_bucket=bucket_of(result), components=result.components, error=result.error or "",
            disagrees=_disagrees(trajectory, result.reward, result.passed),
        ))
        if len(batch) >= BATCH:
            RescoreResult.objects.bulk_create(batch, ignore_conflicts=True)
            batch.clear()
            progress((len(done) + i + 1) / max(1, total))
    RescoreResult.objects.bulk_create(batch, ignore_conflicts=True)
    summary = rescore_summary(rescore)
    Rescore.objects.filter(pk=rescore.pk).update(summary=summary)
    return summary


def rescore_summary(rescore: Rescore) -> dict:
    """How the new version's verdicts differ from the stored ones."""
    rows = list(rescore.results.select_related("trajectory").only(
        "passed", "reward", "failure_bucket", "disagrees", "error",
        "trajectory__passed", "trajectory__reward", "trajectory__failure_bucket",
    ))
    flips = Counter()
    for r in rows:
        if r.trajectory.passed != r.passed:
            flips["fail_to_pass" if r.passed else "pass_to_fail"] += 1
    old_scored = [r.trajectory.reward for r in rows if r.trajectory.reward is not None]
    new_scored = [r.reward for r in rows if r.reward is not None]
    return {
        "total": len(rows),
        "disagreements": sum(r.disagrees for r in rows),
        "pass_to_fail": flips["pass_to_fail"],
        "fail_to_pass": flips["fail_to_pass"],
        "errors": sum(bool(r.error) for r in rows),
        "old_pass_rate": sum(r.trajectory.passed for r in rows) / len(rows) if rows else None,
        "new_pass_rate": sum(r.passed for r in rows) / len(rows) if rows else None,
        "old_reward_mean": sum(old_scored) / len(old_scored) if old_scored else None,
        "new_reward_mean": sum(new_scored) / len(new_scored) if new_scored else None,
        "bucket_changes": dict(Counter(
            f"{r.trajectory.failure_bucket or 'passed'} -> {r.failure_bucket or 'passed'}"
            for r in rows if r.trajectory.failure_bucket != r.failure_bucket
        )),
    }


@transaction.atomic
def trajectory_reverify(*, trajectory: Trajectory, verifier_version: VerifierVersion, actor) -> RescoreResult:
    """Verify one trajectory again (now, in this process) and keep the verdict beside the stored one."""
    if verifier_version.verifier.project_id != trajectory.project_id:
        raise ValueError("The verifier belongs to another project.")
    result = verify_one(verifier_version, trajectory)
    rescore = Rescore.objects.create(project_id=trajectory.project_id, run_id=trajectory.run_id,
                                     verifier_version=verifier_version, created_by=actor,
                                     summary={"trajectory": trajectory.pk})
    return RescoreResult.objects.create(
        rescore=rescore, trajectory=trajectory, reward=result.reward, passed=result.passed,
        failure_bucket=bucket_of(result), components=result.components, error=result.error or "",
        info=_plain_json(result.info), disagrees=_disagrees(trajectory, result.reward, result.passed),
    )


def _plain_json(value) -> dict:
    """Verifier info as JSON the database stores: objects become strings, NUL characters are dropped."""
    try:
        plain = json.loads(json.dumps(value or {}, default=str, allow_nan=False))
    except ValueError:
        return {"note": "the verifier's trace held NaN or infinite numbers, which JSON cannot store"}
    return _without_nul(plain)


def _without_nul(value):
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    return value
