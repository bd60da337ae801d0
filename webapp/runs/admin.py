from django.contrib import admin

from webapp.runs.models import (
    AliasMove,
    Checkpoint,
    CheckpointAlias,
    Job,
    MetricPoint,
    ModelSpec,
    Run,
)


@admin.register(ModelSpec)
class ModelSpecAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "hf_id", "local_path", "gguf_file"]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "kind", "status", "created_at"]
    list_filter = ["kind", "status"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "project", "kind", "queue", "state", "attempt", "max_attempts", "heartbeat_at"]
    list_filter = ["state", "queue", "kind"]
    readonly_fields = ["attempt", "lease_expires_at", "heartbeat_at", "worker", "history"]


@admin.register(MetricPoint)
class MetricPointAdmin(admin.ModelAdmin):
    list_display = ["run", "step", "split", "name", "value"]
    list_filter = ["split"]


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ["run", "step", "kind", "storage_uri", "created_at"]


class AliasMoveInline(admin.TabularInline):
    model = AliasMove
    fk_name = "alias"
    extra = 0
    readonly_fields = ["checkpoint", "previous_checkpoint", "moved_by", "moved_at", "reason", "is_rollback"]


@admin.register(CheckpointAlias)
class CheckpointAliasAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "checkpoint", "updated_at"]
    inlines = [AliasMoveInline]
