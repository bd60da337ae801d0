"""Verifiers are view-only here: every configuration is an immutable, audited version made by the services."""

from django.contrib import admin

from webapp.projects.admin import ViewOnlyAdmin, ViewOnlyTabularInline
from webapp.verifiers.models import Verifier, VerifierCheck, VerifierVersion


class VerifierVersionInline(ViewOnlyTabularInline):
    model = VerifierVersion
    fields = ["version", "config", "kind_version", "content_hash", "created_at", "created_by"]


@admin.register(Verifier)
class VerifierAdmin(ViewOnlyAdmin):
    list_display = ["name", "kind", "project", "created_at"]
    list_select_related = ["project"]
    inlines = [VerifierVersionInline]


@admin.register(VerifierCheck)
class VerifierCheckAdmin(ViewOnlyAdmin):
    """Sanity checks are made and judged on the verifier pages (webapp.trajectories.services.sanity_checks)."""

    list_display = ["id", "version", "size", "labelled", "agreed", "threshold", "created_by", "created_at"]
    list_select_related = ["version__verifier", "created_by"]
