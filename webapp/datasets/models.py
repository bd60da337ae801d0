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
    origin_trajectory = models.ForeignKey(
        "trajectories.Trajectory", null=True, blank=True, on_delete=models.SET_NULL, related_name="derived_tasks",
        help_text="The trajectory this task was made from (turning failures into evals).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["dataset", "content_hash"], name="uniq_task_content")]
        indexes = [models.Index(fields=["dataset", "split"]), models.Index(fields=["dataset", "external_id"])]

    def __str__(self) -> str:
        return self.external_id
