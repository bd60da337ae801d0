"""Start an experiment (the whole pipeline) from the shell and follow it to its gate table."""

from __future__ import annotations

import json
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from webapp.projects.models import Project
from webapp.runs.models import Experiment, ExperimentState
from webapp.runs.services.experiments import ExperimentError, experiment_create, stage_plan

# Small enough for a CPU demo: every stage runs, in minutes rather than hours.
QUICK_CONFIG = {
    "common": {"max_tasks": 24, "max_completion_length": 64, "bf16": "auto", "device": "cpu"},
    "sft": {"kind": "sft", "max_steps": 6, "micro_batch_size": 4, "gradient_accumulation_steps": 1,
            "learning_rate": 1e-3, "eval_interval": 0, "checkpoint_interval": 6},
    "grpo": {"kind": "grpo", "algorithm": "dapo", "max_steps": 3, "num_prompts_per_step": 2,
             "num_generations_per_prompt": 4, "micro_batch_size": 8, "learning_rate": 2e-5,
             "eval_interval": 3, "checkpoint_interval": 3, "max_generation_batches": 1},
}


class Command(BaseCommand):
    help = "Create an experiment on a project and wait for its candidate checkpoint and gate table."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--project", default="demo")
        parser.add_argument("--dataset", default="workplace-json")
        parser.add_argument("--verifier", default="exact tool call")
        parser.add_argument("--model", default="SmolLM2-135M-Instruct (offline)")
        parser.add_argument("--name", default="demo experiment")
        parser.add_argument("--quick", action="store_true", help="tiny stage sizes (a CPU demo in minutes)")
        parser.add_argument("--config", default="{}", help="experiment settings as JSON (see services/experiments.py)")
        parser.add_argument("--no-wait", action="store_true")

    def handle(self, *args, **opts) -> None:
        project = Project.objects.filter(slug=opts["project"]).first()
        if project is None:
            raise CommandError(f"No project {opts['project']!r}; run `python manage.py crucible_setup` first.")
        dataset = project.datasets.filter(name=opts["dataset"]).order_by("-version").first()
        verifier = project.verifiers.filter(name=opts["verifier"]).first()
        model = project.model_specs.filter(name=opts["model"]).first()
        for what, obj in (("dataset", dataset), ("verifier", verifier), ("model", model)):
            if obj is None:
                raise CommandError(f"No {what} named {opts[what]!r} in project {project.slug}.")
        config = {**(QUICK_CONFIG if opts["quick"] else {}), **json.loads(opts["config"])}
        owner = project.memberships.filter(role="owner").first()
        actor = owner.user if owner else get_user_model().objects.filter(is_superuser=True).first()
        try:
            experiment = experiment_create(project=project, name=opts["name"], dataset=dataset,
                                           verifier_version=verifier.latest_version, model=model, actor=actor,
                                           config=config)
        except ExperimentError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"experiment {experiment.pk} started")
        if opts["no_wait"]:
            return
        self._follow(experiment.pk)

    def _follow(self, experiment_id: int) -> None:
        seen = None
        while True:
            experiment = Experiment.objects.get(pk=experiment_id)
            stages = {name: experiment.stages[name]["state"] for name in stage_plan(experiment) if name in experiment.stages}
            if stages != seen:
                self.stdout.write(f"  stages: {stages}")
                seen = stages
            if experiment.state != ExperimentState.RUNNING:
                break
            time.sleep(5)
        self.stdout.write(f"{experiment.state}: {experiment.reason}")
        for gate in experiment.gates:
            self.stdout.write(f"  {'PASS' if gate['passed'] else 'FAIL'}  {gate['gate']:<18} baseline "
                              f"{gate['baseline']}  candidate {gate['candidate']}  ({gate['rule']})")
