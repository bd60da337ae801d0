"""Reads of a project's models (ModelSpec) for the settings page: the list, one model, and what uses each.

The writes (register, remove one nothing uses) are webapp.runs.services.models'.
"""

from __future__ import annotations

from django.db.models import Count

from webapp.projects.models import Project
from webapp.runs.models import Experiment, ModelSpec, Run


def project_models(project: Project, limit: int | None = None) -> list[ModelSpec]:
    """The project's models by name, at most `limit` (ask for one more than shown to know whether there are more),
    every one when `limit` is None."""
    return list(project.model_specs.order_by("name", "pk")[:limit])


def model_choice_rows(project: Project, limit: int) -> list[dict]:
    """{"id", "name", "hf_id", "local_path"} of the project's models by name, at most `limit` (a form's model menu)."""
    return list(project.model_specs.order_by("name").values("id", "name", "hf_id", "local_path")[:limit])


def project_model(project: Project, model_id: int) -> ModelSpec | None:
    """The project's model with this id (another project's is as absent as a missing one)."""
    return project.model_specs.filter(pk=model_id).first()


def model_use_counts(model_ids: list[int]) -> tuple[dict[int, int], dict[int, int]]:
    """How many runs and how many experiments use each of these models ({model id: count}, a model nothing
    uses is left out): a model in use cannot be removed, and the settings page says why. Two queries."""
    runs = dict(Run.objects.filter(model_id__in=model_ids).values("model_id").annotate(n=Count("id"))
                .values_list("model_id", "n"))
    experiments = dict(Experiment.objects.filter(model_id__in=model_ids).values("model_id").annotate(n=Count("id"))
                       .values_list("model_id", "n"))
    return runs, experiments


def model_named(project: Project, name: str) -> ModelSpec | None:
    """The project's model of that name, or None (an experiment names its model)."""
    return project.model_specs.filter(name=name).first()
