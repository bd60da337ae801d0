"""Checkpoint aliases: moving `candidate` / `production` (or any name) and rolling back.

Every move is kept (AliasMove) and audited, so "which checkpoint served
production last Tuesday" has an answer and a rollback is just a move back. A promotion needs
passed gates and the checkpoint's weights on this server (an imported run's are elsewhere);
otherwise `force` and a reason, both recorded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from webapp.projects.models import Project
from webapp.projects.services.projects import audit_log
from webapp.runs.models import AliasMove, Checkpoint, CheckpointAlias, Experiment, ExperimentState
from webapp.runs.services.paths import GONE, PRESENT, checkpoint_folder

ALIAS_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class InvalidAliasName(ValueError):
    """The alias name is not one we accept (a client error, not a conflict)."""


class AliasConflict(ValueError):
    """The move cannot happen as asked: the alias is already there, or someone else moved it meanwhile."""


class GatesNotPassed(ValueError):
    """Promotion of a checkpoint whose gates failed (or that has none) without `force` and a reason."""


class WeightsAbsent(GatesNotPassed):
    """Promotion of a checkpoint whose weights are not on this server without `force` and a reason.

    A kind of GatesNotPassed: it needs the same force-with-reason, and every caller that answers
    a failed gate (409 in the API, the form's errors) answers this too.
    """


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


@dataclass(frozen=True)
class WeightsStatus:
    """Whether this server holds the checkpoint's weights (inside its run's folder), and if not, why."""

    state: str  # webapp.runs.services.paths: PRESENT, GONE or ELSEWHERE
    detail: str

    @property
    def present(self) -> bool:
        return self.state == PRESENT


def checkpoint_weights_status(checkpoint: Checkpoint) -> WeightsStatus:
    """The weights are here only when its folder is inside its run's folder on this server (webapp.runs.services.paths).

    An imported run's checkpoints name folders on the machine that trained them; an alias on
    such a checkpoint would point serving and exports at files this server does not have.
    """
    _, state = checkpoint_folder(checkpoint)
    where = checkpoint.storage_uri if len(checkpoint.storage_uri) <= 200 else checkpoint.storage_uri[:200] + "…"
    if state == PRESENT:
        return WeightsStatus(state, "its weights are in its run's folder on this server")
    if state == GONE:
        return WeightsStatus(state, f"its weights are gone from this server (its folder {where} was deleted; "
                                    "training keeps only the best checkpoints of a run)")
    return WeightsStatus(state, f"its weights are not on this server (its folder {where} is not in its run's "
                                "folder here, as for a run trained elsewhere and imported), so nothing here "
                                "can serve or export it")


@dataclass(frozen=True)
class PromotionCheck:
    """What stands between a checkpoint and an unforced promotion: its gates and where its weights are."""

    gates: GateStatus
    weights: WeightsStatus

    @property
    def problems(self) -> list[str]:
        """What a promotion would have to override, in words (empty: nothing; it may be promoted as asked)."""
        checks = ((self.gates.state == "passed", self.gates.detail), (self.weights.present, self.weights.detail))
        return [detail for ok, detail in checks if not ok]

    @property
    def needs_force(self) -> bool:
        return bool(self.problems)


def promotion_check(checkpoint: Checkpoint) -> PromotionCheck:
    return PromotionCheck(gates=checkpoint_gate_status(checkpoint), weights=checkpoint_weights_status(checkpoint))


def checkpoint_promote(*, checkpoint: Checkpoint, alias: str, actor, reason: str = "",
                       force: bool = False) -> CheckpointAlias:
    """Promote a checkpoint only when its gates passed and its weights are on this server, or when forced
    with a reason (both recorded)."""
    check = promotion_check(checkpoint)
    refusal = GatesNotPassed if check.weights.present else WeightsAbsent
    problems = "; and ".join(check.problems)
    if check.needs_force:
        if not force:
            raise refusal(
                f"Checkpoint {checkpoint.pk} was not promoted: {problems}. To promote it anyway, "
                "send force: true with a reason; both are kept in the alias history and the audit log."
            )
        if not reason.strip():
            raise refusal(f"A forced promotion needs a reason ({problems}).")
    return alias_move(checkpoint=checkpoint, name=alias, actor=actor, reason=reason,
                      forced=check.needs_force, gates=check.gates, weights=check.weights)


def alias_move(*, checkpoint: Checkpoint, name: str, actor, reason: str = "", is_rollback: bool = False,
               forced: bool = False, gates: GateStatus | None = None,
               weights: WeightsStatus | None = None) -> CheckpointAlias:
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
                                      is_rollback=is_rollback, forced=forced, gates=gates, weights=weights)
    except IntegrityError:
        raise AliasConflict(f"Alias {name!r} was moved by someone else at the same time; try again.") from None


def _alias_move_locked(*, checkpoint: Checkpoint, name: str, actor, reason: str, is_rollback: bool,
                       forced: bool, gates: GateStatus | None, weights: WeightsStatus | None) -> CheckpointAlias:
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
    if weights is not None:
        data.update(weights=weights.state, weights_detail=weights.detail)
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
