"""Trajectory pages in a real browser: from a run's curve and a failure bucket to one trajectory, through
its GRPO group by keyboard, and hostile model output shown as text everywhere with no dialog raised."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from browser_session import login, watch
from pipeline_data import XSS, make_pipeline_run

from webapp.trajectories.models import Trajectory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def hostile_run(project_team):
    return make_pipeline_run(project_team["project"], project_team["owner"], hostile=True, steps=3)


def test_hostile_text_renders_as_text_in_the_list_inspector_group_and_diff(page, live_server, project_team, hostile_run):
    seen = watch(page)
    login(page, live_server, "viewer")
    slug = project_team["project"].slug
    hostile = Trajectory.objects.get(run=hostile_run, step=1, sample_index=0, task_key__contains="<script>")
    other = Trajectory.objects.get(run=hostile_run, step=1, sample_index=2, task_key=hostile.task_key)
    page.goto(f"{live_server.url}/p/{slug}/trajectories/?run={hostile_run.pk}&step=1")
    assert XSS[0] in page.locator(f'tr[data-trajectory="{hostile.pk}"] td.task-key').inner_text()
    page.goto(f"{live_server.url}/p/{slug}/trajectories/{hostile.pk}/")
    timeline = page.locator(".timeline").inner_text()
    assert XSS[1] in timeline and XSS[0] + " ok " + XSS[2] in timeline, "the prompt and the tool output, as text"
    page.goto(f"{live_server.url}/p/{slug}/trajectories/{other.pk}/group/")
    assert XSS[2] in page.locator(".samples").inner_text(), "the hostile tool argument, as text"
    page.goto(f"{live_server.url}/p/{slug}/trajectories/diff/?a={hostile.pk}&b={other.pk}")
    assert XSS[2] in page.locator(".diff-turns").inner_text()
    assert seen == {"dialogs": [], "csp": []}


def test_from_a_failure_bucket_to_a_trajectory_and_through_its_group_by_keyboard(page, live_server, project_team,
                                                                                hostile_run):
    login(page, live_server, "viewer")
    slug = project_team["project"].slug
    page.goto(f"{live_server.url}/p/{slug}/trajectories/?run={hostile_run.pk}&bucket=wrong_arguments")
    expected = list(Trajectory.objects.filter(run=hostile_run, failure_bucket="wrong_arguments").order_by("-id")
                    .values_list("id", flat=True))
    rows = page.locator("table.trajectories tbody tr[data-trajectory]")
    assert [int(rows.nth(i).get_attribute("data-trajectory")) for i in range(rows.count())] == expected
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(rf"/trajectories/{expected[1]}/\?"))
    assert "wrong_arguments" in page.locator(".inspector-head").inner_text()
    page.keyboard.press("j")
    page.wait_for_url(re.compile(rf"/trajectories/{expected[2]}/\?.*bucket=wrong_arguments"))
    page.keyboard.press("k")
    page.wait_for_url(re.compile(rf"/trajectories/{expected[1]}/\?"))
    page.keyboard.press("Shift+G")
    page.wait_for_url(re.compile(rf"/trajectories/{expected[1]}/group/"))
    samples = page.locator(".group-view .sample")
    assert samples.count() == 4
    assert "rewards differ" in page.locator(".group-stats").inner_text()
    current = Trajectory.objects.get(pk=expected[1]).sample_index
    page.keyboard.press("j")
    page.wait_for_function("() => document.activeElement && document.activeElement.classList.contains('sample')")
    assert page.evaluate("() => document.activeElement.id") == f"sample-{min(3, current + 1)}"


def test_a_click_on_the_reward_curve_opens_that_steps_trajectories(page, live_server, project_team, hostile_run):
    login(page, live_server, "viewer")
    slug = project_team["project"].slug
    page.goto(f"{live_server.url}/p/{slug}/runs/{hostile_run.pk}/")
    chart = page.locator('[data-chart][data-names="reward"]')
    page.wait_for_function("() => document.querySelector('[data-chart][data-names=\"reward\"] .nsewdrag')")
    box = chart.locator(".nsewdrag").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] - 3, box["y"] + box["height"] / 2)
    page.mouse.click(box["x"] + box["width"] - 3, box["y"] + box["height"] / 2)
    page.wait_for_url(re.compile(r"/trajectories/\?"))
    query = parse_qs(urlparse(page.url).query)
    assert query["run"] == [str(hostile_run.pk)] and query["step"] == ["3"]
    steps = {int(s) for s in page.locator("table.trajectories tbody td:nth-child(4)").all_inner_texts()}
    assert steps == {3}
