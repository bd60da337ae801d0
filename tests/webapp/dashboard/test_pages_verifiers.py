"""The verifier pages: list, versions, config diff, schema-built forms (a new version on save), sanity
checks (sampling, agreement math, the run form's flag), rescores, roles and escaping."""

from __future__ import annotations

import html
import random
import re

import pytest
from pipeline_data import XSS, make_pipeline_run

from webapp.runs.models import Job
from webapp.runs.services.rescore import rescore_execute
from webapp.trajectories.models import Rescore, RescoreResult, Trajectory
from webapp.trajectories.services.sanity_checks import (
    CheckError,
    check_create,
    check_label,
    check_score_pending,
    check_summary,
    histogram,
    sample_ids,
)
from webapp.verifiers.models import Verifier, VerifierCheck, VerifierCheckItem, VerifierVersion
from webapp.verifiers.services.verifiers import verifier_create, verifier_update_config

SCRIPT = XSS[0]


@pytest.fixture
def run(project_team):
    return make_pipeline_run(project_team["project"], project_team["owner"], steps=3)


@pytest.fixture
def verifier(run):
    return run.verifier_version.verifier


def _base(project_team) -> str:
    return f"/p/{project_team['project'].slug}/verifiers/"


def _judge(check: VerifierCheck, user, right: int) -> None:
    """Judge every scored item: the first `right` right, the rest wrong (bucket wrong_tool)."""
    for index, item in enumerate(check.items.filter(scored=True).order_by("position")):
        check_label(item=item, actor=user, right=index < right, bucket="" if index < right else "wrong_tool")


def _verifier_option(form: str, pk: int) -> str:
    select = form[form.index('id="id_verifier_version"'):]
    return re.search(rf'<option value="{pk}"[^>]*>(.*?)</option>', select[:select.index("</select>")], re.S).group(1)


# --------------------------------------------------------------------------- list, detail, version


def test_the_list_shows_kind_versions_runs_per_version_and_the_agreement(client, project_team, run, verifier):
    verifier_update_config(verifier=verifier, config={"mode": "strict"}, actor=project_team["editor"])
    check = check_create(version=verifier.versions.get(version=1), actor=project_team["editor"], size=10, run=run,
                         seed=1)
    check_score_pending(check)
    _judge(check, project_team["reviewer"], right=9)
    client.force_login(project_team["viewer"])
    body = client.get(_base(project_team)).content.decode()
    assert 'data-nav-key="v"' in body, "Verifiers is in the project navigation (g v)"
    row = re.search(rf'<tr data-verifier="{verifier.pk}">(.*?)</tr>', body, re.S).group(1)
    assert "tool_call_verifier" in row and "<code>json_tool_call</code>" in row
    assert "v1: 1 run · 90% on 10" in row and "v2: 0 runs" in row
    assert "not checked yet" in row, "the latest version (v2) has no check of its own"
    version_page = client.get(f"{_base(project_team)}{verifier.pk}/versions/1/").content.decode()
    assert "checked on 10 outputs: 90% agreement" in version_page
    assert run.name in version_page and f"/runs/{run.pk}/" in version_page


def test_an_empty_project_says_what_to_do(client, project_team):
    client.force_login(project_team["editor"])
    body = client.get(_base(project_team)).content.decode()
    assert "No verifiers yet" in body and f"{_base(project_team)}new/" in body


def test_the_diff_of_two_versions_shows_changed_keys_and_a_line_diff_of_code(client, project_team):
    project, editor = project_team["project"], project_team["editor"]
    code = "def verify(task, trajectory):\n    return 1.0\n"
    verifier = verifier_create(project=project, name="mine", kind="python", config={"code": code}, actor=editor)
    verifier_update_config(verifier=verifier, config={"code": code.replace("1.0", "0.5"), "timeout_seconds": 2},
                           actor=editor)
    client.force_login(project_team["viewer"])
    body = client.get(f"{_base(project_team)}{verifier.pk}/?a=1&b=2").content.decode()
    diff = body[body.index('id="config-diff"'):]
    assert '<tr class="changed" data-key="code">' in diff and '<tr class="changed" data-key="timeout_seconds">' in diff
    assert "<del>    return 1.0\n</del><ins>    return 0.5\n</ins>" in diff
    assert "(not set)" in diff
    same = client.get(f"{_base(project_team)}{verifier.pk}/?a=2&b=2").content.decode()
    assert 'id="configs-identical"' in same
    bad = client.get(f"{_base(project_team)}{verifier.pk}/?a=1&b=9").content.decode()
    assert "Choose two versions of mine to compare" in bad


# --------------------------------------------------------------------------- forms built from the schema


def test_the_form_is_built_from_the_kinds_schema(client, project_team):
    client.force_login(project_team["editor"])
    python = client.get(f"{_base(project_team)}new/?kind=python").content.decode()
    assert 'name="cfg.code"' in python and "data-code-editor" in python and "def verify(task, trajectory):" in python
    assert "Wall-clock and CPU limit for one verify call." in python, "the schema's description is the help text"
    assert 'name="cfg.timeout_seconds" type="number" step="any" min="0" max="300" placeholder="10"' in python
    assert 'name="cfg.memory_mb" type="number" step="1" min="64" max="16384"' in python
    tool = client.get(f"{_base(project_team)}new/?kind=json_tool_call").content.decode()
    assert '<option value="strict">strict</option>' in tool and "default (lenient)" in tool
    assert 'name="cfg.weights.right_tool"' in tool and 'placeholder="0.1"' in tool, "nested weights become inputs"
    judge = client.get(f"{_base(project_team)}new/?kind=llm_judge").content.decode()
    assert 'name="cfg.base_url"' in judge and '<textarea id="cfg-rubric" name="cfg.rubric"' in judge


def test_errors_are_shown_beside_their_fields_keeping_the_input(client, project_team):
    client.force_login(project_team["editor"])
    response = client.post(f"{_base(project_team)}new/", {
        "kind": "python", "name": "loop", "cfg.code": "", "cfg.timeout_seconds": "9999", "cfg.memory_mb": "1.5",
        "cfg.pass_threshold": "abc"})
    assert response.status_code == 422
    body = response.content.decode()
    def field(name: str) -> str:
        return re.search(rf'data-field="{re.escape(name)}">(.*?)</div>\s*<p class="help">', body, re.S).group(1)

    assert "Required." in field("code")
    assert "Must be a whole number." in field("memory_mb") and 'value="1.5"' in field("memory_mb")
    assert "is not a number" in field("pass_threshold") and 'value="abc"' in field("pass_threshold")
    schema_error = client.post(f"{_base(project_team)}new/", {
        "kind": "python", "name": "loop", "cfg.code": "def verify(t, r):\n    return 1\n",
        "cfg.timeout_seconds": "9999"})
    assert schema_error.status_code == 422
    body = schema_error.content.decode()
    assert "9999 is greater than the maximum of 300" in field("timeout_seconds"), "beside its input"
    assert not Verifier.objects.filter(name="loop").exists()


def test_a_new_verifier_and_a_new_version_on_save_leave_the_old_one_unchanged(client, project_team):
    client.force_login(project_team["editor"])
    created = client.post(f"{_base(project_team)}new/", {
        "kind": "json_tool_call", "name": "calls", "description": "one call", "cfg.mode": "strict",
        "cfg.weights.completion": "1", "cfg.weights.unsafe_action": "-1"})
    verifier = Verifier.objects.get(name="calls")
    assert created.status_code == 302 and created["Location"].endswith(f"/verifiers/{verifier.pk}/versions/1/")
    first = verifier.versions.get()
    assert first.config == {"mode": "strict", "weights": {"completion": 1, "unsafe_action": -1}}
    form = client.get(f"{_base(project_team)}{verifier.pk}/versions/new/").content.decode()
    assert '<option value="strict" selected>' in form, "a new version starts from the latest config"
    saved = client.post(f"{_base(project_team)}{verifier.pk}/versions/new/", {
        "cfg.mode": "lenient", "cfg.reward": "shaped", "cfg.weights.completion": "1"})
    assert saved.status_code == 302 and saved["Location"].endswith("/versions/2/")
    first.refresh_from_db()
    assert first.config == {"mode": "strict", "weights": {"completion": 1, "unsafe_action": -1}}
    assert verifier.versions.get(version=2).config == {"mode": "lenient", "reward": "shaped",
                                                       "weights": {"completion": 1}}
    again = client.post(f"{_base(project_team)}{verifier.pk}/versions/new/", {
        "cfg.mode": "lenient", "cfg.reward": "shaped", "cfg.weights.completion": "1"}, follow=True)
    assert verifier.versions.count() == 2 and "Nothing changed: v2 already has this config" in again.content.decode()


# --------------------------------------------------------------------------- sanity checks


def test_stratified_sampling_takes_from_every_reward_level_and_errors():
    pool = [(i, 1.0) for i in range(1, 91)] + [(i, 0.0) for i in range(91, 100)] + [(100, None)]
    picked = sample_ids(pool, 10, "stratified", random.Random(3))
    rewards = {dict(pool)[pk] for pk in picked}
    assert len(picked) == 10 and len(set(picked)) == 10 and rewards == {1.0, 0.0, None}
    plain = sample_ids(pool, 10, "random", random.Random(3))
    assert len(set(plain)) == 10 and plain == sample_ids(pool, 10, "random", random.Random(3)), "a seed redraws"


def test_histogram_bins():
    assert histogram([0.0, 1.0, 1.0]) == [{"low": 0.0, "high": 0.0, "label": "0", "count": 1},
                                          {"low": 1.0, "high": 1.0, "label": "1", "count": 2}]
    bins = histogram([i / 100 for i in range(101)])
    assert len(bins) == 10 and sum(b["count"] for b in bins) == 101


def test_sanity_check_agreement_math_and_the_run_form_flag(client, project_team, run, verifier):
    version = verifier.latest_version
    check = check_create(version=version, actor=project_team["editor"], size=20, run=run, method="stratified", seed=7)
    report = check_score_pending(check)
    assert (report.scored, report.remaining, check.size) == (20, 0, 20)
    items = list(check.items.select_related("trajectory"))
    assert all(i.scored and i.reward == i.trajectory.reward and i.passed == i.trajectory.passed for i in items), \
        "the same verifier gives the stored verdicts again"
    _judge(check, project_team["reviewer"], right=17)
    check.refresh_from_db()
    summary = check_summary(check)
    assert (check.labelled, check.agreed, summary.labelled, summary.agreed) == (20, 17, 20, 17)
    assert summary.agreement == pytest.approx(0.85) and summary.under_threshold and check.under_threshold
    assert [i.position for i in summary.disagreements] == [i.position for i in
                                                           check.items.filter(human_right=False).order_by("position")]
    client.force_login(project_team["viewer"])
    page = client.get(f"{_base(project_team)}checks/{check.pk}/").content.decode()
    assert '<strong id="agreement-rate">85%</strong>' in page and "you judged 17 of 20 verdicts right" in page
    assert "Under the 90% threshold" in page
    disagreements = page[page.index('id="disagreements"'):page.index("All outputs")]
    assert disagreements.count("/trajectories/") == 3 and "should be <strong>wrong_tool</strong>" in disagreements
    assert 'id="check-histogram"' in page and "data-histogram" in page
    client.force_login(project_team["editor"])
    form = client.get(f"/p/{project_team['project'].slug}/runs/new/").content.decode()
    option = _verifier_option(form, version.pk)
    assert "85% agreement on 20 outputs" in option
    # Relabelled to 19 of 20: at 95% the flag goes.
    for item in check.items.filter(human_right=False)[:2]:
        check_label(item=item, actor=project_team["reviewer"], right=True)
    form = client.get(f"/p/{project_team['project'].slug}/runs/new/").content.decode()
    option = _verifier_option(form, version.pk)
    assert "agreement" not in option


def test_a_check_is_started_scored_and_judged_through_the_pages(client, project_team, run, verifier):
    base = _base(project_team)
    client.force_login(project_team["editor"])
    form = client.get(f"{base}{verifier.pk}/versions/1/check/").content.decode()
    assert 'name="size"' in form and f'value="{run.pk}"' in form
    bad = client.post(f"{base}{verifier.pk}/versions/1/check/", {"size": "5", "run": "", "method": "random"})
    assert bad.status_code == 422 and "Choose between 10 and 100 outputs." in bad.content.decode()
    started = client.post(f"{base}{verifier.pk}/versions/1/check/",
                          {"size": "10", "run": str(run.pk), "method": "random", "seed": "5"})
    check = VerifierCheck.objects.get()
    assert started["Location"].endswith(f"/verifiers/checks/{check.pk}/")
    assert check.items.filter(scored=True).count() == 10
    client.force_login(project_team["reviewer"])
    label = client.get(f"{base}checks/{check.pk}/label/")
    assert label.status_code == 200 and 'id="key-hint"' in label.content.decode()
    first = check.items.order_by("position").first()
    missing = client.post(f"{base}checks/{check.pk}/label/", {"item": str(first.position), "verdict": ""})
    assert missing.status_code == 422 and "right (a) or wrong (d)" in missing.content.decode()
    for position in range(10):
        response = client.post(f"{base}checks/{check.pk}/label/", {
            "item": str(position), "verdict": "right" if position else "wrong", "human_bucket": "wrong_tool"
            if not position else ""})
        assert response.status_code == 302
    assert response["Location"].endswith(f"/verifiers/checks/{check.pk}/"), "the last one goes to the results"
    check.refresh_from_db()
    assert (check.labelled, check.agreed) == (10, 9)
    results = client.get(f"{base}checks/{check.pk}/").content.decode()
    assert '<strong id="agreement-rate">90%</strong>' in results and "At or above the 90% threshold" in results
    assert "checked on 10 outputs: 90% agreement" in client.get(base).content.decode()


def test_check_needs_stored_outputs(project_team):
    verifier = verifier_create(project=project_team["project"], name="v", kind="json_tool_call", config={},
                               actor=project_team["editor"])
    with pytest.raises(CheckError, match="No stored outputs"):
        check_create(version=verifier.latest_version, actor=project_team["editor"], size=10)


def test_scoring_stops_at_the_time_budget_and_continues(project_team, run, verifier):
    check = check_create(version=verifier.latest_version, actor=project_team["editor"], size=12, run=run, seed=2)
    first = check_score_pending(check, budget_seconds=0)
    assert (first.scored, first.remaining) == (1, 11), "at least one per request, then the budget stops it"
    rest = check_score_pending(check, budget_seconds=60)
    assert (rest.scored, rest.remaining) == (11, 0)


# --------------------------------------------------------------------------- rescore


def test_rescore_a_run_lists_the_disagreements_with_both_verdicts(client, project_team, run, verifier):
    strict = verifier_update_config(verifier=verifier, config={"mode": "strict", "reward": "shaped"},
                                    actor=project_team["editor"])
    client.force_login(project_team["editor"])
    base = _base(project_team)
    form = client.get(f"{base}rescores/new/?version={strict.pk}").content.decode()
    assert f'<option value="{strict.pk}" selected>' in form
    assert client.post(f"{base}rescores/new/", {"run": "", "version": str(strict.pk)}).status_code == 422
    started = client.post(f"{base}rescores/new/", {"run": str(run.pk), "version": str(strict.pk)})
    rescore = Rescore.objects.get(run=run)
    assert started["Location"].endswith(f"/verifiers/rescores/{rescore.pk}/")
    assert Job.objects.get(pk=rescore.job_id).queue == "verify"
    waiting = client.get(started["Location"]).content.decode()
    assert "hx-trigger" in waiting and "waiting for a worker" in waiting
    summary = rescore_execute(rescore_id=rescore.pk)
    Job.objects.filter(pk=rescore.job_id).update(state="succeeded", progress=1.0)
    client.force_login(project_team["viewer"])
    body = client.get(started["Location"]).content.decode()
    disagreeing = RescoreResult.objects.filter(rescore=rescore, disagrees=True)
    assert summary["disagreements"] == disagreeing.count() > 0
    rows = body[body.index('id="rescore-disagreement-rows"'):]
    for result in disagreeing[:5]:
        assert f"/trajectories/{result.trajectory_id}/" in rows
    assert f"?rescore={rescore.pk}&amp;disagree=yes" in body and "hx-trigger" not in body


# --------------------------------------------------------------------------- roles and escaping


@pytest.fixture
def objects(project_team, run, verifier):
    check = check_create(version=verifier.latest_version, actor=project_team["editor"], size=10, run=run, seed=4)
    check_score_pending(check)
    rescore = Rescore.objects.create(project=project_team["project"], run=run,
                                     verifier_version=verifier.latest_version)
    return {"verifier": verifier, "check": check, "rescore": rescore}


READS = ["", "{v}/", "{v}/versions/1/", "{v}/?a=1&b=1", "playground/", "checks/{c}/", "rescores/{r}/"]
EDITOR_PAGES = ["new/", "{v}/versions/new/", "{v}/versions/1/check/", "rescores/new/"]


def _urls(project_team, objects, paths):
    return [_base(project_team) + p.format(v=objects["verifier"].pk, c=objects["check"].pk, r=objects["rescore"].pk)
            for p in paths]


def test_viewers_read_and_get_403_on_edits(client, project_team, objects):
    client.force_login(project_team["viewer"])
    for url in _urls(project_team, objects, READS):
        assert client.get(url).status_code == 200, url
    for url in _urls(project_team, objects, [*EDITOR_PAGES, "checks/{c}/label/"]):
        assert client.get(url).status_code == 403, url
        assert client.post(url, {"name": "x", "kind": "python"}).status_code == 403, url
    assert client.post(_urls(project_team, objects, ["checks/{c}/score/"])[0]).status_code == 403
    client.force_login(project_team["reviewer"])
    assert client.get(_urls(project_team, objects, ["checks/{c}/label/"])[0]).status_code == 200
    assert client.post(_urls(project_team, objects, ["new/"])[0], {"name": "x"}).status_code == 403
    assert Verifier.objects.count() == 1 and VerifierVersion.objects.count() == 1


def test_outsiders_get_404_everywhere(client, project_team, objects):
    client.force_login(project_team["outsider"])
    urls = _urls(project_team, objects, [*READS, *EDITOR_PAGES, "checks/{c}/label/"])
    for url in urls:
        assert client.get(url).status_code == 404, url
        assert client.post(url, {"name": "x"}).status_code == 404, url
    # Through the outsider's own project: the ids of another project's objects are not found either.
    other = f"/p/{project_team['other'].slug}/verifiers/"
    for path in [f"{objects['verifier'].pk}/", f"checks/{objects['check'].pk}/", f"rescores/{objects['rescore'].pk}/"]:
        assert client.get(other + path).status_code == 404
    assert client.post(f"{other}rescores/new/", {"run": str(objects["rescore"].run_id),
                                                 "version": str(objects["verifier"].latest_version.pk)}).status_code == 422


def test_hostile_text_is_escaped_on_every_page(client, project_team):
    project, editor = project_team["project"], project_team["editor"]
    run = make_pipeline_run(project, project_team["owner"], hostile=True, steps=2)
    code = f'def verify(task, trajectory):\n    """{SCRIPT}"""\n    return 1.0\n'
    mine = verifier_create(project=project, name=f"py {SCRIPT}", kind="python", description=XSS[1],
                           config={"code": code}, actor=editor)
    verifier_update_config(verifier=mine, config={"code": code + f"# {XSS[2]}\n"}, actor=editor)
    judge = verifier_create(project=project, name="judge", kind="llm_judge", actor=editor,
                            config={"base_url": "https://judge.example/v1", "model": SCRIPT, "rubric": SCRIPT})
    check = check_create(version=run.verifier_version, actor=editor, size=10, run=run, seed=1)
    check_score_pending(check)
    item = VerifierCheckItem.objects.filter(sanity_check=check, trajectory__task_key__contains="<script>").first()
    if item is None:  # put a trajectory with a hostile task key into the check
        taken = check.items.values_list("trajectory_id", flat=True)
        hostile = Trajectory.objects.filter(run=run, task_key__contains="<script>").exclude(pk__in=taken).first()
        item = check.items.first()
        VerifierCheckItem.objects.filter(pk=item.pk).update(trajectory=hostile)
    check_label(item=item, actor=editor, right=False)
    client.force_login(editor)
    base = _base(project_team)
    pages = [base, f"{base}{mine.pk}/", f"{base}{mine.pk}/?a=1&b=2", f"{base}{mine.pk}/versions/1/",
             f"{base}{mine.pk}/versions/new/", f"{base}{judge.pk}/versions/1/", f"{base}{judge.pk}/versions/new/",
             f"{base}checks/{check.pk}/", f"{base}checks/{check.pk}/label/?item={item.position}",
             f"{base}playground/?version={mine.latest_version.pk}"]
    for url in pages:
        body = client.get(url).content.decode()
        for probe in XSS:
            assert probe not in body, (url, probe)
    assert html.escape(SCRIPT) in client.get(f"{base}{mine.pk}/versions/1/").content.decode()
