"""Shared fixtures: users in each role of one project, and a stranger's project.

And the collection order `make test` needs to run on two processes (pytest-xdist, one file per
process at a time): every test has a node id of its own, and the files of long tests come first.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from tests.db_access import remember_blocker

# Files holding a test with one of these marks go first under xdist: started last, one of them
# (minutes of training, fuzzing or a browser journey) would keep one process busy long after the
# other has run out of files.
LONG_MARKS = ("slow", "torchrun")


@pytest.fixture(scope="session", autouse=True)
def _database_access_for_helpers(django_db_blocker):
    remember_blocker(django_db_blocker)


def pytest_collection_modifyitems(config, items):
    _give_every_item_its_own_node_id(items)
    _refuse_shared_node_ids(items)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _long_files_first(items)


def _give_every_item_its_own_node_id(items) -> None:
    """Schemathesis names each operation's test `name[METHOD /path]`, but under pytest 9.2 its node id
    is the bare function name, the same for every operation. xdist schedules by node id, so all but one
    of them would be dropped without a word (and --durations could not tell them apart)."""
    for item in items:
        wanted = f"{item.parent.nodeid}::{item.name}"
        if type(item).__name__ != "SchemathesisFunction" or item.nodeid == wanted:
            continue
        if hasattr(item, "_id"):  # pytest >= 9.2 keeps a structured id
            item._id = type(item._id).parse(wanted)
        else:
            item._nodeid = wanted


def _refuse_shared_node_ids(items) -> None:
    shared = [nodeid for nodeid, count in Counter(item.nodeid for item in items).items() if count > 1]
    if shared:
        raise pytest.UsageError(f"{len(shared)} node ids name more than one test (xdist would run only one "
                                f"of each): {shared[:3]}")


def _long_files_first(items) -> None:
    """Stable: the long files keep their order, then every other file in its collection order
    (xdist's --no-loadscope-reorder hands them out in this order)."""
    long_files = {item.nodeid.split("::", 1)[0] for item in items
                  if any(item.get_closest_marker(mark) for mark in LONG_MARKS)}
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in long_files)


@pytest.fixture
def make_user(django_user_model):
    counter = {"n": 0}

    def make(username: str | None = None, **extra):
        counter["n"] += 1
        name = username or f"user{counter['n']}"
        return django_user_model.objects.create_user(username=name, password="pw-" + name, **extra)

    return make


@pytest.fixture
def project_team(db, make_user):
    """A project with one member per role, plus an outsider who belongs to another project."""
    from webapp.projects.services.projects import membership_set_role, project_create

    owner = make_user("owner")
    project = project_create(name="Acme agents", owner=owner)
    members = {"owner": owner}
    for role in ("viewer", "reviewer", "editor"):
        user = make_user(role)
        membership_set_role(project=project, user=user, role=role, actor=owner)
        members[role] = user
    outsider = make_user("outsider")
    other = project_create(name="Other team", owner=outsider)
    return {"project": project, "other": other, "outsider": outsider, **members}


@pytest.fixture
def bearer(project_team):
    """Authorization headers for a role of `project_team` (one API token per role, issued on first use)."""
    from webapp.projects.services.projects import api_token_issue

    tokens: dict[str, str] = {}

    def headers(who: str) -> dict:
        if who not in tokens:
            tokens[who] = api_token_issue(user=project_team[who], name=f"{who} script").raw
        return {"HTTP_AUTHORIZATION": f"Bearer {tokens[who]}"}

    return headers


@pytest.fixture
def jobs_without_broker(settings, tmp_path, monkeypatch):
    """Jobs are queued without a Celery message (the test runs them itself, or only looks at them), and run
    folders go to a data directory of the test's own."""
    from webapp.runs.services import jobs as job_services

    settings.DATA_DIR = tmp_path / "data"
    settings.CRUCIBLE_RUNS_DIR = tmp_path / "data" / "runs"
    monkeypatch.setattr(job_services, "enqueue_job_message", lambda job_id, queue: None)
