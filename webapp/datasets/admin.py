"""Task sets are view-only here: a dataset version and its tasks are fixed by their content hashes."""

from django.contrib import admin

from webapp.datasets.models import Task, TaskDataset
from webapp.projects.admin import ViewOnlyAdmin


@admin.register(TaskDataset)
class TaskDatasetAdmin(ViewOnlyAdmin):
    list_display = ["name", "version", "project", "environment", "created_at"]
    list_select_related = ["project"]


@admin.register(Task)
class TaskAdmin(ViewOnlyAdmin):
    list_display = ["external_id", "dataset", "category", "split", "source"]
    list_filter = ["split", "source", "category"]
    list_select_related = ["dataset"]
