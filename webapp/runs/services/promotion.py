"""Checkpoint aliases: moving `candidate` / `production` (or any name) and rolling back.

Every move is kept (AliasMove) and audited, so "which checkpoint served
production last Tuesday" has an answer and a rollback is just a move back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from webapp.projects.models import Project
from webapp.projects.services import audit_log
from webapp.runs.models import AliasMove, Checkpoint, CheckpointAlias, Experiment, ExperimentState

ALIAS_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class InvalidAliasName(ValueError):
    """The alias name is not one we accept (a client error, not a conflict)."""


class AliasConflict(ValueError):
    """The move cannot happen as asked: the alias is already there, or someone else moved it meanwhile."""


class GatesNotPassed(ValueError):
    """Promotion of a checkpoint whose gates failed (or that has none) without `force` and a reason."""


@dataclass(frozen=True)
class GateStatus:
    """What the promotion gates said about a checkpoint: passed, failed, or none ran for it."""

    state: str  # "passed", "failed" or "none"
    experiment_id: int | None
    detail: str


def checkpoint_gate_status(checkpoint: Checkpoint) -> GateStatus:
    """The gates of the finished experiments that chose this checkpoint as their candidate."""
    experiments = list(Experiment.objects.filter(candidate_checkpoint=checkpoint, state=ExperimentState.SUCCEEDED)
                       .order_by("-finished_at", "-id"))
    passed = [e for e in experiments if e.gates_passed]
    if passed:
        return GateStatus("passed", passed[0].pk, f"experiment {passed[0].name!r} passed its gates")
    if experiments:
        failed = experiments[0]
        names = ", ".join(g["gate"] for g in failed.gates if not g.get("passed")) or "no gate passed"
        return GateStatus("failed", failed.pk, f"experiment {failed.name!r} failed its gates ({names})")
    return GateStatus("none", None, "no finished experiment chose it as its candidate, so no gates ran for it")


def checkpoint_promote(*, checkpoint: Checkpoint, alias: str, actor, reason: str = "",
                       force: bool = False) -> CheckpointAlias:
    """Promote a checkpoint only when its gates passed, or when forced with a reason (both recorded)."""
    gates = checkpoint_gate_status(checkpoint)
    if gates.state != "passed":
        if not force:
            raise GatesNotPassed(
                f"Checkpoint {checkpoint.pk} was not promoted: {gates.detail}. To promote it anyway, "
                "send force: true with a reason; both are kept in the alias history and the audit log."
            )
        if not reason.strip():
            raise GatesNotPassed(f"A forced promotion needs a reason ({gates.detail}).")
    return alias_move(checkpoint=checkpoint, name=alias, actor=actor, reason=reason,
                      forced=gates.state != "passed", gates=gates)


def alias_move(*, checkpoint: Checkpoint, name: str, actor, reason: str = "", is_rollback: bool = False,
               forced: bool = False, gates: GateStatus | None = None) -> CheckpointAlias:
    """Point alias `name` of the checkpoint's project at this checkpoint.

    Moves of one project's aliases are serialised by a lock on the project row: when the
    alias does not exist yet there is no alias row to lock, and two first promotions
    would both try to create it. A loser that still collides (SQLite has no row locks)
    gets an AliasConflict, never a 500.
    """
    if not ALIAS_NAME.match(name):
        raise InvalidAliasName(
            f"Alias {name!r} is not valid: use lower-case letters, digits, '-' or '_' (at most 64 characters)."
        )
    try:
        with transaction.atomic():
            return _alias_move_locked(checkpoint=checkpoint, name=name, actor=actor, reason=reason,
                                      is_rollback=is_rollback, forced=forced, gates=gates)
    except IntegrityError:
        raise AliasConflict(f"Alias {name!r} was moved by someone else at the same time; try again.") from None


def _alias_move_locked(*, checkpoint: Checkpoint, name: str, actor, reason: str, is_rollback: bool,
                       forced: bool, gates: GateStatus | None) -> CheckpointAlias:
    project = Project.objects.select_for_update().get(pk=checkpoint.run.project_id)
    alias = CheckpointAlias.objects.select_for_update().filter(project=project, name=name).first()
    previous = alias.checkpoint if alias else None
    if alias is None:
        alias = CheckpointAlias.objects.create(project=project, name=name, checkpoint=checkpoint)
    elif previous.pk == checkpoint.pk:
        raise AliasConflict(f"Alias {name!r} already points at {checkpoint}.")
    else:
        alias.checkpoint = checkpoint
        alias.save(update_fields=["checkpoint", "updated_at"])
    AliasMove.objects.create(
        alias=alias, checkpoint=checkpoint, previous_checkpoint=previous, moved_by=actor,
        reason=reason, is_rollback=is_rollback, forced=forced,
    )
    data = {"alias": name, "to": checkpoint.pk, "from": previous.pk if previous else None, "reason": reason}
    if gates is not None:
        data.update(forced=forced, gates=gates.state, gates_detail=gates.detail)
    audit_log(project=project, actor=actor, action="alias.rollback" if is_rollback else "alias.move",
              target=alias, data=data)
    return alias


def alias_rollback(*, alias: CheckpointAlias, actor, reason: str = "") -> CheckpointAlias:
    """Move the alias back to the checkpoint it pointed at before its latest move."""
    last = alias.moves.order_by("-moved_at", "-id").first()
    if last is None or last.previous_checkpoint is None:
        raise AliasConflict(f"Alias {alias.name!r} has no earlier checkpoint to roll back to.")
    return alias_move(
        checkpoint=last.previous_checkpoint, name=alias.name, actor=actor,
        reason=reason or f"rollback of move {last.pk}", is_rollback=True,
    )
