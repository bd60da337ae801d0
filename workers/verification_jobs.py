"""Job handlers on the `verify` queue: verifying logged trajectories and re-scoring runs."""

from __future__ import annotations

from webapp.runs.services.rescore import rescore_execute
from webapp.trajectories.services.verification import verify_and_store
from webapp.verifiers.models import VerifierVersion
from workers.runner import JobContext, handler


@handler("verify")
def run_verify(ctx: JobContext) -> None:
    version = VerifierVersion.objects.select_related("verifier").get(pk=ctx.payload["verifier_version_id"])
    report = verify_and_store(trajectory_ids=ctx.payload["trajectory_ids"], verifier_version=version,
                              should_stop=ctx.should_stop)
    ctx.log(f"verified {report.verified} trajectories ({report.errors} verifier errors)")


@handler("rescore")
def run_rescore(ctx: JobContext) -> None:
    summary = rescore_execute(rescore_id=ctx.payload["rescore_id"], should_stop=ctx.should_stop,
                              progress=ctx.set_progress)
    ctx.log(f"re-scored {summary['total']} trajectories: {summary['disagreements']} disagreements")
