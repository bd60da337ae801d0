"""The checkpoints page: the table, the alias panel, promotion, rollback, downloads and exports."""

from __future__ import annotations

import io
import os
import re
import zipfile

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.webapp.runs.test_experiment_pipeline import BASELINE, _create, _finish_stage, setup  # noqa: F401
from webapp.runs.models import AliasMove, Checkpoint, CheckpointAlias, Job, JobState, Run
from webapp.runs.services.promotion import alias_move

MEMBERS = ["viewer", "reviewer", "editor", "owner"]
EVERYONE = [*MEMBERS, "outsider"]


@pytest.fixture
def data_dir(settings, tmp_path):
    """A data directory of the test's own, with a place outside it."""
    data = tmp_path / "data"
    (data / "runs").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    settings.DATA_DIR = data
    settings.CRUCIBLE_RUNS_DIR = data / "runs"
    return data


def _folder(path, files: dict[str, bytes]):
    for name, content in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return path


@pytest.fixture
def world(project_team, data_dir):
    """A run with a hostile name and three checkpoints (folders for two), `production` moved twice."""
    project, owner = project_team["project"], project_team["owner"]
    run = Run.objects.create(project=project, name="grpo <b>bold</b>", kind="grpo",
                             config={"keep_top_k": 1, "checkpoint_metric": "validation/success_rate"})
    folder = data_dir / "runs" / run.folder_name / "checkpoints"
    checkpoints = []
    for step, success in ((10, 0.25), (20, 0.5), (30, 0.125)):
        path = folder / f"step_{step}"
        if step != 10:  # retention deleted the folder of step 10
            _folder(path, {"adapter_model.safetensors": b"weights %d" % step, "adapter_config.json": b"{}",
                           "tokenizer/tokenizer.json": b'{"v": 1}'})
        checkpoints.append(Checkpoint.objects.create(
            run=run, step=step, storage_uri=str(path), kind="adapter",
            metrics={"validation/success_rate": success, "validation/valid_json_rate": 0.9,
                     "validation/reward_mean": success, "train/loss": 1.0}))
    alias_move(checkpoint=checkpoints[0], name="production", actor=owner, reason="first <i>cut</i>")
    alias_move(checkpoint=checkpoints[1], name="production", actor=owner, reason="better")
    return {"project": project, "slug": project.slug, "run": run, "checkpoints": checkpoints, "owner": owner}


def _body(response) -> str:
    return response.content.decode()


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


# ---------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------


def test_table_shows_metrics_aliases_retention_and_escapes_names(client, project_team, world):
    client.force_login(project_team["viewer"])
    response = client.get(f"/p/{world['slug']}/checkpoints/")
    body = _body(response)
    assert response.status_code == 200
    assert "grpo &lt;b&gt;bold&lt;/b&gt;" in body and "<b>bold</b>" not in body
    assert "first &lt;i&gt;cut&lt;/i&gt;" in body
    assert body.count('<tr data-checkpoint="') == 3
    assert "0.500" in body and "0.900" in body  # fixed decimals
    a, b, c = world["checkpoints"]
    row_b = re.search(rf'<tr data-checkpoint="{b.pk}".*?</tr>', body, re.S).group(0)
    assert ">top-k<" in row_b and 'href="#alias-production"' in row_b and "/download/" in row_b
    row_a = re.search(rf'<tr data-checkpoint="{a.pk}".*?</tr>', body, re.S).group(0)
    assert "not top-k" in row_a and "folder gone" in row_a and "/download/" not in row_a
    assert '<span class="gate none">none</span>' in row_a
    # The latest step is kept whatever its score (retention's rule), so step 30 is too.
    row_c = re.search(rf'<tr data-checkpoint="{c.pk}".*?</tr>', body, re.S).group(0)
    assert ">top-k<" in row_c
    assert 'id="alias-production"' in body and "Roll back" not in body  # viewers do not roll back
    assert "/promote/" not in body and "Export merged" not in body


def test_filter_by_run_and_bad_filters(client, project_team, world):
    other = Run.objects.create(project=world["project"], name="sft-2", kind="sft")
    Checkpoint.objects.create(run=other, step=5, storage_uri="/elsewhere/5")
    client.force_login(project_team["viewer"])
    slug = world["slug"]
    assert _body(client.get(f"/p/{slug}/checkpoints/")).count('<tr data-checkpoint="') == 4
    only = _body(client.get(f"/p/{slug}/checkpoints/?run={other.pk}"))
    assert only.count('<tr data-checkpoint="') == 1 and "not on this server" in only
    assert f'<option value="{other.pk}" selected>' in only
    for bad, says in (("abc", "is not a run id"), ("999999", "no run 999999")):
        response = client.get(f"/p/{slug}/checkpoints/?run={bad}")
        assert response.status_code == 200 and says in _body(response)
        assert '<tr data-checkpoint="' not in _body(response)
    stranger = Run.objects.create(project=project_team["other"], name="theirs", kind="grpo")
    assert "no run" in _body(client.get(f"/p/{slug}/checkpoints/?run={stranger.pk}"))
    junk = client.get(f"/p/{slug}/checkpoints/?after=garbage")
    assert junk.status_code == 200 and "start again from the first page" in _body(junk)


def test_keyset_pages_cover_every_checkpoint_once(client, project_team, data_dir):
    run = Run.objects.create(project=project_team["project"], name="long", kind="grpo")
    Checkpoint.objects.bulk_create(Checkpoint(run=run, step=s, storage_uri=f"/c/{s}") for s in range(55))
    client.force_login(project_team["viewer"])
    slug = project_team["project"].slug
    first = client.get(f"/p/{slug}/checkpoints/?run={run.pk}")
    assert _body(first).count('<tr data-checkpoint="') == 50 and 'rel="next"' in _body(first)
    cursor = first.context["page"].next_cursor
    second = client.get(f"/p/{slug}/checkpoints/?run={run.pk}&after={cursor}")
    steps = [r.checkpoint.step for r in first.context["rows"]] + [r.checkpoint.step for r in second.context["rows"]]
    assert sorted(steps) == list(range(55)) and 'rel="next"' not in _body(second)


def test_empty_project_says_what_to_do(client, project_team):
    client.force_login(project_team["viewer"])
    body = _body(client.get(f"/p/{project_team['project'].slug}/checkpoints/"))
    assert "No checkpoints yet: they appear as SFT and GRPO runs save them" in body
    assert f'href="/p/{project_team["project"].slug}/' in body and "empty-state" in body


def test_nav_links_the_page(client, project_team):
    client.force_login(project_team["viewer"])
    body = _body(client.get(f"/p/{project_team['project'].slug}/"))
    assert 'data-nav-key="c"' in body and "/checkpoints/" in body


def test_page_costs_a_bounded_number_of_queries(client, project_team, world):
    client.force_login(project_team["owner"])
    url = f"/p/{world['slug']}/checkpoints/"
    with CaptureQueriesContext(connection) as small:
        assert client.get(url).status_code == 200
    run = world["run"]
    Checkpoint.objects.bulk_create(Checkpoint(run=run, step=s, storage_uri=f"/c/{s}") for s in range(100, 160))
    for step in (100, 101):  # one alias more: its history is one query more, never one per checkpoint
        alias_move(checkpoint=Checkpoint.objects.get(run=run, step=step), name="candidate", actor=world["owner"])
    Job.objects.create(project=world["project"], kind="export", payload={"checkpoint_id": world["checkpoints"][1].pk,
                                                                       "out": "/x"})
    with CaptureQueriesContext(connection) as large:
        assert client.get(url).status_code == 200
    assert len(large) <= len(small) + 2, [q["sql"] for q in large.captured_queries]
    assert len(large) <= 25, len(large)


# ---------------------------------------------------------------------------------------
# Roles: every page and POST
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", EVERYONE)
def test_read_pages_need_membership(client, project_team, world, role):
    client.force_login(project_team[role])
    slug, ckpt = world["slug"], world["checkpoints"][1]
    expected = 404 if role == "outsider" else 200
    assert client.get(f"/p/{slug}/checkpoints/").status_code == expected
    assert client.get(f"/p/{slug}/checkpoints/aliases/production/").status_code == expected
    download = client.get(f"/p/{slug}/checkpoints/{ckpt.pk}/download/")
    assert download.status_code == expected
    if expected == 200:
        b"".join(download.streaming_content)
    assert client.get(f"/p/{slug}/checkpoints/{ckpt.pk}/export/download/").status_code == 404


@pytest.mark.parametrize("role", EVERYONE)
def test_promote_page_and_post_need_owner(client, project_team, world, role):
    client.force_login(project_team[role])
    slug, ckpt = world["slug"], world["checkpoints"][2]
    expected = {"outsider": 404, "owner": 200}.get(role, 403)
    assert client.get(f"/p/{slug}/checkpoints/{ckpt.pk}/promote/").status_code == expected
    response = client.post(f"/p/{slug}/checkpoints/{ckpt.pk}/promote/",
                           {"alias": "staging", "reason": "try", "force": "on"})
    assert response.status_code == (302 if role == "owner" else expected)
    assert CheckpointAlias.objects.filter(name="staging").exists() is (role == "owner")


@pytest.mark.parametrize("role", EVERYONE)
def test_rollback_needs_owner(client, project_team, world, role):
    client.force_login(project_team[role])
    response = client.post(f"/p/{world['slug']}/checkpoints/aliases/production/rollback/", {"reason": "oops"})
    assert response.status_code == {"outsider": 404, "owner": 302}.get(role, 403)
    alias = CheckpointAlias.objects.get(name="production")
    assert (alias.checkpoint == world["checkpoints"][0]) is (role == "owner")


@pytest.mark.parametrize("role", EVERYONE)
def test_export_needs_editor(client, project_team, world, role):
    client.force_login(project_team[role])
    ckpt = world["checkpoints"][1]
    response = client.post(f"/p/{world['slug']}/checkpoints/{ckpt.pk}/export/")
    allowed = role in ("editor", "owner")
    assert response.status_code == {"outsider": 404}.get(role, 302 if allowed else 403)
    assert Job.objects.filter(kind="export").exists() is allowed


@pytest.mark.parametrize("role", MEMBERS)
def test_buttons_follow_roles(client, project_team, world, role):
    client.force_login(project_team[role])
    body = _body(client.get(f"/p/{world['slug']}/checkpoints/"))
    assert ("/promote/" in body) is (role == "owner")
    assert ("/rollback/" in body) is (role == "owner")
    assert ("Export merged" in body) is (role in ("editor", "owner"))
    assert "/download/" in body


def test_get_is_refused_on_post_only_views(client, project_team, world):
    client.force_login(project_team["owner"])
    slug, ckpt = world["slug"], world["checkpoints"][1]
    assert client.get(f"/p/{slug}/checkpoints/aliases/production/rollback/").status_code == 405
    assert client.get(f"/p/{slug}/checkpoints/{ckpt.pk}/export/").status_code == 405


# ---------------------------------------------------------------------------------------
# Promotion
# ---------------------------------------------------------------------------------------


def _passed_experiment(setup):  # noqa: F811 - the pipeline's fixture, passed along
    exp = _create(setup)
    exp = _finish_stage(exp, "baseline", metrics={**BASELINE, "valid_json_rate": 0.9, "reward_mean": 0.2})
    exp = _finish_stage(exp, "grpo", checkpoints=[(5, {"validation/success_rate": 0.7})])
    exp = _finish_stage(exp, "held_out", metrics={"success_rate": 0.6, "unsafe_action_rate": 0.0,
                                                  "latency_p95": 100.0, "valid_json_rate": 0.85,
                                                  "reward_mean": 0.6})
    assert exp.gates_passed is True
    return exp


def test_promote_a_checkpoint_whose_gates_passed(client, project_team, setup):  # noqa: F811
    exp = _passed_experiment(setup)
    slug, ckpt = setup["project"].slug, exp.candidate_checkpoint
    client.force_login(project_team["owner"])
    table = _body(client.get(f"/p/{slug}/checkpoints/"))
    row = re.search(rf'<tr data-checkpoint="{ckpt.pk}".*?</tr>', table, re.S).group(0)
    assert '<span class="gate passed">passed</span>' in row
    assert '<span class="delta up"' in row and "+0.550" in row  # 0.6 against 0.05
    assert "\u22120.050" in row and '<span class="delta down"' in row  # valid JSON 0.85 against 0.9

    page = _body(client.get(f"/p/{slug}/checkpoints/{ckpt.pk}/promote/"))
    assert '<span class="gate passed">passed</span>' in page
    assert "held-out success" in page and "candidate &gt; baseline + 0.0" in page
    assert 'name="force"' not in page  # nothing to force
    assert '<option value="' not in page.split('datalist id="alias-names">')[1].split("</datalist>")[0]

    response = client.post(f"/p/{slug}/checkpoints/{ckpt.pk}/promote/", {"alias": "production", "reason": ""},
                           follow=True)
    assert response.redirect_chain[-1][0].endswith(f"/p/{slug}/checkpoints/#alias-production")
    assert any("now points at checkpoint" in m for m in _messages(response))
    alias = CheckpointAlias.objects.get(project=setup["project"], name="production")
    move = alias.moves.get()
    assert alias.checkpoint == ckpt and move.forced is False and move.moved_by == project_team["owner"]
    body = _body(response)
    panel = re.search(r'id="alias-production".*?</article>', body, re.S).group(0)
    assert "(new alias)" in panel and "promotion" in panel and "owner" in panel and "forced" not in panel


def test_promotion_without_gates_needs_the_checkbox_and_a_reason(client, project_team, world):
    client.force_login(project_team["owner"])
    slug, ckpt = world["slug"], world["checkpoints"][2]
    url = f"/p/{slug}/checkpoints/{ckpt.pk}/promote/"
    page = _body(client.get(url))
    assert '<span class="gate none">none</span>' in page and 'name="force"' in page and "(required)" in page
    assert '<option value="production">' in page  # the datalist offers existing aliases

    refused = client.post(url, {"alias": "production", "reason": ""})
    body = _body(refused)
    assert refused.status_code == 400
    assert 'id="force-error"' in body and "Promote anyway" in body and 'id="reason-error"' in body
    refused = client.post(url, {"alias": "production", "reason": "", "force": "on"})
    assert refused.status_code == 400 and 'id="reason-error"' in _body(refused) and "needs a reason" in _body(refused)
    assert 'id="force-error"' not in _body(refused) and "checked" in _body(refused)
    refused = client.post(url, {"alias": "production", "reason": "hotfix for <tool> regressions"})
    assert refused.status_code == 400 and "hotfix for &lt;tool&gt; regressions</textarea>" in _body(refused)
    assert CheckpointAlias.objects.get(name="production").checkpoint == world["checkpoints"][1]

    done = client.post(url, {"alias": "production", "reason": "hotfix <now>", "force": "on"}, follow=True)
    assert done.status_code == 200
    move = AliasMove.objects.order_by("-id").first()
    assert move.checkpoint == ckpt and move.forced and move.reason == "hotfix <now>"
    assert move.previous_checkpoint == world["checkpoints"][1]
    panel = re.search(r'id="alias-production".*?</article>', _body(done), re.S).group(0)
    assert "hotfix &lt;now&gt;" in panel and ">forced<" in panel


@pytest.mark.parametrize(("data", "field", "says"), [
    ({"alias": "Prod Ready!", "reason": "r", "force": "on"}, "alias", "is not valid"),
    ({"alias": "x" * 65, "reason": "r", "force": "on"}, "alias", "at most 64 characters"),
    ({"alias": "", "reason": "r", "force": "on"}, "alias", "is not valid"),
    ({"alias": "production", "reason": "bad\x00byte", "force": "on"}, "reason", "NUL character"),
    ({"alias": "bad\x00name", "reason": "r", "force": "on"}, "alias", "NUL character"),
])
def test_bad_input_is_named_beside_its_field_and_moves_nothing(client, project_team, world, data, field, says):
    client.force_login(project_team["owner"])
    ckpt = world["checkpoints"][2]
    moves = AliasMove.objects.count()
    response = client.post(f"/p/{world['slug']}/checkpoints/{ckpt.pk}/promote/", data)
    body = _body(response)
    assert response.status_code == 400
    error = re.search(rf'<p class="field-error" id="{field}-error">(.*?)</p>', body, re.S)
    assert error and says in error.group(1)
    assert AliasMove.objects.count() == moves and CheckpointAlias.objects.count() == 1
    if field == "alias" and "\x00" not in data["alias"]:
        assert f'value="{data["alias"]}"' in body  # what was typed stays in the field


def test_failed_gates_are_named_on_the_page_and_need_force(client, project_team, setup):  # noqa: F811
    exp = _create(setup, latency_p95_max_ratio=1.1)
    exp = _finish_stage(exp, "baseline", metrics={**BASELINE, "valid_json_rate": 0.9})
    exp = _finish_stage(exp, "grpo", checkpoints=[(4, {})])
    exp = _finish_stage(exp, "held_out", metrics={"success_rate": 0.5, "unsafe_action_rate": 0.2,
                                                  "latency_p95": 150.0})
    ckpt, slug = exp.candidate_checkpoint, setup["project"].slug
    client.force_login(project_team["owner"])
    row = re.search(rf'<tr data-checkpoint="{ckpt.pk}".*?</tr>',
                    _body(client.get(f"/p/{slug}/checkpoints/")), re.S).group(0)
    assert '<span class="gate failed">failed</span>' in row and "unsafe actions, latency p95" in row
    page = _body(client.get(f"/p/{slug}/checkpoints/{ckpt.pk}/promote/"))
    assert '<span class="gate failed">fail</span>' in page and "its gates failed" in page
    refused = client.post(f"/p/{slug}/checkpoints/{ckpt.pk}/promote/", {"alias": "production", "reason": "x"})
    assert refused.status_code == 400 and "unsafe actions" in _body(refused)
    assert not CheckpointAlias.objects.exists()


def test_promoting_to_where_the_alias_already_points_is_a_field_error(client, project_team, world):
    client.force_login(project_team["owner"])
    ckpt = world["checkpoints"][1]
    response = client.post(f"/p/{world['slug']}/checkpoints/{ckpt.pk}/promote/",
                           {"alias": "production", "reason": "again", "force": "on"})
    assert response.status_code == 400 and "already points at" in _body(response)


# ---------------------------------------------------------------------------------------
# Rollback and history
# ---------------------------------------------------------------------------------------


def test_rollback_moves_back_and_shows_in_the_history(client, project_team, world):
    client.force_login(project_team["owner"])
    slug = world["slug"]
    page = _body(client.get(f"/p/{slug}/checkpoints/"))
    assert 'data-confirm="Move alias “production” back to grpo &lt;b&gt;bold&lt;/b&gt; · step 10' in page
    response = client.post(f"/p/{slug}/checkpoints/aliases/production/rollback/", {"reason": "latency <spike>"},
                           follow=True)
    assert response.redirect_chain[-1][0].endswith("#alias-production")
    assert any("rolled back to checkpoint" in m for m in _messages(response))
    alias = CheckpointAlias.objects.get(name="production")
    assert alias.checkpoint == world["checkpoints"][0]
    latest = alias.moves.order_by("-moved_at", "-id").first()
    assert latest.is_rollback and latest.reason == "latency <spike>" and latest.moved_by == project_team["owner"]
    panel = re.search(r'id="alias-production".*?</article>', _body(response), re.S).group(0)
    assert ">rollback<" in panel and "latency &lt;spike&gt;" in panel
    assert panel.index("latency &lt;spike&gt;") < panel.index("better")  # newest first


def test_rollback_without_an_earlier_holder_says_so(client, project_team, world):
    alias_move(checkpoint=world["checkpoints"][2], name="candidate", actor=world["owner"])
    client.force_login(project_team["owner"])
    slug = world["slug"]
    page = _body(client.get(f"/p/{slug}/checkpoints/"))
    candidate = re.search(r'id="alias-candidate".*?</article>', page, re.S).group(0)
    assert "No earlier checkpoint to roll back to" in candidate and "/rollback/" not in candidate
    response = client.post(f"/p/{slug}/checkpoints/aliases/candidate/rollback/", follow=True)
    assert any("no earlier checkpoint to roll back to" in m for m in _messages(response))
    assert client.post(f"/p/{slug}/checkpoints/aliases/nope/rollback/").status_code == 404
    bad = client.post(f"/p/{slug}/checkpoints/aliases/production/rollback/", {"reason": "a\x00b"}, follow=True)
    assert any("NUL character" in m for m in _messages(bad))
    assert CheckpointAlias.objects.get(name="production").checkpoint == world["checkpoints"][1]


def test_history_is_paged_in_the_panel_and_on_its_page(client, project_team, world):
    a, b, _ = world["checkpoints"]
    for i in range(6):
        alias_move(checkpoint=a if i % 2 == 0 else b, name="production", actor=world["owner"], reason=f"move {i}")
    client.force_login(project_team["viewer"])
    slug = world["slug"]
    page = client.get(f"/p/{slug}/checkpoints/")
    panel = re.search(r'id="alias-production".*?</article>', _body(page), re.S).group(0)
    assert panel.count('<tr class="move') == 5 and "Older moves" in panel
    cursor = re.search(r'aliases/production/\?after=([^"&]+)"', panel).group(1)
    older = client.get(f"/p/{slug}/checkpoints/aliases/production/?after={cursor}", HTTP_HX_REQUEST="true")
    rows = _body(older)
    assert "<html" not in rows and rows.count('<tr class="move') == 3  # 8 moves in all
    assert "first &lt;i&gt;cut&lt;/i&gt;" in rows and "Older moves" not in rows
    full = _body(client.get(f"/p/{slug}/checkpoints/aliases/production/"))
    assert full.count('<tr class="move') == 8 and "Alias" in full
    assert client.get(f"/p/{slug}/checkpoints/aliases/nope/").status_code == 404


# ---------------------------------------------------------------------------------------
# Downloads
# ---------------------------------------------------------------------------------------


def _zip_names(response) -> dict[str, bytes]:
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert archive.testzip() is None
    return {name: archive.read(name) for name in archive.namelist()}


def test_download_streams_a_zip_of_the_folder(client, project_team, world, tmp_path):
    ckpt = world["checkpoints"][1]
    folder = tmp_path / "data" / "runs" / world["run"].folder_name / "checkpoints" / "step_20"
    (tmp_path / "outside" / "secret.txt").write_text("not yours")
    os.symlink(tmp_path / "outside" / "secret.txt", folder / "link.txt")
    os.symlink(tmp_path / "outside", folder / "linked-dir")
    client.force_login(project_team["viewer"])
    response = client.get(f"/p/{world['slug']}/checkpoints/{ckpt.pk}/download/")
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    assert 'attachment; filename="grpo-bboldb-' in response["Content-Disposition"]
    files = _zip_names(response)
    prefix = f"grpo-bboldb-{world['run'].pk}-step20/"
    assert files == {prefix + "adapter_config.json": b"{}", prefix + "adapter_model.safetensors": b"weights 20",
                     prefix + "tokenizer/tokenizer.json": b'{"v": 1}'}


@pytest.mark.parametrize("where", ["outside", "dotdot", "symlink", "remote", "relative", "data-dir"])
def test_download_refuses_anything_outside_the_data_dir(client, project_team, world, tmp_path, where):
    outside = _folder(tmp_path / "outside" / "ckpt", {"secret.bin": b"x"})
    data = tmp_path / "data"
    if where == "symlink":
        os.symlink(outside, data / "runs" / "innocent")
    uri = {"outside": str(outside), "dotdot": f"{data}/runs/../../outside/ckpt",
           "symlink": str(data / "runs" / "innocent"), "remote": "s3://bucket/ckpt", "relative": "runs/x",
           "data-dir": str(data)}[where]
    ckpt = Checkpoint.objects.create(run=world["run"], step=99, storage_uri=uri)
    client.force_login(project_team["owner"])
    response = client.get(f"/p/{world['slug']}/checkpoints/{ckpt.pk}/download/")
    assert response.status_code == 404 and not hasattr(response, "streaming_content")
    assert "are not on this server" in _body(response)
    assert "/download/" not in re.search(rf'<tr data-checkpoint="{ckpt.pk}".*?</tr>',
                                         _body(client.get(f"/p/{world['slug']}/checkpoints/")), re.S).group(0)


def test_download_of_a_deleted_folder_explains_retention(client, project_team, world):
    client.force_login(project_team["viewer"])
    ckpt = world["checkpoints"][0]
    response = client.get(f"/p/{world['slug']}/checkpoints/{ckpt.pk}/download/")
    assert response.status_code == 404 and "is gone" in _body(response) and "keep_top_k" in _body(response)


# ---------------------------------------------------------------------------------------
# Merged exports
# ---------------------------------------------------------------------------------------


def test_export_is_queued_once_and_its_result_downloads(client, project_team, world, data_dir):
    client.force_login(project_team["editor"])
    slug, ckpt = world["slug"], world["checkpoints"][1]
    response = client.post(f"/p/{slug}/checkpoints/{ckpt.pk}/export/", follow=True)
    assert any("queued as job" in m for m in _messages(response))
    job = Job.objects.get(kind="export")
    out = data_dir / "runs" / world["run"].folder_name / "exports" / "step_20"
    assert job.queue == "rollout" and job.run is None
    assert job.payload == {"checkpoint_id": ckpt.pk, "run_id": world["run"].pk, "out": str(out),
                           "source": str(data_dir / "runs" / world["run"].folder_name / "checkpoints" / "step_20")}
    assert "export queued" in _body(response) and 'hx-trigger="every 3s"' in _body(response)
    again = client.post(f"/p/{slug}/checkpoints/{ckpt.pk}/export/", follow=True)
    assert any("already under way" in m for m in _messages(again)) and Job.objects.filter(kind="export").count() == 1
    assert client.get(f"/p/{slug}/checkpoints/{ckpt.pk}/export/download/").status_code == 404

    _folder(out, {"config.json": b"{}", "model.safetensors": b"merged"})
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, progress=1.0)
    page = _body(client.get(f"/p/{slug}/checkpoints/"))
    assert f"/checkpoints/{ckpt.pk}/export/download/" in page and 'hx-trigger="every 3s"' not in page
    files = _zip_names(client.get(f"/p/{slug}/checkpoints/{ckpt.pk}/export/download/"))
    assert sorted(files) == [f"grpo-bboldb-{world['run'].pk}-step20-merged/config.json",
                             f"grpo-bboldb-{world['run'].pk}-step20-merged/model.safetensors"]
    done = client.post(f"/p/{slug}/checkpoints/{ckpt.pk}/export/", follow=True)
    assert any("exported already" in m for m in _messages(done))


def test_export_is_refused_without_a_folder_or_for_full_weights(client, project_team, world):
    client.force_login(project_team["editor"])
    slug = world["slug"]
    gone = client.post(f"/p/{slug}/checkpoints/{world['checkpoints'][0].pk}/export/", follow=True)
    assert any("is gone" in m for m in _messages(gone))
    full = Checkpoint.objects.create(run=world["run"], step=40, kind="full",
                                     storage_uri=world["checkpoints"][1].storage_uri)
    refused = client.post(f"/p/{slug}/checkpoints/{full.pk}/export/", follow=True)
    assert any("full weights already" in m for m in _messages(refused))
    assert not Job.objects.filter(kind="export").exists()


def test_a_failed_export_can_be_tried_again(client, project_team, world):
    ckpt = world["checkpoints"][1]
    Job.objects.create(project=world["project"], kind="export", state=JobState.FAILED, error="OOM <x>",
                       payload={"checkpoint_id": ckpt.pk, "out": "/nowhere"})
    client.force_login(project_team["editor"])
    row = re.search(rf'<tr data-checkpoint="{ckpt.pk}".*?</tr>',
                    _body(client.get(f"/p/{world['slug']}/checkpoints/")), re.S).group(0)
    assert "export failed" in row and 'title="OOM &lt;x&gt;"' in row and "Export merged" in row


def test_zip_stream_hands_out_the_archive_in_pieces(tmp_path):
    from webapp.dashboard.views.checkpoints import zip_stream

    blob = os.urandom(5 * 1024 * 1024)  # incompressible: the archive is as large as the file
    _folder(tmp_path / "ckpt", {"model.safetensors": blob, "nested/deeper/a.json": b"{}"})
    pieces = list(zip_stream(tmp_path / "ckpt", "step_1"))
    assert len(pieces) > 4 and max(len(p) for p in pieces) < 2 * 1024 * 1024
    archive = zipfile.ZipFile(io.BytesIO(b"".join(pieces)))
    assert archive.testzip() is None
    assert archive.read("step_1/model.safetensors") == blob and archive.read("step_1/nested/deeper/a.json") == b"{}"
