"""Runs, jobs, checkpoints and aliases are view-only here: they are launched and moved from the product.

A run or job saved in the admin would never be queued, a job's state edited by hand would fight the
worker that holds its lease, and an alias moved here would leave no AliasMove row and no audit
event. Use the pages and the API (which call the services) instead.
"""

from django.contrib import admin

from webapp.projects.admin import ViewOnlyAdmin, ViewOnlyTabularInline
from webapp.runs.models import (
    AliasMove,
    Checkpoint,
    CheckpointAlias,
    Experiment,
    Job,
    MetricPoint,
    ModelSpec,
    Run,
    WorkerNode,
)


@admin.register(ModelSpec)
class ModelSpecAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "hf_id", "local_path", "gguf_file"]
    list_select_related = ["project"]


@admin.register(Run)
class RunAdmin(ViewOnlyAdmin):
    list_display = ["name", "project", "kind", "status", "created_at"]
    list_filter = ["kind", "status"]
    list_select_related = ["project"]


@admin.register(Experiment)
class ExperimentAdmin(ViewOnlyAdmin):
    list_display = ["name", "project", "state", "gates_passed", "created_at"]
    list_filter = ["state"]
    list_select_related = ["project"]


@admin.register(Job)
class JobAdmin(ViewOnlyAdmin):
    list_display = ["id", "project", "kind", "queue", "state", "attempt", "max_attempts", "heartbeat_at"]
    list_filter = ["state", "queue", "kind"]
    list_select_related = ["project"]


@admin.register(MetricPoint)
class MetricPointAdmin(ViewOnlyAdmin):
    list_display = ["run", "step", "split", "name", "value"]
    list_filter = ["split"]
    list_select_related = ["run"]
    show_full_result_count = False


@admin.register(Checkpoint)
class CheckpointAdmin(ViewOnlyAdmin):
    list_display = ["run", "step", "kind", "storage_uri", "created_at"]
    list_select_related = ["run"]


class AliasMoveInline(ViewOnlyTabularInline):
    model = AliasMove
    fk_name = "alias"
    fields = ["moved_at", "checkpoint", "previous_checkpoint", "moved_by", "reason", "is_rollback", "forced"]


@admin.register(CheckpointAlias)
class CheckpointAliasAdmin(ViewOnlyAdmin):
    list_display = ["name", "project", "checkpoint", "updated_at"]
    list_select_related = ["project", "checkpoint__run"]
    inlines = [AliasMoveInline]


@admin.register(WorkerNode)
class WorkerNodeAdmin(ViewOnlyAdmin):
    list_display = ["name", "hostname", "pid", "concurrency", "heartbeat_at", "stopped_at"]
