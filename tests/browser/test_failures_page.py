"""The Failures page in a real browser: the stacked bars are drawn from the run's rollups, a click
on a segment opens the trajectory list filtered by run, step and bucket, shares switch in place,
and hostile run names and task keys stay text."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
from browser_session import login
from failure_data import eval_run_with_first_samples
from pipeline_data import XSS, make_pipeline_project, make_pipeline_run

from webapp.dashboard.views.common import has_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

STEPS_CHART = "#failures-steps-chart"
LIST_URL = re.compile(r".*/trajectories/\?.*")


def _click_segment(page, chart: str, trace: int, point: int) -> None:
    """Click the middle of one bar segment (Plotly listens on the plot area, not on the bar's path)."""
    segment = page.locator(f"{chart} .barlayer .trace").nth(trace).locator(".point").nth(point)
    segment.scroll_into_view_if_needed()
    box = segment.bounding_box()
    assert box and box["height"] > 2, "the segment is not drawn"
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)


def _query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


@pytest.fixture
def hostile_world(project_team):
    project, owner = project_team["project"], project_team["owner"]
    setup = make_pipeline_project(project, owner, hostile=True)
    run = make_pipeline_run(project, owner, name=f"grpo {XSS[2]}", hostile=True, setup=setup)
    baseline = eval_run_with_first_samples(project, owner, setup, f"baseline {XSS[1]}", [1, 1, 0, 3], hostile=True)
    candidate = eval_run_with_first_samples(project, owner, setup, "candidate", [0, 0, 0, 3], hostile=True)
    return {"project": project, "run": run, "baseline": baseline, "candidate": candidate}


def test_a_click_on_a_bar_opens_that_steps_bucket_in_the_trajectory_list(page, live_server, project_team,
                                                                         hostile_world):
    if not has_page("dashboard:trajectory_list"):
        pytest.skip("the trajectory list page does not exist yet: the bars have no link")
    project, run = hostile_world["project"], hostile_world["run"]
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/p/{project.slug}/failures/?run={run.pk}")
    page.wait_for_function(f"() => document.querySelector('{STEPS_CHART}').dataset.drawn === 'count'")
    assert page.locator(STEPS_CHART).get_attribute("data-traces") == "4"
    assert page.locator(f"{STEPS_CHART} .barlayer .trace").count() == 4
    # Traces in bucket order: passed, invalid_json, wrong_tool, wrong_arguments; points: steps 1, 2, 3.
    _click_segment(page, STEPS_CHART, trace=2, point=1)
    page.wait_for_url(LIST_URL)
    assert _query(page.url) == {"run": [str(run.pk)], "split": ["train"], "step": ["2"], "bucket": ["wrong_tool"]}
    assert not dialogs


def test_passed_segments_and_the_table_fallback_link_the_same_list(page, live_server, project_team, hostile_world):
    if not has_page("dashboard:trajectory_list"):
        pytest.skip("the trajectory list page does not exist yet: the bars have no link")
    project, run = hostile_world["project"], hostile_world["run"]
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/p/{project.slug}/failures/?run={run.pk}")
    page.wait_for_function(f"() => document.querySelector('{STEPS_CHART}').dataset.drawn === 'count'")
    _click_segment(page, STEPS_CHART, trace=0, point=2)
    page.wait_for_url(LIST_URL)
    assert _query(page.url) == {"run": [str(run.pk)], "split": ["train"], "step": ["3"], "passed": ["yes"]}

    # Without a mouse: the table under the chart holds the same links.
    page.goto(f"{live_server.url}/p/{project.slug}/failures/?run={run.pk}")
    page.click("details.failures-table summary")
    page.click("#failures-step-table tr[data-step='1'] a[data-bucket='invalid_json']")
    page.wait_for_url(LIST_URL)
    assert _query(page.url) == {"run": [str(run.pk)], "split": ["train"], "step": ["1"], "bucket": ["invalid_json"]}


def test_shares_redraw_in_place_and_hostile_text_stays_text(page, live_server, project_team, hostile_world):
    project, run = hostile_world["project"], hostile_world["run"]
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/p/{project.slug}/failures/?run={run.pk}")
    page.wait_for_function(f"() => document.querySelector('{STEPS_CHART}').dataset.drawn === 'count'")
    page.check("input[name=show][value=share]")
    page.wait_for_function(f"() => document.querySelector('{STEPS_CHART}').dataset.drawn === 'share'")
    assert "show=share" in page.url
    page.wait_for_function("() => document.querySelector('#failures-compare-chart').dataset.drawn === 'share'")

    # The hostile task key and run names are shown as text, never as markup.
    assert page.locator("h2#steps-title").inner_text().startswith(f"Buckets per step · grpo {XSS[2]}")
    page.goto(f"{live_server.url}/p/{project.slug}/failures/?run={hostile_world['baseline'].pk}")
    page.wait_for_function("() => document.querySelector('#failures-compare-chart').dataset.drawn === 'count'")
    assert page.locator("#failures-run option:checked").inner_text().startswith(f"baseline {XSS[1]}")
    assert page.locator(".failures-examples li").filter(has_text=XSS[0]).count() >= 1
    assert page.locator("#failures-compare-chart .xtick2 text").filter(has_text="all tasks").count() == 1
    assert page.locator("svg[onload], img[onerror], .failures-page script:not([type])").count() == 0
    assert not dialogs


def test_a_click_on_the_comparison_opens_that_evaluations_bucket(page, live_server, project_team, hostile_world):
    if not has_page("dashboard:trajectory_list"):
        pytest.skip("the trajectory list page does not exist yet: the bars have no link")
    project, baseline = hostile_world["project"], hostile_world["baseline"]
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/p/{project.slug}/failures/")
    chart = "#failures-compare-chart"
    page.wait_for_function(f"() => document.querySelector('{chart}').dataset.drawn === 'count'")
    # Buckets of A and B together: passed, invalid_json, wrong_tool; points: (all tasks, A), (all tasks, B), ...
    _click_segment(page, chart, trace=2, point=0)
    page.wait_for_url(LIST_URL)
    assert _query(page.url) == {"run": [str(baseline.pk)], "split": ["held_out"], "step": ["0"],
                                "bucket": ["wrong_tool"]}
