from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "webapp.dashboard"
    label = "dashboard"
    default_auto_field = "django.db.models.BigAutoField"
