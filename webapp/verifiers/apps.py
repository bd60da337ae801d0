from django.apps import AppConfig


class VerifiersConfig(AppConfig):
    name = "webapp.verifiers"
    label = "verifiers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from webapp.verifiers.services.judge import install_judge_policy

        install_judge_policy()
