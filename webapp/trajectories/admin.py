from django.contrib import admin

from webapp.trajectories.models import Review, Trajectory


@admin.register(Trajectory)
class TrajectoryAdmin(admin.ModelAdmin):
    list_display = ["id", "run", "task_key", "step", "sample_index", "reward", "passed", "failure_bucket"]
    list_filter = ["passed", "failure_bucket", "source"]


@admin.register(Review)
class ReviewAdmin(admin.ModelAdmin):
    list_display = ["trajectory", "reviewer", "verdict", "failure_bucket", "created_at"]
