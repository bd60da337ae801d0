"""Promotion respects the gates: a checkpoint whose gates failed, or that has none, needs force and a reason."""

from __future__ import annotations

import pytest

from tests.webapp.runs.test_experiment_pipeline import BASELINE, _create, _finish_stage, setup  # noqa: F401
from webapp.projects.models import AuditEvent
from webapp.runs.models import AliasMove
from webapp.runs.services.promotion import (
    GatesNotPassed,
    checkpoint_gate_status,
    checkpoint_promote,
)


def _finished_experiment(setup, *, candidate_success: float):  # noqa: F811
    exp = _create(setup)
    exp = _finish_stage(exp, "baseline", metrics={**BASELINE, "valid_json_rate": 0.9})
    exp = _finish_stage(exp, "grpo", checkpoints=[(5, {"validation/success_rate": 0.7})])
    return _finish_stage(exp, "held_out", metrics={"success_rate": candidate_success, "unsafe_action_rate": 0.0,
                                                   "latency_p95": 100.0})


def test_a_candidate_that_passed_its_gates_is_promoted_without_force(setup):  # noqa: F811
    exp = _finished_experiment(setup, candidate_success=0.6)
    assert exp.gates_passed is True
    assert checkpoint_gate_status(exp.candidate_checkpoint).state == "passed"
    alias = checkpoint_promote(checkpoint=exp.candidate_checkpoint, alias="production", actor=setup["owner"])
    assert alias.checkpoint == exp.candidate_checkpoint
    assert AliasMove.objects.get(alias=alias).forced is False


def test_failed_gates_refuse_promotion_until_forced_with_a_reason(setup):  # noqa: F811
    exp = _finished_experiment(setup, candidate_success=0.01)
    assert exp.gates_passed is False
    checkpoint = exp.candidate_checkpoint
    with pytest.raises(GatesNotPassed, match=r"failed its gates \(held-out success\).*force: true"):
        checkpoint_promote(checkpoint=checkpoint, alias="production", actor=setup["owner"])
    with pytest.raises(GatesNotPassed, match="needs a reason"):
        checkpoint_promote(checkpoint=checkpoint, alias="production", actor=setup["owner"], force=True, reason=" ")
    assert not AliasMove.objects.exists()
    alias = checkpoint_promote(checkpoint=checkpoint, alias="production", actor=setup["owner"], force=True,
                               reason="customer escalation, accepted the regression")
    move = AliasMove.objects.get(alias=alias)
    assert move.forced is True and move.reason == "customer escalation, accepted the regression"
    event = AuditEvent.objects.get(action="alias.move")
    assert event.data["forced"] is True and event.data["gates"] == "failed"
    assert "held-out success" in event.data["gates_detail"]


def test_a_checkpoint_without_gates_needs_force(setup):  # noqa: F811
    exp = _create(setup)
    run = exp.runs.get()
    checkpoint = run.checkpoints.create(step=1, storage_uri="/c/1")
    assert checkpoint_gate_status(checkpoint).state == "none"
    with pytest.raises(GatesNotPassed, match="no gates ran"):
        checkpoint_promote(checkpoint=checkpoint, alias="candidate", actor=setup["owner"])
