"""Checkpoint aliases: moving `candidate` / `production` (or any name) and rolling back.

Every move is kept (AliasMove) and audited, so "which checkpoint served
production last Tuesday" has an answer and a rollback is just a move back.
"""

from __future__ import annotations

import re

from django.db import transaction

from webapp.projects.services import audit_log
from webapp.runs.models import AliasMove, Checkpoint, CheckpointAlias

ALIAS_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


@transaction.atomic
def alias_move(*, checkpoint: Checkpoint, name: str, actor, reason: str = "", is_rollback: bool = False) -> CheckpointAlias:
    """Point alias `name` of the checkpoint's project at this checkpoint."""
    if not ALIAS_NAME.match(name):
        raise ValueError(
            f"Alias {name!r} is not valid: use lower-case letters, digits, '-' or '_' (at most 64 characters)."
        )
    project = checkpoint.run.project
    alias = CheckpointAlias.objects.select_for_update().filter(project=project, name=name).first()
    previous = alias.checkpoint if alias else None
    if alias is None:
        alias = CheckpointAlias.objects.create(project=project, name=name, checkpoint=checkpoint)
    elif previous.pk == checkpoint.pk:
        raise ValueError(f"Alias {name!r} already points at {checkpoint}.")
    else:
        alias.checkpoint = checkpoint
        alias.save(update_fields=["checkpoint", "updated_at"])
    AliasMove.objects.create(
        alias=alias, checkpoint=checkpoint, previous_checkpoint=previous, moved_by=actor,
        reason=reason, is_rollback=is_rollback,
    )
    audit_log(
        project=project, actor=actor, action="alias.rollback" if is_rollback else "alias.move", target=alias,
        data={"alias": name, "to": checkpoint.pk, "from": previous.pk if previous else None, "reason": reason},
    )
    return alias


def alias_rollback(*, alias: CheckpointAlias, actor, reason: str = "") -> CheckpointAlias:
    """Move the alias back to the checkpoint it pointed at before its latest move."""
    last = alias.moves.order_by("-moved_at", "-id").first()
    if last is None or last.previous_checkpoint is None:
        raise ValueError(f"Alias {alias.name!r} has no earlier checkpoint to roll back to.")
    return alias_move(
        checkpoint=last.previous_checkpoint, name=alias.name, actor=actor,
        reason=reason or f"rollback of move {last.pk}", is_rollback=True,
    )
