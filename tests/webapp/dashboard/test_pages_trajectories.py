"""The trajectory list, the inspector, the GRPO group view and the diff: roles, filters, pages, escaping."""

from __future__ import annotations

import html
import re

import pytest
from pipeline_data import XSS, make_pipeline_project, make_pipeline_run, make_tasks

from webapp.datasets.models import TaskDataset
from webapp.datasets.services.datasets import dataset_create
from webapp.trajectories.models import RescoreResult, Review, Trajectory


@pytest.fixture
def hostile_run(project_team):
    return make_pipeline_run(project_team["project"], project_team["owner"], hostile=True, steps=4)


def _ids(body: str) -> list[int]:
    return [int(i) for i in re.findall(r'data-trajectory="(\d+)"', body)]


def _next_link(body: str) -> str | None:
    found = re.search(r'rel="next" href="\?([^"]+)"', body)
    return html.unescape(found.group(1)) if found else None


def test_the_list_filters_by_run_step_and_bucket(client, project_team, hostile_run):
    client.force_login(project_team["viewer"])
    base = f"/p/{project_team['project'].slug}/trajectories/"
    body = client.get(f"{base}?run={hostile_run.pk}&step=2&bucket=wrong_tool").content.decode()
    wanted = set(Trajectory.objects.filter(run=hostile_run, step=2, failure_bucket="wrong_tool").values_list("id", flat=True))
    assert set(_ids(body)) == wanted and len(wanted) == 4
    passed = _ids(client.get(f"{base}?passed=yes&step_min=3&step_max=4").content.decode())
    assert set(passed) == set(Trajectory.objects.filter(passed=True, step__gte=3).values_list("id", flat=True))
    by_reward = _ids(client.get(f"{base}?reward_max=0&split=train&text=task-1").content.decode())
    assert by_reward and all(not t.passed and t.task_key == "task-1" for t in Trajectory.objects.filter(pk__in=by_reward))


def test_the_list_pages_by_keyset_and_new_rows_do_not_shift_the_next_page(client, project_team, hostile_run):
    client.force_login(project_team["viewer"])
    base = f"/p/{project_team['project'].slug}/trajectories/"
    first = client.get(base).content.decode()
    first_ids = _ids(first)
    assert len(first_ids) == 50 and first_ids == sorted(first_ids, reverse=True)
    following = _next_link(first)
    assert following and "after=" in following
    make_pipeline_run(project_team["project"], project_team["owner"], name="later run", steps=1,
                      setup=(hostile_run.dataset, hostile_run.verifier_version.verifier, hostile_run.model))
    second = _ids(client.get(f"{base}?{following}").content.decode())
    assert len(second) == 14 and max(second) < min(first_ids), "rows inserted meanwhile do not reappear or shift"
    assert not set(first_ids) & set(second)


def test_bad_filters_are_reported_beside_the_filter_and_ignored(client, project_team, hostile_run):
    client.force_login(project_team["viewer"])
    body = client.get(f"/p/{project_team['project'].slug}/trajectories/?step=abc&split=nope&after=zzz").content.decode()
    assert "&#x27;abc&#x27; is not a whole number" in body
    assert "not one of train" in body and "start again from the first page" in body


@pytest.mark.parametrize("path", ["", "{id}/", "{id}/group/", "diff/?a={id}&b={id}"])
def test_outsiders_get_404_everywhere_and_viewers_read(client, project_team, hostile_run, path):
    trajectory = Trajectory.objects.filter(run=hostile_run).first()
    url = f"/p/{project_team['project'].slug}/trajectories/" + path.format(id=trajectory.pk)
    client.force_login(project_team["outsider"])
    assert client.get(url).status_code == 404
    client.force_login(project_team["viewer"])
    assert client.get(url).status_code == 200


def test_another_projects_trajectory_is_404_through_my_project(client, project_team, hostile_run):
    mine = Trajectory.objects.filter(run=hostile_run).first()
    client.force_login(project_team["outsider"])
    other = project_team["other"].slug
    assert client.get(f"/p/{other}/trajectories/{mine.pk}/").status_code == 404
    assert client.get(f"/p/{other}/trajectories/{mine.pk}/group/").status_code == 404


def test_every_page_escapes_hostile_text(client, project_team, hostile_run):
    client.force_login(project_team["viewer"])
    slug = project_team["project"].slug
    hostile = Trajectory.objects.filter(run=hostile_run, task_key__contains="<script>", sample_index=0).first()
    other = Trajectory.objects.filter(run=hostile_run, task_key=hostile.task_key, sample_index=1).first()
    pages = [f"/p/{slug}/trajectories/", f"/p/{slug}/trajectories/{hostile.pk}/",
             f"/p/{slug}/trajectories/{hostile.pk}/group/", f"/p/{slug}/trajectories/diff/?a={hostile.pk}&b={other.pk}"]
    for url in pages:
        body = client.get(url).content.decode()
        for probe in XSS:
            assert probe not in body, f"{probe} unescaped on {url}"
        assert html.escape(XSS[0]) in body, url


def test_the_inspector_pairs_tool_output_checks_arguments_and_shows_the_trace(client, project_team, hostile_run):
    client.force_login(project_team["viewer"])
    slug = project_team["project"].slug
    right = Trajectory.objects.filter(run=hostile_run, sample_index=0, task_key="task-1").first()
    body = client.get(f"/p/{slug}/trajectories/{right.pk}/").content.decode()
    assert "matches the tool's schema" in body and "(its output is shown with the call above)" in body
    assert "Recomputed now with tool_call_verifier v1" in body and '<span class="pass">same</span>' in body
    wrong = Trajectory.objects.filter(run=hostile_run, failure_bucket="wrong_arguments", task_key="task-1").first()
    body = client.get(f"/p/{slug}/trajectories/{wrong.pk}/").content.decode()
    assert "should be string" in body and "extra: not in the schema" in body
    assert "arguments differ" in body and "different" in body


def test_previous_and_next_stay_inside_the_filter(client, project_team, hostile_run):
    client.force_login(project_team["viewer"])
    slug = project_team["project"].slug
    ids = list(Trajectory.objects.filter(run=hostile_run, failure_bucket="wrong_tool").order_by("-id")
               .values_list("id", flat=True))
    body = client.get(f"/p/{slug}/trajectories/{ids[1]}/?bucket=wrong_tool").content.decode()
    assert f'/trajectories/{ids[0]}/?bucket=wrong_tool" ' in body.replace('">‹', '" ‹')
    assert f"/trajectories/{ids[2]}/?bucket=wrong_tool" in body


def test_the_group_view_shows_statistics_and_marks_groups_without_gradient(client, project_team):
    run = make_pipeline_run(project_team["project"], project_team["owner"], steps=2, improving=True)
    client.force_login(project_team["viewer"])
    slug = project_team["project"].slug
    mixed = Trajectory.objects.filter(run=run, step=1).first()
    body = client.get(f"/p/{slug}/trajectories/{mixed.pk}/group/").content.decode()
    assert body.count('class="sample card') == 4 and "rewards differ" in body and "0.250" in body and "0.433" in body
    flat = Trajectory.objects.filter(run=run, step=2).first()
    body = client.get(f"/p/{slug}/trajectories/{flat.pk}/group/").content.decode()
    assert "no gradient: every sample has the same reward" in body


def test_reverify_keeps_the_stored_verdict_and_shows_the_new_one(client, project_team, hostile_run):
    slug = project_team["project"].slug
    trajectory = Trajectory.objects.filter(run=hostile_run, failure_bucket="wrong_tool").first()
    version = hostile_run.verifier_version
    client.force_login(project_team["viewer"])
    assert client.post(f"/p/{slug}/trajectories/{trajectory.pk}/reverify/", {"version": version.pk}).status_code == 403
    client.force_login(project_team["reviewer"])
    response = client.post(f"/p/{slug}/trajectories/{trajectory.pk}/reverify/", {"version": version.pk}, follow=True)
    assert "Re-verified with tool_call_verifier v1: reward 0.0" in response.content.decode()
    result = RescoreResult.objects.get(trajectory=trajectory)
    assert result.failure_bucket == "wrong_tool" and not result.disagrees and "parse" in result.info
    trajectory.refresh_from_db()
    assert trajectory.failure_bucket == "wrong_tool" and trajectory.reward == 0.0


def test_add_to_dataset_from_a_selection_makes_a_new_version_linked_to_its_source(client, project_team, hostile_run):
    slug = project_team["project"].slug
    dataset = dataset_create(project=project_team["project"], name="regressions", tasks=make_tasks(1)[:1],
                             actor=project_team["owner"])
    chosen = list(Trajectory.objects.filter(run=hostile_run, passed=False, step=1).values_list("id", flat=True)[:3])
    client.force_login(project_team["reviewer"])
    assert client.post(f"/p/{slug}/trajectories/to-dataset/", {"ids": chosen, "dataset": dataset.pk}).status_code == 403
    client.force_login(project_team["editor"])
    response = client.post(f"/p/{slug}/trajectories/to-dataset/",
                           {"ids": chosen, "dataset": dataset.pk, "split": "held_out"}, follow=True)
    newest = TaskDataset.objects.filter(project=project_team["project"], name=dataset.name).order_by("-version").first()
    assert newest.version == dataset.version + 1
    origins = set(newest.tasks.exclude(origin_trajectory=None).values_list("origin_trajectory_id", flat=True))
    # Trajectories of one task share its ground truth, so they collapse into one new task per task.
    assert origins and origins <= set(chosen)
    assert newest.tasks.count() == 1 + len({t.task_key for t in Trajectory.objects.filter(pk__in=chosen)})
    assert f"{dataset.name} v{newest.version}" in response.content.decode()


def test_the_list_shows_review_state(client, project_team, hostile_run):
    trajectory = Trajectory.objects.filter(run=hostile_run).order_by("-id").first()
    Review.objects.create(trajectory=trajectory, reviewer=project_team["reviewer"], verdict="disagree")
    client.force_login(project_team["viewer"])
    slug = project_team["project"].slug
    body = client.get(f"/p/{slug}/trajectories/?reviewed=yes").content.decode()
    assert _ids(body) == [trajectory.pk] and "1 disagree" in body
    assert trajectory.pk not in _ids(client.get(f"/p/{slug}/trajectories/?reviewed=no").content.decode())


def test_an_empty_project_says_what_to_do(client, project_team):
    make_pipeline_project(project_team["project"], project_team["owner"])
    client.force_login(project_team["viewer"])
    body = client.get(f"/p/{project_team['project'].slug}/trajectories/").content.decode()
    assert "No trajectories yet: launch a run" in body


def test_add_to_dataset_takes_every_row_the_filter_matches(client, project_team, hostile_run):
    slug = project_team["project"].slug
    dataset = dataset_create(project=project_team["project"], name="regressions", tasks=make_tasks(1)[:1],
                             actor=project_team["owner"])
    client.force_login(project_team["editor"])
    client.post(f"/p/{slug}/trajectories/to-dataset/", {
        "all_matching": "1", "filter": f"run={hostile_run.pk}&bucket=wrong_tool&step=1", "dataset": dataset.pk,
        "split": "held_out"})
    newest = TaskDataset.objects.filter(project=project_team["project"], name="regressions").order_by("-version").first()
    sources = Trajectory.objects.filter(pk__in=newest.tasks.exclude(origin_trajectory=None)
                                        .values_list("origin_trajectory_id", flat=True))
    assert newest.version == 2 and {t.failure_bucket for t in sources} == {"wrong_tool"} and {t.step for t in sources} == {1}
    assert sources.count() == 4, "one new task per task (4 tasks failed with wrong_tool at step 1)"


def test_the_checkpoint_filter_finds_the_runs_that_evaluated_it(client, project_team, hostile_run):
    from webapp.runs.models import Checkpoint

    checkpoint = Checkpoint.objects.create(run=hostile_run, step=4, storage_uri="/tmp/x")
    setup = (hostile_run.dataset, hostile_run.verifier_version.verifier, hostile_run.model)
    evaluation = make_pipeline_run(project_team["project"], project_team["owner"], name="eval of step 4", kind="eval",
                                   split="held_out", steps=1, setup=setup)
    evaluation.parent_checkpoint = checkpoint
    evaluation.save(update_fields=["parent_checkpoint"])
    client.force_login(project_team["viewer"])
    body = client.get(f"/p/{project_team['project'].slug}/trajectories/?checkpoint={checkpoint.pk}&passed=no")
    ids = _ids(body.content.decode())
    assert set(ids) == set(Trajectory.objects.filter(run=evaluation, passed=False).values_list("id", flat=True))


def test_the_task_prompt_is_shown_first_when_the_turns_start_with_the_answer(client, project_team, hostile_run):
    trajectory = Trajectory.objects.filter(run=hostile_run, sample_index=1, task_key="task-1").first()
    Trajectory.objects.filter(pk=trajectory.pk).update(turns=[t for t in trajectory.turns if t["role"] == "assistant"])
    client.force_login(project_team["viewer"])
    body = client.get(f"/p/{project_team['project'].slug}/trajectories/{trajectory.pk}/").content.decode()
    assert body.count("(the task's prompt)") == 2 and "Please do task 1" in body
    full = Trajectory.objects.filter(run=hostile_run, sample_index=2, task_key="task-1").first()
    body = client.get(f"/p/{project_team['project'].slug}/trajectories/{full.pk}/").content.decode()
    assert "(the task's prompt)" not in body, "turns that hold the prompt are shown as stored"


def test_failures_become_a_new_dataset_and_nothing_is_kept_when_none_is_usable(client, project_team, hostile_run):
    slug = project_team["project"].slug
    client.force_login(project_team["editor"])
    form = {"all_matching": "1", "filter": f"run={hostile_run.pk}&passed=no&step=1", "new_dataset": "regressions",
            "split": "held_out"}
    response = client.post(f"/p/{slug}/trajectories/to-dataset/", form, follow=True)
    made = TaskDataset.objects.filter(project=project_team["project"], name="regressions").order_by("-version")
    assert [d.version for d in made] == [2, 1] and made[0].tasks.count() == 4, "one task per failing task"
    assert "regressions v2: 4 new task(s)" in response.content.decode()
    again = client.post(f"/p/{slug}/trajectories/to-dataset/", form, follow=True).content.decode()
    assert "exists already" in again
    Trajectory.objects.filter(run=hostile_run).update(task=None, task_snapshot=None)
    client.post(f"/p/{slug}/trajectories/to-dataset/", {**form, "new_dataset": "nothing usable"})
    assert not TaskDataset.objects.filter(name="nothing usable").exists()


def test_a_single_sample_is_not_called_a_group_that_teaches(client, project_team):
    run = make_pipeline_run(project_team["project"], project_team["owner"], kind="eval", split="held_out", steps=1)
    Trajectory.objects.filter(run=run).exclude(sample_index=0).delete()
    one = Trajectory.objects.filter(run=run).first()
    client.force_login(project_team["viewer"])
    body = client.get(f"/p/{project_team['project'].slug}/trajectories/{one.pk}/group/").content.decode()
    assert "a single sample" in body and "this group teaches" not in body
