"""Runs: validating their configs and turning a Run row into the training process's config."""

from __future__ import annotations

import json
import re
from pathlib import Path

from django.db import transaction

from environments.types import Task as EnvTask
from training.config import ConfigError, config_problems, validate_run_config
from webapp.datasets.models import TaskDataset
from webapp.projects.models import Project
from webapp.runs.models import Checkpoint, Job, ModelSpec, Run
from webapp.runs.services.jobs import job_create
from webapp.verifiers.models import VerifierVersion

__all__ = ["ConfigError", "config_error_field", "run_config_check", "run_config_problems", "run_create",
           "run_process_config"]


def _config_with_links(
    config: dict, *, kind: str, dataset: TaskDataset | None, dataset_path: str | None,
    verifier_version: VerifierVersion | None, model: ModelSpec | None, parent_checkpoint: Checkpoint | None,
) -> dict:
    """The run's own config plus what its linked rows say (dataset file, verifier, model, start point)."""
    merged = {k: v for k, v in config.items() if k != "reward" or verifier_version is None}
    merged.setdefault("kind", kind)
    if dataset is not None and dataset_path is not None:
        merged["dataset"] = dataset_path
        if dataset.environment:
            merged.setdefault("environment", dataset.environment)
    if verifier_version is not None:
        merged["verifier"] = {"name": verifier_version.verifier.kind, "config": verifier_version.config}
    if model is not None:
        merged["model"] = model.spec
        if model.gguf_file:
            merged["model_gguf_file"] = model.gguf_file
    if parent_checkpoint is not None:
        merged["init_checkpoint"] = parent_checkpoint.storage_uri
    return merged


# Keys the run config receives from the linked rows rather than from the body's config.
LINKED_CONFIG_KEYS = {
    "kind": "kind", "dataset": "dataset", "environment": "dataset", "verifier": "verifier", "reward": "verifier",
    "model": "model", "model_gguf_file": "model", "init_checkpoint": "parent_checkpoint_id",
}
QUOTED_KEY = re.compile(r"'([A-Za-z_][\w.\[\]]*)'")


def config_error_field(message: str, config: dict) -> str:
    """The request field a ConfigError is about: `config.<key>` for the key its message quotes.

    training.config names the offending key first, in single quotes ("'learning_rate'
    must be > 0, got -1", "unknown key 'lr' ..."). A key the body's config does not
    hold came from a linked row (dataset, verifier, model, parent checkpoint), so the
    error belongs beside that field instead.
    """
    match = QUOTED_KEY.search(message)
    if match is None:
        return "config"
    key = match.group(1)
    top = key.split(".")[0].split("[")[0]
    if top not in config and top in LINKED_CONFIG_KEYS:
        return LINKED_CONFIG_KEYS[top]
    return f"config.{key}"


def run_config_problems(
    config: dict, *, kind: str, dataset: TaskDataset | None = None, verifier_version: VerifierVersion | None = None,
    model: ModelSpec | None = None, parent_checkpoint: Checkpoint | None = None,
) -> dict[str, str]:
    """Every problem of a run config with its links, by field (`config.<key>`, `dataset`, ...), for forms."""
    merged = _config_with_links(
        config, kind=kind, dataset=dataset, dataset_path="tasks.jsonl" if dataset else None,
        verifier_version=verifier_version, model=model, parent_checkpoint=parent_checkpoint,
    )
    problems: dict[str, str] = {}
    for message in config_problems(merged):
        problems.setdefault(config_error_field(message, config), message)
    return problems


def run_config_check(
    config: dict, *, kind: str, dataset: TaskDataset | None = None, verifier_version: VerifierVersion | None = None,
    model: ModelSpec | None = None, parent_checkpoint: Checkpoint | None = None,
) -> None:
    """Raise ConfigError (naming the bad key) unless the config, with its links, is a valid run config."""
    validate_run_config(_config_with_links(
        config, kind=kind, dataset=dataset, dataset_path="tasks.jsonl" if dataset else None,
        verifier_version=verifier_version, model=model, parent_checkpoint=parent_checkpoint,
    ))


@transaction.atomic
def run_create(
    *, project: Project, name: str, kind: str, config: dict, actor, dataset: TaskDataset | None = None,
    verifier_version: VerifierVersion | None = None, model: ModelSpec | None = None,
    parent_checkpoint: Checkpoint | None = None, start: bool = True,
) -> tuple[Run, Job | None]:
    """Validate the config (ConfigError names the bad key), save the run, and queue its job."""
    run_config_check(config, kind=kind, dataset=dataset, verifier_version=verifier_version, model=model,
                     parent_checkpoint=parent_checkpoint)
    run = Run.objects.create(
        project=project, name=name, kind=kind, config=config, dataset=dataset, verifier_version=verifier_version,
        model=model, parent_checkpoint=parent_checkpoint, created_by=actor,
    )
    job = job_create(project=project, kind=kind, run=run) if start else None
    return run, job


def run_process_config(run: Run, run_dir: Path) -> dict:
    """The JSON config `python -m training run` receives for this run (dataset exported beside it)."""
    dataset_path = str(_export_dataset(run.dataset, run_dir)) if run.dataset_id else None
    config = _config_with_links(
        run.config, kind=run.kind, dataset=run.dataset, dataset_path=dataset_path,
        verifier_version=run.verifier_version,
        model=run.model, parent_checkpoint=run.parent_checkpoint,
    )
    validate_run_config(config)
    return config


def _export_dataset(dataset: TaskDataset, run_dir: Path) -> Path:
    """Write the dataset as Task JSONL once per content hash (attempts reuse the file)."""
    path = run_dir / f"tasks-{dataset.pk}-{(dataset.content_hash or 'nohash')[:12]}.jsonl"
    if path.exists():
        return path
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        for row in dataset.tasks.order_by("id").iterator(chunk_size=1000):
            task = EnvTask(
                id=row.external_id, messages=row.messages, tools=row.tools, ground_truth=row.ground_truth,
                category=row.category, split=row.split, environment=dataset.environment, metadata=row.metadata,
            )
            line = json.dumps(task.to_dict(), sort_keys=True)
            f.write(line + "\n")
    tmp.rename(path)
    return path
