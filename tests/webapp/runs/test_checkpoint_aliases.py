"""Aliases move between checkpoints with history kept, audited, and can roll back."""

from __future__ import annotations

import pytest

from webapp.projects.models import AuditEvent
from webapp.runs.models import Checkpoint, Run
from webapp.runs.services.promotion import alias_move, alias_rollback


@pytest.fixture
def checkpoints(project_team):
    run = Run.objects.create(project=project_team["project"], name="grpo-1", kind="grpo")
    return [Checkpoint.objects.create(run=run, step=s, storage_uri=f"/ckpt/{s}") for s in (10, 20, 30)]


def test_moves_keep_history_and_rollback_returns(project_team, checkpoints):
    owner = project_team["owner"]
    a, b, _ = checkpoints
    alias_move(checkpoint=a, name="production", actor=owner, reason="first")
    alias = alias_move(checkpoint=b, name="production", actor=owner, reason="beats baseline")
    assert alias.checkpoint == b
    rolled = alias_rollback(alias=alias, actor=owner, reason="latency regression")
    assert rolled.checkpoint == a
    moves = list(alias.moves.order_by("moved_at", "id").values_list("checkpoint__step", "previous_checkpoint__step", "is_rollback"))
    assert moves == [(10, None, False), (20, 10, False), (10, 20, True)]
    actions = list(AuditEvent.objects.filter(action__startswith="alias.").order_by("id").values_list("action", flat=True))
    assert actions == ["alias.move", "alias.move", "alias.rollback"]


def test_bad_alias_names_and_noop_moves_are_refused(project_team, checkpoints):
    with pytest.raises(ValueError, match="not valid"):
        alias_move(checkpoint=checkpoints[0], name="Prod Ready!", actor=project_team["owner"])
    alias_move(checkpoint=checkpoints[0], name="candidate", actor=project_team["owner"])
    with pytest.raises(ValueError, match="already points"):
        alias_move(checkpoint=checkpoints[0], name="candidate", actor=project_team["owner"])


def test_rollback_without_history_is_refused(project_team, checkpoints):
    alias = alias_move(checkpoint=checkpoints[0], name="candidate", actor=project_team["owner"])
    with pytest.raises(ValueError, match="no earlier checkpoint"):
        alias_rollback(alias=alias, actor=project_team["owner"])
