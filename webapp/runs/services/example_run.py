"""The demo's example run: a real CPU-recipe run recorded by our own training process, imported.

A new install should have something real to look at before anything trained on it: the demo
project gets the stages of one `scripts/cpu_recipe.py` run (baseline eval, SFT, GRPO from the
SFT checkpoint, held-out and validation evals of both checkpoints) with their metrics,
trajectories and checkpoints' metrics. They ship in EXAMPLE_ARCHIVE (made by
`scripts/record_example_run.py`: only what the import reads, no weights, xz-compressed) and go
in through `run_import`, the same path as `manage.py import_run` and the upload page, so the
import is idempotent: running `crucible_setup` again adds nothing.

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

from webapp.projects.models import Project
from webapp.runs.models import Run
from webapp.runs.services.run_import import ImportReport, import_scratch_dir, run_import

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


class ExampleRunMissing(RuntimeError):
    pass


@dataclass(frozen=True)
class ExampleImport:
    reports: dict[str, ImportReport]

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
        for stage, name in STAGES.items():
            folder = root / stage
            if not (folder / "events.jsonl").is_file():
                continue
            report = run_import(project=project, run_dir=folder, actor=actor, name=name,
                                source=f"{archive.name}:{stage}", folder_kept=False, trusted=False)
            _mark_example(report.run_id, stage)
            reports[stage] = report
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return ExampleImport(reports)


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
