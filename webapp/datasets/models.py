"""Task sets. A dataset version is immutable once a run used it; changes make a new version."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.projects.models import Project


class Split(models.TextChoices):
    TRAIN = "train", "Train"
    VALIDATION = "validation", "Validation"
    HELD_OUT = "held_out", "Held out"


class Source(models.TextChoices):
    SYNTHETIC = "synthetic", "Synthetic"
    HUMAN = "human", "Human"
    PRODUCTION = "production", "Production"
    IMPORTED = "imported", "Imported"


class Lineage(models.TextChoices):
    """How a dataset version was made (shown as its lineage on the datasets page)."""

    IMPORT = "import", "Import"
    GENERATION = "generation", "Generation"
    TRAJECTORIES = "trajectories", "From trajectories"
    EDIT = "edit", "Edit"


SEARCH_TEXT_LIMIT = 50_000  # characters of a task's messages kept for the text search


def search_text_of(messages) -> str:
    """The text of a task's messages, lower-cased, for the task browser's text search.

    Only the words people read (each message's content, text parts of list contents), not the
    JSON around them, so a search for "content" or "role" does not match every task.
    """
    parts: list[str] = []
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p if isinstance(p, str) else p.get("text", "") for p in content
                         if isinstance(p, str) or (isinstance(p, dict) and isinstance(p.get("text"), str)))
    return "\n".join(parts).lower()[:SEARCH_TEXT_LIMIT]


class TaskDataset(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=200)
    version = models.PositiveIntegerField(default=1)
    description = models.TextField(blank=True)
    environment = models.CharField(max_length=64, blank=True, help_text="Registry name of the environment.")
    content_hash = models.CharField(max_length=64, blank=True, help_text="SHA-256 over the tasks' hashes.")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    lineage = models.CharField(max_length=16, choices=Lineage.choices, blank=True,
                               help_text="How this version was made from its parent (or from nothing).")
    lineage_detail = models.JSONField(default=dict, blank=True,
                                      help_text="The particulars: file and format, generator and seed, split move.")
    stats = models.JSONField(default=dict, blank=True,
                             help_text="Task counts (in all, by split, category, source), computed once: a version "
                                       "never changes.")

    class Meta:
        ordering = ["name", "-version"]
        constraints = [models.UniqueConstraint(fields=["project", "name", "version"], name="uniq_dataset_version")]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"


class Task(models.Model):
    dataset = models.ForeignKey(TaskDataset, on_delete=models.CASCADE, related_name="tasks")
    external_id = models.CharField(max_length=200, help_text="The task's id in its source file.")
    messages = models.JSONField(help_text="Chat messages shown to the model.")
    tools = models.JSONField(default=list, blank=True, help_text="Tool schemas offered.")
    ground_truth = models.JSONField(null=True, blank=True)
    category = models.CharField(max_length=64, blank=True)
    split = models.CharField(max_length=16, choices=Split.choices, default=Split.TRAIN)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.HUMAN)
    metadata = models.JSONField(default=dict, blank=True)
    content_hash = models.CharField(max_length=64)
    search_text = models.TextField(blank=True, default="", editable=False,
                                   help_text="The messages' text, lower-cased (the task browser's text search).")
    origin_trajectory = models.ForeignKey(
        "trajectories.Trajectory", null=True, blank=True, on_delete=models.SET_NULL, related_name="derived_tasks",
        help_text="The trajectory this task was made from (turning failures into evals).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["dataset", "content_hash"], name="uniq_task_content")]
        # The task browser reads one version in id order under a filter: each index ends in id so
        # the keyset page is a range scan. The text search has a trigram index on PostgreSQL
        # (migration 0003; SQLite scans).
        indexes = [
            models.Index(fields=["dataset", "id"], name="task_dataset_id"),
            models.Index(fields=["dataset", "split", "id"], name="task_dataset_split_id"),
            models.Index(fields=["dataset", "category", "id"], name="task_dataset_category_id"),
            models.Index(fields=["dataset", "external_id"]),
        ]

    def __str__(self) -> str:
        return self.external_id
