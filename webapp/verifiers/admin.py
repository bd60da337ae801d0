from django.contrib import admin

from webapp.verifiers.models import Verifier, VerifierVersion


class VerifierVersionInline(admin.TabularInline):
    model = VerifierVersion
    extra = 0
    readonly_fields = ["version", "config", "kind_version", "content_hash", "created_at", "created_by"]


@admin.register(Verifier)
class VerifierAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "project", "created_at"]
    inlines = [VerifierVersionInline]
