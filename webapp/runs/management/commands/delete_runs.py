"""Clean up old runs from the shell or a cron job: `manage.py delete_runs --project SLUG --older-than DAYS ...`.

Without --yes it only lists what it would do: each chosen run with what it holds, and the runs it keeps
with why (what keeps a run on its delete page keeps it here; so do people's reviews, unless
--include-reviewed). With --yes it queues one `run_delete` job per run that may go, as the runs table's
"Delete selected…" does, and a worker deletes them (each run with its evaluations, in one
transaction, then its folder); --now deletes them in this process instead, one after the other, for a
server whose workers are not running. Runs that are queued or running are never chosen.
"""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.template.defaultfilters import filesizeformat
from django.utils import timezone

from webapp.projects.models import Project
from webapp.runs.selectors.run_delete import (
    ENDED_STATUSES,
    RunDeletePlan,
    ended_runs_before,
    run_delete_plan,
)
from webapp.runs.services.run_delete import RunDeleteRefused, run_delete_execute, run_delete_start

MAX_RUNS = 1000


def _words(value: str) -> list[str]:
    return [word.strip() for word in value.split(",") if word.strip()]


class Command(BaseCommand):
    help = "List, then delete, a project's ended runs older than some days (a dry run unless --yes)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--project", required=True, help="the project's slug")
        parser.add_argument("--older-than", type=float, required=True, metavar="DAYS",
                            help="runs created more than DAYS days ago (0: any age)")
        parser.add_argument("--status", default="", help="comma-separated: succeeded, failed, cancelled, draft "
                                                         "(default: all of these; never queued or running)")
        parser.add_argument("--kind", default="", help="comma-separated run kinds: eval, sft, grpo, dpo (default: any)")
        parser.add_argument("--name-contains", default="", help="only runs whose name contains this (any case)")
        parser.add_argument("--limit", type=int, default=100, help=f"at most this many runs (1-{MAX_RUNS}; oldest first)")
        parser.add_argument("--include-reviewed", action="store_true",
                            help="also delete runs whose trajectories people reviewed (kept by default)")
        parser.add_argument("--yes", action="store_true", help="delete them (without it, nothing changes)")
        parser.add_argument("--now", action="store_true", help="with --yes: delete in this process, not by a worker")

    def handle(self, *args, **opts) -> None:
        project = Project.objects.filter(slug=opts["project"]).first()
        if project is None:
            raise CommandError(f"No project with the slug {opts['project']!r}; see the slugs on the home page.")
        statuses = _words(opts["status"])
        unknown = [s for s in statuses if s not in ENDED_STATUSES]
        if unknown:
            raise CommandError(f"--status {', '.join(unknown)}: choose among {', '.join(ENDED_STATUSES)} (a queued or "
                               "running run is never deleted by this command).")
        if opts["older_than"] < 0 or not 1 <= opts["limit"] <= MAX_RUNS:
            raise CommandError(f"--older-than takes days (0 or more) and --limit 1 to {MAX_RUNS}.")
        if opts["now"] and not opts["yes"]:
            raise CommandError("--now deletes: give --yes with it (or leave both out to see what would go).")
        runs = ended_runs_before(project, before=timezone.now() - timedelta(days=opts["older_than"]),
                                 statuses=statuses, kinds=_words(opts["kind"]), name_contains=opts["name_contains"],
                                 limit=opts["limit"])
        going, kept = self._plans(runs, include_reviewed=opts["include_reviewed"])
        self._report(going, kept, dry_run=not opts["yes"])
        if opts["yes"] and going:
            self._delete(project, going, now=opts["now"])

    def _plans(self, runs, *, include_reviewed: bool) -> tuple[list[RunDeletePlan], dict[int, str]]:
        """The plans of the runs that may go, and why each other one stays; an evaluation that goes with a
        chosen run is not listed twice."""
        going: list[RunDeletePlan] = []
        kept: dict[int, str] = {}
        with_parent: set[int] = set()
        for run in runs:
            if run.pk in with_parent:
                continue
            plan = run_delete_plan(run)
            reasons = list(plan.blockers)
            if plan.pending_job is not None:
                reasons.append(f"being deleted already (job {plan.pending_job.pk})")
            if plan.reviews and not include_reviewed:
                reasons.append(f"people reviewed its trajectories ({plan.reviews}); --include-reviewed deletes "
                               "them too")
            if reasons:
                kept[run.pk] = f"#{run.pk} {run.name!r}: " + " ".join(reasons)
                continue
            going.append(plan)
            with_parent.update(plan.run_ids)
        return going, kept

    def _report(self, going: list[RunDeletePlan], kept: dict[int, str], *, dry_run: bool) -> None:
        for plan in going:
            extra = f" with {len(plan.evaluations)} evaluation(s)" if plan.evaluations else ""
            self.stdout.write(f"{'would delete' if dry_run else 'delete'} #{plan.run.pk} {plan.run.name!r} "
                              f"({plan.run.kind}, {plan.run.status}){extra}: {plan.trajectories:,} trajectories, "
                              f"{plan.checkpoints} checkpoint(s), {filesizeformat(plan.folder.bytes)}")
        for reason in kept.values():
            self.stdout.write(f"keep {reason}")
        files = sum(plan.folder.bytes for plan in going)
        self.stdout.write(f"{len(going)} run(s) {'would go' if dry_run else 'go'} "
                          f"({sum(p.trajectories for p in going):,} trajectories, {filesizeformat(files)}); "
                          f"{len(kept)} kept." + (" Nothing was changed: add --yes to delete them." if dry_run else ""))

    def _delete(self, project: Project, going: list[RunDeletePlan], *, now: bool) -> None:
        for plan in going:
            run = plan.run
            try:
                if now:
                    report = run_delete_execute(project_id=project.pk,
                                                payload={"run_id": run.pk, "run_name": run.name})
                    self.stdout.write(f"deleted #{run.pk} {run.name!r}: {report.removed.get('trajectories', 0):,} "
                                      f"trajectories, {filesizeformat(report.freed_bytes)} freed in "
                                      f"{sum(report.seconds.values()):.1f} s")
                else:
                    job = run_delete_start(run=run, actor=None)
                    self.stdout.write(f"queued job {job.pk} to delete #{run.pk} {run.name!r}")
            except RunDeleteRefused as exc:  # something changed since the plan was read
                self.stdout.write(f"keep {exc}")
