from django.apps import AppConfig


class VerifiersConfig(AppConfig):
    name = "webapp.verifiers"
    label = "verifiers"
    default_auto_field = "django.db.models.BigAutoField"
