"""The demo project a new install starts with, and its first login."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from webapp.datasets.services.datasets import dataset_create
from webapp.projects.models import Project
from webapp.projects.services.projects import project_create
from webapp.runs.models import ModelSpec
from webapp.verifiers.services.verifiers import verifier_create

# The first login's password, kept (0600, in the data dir beside the generated secret key) so that
# crucible_start can print it again once the server answers, where it is not lost among the workers'
# start-up lines. It is forgotten as soon as the password no longer matches (changepassword).
FIRST_LOGIN_FILE = "first-login.json"
DEMO_SLUG = "demo"
DEMO_TASKS = 400


@dataclass(frozen=True)
class Login:
    username: str
    password: str | None  # None when the account already existed (its password is not known)


def login_bootstrap(username: str = "admin") -> Login:
    """Create the first staff login with a random password, once."""
    User = get_user_model()
    if User.objects.filter(username=username).exists():
        return Login(username=username, password=None)
    password = secrets.token_urlsafe(12)
    User.objects.create_superuser(username=username, email="", password=password)
    _remember_first_login(Login(username=username, password=password))
    return Login(username=username, password=password)


def _first_login_path():
    return settings.DATA_DIR / FIRST_LOGIN_FILE


def _remember_first_login(login: Login) -> None:
    path = _first_login_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(json.dumps({"username": login.username, "password": login.password}))


def first_login_to_show() -> Login | None:
    """The first login while its generated password still works, else None (and it is forgotten)."""
    path = _first_login_path()
    try:
        saved = json.loads(path.read_text())
        username, password = str(saved["username"]), str(saved["password"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    user = get_user_model().objects.filter(username=username).first()
    if user is None or not user.check_password(password):
        path.unlink(missing_ok=True)
        return None
    return Login(username=username, password=password)


@transaction.atomic
def demo_seed(*, owner) -> Project:
    """The demo project: workplace tasks, a json_tool_call verifier and the offline SmolLM2 model."""
    existing = Project.objects.filter(slug=DEMO_SLUG).first()
    if existing is not None:
        return existing
    from environments.json_tool_call_tasks import workplace_json_tasks
    from environments.workplace.generator import generate_tasks

    project = project_create(
        name="Demo: workplace tool calling", slug=DEMO_SLUG, owner=owner,
        description="Teach a small model to answer workplace requests with exactly one correct tool call.",
    )
    dataset_create(
        project=project, name="workplace-synthetic", tasks=generate_tasks(DEMO_TASKS, 0), actor=owner,
        environment="workplace", description=f"{DEMO_TASKS} generated workplace tasks (seed 0).",
    )
    dataset_create(
        project=project, name="workplace-json", tasks=workplace_json_tasks(DEMO_TASKS, 0), actor=owner,
        environment="json_tool_call",
        description="The same requests as one-call json_tool_call tasks with a short tool list (small models).",
    )
    verifier_create(
        project=project, name="workplace end state", kind="workplace", config={"mode": "lenient"}, actor=owner,
        description="Replays the calls in a fresh sandbox and compares the end state with the ground truth's.",
    )
    verifier_create(
        project=project, name="exact tool call", kind="json_tool_call", config={"mode": "lenient"}, actor=owner,
        description="Passes when the answer is exactly one call of the right tool with the right arguments.",
    )
    ModelSpec.objects.create(
        project=project, name="SmolLM2-135M-Instruct (offline)", hf_id="smollm2-135m-instruct", tool_format="compact",
    )
    return project
