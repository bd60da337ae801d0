"""What every page's shell needs: the theme, the project switcher, the project navigation."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

from webapp.projects.models import Theme, UserPreference
from webapp.projects.selectors.access import projects_for_user

# The seeds' workflow order; the key after `g` jumps there. An entry shows once its page exists.
PROJECT_NAV = [
    ("Overview", "dashboard:project", "o"),
    ("Datasets", "dashboard:dataset_list", "d"),
    ("Verifiers", "dashboard:verifier_list", "v"),
    ("Runs", "dashboard:run_list", "r"),
    ("Experiments", "dashboard:experiment_list", "e"),
    ("Trajectories", "dashboard:trajectory_list", "t"),
    ("Review", "dashboard:review", "q"),
    ("Failures", "dashboard:failures", "f"),
    ("Checkpoints", "dashboard:checkpoint_list", "c"),
    ("Jobs", "dashboard:job_list", "j"),
    ("Settings", "dashboard:project_settings", "s"),
]


@dataclass(frozen=True)
class NavEntry:
    label: str
    url: str
    key: str
    active: bool


def project_nav(slug: str, current_path: str) -> list[NavEntry]:
    entries = []
    for label, name, key in PROJECT_NAV:
        try:
            url = reverse(name, args=[slug])
        except NoReverseMatch:
            continue
        overview = name == "dashboard:project"
        active = current_path == url if overview else current_path.startswith(url)
        entries.append(NavEntry(label, url, key, active))
    return entries


def user_theme(user) -> str:
    if not user.is_authenticated:
        return Theme.AUTO
    preference = UserPreference.objects.filter(user=user).values_list("theme", flat=True).first()
    return preference or Theme.AUTO


def example_note(slug: str) -> str:
    """The banner of a project that holds the imported example run (every page says what it is)."""
    from webapp.runs.models import Run
    from webapp.runs.services.example_run import EXAMPLE_NOTE

    held = (Run.objects.filter(project__slug=slug, import_info__has_key="example")
            .exclude(import_key="").exists())
    return EXAMPLE_NOTE if held else ""


def shell(request: HttpRequest) -> dict:
    user = request.user
    context: dict = {"theme": user_theme(user)}
    if not user.is_authenticated:
        return context
    match = request.resolver_match
    slug = match.kwargs.get("slug") if match else None
    context["switcher_projects"] = list(projects_for_user(user).order_by("name").values("slug", "name"))
    if slug:
        context["project_nav"] = project_nav(slug, request.path)
        context["current_slug"] = slug
        context["example_note"] = example_note(slug)
    return context
