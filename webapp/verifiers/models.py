"""A Verifier keeps every version it ever had, so stored trajectories stay reverifiable."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.projects.models import Project


class Verifier(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="verifiers")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=64, help_text="Registry name: workplace, json_tool_call, python, llm_judge.")
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="uniq_verifier_name")]

    def __str__(self) -> str:
        return self.name

    @property
    def latest_version(self) -> VerifierVersion | None:
        return self.versions.order_by("-version").first()


class VerifierVersion(models.Model):
    verifier = models.ForeignKey(Verifier, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    config = models.JSONField(default=dict, blank=True)
    kind_version = models.CharField(max_length=32, blank=True, help_text="Version of the built-in verifier code.")
    content_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["verifier", "-version"]
        constraints = [models.UniqueConstraint(fields=["verifier", "version"], name="uniq_verifier_version")]

    def __str__(self) -> str:
        return f"{self.verifier.name} v{self.version}"


class SampleMethod(models.TextChoices):
    RANDOM = "random", "Random"
    STRATIFIED = "stratified", "Stratified by reward"


class VerifierCheck(models.Model):
    """A sanity check: a person judged the version's verdicts on stored outputs (kept with the version).

    `labelled` and `agreed` are kept in step with the items by the labelling service, so
    pages list "checked on 80 outputs: 92% agreement" without counting items.
    """

    version = models.ForeignKey(VerifierVersion, on_delete=models.CASCADE, related_name="checks")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    size = models.PositiveIntegerField(default=0, help_text="Outputs drawn for the check.")
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                            help_text="The run the outputs came from; empty: the whole project.")
    method = models.CharField(max_length=16, choices=SampleMethod.choices, default=SampleMethod.RANDOM)
    seed = models.BigIntegerField(default=0)
    labelled = models.PositiveIntegerField(default=0, help_text="Items a person marked right or wrong.")
    agreed = models.PositiveIntegerField(default=0, help_text="Items a person marked right.")
    threshold = models.FloatField(default=0.9, help_text="Agreement under this flags the version on the run form.")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["version", "-created_at"], name="verifier_check_latest")]

    def __str__(self) -> str:
        return f"check #{self.pk} of {self.version}"

    @property
    def agreement(self) -> float | None:
        return self.agreed / self.labelled if self.labelled else None

    @property
    def under_threshold(self) -> bool:
        return self.agreement is not None and self.agreement < self.threshold


class VerifierCheckItem(models.Model):
    """One stored output, the version's verdict on it and the person's judgement of that verdict."""

    sanity_check = models.ForeignKey(VerifierCheck, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    trajectory = models.ForeignKey("trajectories.Trajectory", on_delete=models.CASCADE, related_name="+")
    scored = models.BooleanField(default=False, help_text="The verifier ran on it (errors included).")
    reward = models.FloatField(null=True, blank=True, help_text="Null for a verifier error (never 0).")
    passed = models.BooleanField(default=False)
    bucket = models.CharField(max_length=32, blank=True)
    components = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    human_right = models.BooleanField(null=True, blank=True, help_text="True: the verdict is right; False: wrong.")
    human_bucket = models.CharField(max_length=32, blank=True)
    labelled_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    labelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["sanity_check", "position"]
        constraints = [
            models.UniqueConstraint(fields=["sanity_check", "position"], name="uniq_check_position"),
            models.UniqueConstraint(fields=["sanity_check", "trajectory"], name="uniq_check_trajectory"),
        ]
