"""Trajectories are model output: untrusted text, stored as JSON, always escaped when shown."""

from __future__ import annotations

import json

from django.conf import settings
from django.db import models

from webapp.projects.models import Project

FAILURE_BUCKETS = [
    "invalid_json", "unknown_tool", "wrong_tool", "wrong_arguments", "missing_call",
    "extra_write", "unsafe_action", "truncated", "no_tool_call", "verifier_error",
]
BUCKET_CHOICES = [(b, b.replace("_", " ")) for b in FAILURE_BUCKETS]
# Characters of a trajectory's text kept for the search (prompts, outputs, tool calls and results).
SEARCH_TEXT_LIMIT = 20_000


def _content_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        return "\n".join(str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content)
    return "" if content is None else str(content)


def _call_text(call) -> str:
    if not isinstance(call, dict):
        return str(call)
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    return f"{function.get('name', '')} {arguments}"


def search_text_of_turns(turns, request=None) -> str:
    """What the trajectory search matches: each turn's text and its tool calls (name and arguments),
    as written (the search lower-cases both sides), without the JSON around them, so a search for
    "role" or "content" does not match every trajectory. Capped at SEARCH_TEXT_LIMIT characters.

    `request` is the task's messages: a training run's trajectory holds only what the model wrote
    and the tools answered, so when its turns have no user turn the task's user turns come first
    (a search for words of the request finds the trajectories of that task).
    """
    if not isinstance(turns, list):
        turns = []
    if isinstance(request, list) and not any(isinstance(t, dict) and t.get("role") == "user" for t in turns):
        turns = [m for m in request if isinstance(m, dict) and m.get("role") == "user"] + turns
    parts: list[str] = []
    for turn in turns:
        if not isinstance(turn, dict):
            continue
        parts.append(_content_text(turn.get("content")))
        parts.extend(_call_text(call) for call in turn.get("tool_calls") or [] if call)
    text = "\n".join(p for p in parts if p)
    text = text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")  # no NUL, no lone surrogate
    return text[:SEARCH_TEXT_LIMIT]


class Trajectory(models.Model):
    # Trajectories are the largest table and are written in bulk: FK indexes that the
    # composite indexes below already cover are switched off to keep inserts cheap.
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="trajectories", db_index=False)
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="trajectories",
                            db_index=False)
    attempt = models.PositiveIntegerField(default=1, help_text="The job attempt that produced it.")
    task = models.ForeignKey("datasets.Task", null=True, blank=True, on_delete=models.SET_NULL, related_name="trajectories")
    task_key = models.CharField(max_length=200, help_text="The task's id as the producer named it.")
    checkpoint = models.ForeignKey("runs.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                   db_index=False)
    step = models.IntegerField(default=0)
    split = models.CharField(max_length=32, default="train", help_text="train, validation, held_out or production.")
    group_id = models.CharField(max_length=64, blank=True)
    sample_index = models.PositiveIntegerField(default=0)
    task_snapshot = models.JSONField(
        null=True, blank=True,
        help_text="The task as the producer sent it (production trajectories have no dataset task).",
    )
    verifier_version = models.ForeignKey(
        "verifiers.VerifierVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="The verifier version that produced reward and bucket.", db_index=False,
    )
    turns = models.JSONField(default=list)
    search_text = models.TextField(blank=True, default="", editable=False,
                                   help_text="The turns' text and tool calls, for the trajectory search.")
    tool_calls = models.JSONField(default=list, blank=True)
    reward = models.FloatField(null=True, blank=True, help_text="Null when the verifier failed (never 0 for an error).")
    components = models.JSONField(default=dict, blank=True)
    advantage = models.FloatField(null=True, blank=True)
    passed = models.BooleanField(default=False)
    failure_bucket = models.CharField(max_length=32, blank=True, choices=BUCKET_CHOICES)
    flags = models.JSONField(default=list, blank=True)
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    latency_ms = models.FloatField(null=True, blank=True)
    source = models.CharField(max_length=16, default="run", help_text="run or production.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "step", "task_key", "sample_index"]
        verbose_name_plural = "trajectories"
        constraints = [
            models.UniqueConstraint(fields=["run", "step", "task_key", "sample_index"], name="uniq_trajectory_sample"),
            # Production rows have no run, so the key above cannot hold for them (NULLs are distinct):
            # the producer's id is their key. Logging inserts ON CONFLICT DO NOTHING against it.
            models.UniqueConstraint(fields=["project", "task_key"], condition=models.Q(source="production"),
                                    name="uniq_production_trajectory"),
        ]
        # The lists read newest first (ORDER BY id DESC) under a filter: each index ends in id so
        # the filtered keyset page is an index range scan, not a sort of every matching row.
        indexes = [
            models.Index(fields=["run", "step", "id"], name="traj_run_step_id"),
            models.Index(fields=["run", "failure_bucket", "id"], name="traj_run_bucket_id"),
            models.Index(fields=["run", "reward"]),
            models.Index(fields=["project", "id"], name="traj_project_id"),
            models.Index(fields=["project", "task_key", "id"], name="traj_project_task_id"),
            models.Index(fields=["project", "source", "-created_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.task_key}#{self.sample_index}@{self.step}"


class StepRollup(models.Model):
    """Per (run, step, split) aggregates, updated as trajectories land, so charts never scan trajectories."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="rollups")
    step = models.IntegerField()
    split = models.CharField(max_length=32)
    count = models.PositiveIntegerField(default=0)
    scored = models.PositiveIntegerField(default=0, help_text="Trajectories with a reward (not verifier errors).")
    reward_sum = models.FloatField(default=0.0)
    reward_min = models.FloatField(null=True, blank=True)
    reward_max = models.FloatField(null=True, blank=True)
    passed = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "step", "split"], name="uniq_step_rollup")]

    @property
    def reward_mean(self) -> float | None:
        return self.reward_sum / self.scored if self.scored else None

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.count if self.count else None


class BucketRollup(models.Model):
    """Failure-bucket counts per (run, step, split), maintained with StepRollup."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="bucket_rollups")
    step = models.IntegerField()
    split = models.CharField(max_length=32)
    bucket = models.CharField(max_length=32)
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "step", "split", "bucket"], name="uniq_bucket_rollup")
        ]


class Rescore(models.Model):
    """One re-verification of stored trajectories with another verifier version."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="rescores")
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="rescores")
    verifier_version = models.ForeignKey("verifiers.VerifierVersion", on_delete=models.PROTECT, related_name="rescores")
    job = models.ForeignKey("runs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    summary = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]


class RescoreResult(models.Model):
    """The new verdict for one trajectory; the trajectory's own scores are never changed."""

    rescore = models.ForeignKey(Rescore, on_delete=models.CASCADE, related_name="results")
    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="rescores")
    reward = models.FloatField(null=True, blank=True)
    passed = models.BooleanField(default=False)
    failure_bucket = models.CharField(max_length=32, blank=True)
    components = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    info = models.JSONField(default=dict, blank=True, help_text="The verifier's trace (parse, state diff).")
    disagrees = models.BooleanField(default=False, help_text="Pass/fail or reward differs from the stored verdict.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["rescore", "trajectory"], name="uniq_rescore_result")]
        indexes = [models.Index(fields=["rescore", "disagrees"])]


class Verdict(models.TextChoices):
    AGREE = "agree", "Agree with the verifier"
    DISAGREE = "disagree", "Disagree with the verifier"


class QueueKind(models.TextChoices):
    VERDICT = "verdict", "Verdicts (agree or disagree with the verifier)"
    PAIR = "pair", "Preference pairs (which of two samples is better)"


class QueueOrder(models.TextChoices):
    FAILURES_FIRST = "failures_first", "Failures first"
    NEWEST = "newest", "Newest first"
    RANDOM = "random", "Random sample"


class ReviewQueue(models.Model):
    """A saved trajectory filter whose matches (taken once, at creation) are labelled one by one."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="review_queues")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=QueueKind.choices, default=QueueKind.VERDICT)
    filter = models.JSONField(default=dict, blank=True, help_text="The trajectory list's query (run, bucket, ...).")
    order = models.CharField(max_length=16, choices=QueueOrder.choices, default=QueueOrder.FAILURES_FIRST)
    size = models.PositiveIntegerField(default=0, help_text="How many items the filter gave at creation.")
    reviews_per_item = models.PositiveSmallIntegerField(
        default=1, help_text="2 or more gives agreement between reviewers (Cohen's kappa).")
    lock_minutes = models.PositiveSmallIntegerField(default=10, help_text="How long an item stays with its reviewer.")
    assignees = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="assigned_queues")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    archived = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at"]
        # One name per project (archived queues included), so a name finds one queue; concurrent
        # creates of one name are decided here, not by the check before the insert.
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="uniq_review_queue_name")]

    def __str__(self) -> str:
        return self.name


class QueueItem(models.Model):
    """One item of a queue: a trajectory (or, in pair mode, two samples of one task) and its lock."""

    queue = models.ForeignKey(ReviewQueue, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="+")
    other = models.ForeignKey(Trajectory, null=True, blank=True, on_delete=models.CASCADE, related_name="+",
                              help_text="Pair mode: the sample compared with `trajectory`.")
    reviews_done = models.PositiveSmallIntegerField(default=0)
    locked_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    locked_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["queue", "position"]
        constraints = [models.UniqueConstraint(fields=["queue", "position"], name="uniq_queue_position")]
        indexes = [models.Index(fields=["queue", "reviews_done", "position"], name="queue_open_items")]


class Review(models.Model):
    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="reviews")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="reviews")
    item = models.ForeignKey(QueueItem, null=True, blank=True, on_delete=models.SET_NULL, related_name="reviews",
                             help_text="The queue item it labelled, if it came from a queue.")
    verdict = models.CharField(max_length=16, choices=Verdict.choices, blank=True,
                               help_text="Blank for a preference label.")
    failure_bucket = models.CharField(max_length=32, blank=True, choices=BUCKET_CHOICES)
    note = models.TextField(blank=True)
    corrected_output = models.TextField(blank=True, help_text="What the model should have answered.")
    preferred_over = models.ForeignKey(
        Trajectory, null=True, blank=True, on_delete=models.SET_NULL, related_name="dispreferred_in",
        help_text="For preference pairs (DPO): this trajectory is preferred over that one.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        # One verdict per reviewer and trajectory; one preference per reviewer and ordered pair
        # (the service removes the reverse pair before storing, so a pair has one answer).
        constraints = [
            models.UniqueConstraint(fields=["trajectory", "reviewer"], condition=models.Q(preferred_over__isnull=True),
                                    name="uniq_review_per_reviewer"),
            models.UniqueConstraint(fields=["trajectory", "preferred_over", "reviewer"],
                                    condition=models.Q(preferred_over__isnull=False), name="uniq_preference_per_reviewer"),
        ]
        indexes = [models.Index(fields=["reviewer", "-created_at"], name="review_reviewer_recent")]
