"""Runs: validating their configs and turning a Run row into the training process's config.

A run config is validated once per process boundary: once per web request, by
`run_config_check`, whose `CheckedRunConfig` is what `run_create` saves (it takes no unchecked
dict); and once in the worker, by `run_process_config`, when the linked rows become paths.
Problems travel as data (training.config.ConfigProblem), each named by the request field it is
about: `config.<path>` for the run's own config, or the field of the linked row that supplied
the key (`dataset`, `verifier`, `model`, `parent_checkpoint_id`, `kind`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from environments.registry import canonical_verifier_name
from environments.types import Task as EnvTask
from training.config import (
    ConfigError,
    ConfigProblem,
    RunConfig,
    config_to_dict,
    validate_run_config,
)
from webapp.datasets.models import TaskDataset
from webapp.projects.models import Project
from webapp.runs.models import Checkpoint, Job, ModelSpec, Run
from webapp.runs.selectors.dataset_delete import dataset_label, pending_dataset_deletion
from webapp.runs.services.jobs import job_create, queue_for_run
from webapp.runs.services.models import gguf_name_problem, hf_id_problem, registered_model_problem
from webapp.runs.services.paths import checkpoint_folder, weights_problem
from webapp.trajectories.models import ReviewQueue
from webapp.trajectories.services.review import ReviewError, queue_preference_pairs_file
from webapp.verifiers.models import VerifierVersion

__all__ = ["CheckedRunConfig", "ConfigError", "config_path_problems", "run_config_check", "run_config_problems",
           "run_create", "run_process_config"]

# A review queue's preference pairs, as a DPO run's `preference_pairs` names them.
QUEUE_REFERENCE = re.compile(r"^review_queue:([1-9][0-9]{0,17})$")
# Config keys the training process opens as a file or folder: a request never gives their path;
# it names a row of the project that the server turns into a path (run_process_config).
PATH_KEYS = {
    "dataset": "give one of this project's datasets in the run's `dataset` field (a name, or {name, version}); "
               "the server writes its tasks file for the job",
    "init_checkpoint": "give one of this project's checkpoints in `parent_checkpoint_id` (the API) or as the "
                       "start checkpoint (the form); the server loads its folder",
    "reviewed_trajectories": "turn the reviewed trajectories into a dataset (the review queue's “add to dataset”) "
                             "and train on it with sft_source ground_truth",
    "preference_pairs": "give one of this project's review queues as \"review_queue:<id>\" (the queue's “Train DPO "
                        "on these pairs”); the server writes its preference pairs for the job",
}
# Verifiers whose config makes the server call a URL: only a saved verifier of the project may use them.
URL_VERIFIERS = frozenset({"llm_judge"})


LINKED_CONFIG_KEYS = frozenset(
    {"kind", "dataset", "environment", "verifier", "model", "model_gguf_file", "init_checkpoint"})
"""Config keys a run's linked rows may write (_config_with_links): set by the run, never a default."""


def _config_with_links(
    config: dict, *, kind: str, dataset: TaskDataset | None, dataset_path: str | None,
    verifier_version: VerifierVersion | None, model: ModelSpec | None, parent_checkpoint: Checkpoint | None,
) -> tuple[dict, dict[str, str]]:
    """The run's own config plus what its linked rows say (dataset file, verifier, model, start point),
    and, for each key a linked row wrote, the request field that names that row (its problems belong there)."""
    merged = {k: v for k, v in config.items() if k != "reward" or verifier_version is None}
    origin: dict[str, str] = {}

    def link(key: str, value, field: str, *, default: bool = False) -> None:
        if not (default and key in merged):  # a default only where the config itself is silent
            merged[key], origin[key] = value, field

    link("kind", kind, "kind", default=True)
    if dataset is not None and dataset_path is not None:
        link("dataset", dataset_path, "dataset")
        if dataset.environment:
            link("environment", dataset.environment, "dataset", default=True)
    if verifier_version is not None:
        link("verifier", {"name": verifier_version.verifier.kind, "config": verifier_version.config}, "verifier")
    if model is not None:
        link("model", model.spec, "model")
        if model.gguf_file:
            link("model_gguf_file", model.gguf_file, "model")
    if parent_checkpoint is not None:
        link("init_checkpoint", parent_checkpoint.storage_uri, "parent_checkpoint_id")
    return merged, origin


def _request_field(path: str, origin: dict[str, str]) -> str:
    """The request field a training.config problem at `path` is about: the linked row that wrote its key, else
    `config.<path>` (`config` for the config as a whole)."""
    return origin.get(path.split(".")[0]) or (f"config.{path}" if path else "config")


def _preference_queue_problem(value: str, project: Project) -> str | None:
    match = QUEUE_REFERENCE.match(value)
    if match is None:
        return f"'preference_pairs' must name a review queue, not a path: {PATH_KEYS['preference_pairs']}."
    if not ReviewQueue.objects.filter(pk=int(match.group(1)), project=project).exists():
        return (f"'preference_pairs' names review queue {match.group(1)}, which this project does not have: "
                "give one of this project's review queues as \"review_queue:<id>\".")
    return None


def _verifier_problem(config: dict) -> str | None:
    for key in ("verifier", "reward"):
        value = config.get(key)
        name = value.get("name") if isinstance(value, dict) else value
        if isinstance(name, str) and canonical_verifier_name(name) in URL_VERIFIERS:
            return (f"'{key}' {name} calls a URL, so a run config cannot set it up: save it as one of this "
                    "project's verifiers (Verifiers page) and choose it in the run's `verifier` field.")
    return None


def config_path_problems(config: dict, *, project: Project) -> dict[str, str]:
    """Every path- or URL-valued key of a request's config that is not a reference, by `config.<key>`.

    A path never comes from a request: dataset, init_checkpoint, reviewed_trajectories and
    preference_pairs are rows of the project (preference_pairs as "review_queue:<id>"), model
    is a Hugging Face id (a folder on this machine is a registered model), model_gguf_file a
    file name inside the model, and a verifier that calls a URL is a saved verifier.
    """
    if not isinstance(config, dict):
        return {}
    problems: dict[str, str] = {}
    for key, instead in PATH_KEYS.items():
        value = config.get(key)
        if value is None:
            continue
        if key == "preference_pairs" and isinstance(value, str):
            problem = _preference_queue_problem(value, project)
        else:
            problem = f"'{key}' cannot be a path from a request: {instead}."
        if problem:
            problems[f"config.{key}"] = problem
    model = config.get("model")
    if isinstance(model, str) and (problem := hf_id_problem(model)):
        problems["config.model"] = (f"'model' {problem} A model folder on this server is a registered model: "
                                    "register it in the project's settings and choose it in the run's `model` field.")
    gguf = config.get("model_gguf_file")
    if isinstance(gguf, str) and (problem := gguf_name_problem(gguf)):
        problems["config.model_gguf_file"] = f"'model_gguf_file' {problem}"
    if problem := _verifier_problem(config):
        problems["config.verifier" if "verifier" in config else "config.reward"] = problem
    return problems


def _links_problems(*, model: ModelSpec | None, dataset: TaskDataset | None = None) -> dict[str, str]:
    """Problems of the linked rows a job would open: a registered model folder outside the model roots, a
    dataset version whose deletion is queued (the deletion job would refuse once the run exists, but the
    person meant neither to keep the version nor to train on a version that is going)."""
    problems: dict[str, str] = {}
    problem = registered_model_problem(model) if model is not None else None
    if problem:
        problems["model"] = problem
    deletion = pending_dataset_deletion(dataset) if dataset is not None else None
    if deletion is not None:
        problems["dataset"] = (f"Dataset {dataset_label(dataset)!r} is being deleted (job {deletion.pk}); choose another "
                               "version, or cancel that job on the Jobs page to keep this one.")
    return problems


@dataclass(frozen=True)
class CheckedRunConfig:
    """A run config with the rows it links to, checked once (run_config_check): what run_create saves.

    `config` is the run's own config as given (Run.config keeps it: what the person set, the
    defaults left out); `resolved` is training's RunConfig of it with its links, every default filled.
    """

    project: Project
    kind: str
    config: dict
    resolved: RunConfig
    dataset: TaskDataset | None = None
    verifier_version: VerifierVersion | None = None
    model: ModelSpec | None = None
    parent_checkpoint: Checkpoint | None = None


def _check(
    config: dict, *, kind: str, dataset: TaskDataset | None, verifier_version: VerifierVersion | None,
    model: ModelSpec | None, parent_checkpoint: Checkpoint | None, project: Project | None,
) -> tuple[RunConfig | None, list[ConfigProblem]]:
    """training.config's one validation of the config with its links, and every problem by request field."""
    merged, origin = _config_with_links(
        config, kind=kind, dataset=dataset, dataset_path="tasks.jsonl" if dataset else None,
        verifier_version=verifier_version, model=model, parent_checkpoint=parent_checkpoint,
    )
    problems: list[ConfigProblem] = []
    if project is not None:
        problems += [ConfigProblem(field, message) for field, message in
                     {**config_path_problems(config, project=project), **_links_problems(model=model, dataset=dataset)}.items()]
    try:
        resolved = validate_run_config(merged)
    except ConfigError as exc:
        return None, problems + [ConfigProblem(_request_field(p.field, origin), p.message) for p in exc.problems]
    return (None if problems else resolved), problems


def run_config_check(
    config: dict, *, project: Project, kind: str, dataset: TaskDataset | None = None,
    verifier_version: VerifierVersion | None = None, model: ModelSpec | None = None,
    parent_checkpoint: Checkpoint | None = None,
) -> CheckedRunConfig:
    """The config checked with its links, for run_create; ConfigError with every problem otherwise.

    Each problem names its request field (`config.<path>`, or the linked row's field): a path where a
    reference belongs (config_path_problems), a registered model outside the model roots, and every
    problem training.config finds.
    """
    resolved, problems = _check(config, kind=kind, dataset=dataset, verifier_version=verifier_version, model=model,
                                parent_checkpoint=parent_checkpoint, project=project)
    if resolved is None:
        raise ConfigError(problems)
    return CheckedRunConfig(project=project, kind=kind, config=config, resolved=resolved, dataset=dataset,
                            verifier_version=verifier_version, model=model, parent_checkpoint=parent_checkpoint)


def run_config_problems(
    config: dict, *, kind: str, dataset: TaskDataset | None = None, verifier_version: VerifierVersion | None = None,
    model: ModelSpec | None = None, parent_checkpoint: Checkpoint | None = None, project: Project | None = None,
) -> dict[str, str]:
    """Every problem of a run config with its links, by request field, or {}.

    With `project` (a request's config) a path where a reference belongs is a problem too
    (config_path_problems); without it (an imported run's recorded config) only the schema is checked.
    """
    _resolved, problems = _check(config, kind=kind, dataset=dataset, verifier_version=verifier_version, model=model,
                                 parent_checkpoint=parent_checkpoint, project=project)
    return ConfigError(problems).by_field() if problems else {}


def resolved_run_config(config: dict, *, kind: str) -> dict | None:
    """An imported run's config with every default filled in, or None when it does not validate on its own.

    A worker's run.json names its model and dataset itself, so it resolves without the rows a
    new run links; a hand-written config that needs them stays as it was given.
    """
    resolved, _problems = _check(config, kind=kind, dataset=None, verifier_version=None, model=None,
                                 parent_checkpoint=None, project=None)
    return config_to_dict(resolved) if resolved is not None else None


@transaction.atomic
def run_create(*, name: str, checked: CheckedRunConfig, actor, start: bool = True) -> tuple[Run, Job | None]:
    """Save the run of a checked config and queue its job; the config is not validated again."""
    run = Run.objects.create(
        project=checked.project, name=name, kind=checked.kind, config=checked.config,
        resolved_config=config_to_dict(checked.resolved), dataset=checked.dataset,
        verifier_version=checked.verifier_version, model=checked.model, parent_checkpoint=checked.parent_checkpoint,
        created_by=actor,
    )
    job = (job_create(project=checked.project, kind=checked.kind, run=run, queue=queue_for_run(checked.kind,
                                                                                                checked.config))
           if start else None)
    return run, job


def run_process_config(run: Run, run_dir: Path) -> dict:
    """The JSON config `python -m training run` receives for this run (the worker's one validation).

    Every path in it is the server's: the dataset and the review queue's preference pairs are
    written beside it, the start checkpoint is its folder inside its own run's folder (or the
    job stops with a ConfigError saying why), and a path the run's config holds where a
    reference belongs is refused here too, whoever wrote the row.

    The worker validates what it writes, although the request that created the run did, because
    this is a new config: the linked rows are read now (a model spec edited since, the start
    checkpoint's folder, files written for this attempt), and the worker reads `device` and
    `num_processes` from it to refuse a device it lacks and to count ranks before it spawns
    anything. A config that cannot run fails the job here, in a second, instead of after the
    training process has imported torch; the training process then validates run.json once more
    as its own boundary.
    """
    problems = {**config_path_problems(run.config, project=run.project), **_links_problems(model=run.model)}
    if problems:
        raise ConfigError([ConfigProblem(field, message) for field, message in problems.items()])
    dataset_path = str(_export_dataset(run.dataset, run_dir)) if run.dataset_id else None
    config, _origin = _config_with_links(
        run.config, kind=run.kind, dataset=run.dataset, dataset_path=dataset_path,
        verifier_version=run.verifier_version,
        model=run.model, parent_checkpoint=run.parent_checkpoint,
    )
    if run.parent_checkpoint_id:
        config["init_checkpoint"] = str(_start_checkpoint_folder(run))
    if isinstance(config.get("preference_pairs"), str):
        config["preference_pairs"] = str(_export_preference_pairs(config["preference_pairs"], run, run_dir))
    validate_run_config(config)
    return config


def _start_checkpoint_folder(run: Run) -> Path:
    """The parent checkpoint's folder, only from inside its own run's folder in this project."""
    parent = run.parent_checkpoint
    what = f"checkpoint {parent.pk} ({parent.run.name}, step {parent.step})"
    if parent.run.project_id != run.project_id:
        raise ConfigError(f"'init_checkpoint' {what} belongs to another project: start from one of this project's "
                          "checkpoints.", field="init_checkpoint")
    folder, state = checkpoint_folder(parent)
    if folder is None:
        raise ConfigError(f"'init_checkpoint' cannot be loaded. {weights_problem(state, what, parent.storage_uri)}",
                          field="init_checkpoint")
    return folder


def _export_preference_pairs(reference: str, run: Run, run_dir: Path) -> Path:
    """The review queue's preference pairs as the JSONL file training/dpo.py reads, in the run's folder."""
    match = QUEUE_REFERENCE.match(reference)
    queue = ReviewQueue.objects.filter(pk=int(match.group(1)), project=run.project).first() if match else None
    if queue is None:
        raise ConfigError(f"'preference_pairs' {reference!r} is not a review queue of this project (it was removed?): "
                          "start a new DPO run from a review queue.", field="preference_pairs")
    try:
        return queue_preference_pairs_file(queue=queue, folder=run_dir)
    except ReviewError as exc:
        raise ConfigError(f"'preference_pairs' of review queue {queue.pk}: {'; '.join(exc.errors.values())}",
                          field="preference_pairs") from None


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
