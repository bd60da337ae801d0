from django.contrib import admin

from webapp.datasets.models import Task, TaskDataset


@admin.register(TaskDataset)
class TaskDatasetAdmin(admin.ModelAdmin):
    list_display = ["name", "version", "project", "environment", "created_at"]


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["external_id", "dataset", "category", "split", "source"]
    list_filter = ["split", "source", "category"]
