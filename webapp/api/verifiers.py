"""API for verifiers: list, versions, a new version validated against the kind's schema, score one
output or one stored trajectory, sanity checks. The same services and rules as the verifier pages.

Rescores live in webapp/api/trajectories.py (`POST /runs/{id}/rescore`, `GET /rescores/{id}`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from ninja import Field, Router, Schema
from ninja.responses import Status
from pydantic import AfterValidator, StringConstraints

from environments.registry import VERIFIERS
from webapp.api.errors import FieldErrorsOut, field_errors
from webapp.api.schemas import CHAT_TURN_SCHEMA
from webapp.common.bounds import Choice, JsonObject, RowId, Text, clean_text
from webapp.datasets.selectors.datasets import project_task
from webapp.projects.models import Role
from webapp.projects.selectors.access import get_object_or_404_for_user, get_project_or_404
from webapp.runs.selectors.failures import run_in_project
from webapp.runs.selectors.runs import runs_per_version_id
from webapp.trajectories.selectors.trajectories import project_trajectory_with_task
from webapp.trajectories.services.playground import (
    MAX_OUTPUT_CHARS,
    InputError,
    score_output,
    task_from_data,
    task_of_row,
    trajectory_from_output,
    trajectory_from_turns,
)
from webapp.trajectories.services.sanity_checks import (
    CHECK_DEFAULT,
    CHECK_MAX,
    CHECK_MIN,
    CheckError,
    check_create,
    check_score_pending,
    check_summary,
)
from webapp.trajectories.services.verification import env_task_of, env_trajectory_of
from webapp.verifiers.models import SampleMethod, Verifier, VerifierCheck, VerifierVersion
from webapp.verifiers.selectors.verifiers import (
    check_items,
    checks_with_project,
    latest_checks,
    project_verifiers,
    project_versions_with_creators,
    verifier_named,
    verifier_versions,
    verifiers_with_project,
    version_checks,
    versions_with_project,
)
from webapp.verifiers.services import config_form
from webapp.verifiers.services.verifiers import (
    VerifierNameTaken,
    verifier_create,
    verifier_update_config,
)

router = Router(tags=["verifiers"])

OutputText = Annotated[str, StringConstraints(max_length=MAX_OUTPUT_CHARS), AfterValidator(clean_text)]
Description = Annotated[str, StringConstraints(max_length=10_000), AfterValidator(clean_text)]


class CheckBriefOut(Schema):
    id: int
    size: int
    labelled: int = Field(description="Verdicts a person judged right or wrong.")
    agreed: int = Field(description="Verdicts judged right.")
    agreement: float | None = Field(description="agreed / labelled; null before the first judgement.")
    threshold: float
    under_threshold: bool = Field(description="The run form flags the version when its latest check is under.")
    created_at: datetime


class VersionOut(Schema):
    id: int
    verifier_id: int
    version: int
    config: dict
    kind_version: str = Field(description="Version of the built-in verifier code.")
    content_hash: str
    created_at: datetime
    created_by: str | None
    runs: int = Field(description="Runs that used this version.")
    latest_check: CheckBriefOut | None = Field(description="The latest sanity check with at least one judgement.")


class VerifierOut(Schema):
    id: int
    name: str
    kind: str
    description: str
    created_at: datetime
    version_count: int
    latest_version: int | None
    latest_check: CheckBriefOut | None = Field(description="The latest version's latest judged sanity check.")


class VerifierDetailOut(VerifierOut):
    versions: list[VersionOut] = Field(description="Newest first.")


class VerifierIn(Schema):
    name: Text(200, min_length=1)
    kind: Choice(*VERIFIERS) = Field(description="A registry verifier kind; its config follows that kind's schema "
                                                 "(GET the registry's schemas from the verifier page's form).")
    description: Description = ""
    config: JsonObject = Field(default_factory=dict, description="Validated against the kind's JSON schema.")


class VersionIn(Schema):
    config: JsonObject = Field(description="The whole config of the new version, validated against the kind's "
                                           "JSON schema (GET the registry's schema from the verifier page's form).")


class ScoreIn(Schema):
    task: JsonObject | None = Field(None, description='A task: {"messages", "tools", "ground_truth", ...}.')
    task_id: RowId | None = Field(None, description="A task of one of the project's datasets.")
    trajectory_id: RowId | None = Field(
        None, description="A stored trajectory: its turns are the output, its task the task (unless given).")
    output: OutputText | None = Field(None, description="A model output: one assistant message as text, or turns "
                                                        "as JSON text (see output_format).")
    output_format: Choice("auto", "text", "turns") = Field("auto", description="auto, text or turns.")
    turns: list[JsonObject] | None = Field(None, min_length=1, json_schema_extra={"items": CHAT_TURN_SCHEMA},
                                           description="The output as chat turns (instead of `output`).")
    truncated: bool = Field(False, description="The generation hit its token limit.")


class CallPairOut(Schema):
    expected: dict | None
    actual: dict | None
    matches: bool
    argument_diffs: list[dict]


class ScoreOut(Schema):
    reward: float | None = Field(description="Null exactly when the verifier failed (an error is never a 0).")
    passed: bool
    components: dict
    failure_bucket: str | None
    flags: list[str]
    error: str | None = Field(description="The verifier error (sandbox timeout, crash, judge unreachable).")
    parse: dict = Field(description="source (verifier or parser), format, errors.")
    calls: list[CallPairOut] = Field(description="Expected (ground truth) against actual calls, position by position.")
    state_diff: list[dict] = Field(description="Workplace end-state differences: table, row, field, expected, actual.")
    reward_parts: dict
    sandbox: dict = Field(description="python verifiers: isolation mode, stdout and stderr tails.")
    info: dict
    duration_ms: float


class CheckIn(Schema):
    size: Annotated[int, Field(ge=CHECK_MIN, le=CHECK_MAX)] = CHECK_DEFAULT
    run_id: RowId | None = Field(None, description="Draw from this run; omitted: from the whole project.")
    method: Choice(*SampleMethod.values) = Field("random", description="random or stratified (by stored reward).")
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None


class CheckItemOut(Schema):
    position: int
    trajectory_id: int
    scored: bool
    reward: float | None
    passed: bool
    failure_bucket: str
    error: str
    human_right: bool | None = Field(description="True: the verdict is right; False: wrong; null: not judged.")
    human_bucket: str


class CheckOut(CheckBriefOut):
    version_id: int
    run_id: int | None
    method: str
    seed: int
    scored: int
    errors: int
    histogram: list[dict] = Field(description="Reward bins: low, high, label, count (verifier errors apart).")
    items: list[CheckItemOut]
    disagreements: list[int] = Field(description="Positions of the items judged wrong.")


def _check_brief(check: VerifierCheck | None) -> dict | None:
    if check is None:
        return None
    return {"id": check.pk, "size": check.size, "labelled": check.labelled, "agreed": check.agreed,
            "agreement": check.agreement, "threshold": check.threshold, "under_threshold": check.under_threshold,
            "created_at": check.created_at}


def _versions_out(versions: list[VerifierVersion]) -> list[dict]:
    ids = [v.pk for v in versions]
    runs, checks = runs_per_version_id(ids), latest_checks(ids)
    return [{"id": v.pk, "verifier_id": v.verifier_id, "version": v.version, "config": v.config,
             "kind_version": v.kind_version, "content_hash": v.content_hash, "created_at": v.created_at,
             "created_by": v.created_by.get_username() if v.created_by else None, "runs": runs.get(v.pk, 0),
             "latest_check": _check_brief(checks.get(v.pk))} for v in versions]


def _verifier_out(verifier: Verifier, versions: list[dict]) -> dict:
    latest = versions[0] if versions else None
    return {"id": verifier.pk, "name": verifier.name, "kind": verifier.kind, "description": verifier.description,
            "created_at": verifier.created_at, "version_count": len(versions),
            "latest_version": latest["version"] if latest else None,
            "latest_check": latest["latest_check"] if latest else None}


def _verifier_for(request, verifier_id: int, minimum: str = Role.VIEWER) -> Verifier:
    return get_object_or_404_for_user(verifiers_with_project(), request.user, minimum, pk=verifier_id)


def _version_for(request, verifier_id: int, number: int, minimum: str = Role.VIEWER) -> VerifierVersion:
    verifier = _verifier_for(request, verifier_id, minimum)
    return get_object_or_404_for_user(versions_with_project(), request.user, minimum,
                                      project_field="verifier__project", verifier=verifier, version=number)


def _detail(verifier: Verifier) -> dict:
    versions = _versions_out(verifier_versions(verifier))
    return {**_verifier_out(verifier, versions), "versions": versions}


@router.get("/projects/{slug}/verifiers", response=list[VerifierOut], summary="List verifiers")
def list_verifiers(request, slug: str):
    """The project's verifiers with their kind, version count, latest version and its latest sanity check."""
    project = get_project_or_404(request.user, slug)
    verifiers = project_verifiers(project)
    out = _versions_out(project_versions_with_creators(project))
    by_verifier: dict[int, list[dict]] = {}
    for row in out:
        by_verifier.setdefault(row["verifier_id"], []).append(row)
    return [_verifier_out(v, by_verifier.get(v.pk, [])) for v in verifiers]


@router.post("/projects/{slug}/verifiers", response={201: VerifierDetailOut, 409: FieldErrorsOut, 422: FieldErrorsOut},
             summary="Create a verifier (its v1)")
def create_verifier(request, slug: str, body: VerifierIn):
    """A new verifier of a registry kind; its config becomes v1 (validated against the kind's JSON schema).
    Field errors come back by config path (`config.timeout_seconds`); a name already in use is a 409 on
    `name` (a conflict with the project's verifiers, as for datasets and review queues), also for the
    losers of concurrent creations. An llm_judge config must pass the operator's
    judge policy (allowed hosts, configured judge keys). Editors and owners."""
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    kinds = [k["name"] for k in config_form.kind_entries() if k["available"]]
    if body.kind not in kinds:
        return field_errors({"kind": f"Choose one of {', '.join(kinds)}."})
    if verifier_named(project, body.name) is not None:
        return field_errors({"name": str(VerifierNameTaken(body.name))}, 409)
    problems = config_form.config_problems(body.kind, body.config, project)
    if problems:
        return field_errors(problems)
    try:
        verifier = verifier_create(project=project, name=body.name, kind=body.kind, config=body.config,
                                   actor=request.user, description=body.description)
    except VerifierNameTaken as exc:  # a concurrent request created it between the check and now
        return field_errors({"name": str(exc)}, 409)
    return Status(201, _detail(verifier))


@router.get("/verifiers/{verifier_id}", response=VerifierDetailOut, summary="One verifier with its versions")
def get_verifier(request, verifier_id: RowId):
    """A verifier and every version (config, hash, runs that used it, latest sanity check), newest first."""
    return _detail(_verifier_for(request, verifier_id))


@router.get("/verifiers/{verifier_id}/versions", response=list[VersionOut], summary="List a verifier's versions")
def list_versions(request, verifier_id: RowId):
    """Every version, newest first; a version never changes once made (runs keep the one they used)."""
    return _detail(_verifier_for(request, verifier_id))["versions"]


@router.get("/verifiers/{verifier_id}/versions/{number}", response=VersionOut, summary="One version")
def get_version(request, verifier_id: RowId, number: RowId):
    return _versions_out([_version_for(request, verifier_id, number)])[0]


@router.post("/verifiers/{verifier_id}/versions", response={201: VersionOut, 200: VersionOut, 422: FieldErrorsOut},
             summary="Create a version")
def create_version(request, verifier_id: RowId, body: VersionIn):
    """Save a config as a new version (201), validated against the kind's JSON schema; errors by config path
    (422). The unchanged config answers the existing latest version (200). Editors and owners."""
    verifier = _verifier_for(request, verifier_id, Role.EDITOR)
    problems = config_form.config_problems(verifier.kind, body.config, verifier.project)
    if problems:
        return field_errors(problems)
    latest = verifier.latest_version
    version = verifier_update_config(verifier=verifier, config=body.config, actor=request.user)
    unchanged = latest is not None and version.pk == latest.pk
    return Status(200 if unchanged else 201, _versions_out([version])[0])


def _score_inputs(project, body: ScoreIn):
    stored = None
    if body.trajectory_id is not None:
        stored = project_trajectory_with_task(project, body.trajectory_id)
        if stored is None:
            raise InputError("trajectory_id", "No trajectory with this id in this project.")
    if body.task is not None:
        task = task_from_data(body.task, "task")
    elif body.task_id is not None:
        row = project_task(project, body.task_id)
        if row is None:
            raise InputError("task_id", "No task with this id in this project's datasets.")
        task = task_of_row(row)
    elif stored is not None:
        task = env_task_of(stored)
        if task is None:
            raise InputError("trajectory_id", "This trajectory has no stored task: send `task` or `task_id`.")
    else:
        raise InputError("task", "Send `task`, `task_id` or `trajectory_id`.")
    if body.turns is not None:
        trajectory = trajectory_from_turns(body.turns, truncated=body.truncated)
    elif body.output is not None:
        trajectory = trajectory_from_output(body.output, body.output_format, truncated=body.truncated)
    elif stored is not None:
        trajectory = env_trajectory_of(stored)
    else:
        raise InputError("output", "Send `output`, `turns` or `trajectory_id`.")
    return task, trajectory


@router.post("/verifiers/{verifier_id}/versions/{number}/score", response={200: ScoreOut, 422: FieldErrorsOut},
             summary="Score one output or one stored trajectory")
def score(request, verifier_id: RowId, number: RowId, body: ScoreIn):
    """Run the version on one task and one output (the playground's call); nothing is stored.

    The task is `task` (JSON), `task_id` (a dataset task) or the stored trajectory's; the output is
    `output` (text), `turns`, or the stored trajectory's turns. python verifiers run in the sandbox
    with the version's limits: a crash or a timeout answers 200 with `reward: null` and `error` set
    (a verifier error, never a reward of 0)."""
    version = _version_for(request, verifier_id, number)
    try:
        task, trajectory = _score_inputs(version.verifier.project, body)
    except InputError as exc:
        return field_errors({exc.field: str(exc)})
    return score_output(version, task, trajectory).to_dict()


def _check_out(check: VerifierCheck) -> dict:
    summary = check_summary(check)
    items = check_items(check)
    return {**_check_brief(check), "version_id": check.version_id, "run_id": check.run_id, "method": check.method,
            "seed": check.seed, "scored": summary.scored, "errors": summary.errors, "histogram": summary.histogram,
            "items": [{"position": i.position, "trajectory_id": i.trajectory_id, "scored": i.scored,
                       "reward": i.reward, "passed": i.passed, "failure_bucket": i.bucket, "error": i.error,
                       "human_right": i.human_right, "human_bucket": i.human_bucket} for i in items],
            "disagreements": [i.position for i in summary.disagreements]}


@router.get("/verifiers/{verifier_id}/versions/{number}/checks", response=list[CheckBriefOut],
            summary="A version's sanity checks")
def list_checks(request, verifier_id: RowId, number: RowId):
    """Newest first: size, judged, agreed, agreement rate against the threshold."""
    version = _version_for(request, verifier_id, number)
    return [_check_brief(c) for c in version_checks(version, limit=200)]


@router.post("/verifiers/{verifier_id}/versions/{number}/checks", response={201: CheckOut, 422: FieldErrorsOut},
             summary="Start a sanity check")
def create_check(request, verifier_id: RowId, number: RowId, body: CheckIn):
    """Draw `size` stored outputs (random, or stratified by stored reward) and score them with the version
    now (within the check time budget; GET the check to see what is scored). People judge the verdicts
    on the check's page. Editors and owners."""
    version = _version_for(request, verifier_id, number, Role.EDITOR)
    run = None
    if body.run_id is not None:
        run = run_in_project(version.verifier.project, body.run_id)
        if run is None:
            return field_errors({"run_id": "No run with this id in this project."})
    if body.method not in SampleMethod.values:
        return field_errors({"method": f"Choose one of {', '.join(SampleMethod.values)}."})
    try:
        check = check_create(version=version, actor=request.user, size=body.size, run=run, method=body.method,
                             seed=body.seed)
    except CheckError as exc:
        field = {"run": "run_id"}.get(exc.field, exc.field)
        return field_errors({field: str(exc)})
    check_score_pending(check)
    check.refresh_from_db()
    return Status(201, _check_out(check))


@router.get("/verifier-checks/{check_id}", response=CheckOut, summary="Sanity-check results")
def get_check(request, check_id: RowId):
    """One sanity check: the agreement rate, the reward histogram, every item with the verifier's verdict and
    the person's judgement, and the disagreements (items judged wrong)."""
    check = get_object_or_404_for_user(checks_with_project(), request.user,
                                       project_field="version__verifier__project", pk=check_id)
    return _check_out(check)
