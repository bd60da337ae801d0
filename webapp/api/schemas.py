"""Typed request and response bodies of the API."""

from __future__ import annotations

from datetime import datetime

from ninja import Schema
from pydantic import Field, field_validator

from webapp.common.bounds import (
    Choice,
    Count,
    Documented,
    JsonObject,
    LongText,
    Milliseconds,
    RowId,
    Text,
)
from webapp.runs.services.production_scoring import ProductionItem
from webapp.runs.services.promotion import ALIAS_NAME


class ProjectOut(Schema):
    slug: str
    name: str
    description: str
    role: str | None = None


class JobOut(Schema):
    id: int
    kind: str
    queue: str
    state: str
    attempt: int
    max_attempts: int
    progress: float
    error: str
    run_id: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None


# Job kinds a script may start directly; training kinds are started through runs.
DIRECT_JOB_KIND_NAMES = ("noop",)


class JobIn(Schema):
    kind: Choice(*DIRECT_JOB_KIND_NAMES) = "noop"
    payload: JsonObject = {}


class ErrorOut(Schema):
    """Every error answer of the API: `detail` says what was wrong and what to do."""

    detail: str


class ValidationErrorOut(Schema):
    """A 422: `detail` lists the problems, `errors` maps each field (dotted path) to its problem."""

    detail: str
    errors: dict[str, str] = {}


class ProductionTaskIn(Schema):
    messages: list[JsonObject]
    tools: list[JsonObject] = []
    ground_truth: list[JsonObject] | None = None
    category: Text(64) = ""
    metadata: JsonObject = {}


# What turns_are_chat_messages checks, stated in the document: each turn is an object with a `role`.
CHAT_TURN_SCHEMA = {"type": "object", "required": ["role"], "properties": {"role": {"type": "string"}},
                    "additionalProperties": True}


class ProductionTrajectoryIn(Schema):
    """One logged production run; also what each line of `manage.py log_trajectories` must be."""

    id: Text(200, min_length=1) | None = Field(None, description="Your id for this run: logging is idempotent by it.")
    turns: list[JsonObject] = Field(min_length=1, json_schema_extra={"items": CHAT_TURN_SCHEMA})
    task: ProductionTaskIn | None = None
    truncated: bool = False
    latency_ms: Milliseconds | None = None
    tokens_in: Count = 0
    tokens_out: Count = 0

    @field_validator("turns")
    @classmethod
    def turns_are_chat_messages(cls, turns: list[dict]) -> list[dict]:
        for index, turn in enumerate(turns):
            if not isinstance(turn.get("role"), str):
                raise ValueError(f"turn {index} has no `role`: each turn is a chat message with a role")
        return turns

    def to_item(self) -> ProductionItem:
        return ProductionItem(key=self.id or "", turns=self.turns, task=self.task.dict() if self.task else None,
                              truncated=self.truncated, latency_ms=self.latency_ms, tokens_in=self.tokens_in,
                              tokens_out=self.tokens_out)


class ProductionBatchIn(Schema):
    verifier: Text(200) | None = None
    trajectories: list[ProductionTrajectoryIn] = Field(min_length=1, max_length=1000)


class TrajectoryOut(Schema):
    id: int
    task_key: str
    source: str
    split: str
    step: int
    sample_index: int
    reward: float | None
    passed: bool
    failure_bucket: str
    flags: list
    components: dict
    created_at: datetime


class ProductionBatchOut(Schema):
    created: int
    verify_job_id: int | None
    trajectories: list[TrajectoryOut]


class RescoreIn(Schema):
    verifier: Text(200)
    version: Count | None = None


class RescoreOut(Schema):
    id: int
    run_id: int
    verifier_version_id: int
    job_id: int | None
    summary: dict


class EvalsIn(Schema):
    trajectory_ids: list[RowId] = Field([], max_length=10_000)
    run_id: RowId | None = None
    bucket: Text(32) | None = None
    dataset: Text(200)
    split: Text(16) = "held_out"


class EvalsOut(Schema):
    dataset: str | None
    version: int | None
    created: int
    duplicates: int
    skipped: list[dict]


class ExperimentIn(Schema):
    name: Text(200, min_length=1)
    dataset: Text(200)
    verifier: Text(200)
    model: Text(200)
    config: JsonObject = Field({}, description="Stage settings and gate thresholds; see ExperimentConfigIn.")


class ExperimentOut(Schema):
    id: int
    name: str
    state: str
    stages: dict
    reason: str
    candidate_checkpoint_id: int | None
    gates: list
    gates_passed: bool | None


class PromoteIn(Schema):
    alias: Documented(64, ALIAS_NAME.pattern) = Field("production", description="Lower-case letters, digits, "
                                                                               "'-' or '_', starting with a letter "
                                                                               "or digit.")
    reason: LongText = ""
    force: bool = Field(False, description="Promote although the checkpoint's gates failed or it has none "
                                           "(needs a reason; recorded in the alias history and the audit log).")


class AliasOut(Schema):
    name: str
    checkpoint_id: int
    run_id: int
    step: int


class RunsDeletionOut(Schema):
    """What deleting runs would remove (a run with its evaluations, an experiment with all its runs) and what
    keeps them: the fields GET /runs/{id}/deletion and GET /experiments/{id}/deletion share."""

    trajectories: int
    reviews: int = Field(description="Human reviews of those trajectories (verdicts and preferences): they go too.")
    metric_points: int
    checkpoints: int
    jobs: int
    folder_files: int
    folder_bytes: int = Field(description="The bytes the runs' folders hold on the server's disk (what a deletion "
                                          "frees).")
    folder_size_complete: bool = Field(description="false: counting stopped at 100,000 files a run, the size is at "
                                                   "least this.")
    blockers: list[str] = Field(description="Why it cannot be deleted now, each with what to do; empty: it can.")
    pending_job_id: int | None = Field(description="The deletion job already queued or running for it, if any.")
