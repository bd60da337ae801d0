"""Verifier pages in a real browser: write a python verifier and a new version of it in the code editor
(Tab inserts spaces, line numbers follow), score a pasted output in the playground, and sanity-check a
version over 10 stored outputs with the keyboard only until the agreement rate shows.

Set CRUCIBLE_SCREENSHOT_DIR to keep screenshots (verifier-form.png, verifier-playground.png,
verifier-judge.png, verifier-check.png).
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
from browser_session import login, shot, watch
from pipeline_data import XSS, make_pipeline_project, make_pipeline_run

from environments.sandbox import BWRAP, available_isolation
from webapp.verifiers.models import Verifier, VerifierCheck

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _ready(page) -> None:
    page.wait_for_load_state()  # the page's modules ran: its keys work


@pytest.mark.skipif(shutil.which("bwrap") is None or available_isolation() != BWRAP,
                    reason="bubblewrap (bwrap) is not installed or not usable: python verifier code runs only in "
                           "its sandbox (apt-get install bubblewrap)")
def test_write_a_python_verifier_version_and_score_a_pasted_output(page, live_server, project_team):
    project = project_team["project"]
    dataset, _verifier, _model = make_pipeline_project(project, project_team["owner"])
    task = dataset.tasks.get(external_id="task-0")
    seen = watch(page)
    login(page, live_server, "editor")
    page.goto(f"{live_server.url}/p/{project.slug}/verifiers/")
    _ready(page)
    page.keyboard.press("n")  # new verifier
    page.wait_for_url("**/verifiers/new/")
    page.select_option("#kind-choice", "python")  # the form is rebuilt from the python kind's schema
    page.wait_for_url("**/verifiers/new/?kind=python*")
    _ready(page)
    page.fill("#id_name", f"mentions the tool {XSS[0]}")
    editor = page.locator("#cfg-code")
    assert "def verify(task, trajectory):" in editor.input_value(), "the schema's example code to start from"
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Delete")
    page.keyboard.type("def verify(task, trajectory):")
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    page.keyboard.type("return 1.0 if 'create_event' in trajectory['turns'][-1]['content'] else 0.0")
    assert editor.input_value() == ("def verify(task, trajectory):\n    return 1.0 if 'create_event' in "
                                    "trajectory['turns'][-1]['content'] else 0.0")
    assert page.locator(".code-editor .gutter").inner_text().split() == ["1", "2"]
    page.fill("#cfg-timeout_seconds", "5")
    shot(page, "verifier-form.png")
    page.keyboard.press("Control+Enter")  # save, from inside the editor
    page.wait_for_url("**/versions/1/")
    verifier = Verifier.objects.get(kind="python")
    assert XSS[0] in page.locator("h1").inner_text()

    # A new version: the form starts from v1; the check looks for send_email instead.
    page.keyboard.press("n")
    page.wait_for_url(f"**/verifiers/{verifier.pk}/versions/new/?from=1")
    _ready(page)
    editor = page.locator("#cfg-code")
    editor.fill(editor.input_value().replace("create_event", "send_email"))
    page.click("#save-verifier")
    page.wait_for_url("**/versions/2/")
    assert verifier.versions.count() == 2
    assert "create_event" in verifier.versions.get(version=1).config["code"], "v1 is unchanged"

    # The playground, from the version page: v2 is chosen; a task is found by search; an output pasted.
    _ready(page)
    page.keyboard.press("p")
    page.wait_for_url("**/verifiers/playground/?version=*")
    assert page.locator("#pg-version option:checked").inner_text().startswith("mentions the tool")
    page.select_option("#pg-dataset", str(dataset.pk))
    page.fill("#pg-q", "task-0")
    with page.expect_navigation():  # a full page: the task list htmx filled on the dataset pick is replaced
        page.click("#find-tasks")
    page.wait_for_selector(f"#pg-task option[value='{task.pk}']", state="attached")
    page.select_option("#pg-task", str(task.pk))
    page.fill("#pg-output", json.dumps(task.ground_truth[0]))
    _ready(page)
    page.locator("#pg-output").press("Control+Enter")
    page.wait_for_selector("#verdict")
    assert page.locator("#verdict-reward").inner_text() == "1.000"
    assert page.locator("#verdict-passed").inner_text() == "yes"
    assert "bwrap" in page.locator("#verdict").inner_text()
    shot(page, "verifier-playground.png")
    assert seen == {"dialogs": [], "csp": []}


def test_sanity_check_ten_outputs_by_keyboard_and_see_the_agreement(page, live_server, project_team):
    project = project_team["project"]
    run = make_pipeline_run(project, project_team["owner"], hostile=True, steps=2)
    version = run.verifier_version
    seen = watch(page)
    login(page, live_server, "editor")
    page.goto(f"{live_server.url}/p/{project.slug}/verifiers/{version.verifier_id}/versions/1/")
    _ready(page)
    page.keyboard.press("c")  # sanity check
    page.wait_for_url("**/versions/1/check/")
    page.fill("#check-size", "10")
    page.select_option("#check-run", str(run.pk))
    page.check("input[name=method][value=stratified]")
    page.click("#start-check-button")
    page.wait_for_url(re.compile(r"/verifiers/checks/\d+/$"))
    check = VerifierCheck.objects.get()
    assert page.locator("#histogram-table").inner_text().count("\n") >= 2
    page.wait_for_function("() => document.querySelector('[data-histogram]').dataset.drawn === '1'")
    _ready(page)
    page.keyboard.press("l")  # judge the verdicts
    page.wait_for_url(f"**/checks/{check.pk}/label/")
    assert "a right" in page.locator("#key-hint").inner_text()
    shot(page, "verifier-judge.png")
    for number in range(1, 11):
        page.wait_for_function("(n) => document.title.startsWith(`Judge ${n}/10`)", arg=number)
        _ready(page)
        if number == 1:
            # Keys do nothing while typing: focus the bucket select and press d; nothing is chosen.
            page.focus("#human-bucket")
            page.keyboard.press("d")
            assert not page.locator("#verdict-wrong").is_checked()
            page.keyboard.press("Escape")
        if number == 4:
            page.keyboard.press("d")
            page.keyboard.press("3")  # wrong_tool
            assert page.locator("#human-bucket").input_value() == "wrong_tool"
        else:
            page.keyboard.press("a")
        assert page.locator("#verdict-wrong" if number == 4 else "#verdict-right").is_checked()
        if number == 2:  # k goes back to the first output, j returns
            page.keyboard.press("k")
            page.wait_for_function("() => document.title.startsWith('Judge 1/10')")
            _ready(page)
            assert page.locator("#verdict-right").is_checked(), "the saved judgement is shown again"
            page.keyboard.press("j")
            page.wait_for_function("() => document.title.startsWith('Judge 2/10')")
            _ready(page)
            page.keyboard.press("a")
        page.keyboard.press("Control+Enter")
    page.wait_for_url(f"**/verifiers/checks/{check.pk}/")
    assert page.locator("#agreement-rate").inner_text() == "90%"
    assert "you judged 9 of 10 verdicts right" in page.locator("#agreement").inner_text()
    assert "wrong_tool" in page.locator("#disagreements").inner_text()
    shot(page, "verifier-check.png")
    page.goto(f"{live_server.url}/p/{project.slug}/verifiers/")
    assert "checked on 10 outputs: 90% agreement" in page.locator("#verifier-table").inner_text()
    assert seen == {"dialogs": [], "csp": []}
