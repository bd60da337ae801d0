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
