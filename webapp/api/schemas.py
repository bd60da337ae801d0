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
