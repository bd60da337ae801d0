"""The demo project a new install starts with, and its first login."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

from webapp.datasets.services import dataset_create
from webapp.projects.models import Project
from webapp.projects.services import project_create
from webapp.runs.models import ModelSpec
from webapp.verifiers.services import verifier_create

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
