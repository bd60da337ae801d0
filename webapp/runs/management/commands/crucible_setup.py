"""Create the first login (password printed once) and the demo project with its example run."""

from django.core.management.base import BaseCommand

from webapp.runs.services.demo import demo_seed, login_bootstrap


class Command(BaseCommand):
    help = "Create the first staff login (password printed once) and seed the demo project."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--no-demo", action="store_true", help="Do not create the demo project.")
        parser.add_argument("--no-example", action="store_true",
                            help="Do not import the recorded example run into the demo project.")

    def handle(self, *args, username: str, no_demo: bool, no_example: bool = False, **options) -> None:
        from django.contrib.auth import get_user_model

        login = login_bootstrap(username)
        if login.password:
            self.stdout.write(self.style.SUCCESS(f"Created login {login.username} / {login.password}  (shown once)"))
        else:
            self.stdout.write(f"Login {login.username} exists; reset its password with "
                              f"`python manage.py changepassword {login.username}`.")
        if not no_demo:
            owner = get_user_model().objects.get(username=username)
            project = demo_seed(owner=owner)
            self.stdout.write(f"Demo project: {project.name} (/p/{project.slug}/)")
            if not no_example:
                self._import_example(project, owner)

    def _import_example(self, project, owner) -> None:
        from webapp.runs.services.example_run import (
            ExampleRunMissing,
            example_queue_create,
            example_runs_import,
        )

        try:
            result = example_runs_import(project=project, actor=owner)
        except ExampleRunMissing as exc:
            self.stderr.write(str(exc))
            return
        example_queue_create(project=project, result=result, actor=owner)
        if result.created:
            self.stdout.write(f"Example run: {result.created} stages of a recorded CPU-recipe run imported "
                              f"(/p/{project.slug}/runs/).")
        else:
            self.stdout.write("Example run: already imported; nothing changed.")
