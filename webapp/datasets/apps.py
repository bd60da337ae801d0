from django.apps import AppConfig


class DatasetsConfig(AppConfig):
    name = "webapp.datasets"
    label = "datasets"
    default_auto_field = "django.db.models.BigAutoField"
