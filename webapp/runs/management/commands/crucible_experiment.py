"""Start an experiment (the whole pipeline) from the shell and follow it to its gate table.

While it waits it prints the running stage's progress (its job's state and progress, the
latest training step and its reward or loss) whenever that changes, and at least every
HEARTBEAT_SECONDS, so a long stage is never silent. --fail-on-gates makes the exit status
say whether the candidate may be promoted: 1 when a gate failed or the experiment failed.
"""

from __future__ import annotations

import json
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from webapp.projects.models import Project
from webapp.runs.models import Experiment, ExperimentState, Job, MetricPoint
from webapp.runs.services.experiments import (
    DEMO_DATASET,
    DEMO_MODEL,
    DEMO_VERIFIER,
    QUICK_CONFIG,
    WAITING,
    ExperimentError,
    experiment_create,
    experiment_inputs,
    stage_plan,
)

POLL_SECONDS = 5
HEARTBEAT_SECONDS = 60
"""An unchanged progress line is printed again after this long: proof the command is alive."""


class Command(BaseCommand):
    help = "Create an experiment on a project and wait for its candidate checkpoint and gate table."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--project", default="demo")
        parser.add_argument("--dataset", default=DEMO_DATASET)
        parser.add_argument("--verifier", default=DEMO_VERIFIER)
        parser.add_argument("--model", default=DEMO_MODEL)
        parser.add_argument("--name", default="demo experiment")
        parser.add_argument("--quick", action="store_true", help="tiny stage sizes (a CPU demo in minutes)")
        parser.add_argument("--config", default="{}", help="experiment settings as JSON (see services/experiments.py)")
        parser.add_argument("--no-wait", action="store_true")
        parser.add_argument("--fail-on-gates", action="store_true",
                            help="exit with status 1 unless the experiment succeeded and every gate passed "
                                 "(for scripts and CI)")

    def handle(self, *args, **opts) -> None:
        if opts["fail_on_gates"] and opts["no_wait"]:
            raise CommandError("--fail-on-gates waits for the gate table; drop --no-wait.")
        project = Project.objects.filter(slug=opts["project"]).first()
        if project is None:
            raise CommandError(f"No project {opts['project']!r}; run `python manage.py crucible_setup` first.")
        inputs = experiment_inputs(project, dataset=opts["dataset"], verifier=opts["verifier"], model=opts["model"])
        if inputs.missing:
            what = inputs.missing[0]
            raise CommandError(f"No {what} named {opts[what]!r}"
                               f"{' with a saved version' if what == 'verifier' else ''} in project {project.slug}.")
        config = {**(QUICK_CONFIG if opts["quick"] else {}), **json.loads(opts["config"])}
        owner = project.memberships.filter(role="owner").first()
        actor = owner.user if owner else get_user_model().objects.filter(is_superuser=True).first()
        try:
            experiment = experiment_create(project=project, name=opts["name"], dataset=inputs.dataset,
                                           verifier_version=inputs.verifier_version, model=inputs.model,
                                           actor=actor, config=config)
        except ExperimentError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"experiment {experiment.pk} started")
        if opts["no_wait"]:
            return
        experiment = self._follow(experiment.pk)
        self._report(experiment)
        if opts["fail_on_gates"] and not promotable(experiment):
            raise CommandError(f"experiment {experiment.pk} {verdict(experiment)}", returncode=1)

    def _follow(self, experiment_id: int) -> Experiment:
        """Poll until the experiment ends, printing stage changes and the running stage's progress."""
        started = printed_at = time.monotonic()
        seen_stages, seen_progress = None, None
        while True:
            experiment = Experiment.objects.get(pk=experiment_id)
            stages = {name: experiment.stages[name]["state"] for name in stage_plan(experiment) if name in experiment.stages}
            if stages != seen_stages:
                self.stdout.write(f"  stages: {stages}")
                seen_stages, printed_at = stages, time.monotonic()
            if experiment.state != ExperimentState.RUNNING:
                return experiment
            line = stage_progress(experiment)
            if line and (line != seen_progress or time.monotonic() - printed_at >= HEARTBEAT_SECONDS):
                self.stdout.write(f"  [{_elapsed(time.monotonic() - started)}] {line}")
                seen_progress, printed_at = line, time.monotonic()
            time.sleep(POLL_SECONDS)

    def _report(self, experiment: Experiment) -> None:
        self.stdout.write(f"{experiment.state}: {experiment.reason}")
        for gate in experiment.gates:
            self.stdout.write(f"  {'PASS' if gate['passed'] else 'FAIL'}  {gate['gate']:<18} baseline "
                              f"{gate['baseline']}  candidate {gate['candidate']}  ({gate['rule']})")


def _elapsed(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m{seconds:02d}s"


def promotable(experiment: Experiment) -> bool:
    """What --fail-on-gates checks: the pipeline finished and every gate passed."""
    return experiment.state == ExperimentState.SUCCEEDED and experiment.gates_passed is True


def verdict(experiment: Experiment) -> str:
    if experiment.state != ExperimentState.SUCCEEDED:
        return f"{experiment.state}: {experiment.reason}"
    failed = [gate["gate"] for gate in experiment.gates if not gate["passed"]]
    return "failed gates: " + ", ".join(failed)


def running_stage(experiment: Experiment) -> str | None:
    """The stage whose run the pipeline waits for, if any."""
    return next((name for name in stage_plan(experiment)
                 if experiment.stages.get(name, {}).get("state") == WAITING), None)


def stage_progress(experiment: Experiment) -> str | None:
    """One line on the running stage: its job's state and progress, and its latest train step.

    Job.progress is what the training process reports (steps for training, tasks scored for
    an evaluation); the step's reward (GRPO) or loss (SFT) shows whether it is learning.
    """
    stage = running_stage(experiment)
    if stage is None:
        return None
    run_id = experiment.stages[stage]["run"]
    parts = [f"{stage} (run {run_id})"]
    job = Job.objects.filter(run_id=run_id).order_by("-id").first()
    if job is not None:
        parts.append(f"job {job.state} {job.progress:.0%}")
    step = _latest_train_step(run_id)
    if step is not None:
        parts.append(step)
    return " · ".join(parts)


def _latest_train_step(run_id: int) -> str | None:
    """'step N reward R' (or loss) from the run's newest training metrics, if it has any."""
    latest = MetricPoint.objects.filter(run_id=run_id, split="train").order_by("-step").first()
    if latest is None:
        return None
    values = dict(MetricPoint.objects.filter(run_id=run_id, split="train", step=latest.step,
                                             name__in=("reward", "loss")).values_list("name", "value"))
    shown = next(((name, values[name]) for name in ("reward", "loss") if name in values), None)
    return f"step {latest.step}" + (f" {shown[0]} {shown[1]:.3f}" if shown else "")
