"""The playground's task picker in a real browser: picking a dataset fills the task list without reloading the
page (htmx), each task shown by its request and id, and the search box narrows it as one types."""

from __future__ import annotations

import pytest
from browser_session import login, watch
from pipeline_data import make_tasks
from playwright.sync_api import expect

from webapp.datasets.services.datasets import dataset_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_picking_a_dataset_fills_the_task_list_and_the_search_narrows_it(page, live_server, project_team):
    from webapp.verifiers.services.verifiers import verifier_create

    project, editor = project_team["project"], project_team["editor"]
    verifier_create(project=project, name="calls", kind="json_tool_call", config={}, actor=editor)
    dataset = dataset_create(project=project, name="calls", tasks=make_tasks(5), actor=editor)
    seen = watch(page)
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/p/{project.slug}/verifiers/playground/")
    page.wait_for_load_state()
    page.fill("#pg-output", "kept while the list changes")
    page.evaluate("window.__sameDocument = true")
    page.select_option("#pg-dataset", str(dataset.pk))
    page.wait_for_selector("#pg-task option:not([value=''])", state="attached")
    options = page.locator("#pg-task option:not([value=''])")
    assert options.count() == 5
    assert options.first.inner_text().startswith("Please do task 0 · task-0")
    page.fill("#pg-q", "do task 3")
    expect(options).to_have_count(1)
    assert options.first.inner_text().startswith("Please do task 3 · task-3")
    assert page.evaluate("window.__sameDocument") is True, "no reload"
    assert page.input_value("#pg-output") == "kept while the list changes"
    assert seen == {"dialogs": [], "csp": []}
