"""Trajectories and reviews are view-only here: workers store trajectories, reviewers review in the product."""

from django.contrib import admin

from webapp.projects.admin import ViewOnlyAdmin
from webapp.trajectories.models import Review, Trajectory


@admin.register(Trajectory)
class TrajectoryAdmin(ViewOnlyAdmin):
    list_display = ["id", "project", "run", "task_key", "step", "sample_index", "reward", "passed", "failure_bucket"]
    list_filter = ["passed", "failure_bucket", "source"]
    list_select_related = ["project", "run"]
    show_full_result_count = False  # the largest table: no COUNT(*) over all of it per page


@admin.register(Review)
class ReviewAdmin(ViewOnlyAdmin):
    list_display = ["trajectory", "reviewer", "verdict", "failure_bucket", "created_at"]
    list_select_related = ["trajectory", "reviewer"]
