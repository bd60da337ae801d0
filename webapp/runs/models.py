"""Runs and the jobs that execute them.

The Job row is the source of truth: a Celery message only wakes a worker, which
claims the row with a conditional UPDATE that bumps `attempt`. Every later write
of that attempt is fenced by it (see services/jobs.py).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator

from django.conf import settings
from django.db import models
from django.db.models import F, FloatField, Value
from django.db.models.functions import Coalesce

from webapp.datasets.models import TaskDataset
from webapp.projects.models import Project
from webapp.verifiers.models import VerifierVersion


class ModelSpec(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="model_specs")
    name = models.CharField(max_length=200)
    hf_id = models.CharField(max_length=300, blank=True, help_text="Hugging Face id, e.g. HuggingFaceTB/SmolLM2-135M-Instruct.")
    local_path = models.CharField(max_length=500, blank=True, help_text="A local model folder.")
    gguf_file = models.CharField(max_length=500, blank=True, help_text="A .gguf file inside the id or folder.")
    chat_template = models.TextField(blank=True, help_text="Override of the tokenizer's chat template.")
    tool_format = models.CharField(
        max_length=16, default="auto", choices=[("auto", "auto"), ("native", "native"), ("compact", "compact")],
        help_text="How tools are rendered into prompts: the template's own way or a compact list for small models.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="uniq_model_name")]

    def __str__(self) -> str:
        return self.name

    @property
    def spec(self) -> str:
        """What the training process's `model` field receives."""
        return self.local_path or self.hf_id


class RunKind(models.TextChoices):
    EVAL = "eval", "Evaluation"
    SFT = "sft", "SFT"
    GRPO = "grpo", "GRPO"
    DPO = "dpo", "DPO"


class RunStatus(models.TextChoices):
    DRAFT = "draft", "Draft"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


# Run tags and notes (webapp.runs.services.runs.run_annotate checks them, the run list filters by them).
MAX_RUN_TAGS = 20
RUN_TAG_LENGTH = 40
RUN_NOTE_LENGTH = 5000
RUN_TAG_CHARACTERS = r"\w.:/-"  # inside a regex character class: letters, digits, _ . : / -
RUN_TAG_PATTERN = (rf"^\s*[{RUN_TAG_CHARACTERS}](?:[ {RUN_TAG_CHARACTERS}]{{0,{RUN_TAG_LENGTH - 2}}}"
                   rf"[{RUN_TAG_CHARACTERS}])?\s*$")
"""A tag as typed: 1-40 letters, digits, '-', '_', '.', ':', '/', with spaces inside (not at either end,
which are trimmed)."""


def run_tag_key(text: str) -> str:
    """A tag as stored and compared: trimmed, inner whitespace as one space, lower case ("Base  LR" -> "base lr")."""
    return " ".join(text.split()).lower()


HEADLINE_SORT_KEYS = ("reward", "validation", "held_out")
"""The runs table's headline columns that it sorts by (?sort=reward, ...), each stored as Run.headline_<key>."""


def headline_sort_key(key: str, *, descending: bool) -> Coalesce:
    """What a headline sort orders by: the stored value, and for a run without one the far end of the
    float range in the direction of the sort, so that it comes last either way (keyset pages need a
    non-null key). The index of that direction (headline_sort_indexes) holds the same expression."""
    missing = -sys.float_info.max if descending else sys.float_info.max
    return Coalesce(F(f"headline_{key}"), Value(missing), output_field=FloatField())


def headline_sort_indexes() -> Iterator[models.Index]:
    """One index per headline and direction: a project's runs in sort order, so that a page of the
    runs table sorted by a headline reads its rows from the index, whatever the number of runs."""
    for key in HEADLINE_SORT_KEYS:
        for descending in (True, False):
            value = headline_sort_key(key, descending=descending)
            yield models.Index(
                F("project"), value.desc() if descending else value.asc(), F("id").desc() if descending else F("id").asc(),
                name=f"run_{key}_{'desc' if descending else 'asc'}",
            )


class Run(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="runs")
    storage_key = models.UUIDField(
        default=uuid.uuid4, editable=False, unique=True,
        help_text="Names the run's folder, so a reused primary key never meets an old folder.",
    )
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=8, choices=RunKind.choices)
    config = models.JSONField(default=dict, help_text="Validated against training.config's schema.")
    resolved_config = models.JSONField(
        null=True, blank=True,
        help_text="The config with every default filled in as training resolved it at launch (or at import); "
                  "null where that is not known (a run created before it was recorded, a config that did not "
                  "validate on its own).",
    )
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.DRAFT)
    dataset = models.ForeignKey(TaskDataset, null=True, blank=True, on_delete=models.PROTECT, related_name="runs")
    verifier_version = models.ForeignKey(VerifierVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="runs")
    model = models.ForeignKey(ModelSpec, null=True, blank=True, on_delete=models.PROTECT, related_name="runs")
    parent_checkpoint = models.ForeignKey(
        "runs.Checkpoint", null=True, blank=True, on_delete=models.PROTECT, related_name="child_runs"
    )
    experiment = models.ForeignKey("runs.Experiment", null=True, blank=True, on_delete=models.CASCADE, related_name="runs")
    stage = models.CharField(max_length=32, blank=True, help_text="The experiment stage this run is.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    import_key = models.CharField(
        max_length=64, blank=True, default="",
        help_text="Set on runs imported from a run folder trained elsewhere: the folder's identity "
                  "(sha256 of its first event line), so importing it again finds this run.",
    )
    import_info = models.JSONField(
        default=dict, blank=True,
        help_text="What the import found: source, config problems, the run's error and last log lines.",
    )
    tags = models.JSONField(
        default=list, blank=True,
        help_text="Short labels (lower case, at most 20), to find and filter runs by; PostgreSQL indexes them (GIN).",
    )
    note = models.TextField(blank=True, default="", help_text="Free text about the run (at most 5,000 characters).")
    # The runs table's headline values, stored so that sorting by one is an index scan and not a
    # subquery a run (webapp.runs.services.headlines keeps them; the table's cells read the metrics).
    headline_reward = models.FloatField(
        null=True, blank=True, editable=False,
        help_text="The run's latest train reward, as the runs table shows it; kept by the metric writes.")
    headline_validation = models.FloatField(
        null=True, blank=True, editable=False,
        help_text="The run's latest validation success, or its latest evaluated checkpoint's, as the runs "
                  "table shows it; kept by the metric writes and the evaluations' status changes.")
    headline_held_out = models.FloatField(
        null=True, blank=True, editable=False,
        help_text="The run's latest held-out success, or its latest evaluated checkpoint's, as the runs "
                  "table shows it; kept by the metric writes and the evaluations' status changes.")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"]), *headline_sort_indexes()]
        constraints = [
            models.UniqueConstraint(fields=["project", "import_key"], condition=~models.Q(import_key=""),
                                    name="uniq_run_import_key"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_imported(self) -> bool:
        """Trained elsewhere and imported from its run folder (manage.py import_run or the upload page)."""
        return bool(self.import_key)

    @property
    def folder_name(self) -> str:
        return f"{self.pk}-{self.storage_key.hex[:12]}"


class ExperimentState(models.TextChoices):
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class Experiment(models.Model):
    """The seeds' workflow as one object: baseline -> (SFT) -> GRPO -> held-out eval -> promotion gates.

    Each stage is a Run with its own Job. The pipeline's position is recomputed from
    the runs' states (experiment_advance), so it survives worker restarts.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="experiments")
    name = models.CharField(max_length=200)
    dataset = models.ForeignKey(TaskDataset, on_delete=models.PROTECT, related_name="experiments")
    verifier_version = models.ForeignKey(VerifierVersion, on_delete=models.PROTECT, related_name="experiments")
    model = models.ForeignKey(ModelSpec, on_delete=models.PROTECT, related_name="experiments")
    config = models.JSONField(default=dict, help_text="Stage configs and gate thresholds (see services/experiments.py).")
    state = models.CharField(max_length=16, choices=ExperimentState.choices, default=ExperimentState.RUNNING)
    stages = models.JSONField(default=dict, blank=True, help_text="Per stage: state, run id, reason.")
    reason = models.TextField(blank=True)
    candidate_checkpoint = models.ForeignKey("runs.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    gates = models.JSONField(default=list, blank=True, help_text="The gate table: one row per gate.")
    gates_passed = models.BooleanField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name


class JobState(models.TextChoices):
    QUEUED = "queued", "Queued"
    CLAIMED = "claimed", "Claimed"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


ACTIVE_JOB_STATES = (JobState.CLAIMED, JobState.RUNNING)
FINAL_JOB_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class Job(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="jobs")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.CASCADE, related_name="jobs")
    kind = models.CharField(max_length=32, help_text="What the worker does: eval, sft, grpo, dpo, verify, noop…")
    queue = models.CharField(max_length=32, default="default")
    payload = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.QUEUED)
    attempt = models.PositiveIntegerField(default=0, help_text="Bumped by each claim; fences every write.")
    max_attempts = models.PositiveIntegerField(default=3)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True, help_text="Host and process of the claiming worker.")
    progress = models.FloatField(default=0.0)
    cancel_requested = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    log_tail = models.TextField(blank=True)
    history = models.JSONField(default=list, blank=True, help_text="One entry per attempt: worker, outcome, reason.")
    processes = models.JSONField(
        default=list, blank=True,
        help_text="A data-parallel job's ranks as its worker last saw them: rank, device, host, pid, step, time.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["state", "lease_expires_at"]),
            models.Index(fields=["project", "-created_at"]),
            # The jobs list filtered by one state, kind or queue, newest first (and the checkpoints
            # page's export jobs): a page read from the index, however many other jobs the project has.
            *(models.Index(fields=["project", column, "-created_at", "-id"], name=f"job_project_{column}_newest")
              for column in ("state", "kind", "queue")),
        ]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.kind}, {self.state})"


class MetricPoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metrics")
    step = models.IntegerField()
    split = models.CharField(max_length=32, help_text="train, validation, held_out, …")
    name = models.CharField(max_length=128)
    value = models.FloatField()
    recorded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "step", "split", "name"], name="uniq_metric_point")]
        indexes = [models.Index(fields=["run", "name", "split", "step"])]


class CheckpointKind(models.TextChoices):
    ADAPTER = "adapter", "LoRA adapter"
    FULL = "full", "Full weights"


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.IntegerField()
    storage_uri = models.CharField(max_length=1000)
    kind = models.CharField(max_length=8, choices=CheckpointKind.choices, default=CheckpointKind.ADAPTER)
    metrics = models.JSONField(default=dict, blank=True)
    content_hash = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="uniq_checkpoint_step")]

    def __str__(self) -> str:
        return f"{self.run.name}@{self.step}"


class CheckpointAlias(models.Model):
    """A movable name (production, candidate, or any) pointing at one checkpoint."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="aliases")
    name = models.SlugField(max_length=64)
    checkpoint = models.ForeignKey(Checkpoint, on_delete=models.PROTECT, related_name="aliases")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "checkpoint aliases"
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="uniq_alias_name")]

    def __str__(self) -> str:
        return self.name


class AliasMove(models.Model):
    """History of an alias: who pointed it where, when, and whether it was a rollback."""

    alias = models.ForeignKey(CheckpointAlias, on_delete=models.CASCADE, related_name="moves")
    checkpoint = models.ForeignKey(Checkpoint, on_delete=models.PROTECT, related_name="+")
    previous_checkpoint = models.ForeignKey(Checkpoint, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    moved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    moved_at = models.DateTimeField(auto_now_add=True)
    reason = models.TextField(blank=True)
    is_rollback = models.BooleanField(default=False)
    forced = models.BooleanField(default=False, help_text="Promoted although its gates failed or it had none.")

    class Meta:
        ordering = ["-moved_at", "-id"]


class WorkerNode(models.Model):
    """A Celery worker process that announced itself, so the UI can show who is alive."""

    name = models.CharField(max_length=255, unique=True, help_text="Celery node name, e.g. gpu@host-3.")
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField(default=0)
    queues = models.JSONField(default=list)
    concurrency = models.PositiveIntegerField(default=1)
    gpus = models.JSONField(default=list, blank=True, help_text="[{name, memory_mb}] when GPUs are present.")
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
