"""Create the first login (password printed once) and the demo project."""

from django.core.management.base import BaseCommand

from webapp.projects.demo import demo_seed, login_bootstrap


class Command(BaseCommand):
    help = "Create the first staff login (password printed once) and seed the demo project."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--no-demo", action="store_true", help="Do not create the demo project.")

    def handle(self, *args, username: str, no_demo: bool, **options) -> None:
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
