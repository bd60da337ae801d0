"""The demo's example run: a real CPU-recipe run recorded by our own training process, imported.

A new install should have something real to look at before anything trained on it, and it
should show what the product promises: a checkpoint that beats the baseline on held-out tasks.
The demo project gets the stages of one full `scripts/cpu_recipe.py` run (baseline eval, SFT,
GRPO from the SFT checkpoint, held-out and validation evals of both checkpoints) with their
metrics, trajectories and checkpoints' metrics, and the recipe's own tasks as a dataset
(EXAMPLE_DATASET), so every example trajectory has its task: the inspector shows the prompt,
re-verify and categories work, and the sanity check can draw from it. They ship in
EXAMPLE_ARCHIVE (made by `scripts/record_example_run.py`: only what the import reads, no
weights, xz-compressed) and go in through `run_import`, the same path as `manage.py
import_run` and the upload page, so the import is idempotent: running `crucible_setup` again
adds nothing. The evaluations are tied to the checkpoints they measured (by the path their
config names), so the checkpoints table shows held-out and validation numbers for each.

The stages then make one finished experiment (EXAMPLE_EXPERIMENT, `experiment_record`): its
gates are decided by the same promotion_gates from the runs' own numbers, and when they pass
its candidate is promoted to the EXAMPLE_ALIAS alias, forced with a reason that says why (the
weights are not on this server), as a person would have to.

Every run of it is marked in its import_info ("example": what it is), which the shell shows as
a banner on every page of the project: these runs were not trained on this machine, and their
checkpoints' weights are not here (they cannot be promoted or exported).
"""

from __future__ import annotations

import json
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from django.db import transaction

from environments.types import Task as EnvTask
from webapp.datasets.models import Lineage, Source, TaskDataset
from webapp.datasets.services.datasets import dataset_create
from webapp.projects.models import Project
from webapp.runs.models import Checkpoint, CheckpointAlias, Experiment, ModelSpec, Run
from webapp.runs.services.experiments import DEMO_MODEL, DEMO_VERIFIER, experiment_record
from webapp.runs.services.promotion import checkpoint_promote
from webapp.runs.services.run_import import ImportReport, RunLinks, import_scratch_dir, run_import
from webapp.verifiers.models import Verifier

EXAMPLE_DIR = Path(__file__).resolve().parent / "example_run_archive"
EXAMPLE_ARCHIVE = EXAMPLE_DIR / "cpu-recipe-example.tar.xz"
EXAMPLE_NOTE = ("Example data: recorded by scripts/cpu_recipe.py on a 2-core CPU and imported; "
                "not trained on this machine (its checkpoints' weights are not here).")

# The recipe's stage folders, in the order they ran, and the run names they get.
STAGES: dict[str, str] = {
    "baseline": "example · baseline eval (held-out)",
    "sft": "example · SFT",
    "grpo": "example · GRPO from the SFT checkpoint",
    "sft_held_out": "example · held-out eval after SFT",
    "grpo_held_out": "example · held-out eval after GRPO",
    "sft_validation": "example · validation eval after SFT",
    "grpo_validation": "example · validation eval after GRPO",
}


# The recipe's tasks (train, validation and held-out splits) as they were written for it.
TASKS_FILE = "tasks.jsonl"
EXAMPLE_DATASET = "example-recipe-tasks"
# The experiment the stages make: experiment stage -> recipe stage.
EXPERIMENT_STAGES = {"baseline": "baseline", "sft": "sft", "grpo": "grpo", "held_out": "grpo_held_out"}
EXAMPLE_EXPERIMENT = "example · baseline → SFT → GRPO (the CPU recipe)"
EXAMPLE_ALIAS = "example-candidate"
# The example experiment's one setting beyond its stages' configs. The base model never calls a tool,
# so it is never unsafe, and under the strict rule no model that acts could pass; the example accepts
# up to 5% unsafe actions on held-out tasks, and its gate table says so in the rule.
EXAMPLE_SETTINGS = {"unsafe_action_allowance": 0.05}
# What a stage's config names that is a file of the recording machine, not a setting of the experiment.
_NOT_SETTINGS = ("model", "dataset", "init_checkpoint")


class ExampleRunMissing(RuntimeError):
    pass


@dataclass(frozen=True)
class ExampleImport:
    reports: dict[str, ImportReport]
    experiment: Experiment | None = None

    @property
    def created(self) -> int:
        return sum(1 for r in self.reports.values() if r.created)

    def run_id(self, stage: str) -> int | None:
        report = self.reports.get(stage)
        return report.run_id if report else None


def _extract(archive: Path, dest: Path) -> Path:
    """The archive's stage folders under dest (members checked: relative, no links, files only)."""
    with tarfile.open(archive, "r:xz") as tar:
        members = []
        for member in tar.getmembers():
            parts = PurePosixPath(member.name).parts
            if member.name.startswith("/") or ".." in parts or not (member.isfile() or member.isdir()):
                raise ExampleRunMissing(f"{archive} holds an unexpected entry {member.name!r}; remake it with "
                                        "scripts/record_example_run.py")
            members.append(member)
        tar.extractall(dest, members=members, filter="data")
    roots = [p for p in dest.iterdir() if p.is_dir()]
    return roots[0] if len(roots) == 1 and not (roots[0] / "events.jsonl").exists() else dest


def example_runs_import(*, project: Project, actor, archive: Path = EXAMPLE_ARCHIVE) -> ExampleImport:
    """Import the example run's stages into `project`; a second call finds them and adds nothing."""
    if not archive.is_file():
        raise ExampleRunMissing(f"The example run archive {archive} is missing; remake it with "
                                "scripts/record_example_run.py (or run crucible_setup --no-example).")
    reports: dict[str, ImportReport] = {}
    scratch = import_scratch_dir()  # a fresh folder of its own
    try:
        root = _extract(archive, scratch)
        links = _example_links(project, actor, root / TASKS_FILE)
        for stage, name in STAGES.items():
            folder = root / stage
            if not (folder / "events.jsonl").is_file():
                continue
            report = run_import(project=project, run_dir=folder, actor=actor, name=name,
                                source=f"{archive.name}:{stage}", folder_kept=False, trusted=False, links=links)
            _mark_example(report.run_id, stage)
            reports[stage] = report
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    experiment = _example_experiment(project, actor, reports, links)
    return ExampleImport(reports, experiment)


def _example_links(project: Project, actor, tasks_path: Path) -> RunLinks:
    """The example's dataset (made from the archive's tasks once), the demo's verifier and model."""
    dataset = TaskDataset.objects.filter(project=project, name=EXAMPLE_DATASET).order_by("-version").first()
    if dataset is None and tasks_path.is_file():
        with tasks_path.open() as f:
            tasks = [EnvTask.from_dict(json.loads(line)) for line in f if line.strip()]
        dataset = dataset_create(
            project=project, name=EXAMPLE_DATASET, tasks=tasks, actor=actor, environment="json_tool_call",
            source=Source.IMPORTED, lineage=Lineage.IMPORT,
            description="The example run's tasks, as scripts/cpu_recipe.py wrote them: train and validation "
                        "tasks of the trained request templates, held-out tasks of reworded templates no "
                        "training task uses.")
    verifier = Verifier.objects.filter(project=project, name=DEMO_VERIFIER).first()
    return RunLinks(dataset=dataset, verifier_version=verifier.latest_version if verifier else None,
                    model=ModelSpec.objects.filter(project=project, name=DEMO_MODEL).first())


def _example_experiment(project: Project, actor, reports: dict[str, ImportReport],
                        links: RunLinks) -> Experiment | None:
    """The example's stages as one finished experiment, once; its candidate promoted when its gates passed."""
    existing = Experiment.objects.filter(project=project, name=EXAMPLE_EXPERIMENT).first()
    if existing is not None:
        return existing
    if links.dataset is None or links.verifier_version is None or links.model is None:
        return None
    if any(reports.get(stage) is None for stage in EXPERIMENT_STAGES.values()):
        return None
    runs = {stage: Run.objects.get(pk=reports[recorded].run_id) for stage, recorded in EXPERIMENT_STAGES.items()}
    config = {stage: {k: v for k, v in run.config.items() if k not in _NOT_SETTINGS} for stage, run in runs.items()}
    config.update(EXAMPLE_SETTINGS)
    experiment = experiment_record(project=project, name=EXAMPLE_EXPERIMENT, dataset=links.dataset,
                                   verifier_version=links.verifier_version, model=links.model, config=config,
                                   runs=runs, actor=actor)
    if experiment.gates_passed and experiment.candidate_checkpoint is not None:
        _promote_example(experiment.candidate_checkpoint, actor)
    return experiment


def _promote_example(candidate: Checkpoint, actor) -> None:
    if CheckpointAlias.objects.filter(project=candidate.run.project, name=EXAMPLE_ALIAS).exists():
        return
    checkpoint_promote(checkpoint=candidate, alias=EXAMPLE_ALIAS, actor=actor, force=True,
                       reason="Example data: this candidate passed every gate of the example experiment on the "
                            "numbers recorded by scripts/cpu_recipe.py; its weights are not on this server, so "
                            "the promotion had to be forced.")


def _mark_example(run_id: int, stage: str) -> None:
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        info = {**run.import_info, "example": EXAMPLE_NOTE, "example_stage": stage}
        if info != run.import_info:
            run.import_info = info
            run.save(update_fields=["import_info"])


def project_has_example_runs(project_id: int) -> bool:
    """Whether the project holds example runs (the shell's banner); one indexed query."""
    return Run.objects.filter(project_id=project_id, import_info__has_key="example").exclude(import_key="").exists()


def example_manifest() -> dict:
    """What the shipped archive was recorded with (example_run_archive/manifest.json), for the docs and pages."""
    path = EXAMPLE_DIR / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {}


EXAMPLE_QUEUE = "Example: failures of the GRPO run"


def example_queue_create(*, project: Project, result: ExampleImport, actor):
    """A review queue of the example GRPO run's failures, once, so the review page has work on day one."""
    from webapp.trajectories.models import QueueOrder, ReviewQueue
    from webapp.trajectories.services.review import queue_create

    run_id = result.run_id("grpo")
    if run_id is None or ReviewQueue.objects.filter(project=project, name=EXAMPLE_QUEUE).exists():
        return None
    return queue_create(project=project, name=EXAMPLE_QUEUE, filter={"run": str(run_id), "passed": "no"},
                        order=QueueOrder.FAILURES_FIRST, limit=50, actor=actor)
