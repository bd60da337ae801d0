"""A checkpoint whose weights are not on this server (an imported run's, or deleted) needs force and a reason
to be promoted, even when its gates passed: service, API and page say the weights are absent.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.webapp.runs.test_experiment_pipeline import BASELINE, _create, _finish_stage, setup  # noqa: F401
from webapp.projects.models import AuditEvent
from webapp.projects.services.projects import api_token_issue
from webapp.runs.models import AliasMove, Checkpoint, CheckpointAlias
from webapp.runs.services.paths import checkpoint_folder
from webapp.runs.services.promotion import (
    GatesNotPassed,
    WeightsAbsent,
    checkpoint_promote,
    checkpoint_weights_status,
)


def _passed_candidate(setup) -> Checkpoint:  # noqa: F811
    exp = _create(setup)
    exp = _finish_stage(exp, "baseline", metrics={**BASELINE, "valid_json_rate": 0.9})
    exp = _finish_stage(exp, "grpo", checkpoints=[(5, {"validation/success_rate": 0.7})])
    exp = _finish_stage(exp, "held_out", metrics={"success_rate": 0.6, "unsafe_action_rate": 0.0,
                                                  "latency_p95": 100.0})
    assert exp.gates_passed is True
    return exp.candidate_checkpoint


ELSEWHERE = {
    "imported": "imported:///cluster/runs/grpo-7/checkpoints/step_5",
    "other machine": "/cluster/runs/grpo-7/checkpoints/step_5",
    "file uri elsewhere": "file:///cluster/runs/grpo-7/checkpoints/step_5",
    "s3": "s3://bucket/grpo-7/step_5",
}


@pytest.fixture(params=sorted(ELSEWHERE))
def elsewhere(request, setup):  # noqa: F811
    checkpoint = _passed_candidate(setup)
    Checkpoint.objects.filter(pk=checkpoint.pk).update(storage_uri=ELSEWHERE[request.param])
    checkpoint.refresh_from_db()
    return checkpoint


def test_passed_gates_and_weights_here_promote_without_force(setup):  # noqa: F811
    checkpoint = _passed_candidate(setup)
    assert checkpoint_folder(checkpoint)[1] == "present" and checkpoint_weights_status(checkpoint).present
    alias = checkpoint_promote(checkpoint=checkpoint, alias="production", actor=setup["owner"])
    assert AliasMove.objects.get(alias=alias).forced is False
    assert AuditEvent.objects.get(action="alias.move").data["weights"] == "present"


def test_weights_elsewhere_refuse_promotion_until_forced_with_a_reason(setup, elsewhere):  # noqa: F811
    owner = setup["owner"]
    with pytest.raises(WeightsAbsent, match=r"weights are not on this server.*force: true"):
        checkpoint_promote(checkpoint=elsewhere, alias="production", actor=owner)
    with pytest.raises(GatesNotPassed, match="needs a reason"):  # WeightsAbsent is a GatesNotPassed
        checkpoint_promote(checkpoint=elsewhere, alias="production", actor=owner, force=True, reason="  ")
    assert not AliasMove.objects.exists() and not CheckpointAlias.objects.exists()
    alias = checkpoint_promote(checkpoint=elsewhere, alias="production", actor=owner, force=True,
                               reason="served from the cluster's copy")
    assert AliasMove.objects.get(alias=alias).forced is True
    event = AuditEvent.objects.get(action="alias.move")
    assert event.data["forced"] is True and event.data["gates"] == "passed"
    assert event.data["weights"] == "elsewhere" and "not on this server" in event.data["weights_detail"]


def test_deleted_weights_are_absent_too(setup):  # noqa: F811
    checkpoint = _passed_candidate(setup)
    shutil.rmtree(checkpoint_folder(checkpoint)[0])
    status = checkpoint_weights_status(checkpoint)
    assert status.state == "gone" and "gone from this server" in status.detail
    with pytest.raises(WeightsAbsent, match="gone from this server"):
        checkpoint_promote(checkpoint=checkpoint, alias="production", actor=setup["owner"])


def test_failed_gates_and_absent_weights_are_both_named(setup):  # noqa: F811
    exp = _create(setup)
    run = exp.runs.get()
    checkpoint = run.checkpoints.create(step=1, storage_uri="imported:///far/away")
    with pytest.raises(WeightsAbsent) as refused:
        checkpoint_promote(checkpoint=checkpoint, alias="candidate", actor=setup["owner"])
    assert "no gates ran" in str(refused.value) and "not on this server" in str(refused.value)


def test_the_api_answers_409_naming_the_absent_weights(client, setup, elsewhere):  # noqa: F811
    raw = api_token_issue(user=setup["owner"], name="ci").raw
    headers = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    url = f"/api/checkpoints/{elsewhere.pk}/promote"
    refused = client.post(url, json.dumps({"alias": "production"}), content_type="application/json", **headers)
    assert refused.status_code == 409 and "weights are not on this server" in refused.json()["detail"]
    no_reason = client.post(url, json.dumps({"alias": "production", "force": True}),
                            content_type="application/json", **headers)
    assert no_reason.status_code == 409 and "needs a reason" in no_reason.json()["detail"]
    assert not AliasMove.objects.exists()
    forced = client.post(url, json.dumps({"alias": "production", "force": True, "reason": "cluster copy"}),
                         content_type="application/json", **headers)
    assert forced.status_code == 200 and forced.json()["checkpoint_id"] == elsewhere.pk
    assert AliasMove.objects.get().forced is True


def test_the_page_warns_and_needs_force_with_a_reason(client, project_team, setup, elsewhere):  # noqa: F811
    slug = setup["project"].slug
    url = f"/p/{slug}/checkpoints/{elsewhere.pk}/promote/"
    client.force_login(project_team["owner"])
    page = client.get(url).content.decode()
    assert '<span class="gate passed">passed</span>' in page  # the gates passed...
    assert "not on this server</span>" in page and "weights are not on this server" in page  # ...the weights are not
    assert 'name="force"' in page and "its weights are not on this server (recorded as forced)" in page
    assert '<span class="required">(required)</span>' in page

    refused = client.post(url, {"alias": "production", "reason": ""})
    assert refused.status_code == 400
    body = refused.content.decode()
    force_error = re.search(r'<p class="field-error" id="force-error">([^<]*)</p>', body).group(1)
    assert "Its weights are not on this server" in force_error and "Promote anyway" in force_error
    assert 'id="reason-error"' in body
    assert not AliasMove.objects.exists()

    promoted = client.post(url, {"alias": "production", "reason": "cluster copy", "force": "on"})
    assert promoted.status_code == 302
    assert AliasMove.objects.get().forced is True


def test_the_page_of_a_checkpoint_with_its_weights_here_offers_no_force(client, project_team, setup):  # noqa: F811
    checkpoint = _passed_candidate(setup)
    client.force_login(project_team["owner"])
    page = client.get(f"/p/{setup['project'].slug}/checkpoints/{checkpoint.pk}/promote/").content.decode()
    assert "on this server</span>" in page and 'name="force"' not in page
