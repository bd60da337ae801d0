"""A bounded Schemathesis pass over every operation of the OpenAPI document, as an owner and a viewer.

Schemathesis generates requests from the document (valid ones, and some that break it) and
checks each answer: never a 5xx, only statuses the operation documents, a content type and a
body that match what it declares. Each example is sent twice, with an owner's token and a
viewer's, so the refusals a viewer gets are held to the document too. Half of the examples
use the ids of real rows (a run, a checkpoint, a dataset, ...) so requests reach the views
and not only the 404s of unknown ids.

Bounded: SCHEMATHESIS_EXAMPLES generated examples per operation (default 10), so the pass stays within
a few minutes on two cores inside `make test`; raise it locally for a deeper search.
"""

from __future__ import annotations

import json
import os
import re
import zlib

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from webapp.api.api import api

EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "10"))

# What a valid request may still be refused for, because JSON Schema cannot say it. Each answer is
# a declared 4xx whose detail says which; anything else a valid request is refused for is a rule
# the document should state, and fails the check below.
NOT_EXPRESSIBLE = re.compile("|".join([
    # A name or id in the body or query that names no row of the project: the document says which
    # rows are referred to, whether one exists is the database's to say.
    r"\bNo (dataset|verifier|model|run|checkpoint|trajectory|task|queue|review queue)s?\b[^;]*?"
    r"(\d+|named|with this id|in this project)",
    r"not a (reviewer|member) of this project",
    r"No such (dataset|dataset version|run|checkpoint|verifier)\b",
    # An `after` cursor this server did not hand out: opaque, only its alphabet is documented.
    r"cursor is not one this list gave out",
    # The contents of an uploaded file (a zip, a JSONL file): bytes to the schema.
    r"^file: ",
    # Rules across two fields or parameters (OpenAPI's parameters are independent of each other).
    r"Give both a and b",
    r"a and b are the same run",
    r"must not be below step_min",
    r"a template is either trained on or held out",
    r"choose at least one template",
    # The run config's rules across its fields (training.config._check_cross_field); each field's
    # own type and range is in the document (RUN_CONFIG_SCHEMA).
    r"^config[^:]*: Invalid run config: .*(required|needs|must)",
    # A verifier's config follows the schema of its kind: the body's `kind` on create, the stored
    # verifier's on a new version (the registry's schemas are published with the verifier form).
    r"^config(\.[^:]*)?: (?!Invalid run config)",
    # The playground takes its task from one of three fields and its output from one of three.
    r"Send `task`, `task_id` or `trajectory_id`|Send `output`, `turns` or `trajectory_id`",
    # What this server holds: a model id that is also a folder of its working directory, a .gguf
    # name that climbs out of its folder, a verifier that calls a URL (a saved verifier's job).
    r"A model folder on this server is a registered model",
    r"'model_gguf_file' must be the file's name inside the model's folder",
    r"calls a URL, so a run config cannot set it up",
    # What the project's data holds: a filter that matches no trajectory, a metric a run never recorded.
    r"No trajectories match this filter|No task has two samples under this filter",
    r"which this run has not recorded",
    r"the filter matches no task",
    r"fewer than two evaluation runs",
    r"exists already",  # a dataset name another request took (also a race between two creates)
    r"already has a verifier named",  # the same, for a verifier name
    r"No stored outputs",
    r"Nothing to move: every task the filter matches is in",  # the tasks are in that split already
    r"This trajectory has no stored task",  # what the stored row holds  # the project has no evaluated outputs yet
]))


def _refused_for_what_a_schema_cannot_say(response) -> bool:
    """Every problem the answer names is one of NOT_EXPRESSIBLE's (a 400 or 422 with our ErrorOut body)."""
    try:
        body = json.loads(response.content)
    except ValueError:
        return False
    problems = [f"{field}: {problem}" for field, problem in (body.get("errors") or {}).items()] \
        or [body.get("detail", "")]
    return all(NOT_EXPRESSIBLE.search(problem) for problem in problems)


def positive_data_accepted(ctx, response, case):
    """Schemathesis' `positive_data_acceptance`: schema-valid data is accepted, short of NOT_EXPRESSIBLE."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        if response.status_code in (400, 422) and _refused_for_what_a_schema_cannot_say(response):
            return None
        raise


# Operations whose schemas do not state their rules yet; every other check runs on them.
POSITIVE_CHECK_PENDING: frozenset[str] = frozenset()

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          positive_data_accepted]

# Valid and invalid requests; the coverage phase adds the boundary values of every parameter and
# field (about 3,000 requests in all, 1-2 minutes). Wrong HTTP methods are left out: they are
# Django's 405s, the same for every path, and cost as much again.
CONFIG = SchemathesisConfig.from_dict({
    "generation": {"mode": "all"},
    "phases": {"coverage": {"unexpected-methods": []}},
})
schema = schemathesis.openapi.from_dict(api.get_openapi_schema(), config=CONFIG)
schema.app = WSGIHandler()


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    """The WSGI handler closes the database connection after each request; the test's transaction needs it.

    Django's test Client disconnects the same signal for the same reason.
    """
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def world(project_team):
    """Rows of each kind the API addresses, and a read-write token for the owner and the viewer."""
    from environments.workplace.generator import generate_tasks
    from webapp.datasets.services.datasets import dataset_create
    from webapp.projects.services.projects import api_token_issue
    from webapp.runs.models import Checkpoint, CheckpointAlias, Job, ModelSpec, Run
    from webapp.trajectories.models import Trajectory
    from webapp.verifiers.services.verifiers import verifier_create

    project, owner = project_team["project"], project_team["owner"]
    dataset = dataset_create(project=project, name="wp", tasks=generate_tasks(4, 0), actor=owner)
    verifier = verifier_create(project=project, name="v", kind="json_tool_call", config={}, actor=owner)
    ModelSpec.objects.create(project=project, name="tiny", hf_id="smollm2-135m-instruct")
    run = Run.objects.create(project=project, name="r", kind="grpo")
    checkpoint = Checkpoint.objects.create(run=run, step=1, storage_uri="/ckpt/1")
    CheckpointAlias.objects.create(project=project, name="production", checkpoint=checkpoint)
    trajectory = Trajectory.objects.create(project=project, run=run, task_key="t1", source="eval",
                                           turns=[{"role": "assistant", "content": "hi"}])
    job = Job.objects.create(project=project, kind="noop")
    ids = {"slug": project.slug, "name": "production", "run_id": run.pk, "checkpoint_id": checkpoint.pk,
           "trajectory_id": trajectory.pk, "job_id": job.pk, "dataset_id": getattr(dataset, "pk", None),
           "verifier_id": getattr(verifier, "pk", None), "number": 1}
    tokens = {role: api_token_issue(user=project_team[role], name=f"{role} fuzz").raw for role in ("owner", "viewer")}
    return {"ids": {k: v for k, v in ids.items() if v is not None}, "tokens": tokens}


def _aim_at_real_rows(case, ids: dict) -> None:
    """Every other example (by a hash of the case, so a replay is the same) uses real ids and the project's slug."""
    if not case.path_parameters or zlib.crc32(repr(case.path_parameters).encode()) % 2:
        return
    for name in case.path_parameters:
        if name in ids:
            case.path_parameters[name] = ids[name]


@pytest.mark.slow  # about 3,000 requests in all: minutes
@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, print_blob=True,
          suppress_health_check=list(HealthCheck))
def test_every_operation_answers_as_documented(case, world):
    _aim_at_real_rows(case, world["ids"])
    checks = CHECKS if case.operation.label not in POSITIVE_CHECK_PENDING else CHECKS[:-1]
    for token in world["tokens"].values():
        case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=checks)
