from django.apps import AppConfig


class TrajectoriesConfig(AppConfig):
    name = "webapp.trajectories"
    label = "trajectories"
    default_auto_field = "django.db.models.BigAutoField"
