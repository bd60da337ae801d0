"""Run tags, note, config columns and metric sorting in a real browser: the inline edit swaps in by htmx (CSRF header, no reload),
an error shows beside its field, hostile text stays text, a chip filters the runs table, the columns picker keeps
its choice in the URL, a metric's column header sorts the table by it."""

from __future__ import annotations

import pytest
from browser_session import login, shot, watch

from webapp.runs.models import Run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOSTILE = '<img src=x onerror=alert(1)><script>alert("n")</script>'


def test_an_editor_tags_a_run_inline_and_a_chip_filters_the_table(page, live_server, project_team):
    project = project_team["project"]
    run = Run.objects.create(project=project, name="lr high", kind="grpo", config={"learning_rate": 1e-4})
    other = Run.objects.create(project=project, name="lr low", kind="grpo", config={"learning_rate": 5e-5})
    seen = watch(page)
    login(page, live_server, "editor")
    page.goto(f"{live_server.url}/p/{project.slug}/runs/{run.pk}/")
    page.click("#run-annotation summary")
    page.fill("#run-tags-input", "Baseline, bad<tag")
    page.fill("#run-note-input", HOSTILE)
    page.click("#run-annotation button[type=submit]")
    page.wait_for_selector("#run-tags-error")
    assert "cannot hold" in page.inner_text("#run-tags-error")
    assert page.input_value("#run-tags-input") == "Baseline, bad<tag", "what was typed is kept"
    assert Run.objects.get(pk=run.pk).tags == []

    page.fill("#run-tags-input", "Baseline, lr sweep")
    page.click("#run-annotation button[type=submit]")
    page.wait_for_selector("#run-annotation .saved")
    assert page.url.endswith(f"/runs/{run.pk}/"), "saved in place, no navigation"
    assert page.locator("#run-annotation a.tag-chip").all_inner_texts() == ["baseline", "lr sweep"]
    assert page.inner_text("[data-run-note]") == HOSTILE, "the note is shown as text"
    assert Run.objects.get(pk=run.pk).note == HOSTILE
    shot(page, "run-tags-detail.png")

    page.goto(f"{live_server.url}/p/{project.slug}/runs/")
    page.click(f"tr[data-run='{run.pk}'] a.tag-chip:has-text('lr sweep')")
    page.wait_for_url("**/runs/?tag=lr+sweep")
    assert page.locator(f"tr[data-run='{run.pk}']").count() == 1
    assert page.locator(f"tr[data-run='{other.pk}']").count() == 0

    page.goto(f"{live_server.url}/p/{project.slug}/runs/")
    page.click("details.columns-picker summary")
    page.check("input[name=cols][value=learning_rate]")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**cols=learning_rate**")
    assert page.inner_text(f"tr[data-run='{other.pk}'] td[data-col='learning_rate']") == "5e-05"
    shot(page, "run-tags-list.png")
    assert seen["dialogs"] == [] and seen["csp"] == []


def test_a_click_on_a_metric_header_sorts_the_table_best_first_and_a_second_click_worst_first(
        page, live_server, project_team):
    from webapp.runs.services.ingest import EventIngestor

    project = project_team["project"]
    rewards = {"middling": 0.4, "best": 0.9, "worst": 0.1}
    runs = {name: Run.objects.create(project=project, name=f"{name} {HOSTILE}", kind="grpo") for name in rewards}
    for name, reward in rewards.items():
        EventIngestor(runs[name], attempt=1).ingest(
            [{"type": "metric", "step": 1, "split": "train", "metrics": {"reward": reward}}])
    bare = Run.objects.create(project=project, name="no reward yet", kind="grpo")
    seen = watch(page)
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/p/{project.slug}/runs/?kind=grpo")

    def order() -> list[int]:
        return [int(pk) for pk in page.locator("#run-rows tr[data-run]").evaluate_all(
            "rows => rows.map(r => r.dataset.run)")]

    page.click("th a.sort-link:has-text('Reward')")
    page.wait_for_url("**sort=-reward**")
    assert "kind=grpo" in page.url, "the filter is kept"
    assert order() == [runs["best"].pk, runs["middling"].pk, runs["worst"].pk, bare.pk]
    assert page.get_attribute("th[aria-sort]", "aria-sort") == "descending"
    assert page.locator("select[name=sort]").input_value() == "-reward"
    shot(page, "runs-sorted-by-reward.png")
    page.emulate_media(color_scheme="dark")
    page.click("th a.sort-link:has-text('Reward')")
    page.wait_for_url("**sort=reward**")
    shot(page, "runs-sorted-by-reward-ascending-dark.png")
    assert HOSTILE in page.inner_text(f"tr[data-run='{runs['worst'].pk}']"), "a hostile run name stays text"
    assert order() == [runs["worst"].pk, runs["middling"].pk, runs["best"].pk, bare.pk], "no value: last both ways"
    assert seen["dialogs"] == [] and seen["csp"] == []


def test_a_config_column_picked_in_the_columns_menu_sorts_by_its_header(page, live_server, project_team):
    """Tick Learning rate, Filter, click its header: highest first; again: lowest first; no value last both ways."""
    project = project_team["project"]
    rates = {"middling": 1e-4, "high": 3e-4, "low": 1e-5}
    runs = {name: Run.objects.create(project=project, name=f"{name} {HOSTILE}", kind="grpo",
                                     config={"learning_rate": rate}) for name, rate in rates.items()}
    bare = Run.objects.create(project=project, name="imported without a config", kind="grpo", config={})
    seen = watch(page)
    login(page, live_server, "viewer")
    page.goto(f"{live_server.url}/p/{project.slug}/runs/?kind=grpo")

    def order() -> list[int]:
        return [int(pk) for pk in page.locator("#run-rows tr[data-run]").evaluate_all(
            "rows => rows.map(r => r.dataset.run)")]

    page.click("details.columns-picker summary")
    page.check("input[name=cols][value=learning_rate]")
    page.click("button:has-text('Filter')")
    page.wait_for_url("**cols=learning_rate**")
    page.click("th a.sort-link:has-text('Learning rate')")
    page.wait_for_url("**sort=-config.learning_rate**")
    assert "kind=grpo" in page.url and "cols=learning_rate" in page.url, "the filter and the column are kept"
    assert order() == [runs["high"].pk, runs["middling"].pk, runs["low"].pk, bare.pk]
    assert page.get_attribute("th.config-col[aria-sort]", "aria-sort") == "descending"
    assert page.locator("select[name=sort]").input_value() == "-config.learning_rate"
    shot(page, "runs-sorted-by-learning-rate.png")
    page.emulate_media(color_scheme="dark")
    page.click("th a.sort-link:has-text('Learning rate')")
    page.wait_for_url("**sort=config.learning_rate**")
    shot(page, "runs-sorted-by-learning-rate-ascending-dark.png")
    assert order() == [runs["low"].pk, runs["middling"].pk, runs["high"].pk, bare.pk], "no value: last both ways"
    assert HOSTILE in page.inner_text(f"tr[data-run='{runs['low'].pk}']"), "a hostile run name stays text"
    assert seen["dialogs"] == [] and seen["csp"] == []
