"""Typed request and response bodies of the API."""

from __future__ import annotations

from datetime import datetime

from ninja import Schema


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


class JobIn(Schema):
    kind: str = "noop"
    payload: dict = {}


class ErrorOut(Schema):
    detail: str


class ProductionTaskIn(Schema):
    messages: list[dict]
    tools: list[dict] = []
    ground_truth: list[dict] | None = None
    category: str = ""
    metadata: dict = {}


class ProductionTrajectoryIn(Schema):
    id: str | None = None
    turns: list[dict]
    task: ProductionTaskIn | None = None
    truncated: bool = False
    latency_ms: float | None = None
    tokens_in: int = 0
    tokens_out: int = 0


class ProductionBatchIn(Schema):
    verifier: str | None = None
    trajectories: list[ProductionTrajectoryIn]


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
    verifier: str
    version: int | None = None


class RescoreOut(Schema):
    id: int
    run_id: int
    verifier_version_id: int
    job_id: int | None
    summary: dict


class EvalsIn(Schema):
    trajectory_ids: list[int] = []
    run_id: int | None = None
    bucket: str | None = None
    dataset: str
    split: str = "held_out"


class EvalsOut(Schema):
    dataset: str | None
    version: int | None
    created: int
    duplicates: int
    skipped: list[dict]


class ExperimentIn(Schema):
    name: str
    dataset: str
    verifier: str
    model: str
    config: dict = {}


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
    alias: str = "production"
    reason: str = ""


class AliasOut(Schema):
    name: str
    checkpoint_id: int
    run_id: int
    step: int
