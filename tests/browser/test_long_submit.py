"""Long posts show progress (static/crucible/js/long_submit.js): a dataset file's upload is measured, then a
counter runs while the server checks it, and the report page follows; a refused file comes back in place
with its error and the page still works (its modules run again: keys, a second upload); the run import
page does the same; the generate form says "Working… N s" and disables its buttons."""

from __future__ import annotations

import json
import re

import pytest
from browser_session import login, watch

from tests.training.conftest import tiny_model_dir, tokenizer  # noqa: F401  (fixtures of real_run_dir)
from tests.webapp.runs.test_run_import import _zip_folder, real_run_dir, run_copy  # noqa: F401  (fixtures)
from webapp.runs.models import Run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Every state the long-submit status goes through, kept in sessionStorage so it survives the navigation
# to the next page: the status text, the bar's value ("indeterminate" without one, "none" without a bar),
# whether the form's submit buttons are disabled. Installed before any page script runs.
RECORDER = """
(() => {
  const KEY = "longSubmitLog";
  const record = () => {
    for (const status of document.querySelectorAll("[data-long-submit-status]")) {
      if (!status.textContent.trim()) continue;
      const bar = status.querySelector("progress");
      const form = status.closest("form");
      const entry = {
        text: status.textContent.trim(),
        bar: !bar ? "none" : bar.hasAttribute("value") ? bar.value : "indeterminate",
        role: status.getAttribute("role"),
        disabled: form ? [...form.querySelectorAll("button[type=submit]")].every((b) => b.disabled) : null,
      };
      const log = JSON.parse(sessionStorage.getItem(KEY) || "[]");
      const last = log[log.length - 1];
      if (!last || JSON.stringify(last) !== JSON.stringify(entry)) {
        log.push(entry);
        sessionStorage.setItem(KEY, JSON.stringify(log));
      }
    }
  };
  new MutationObserver(record).observe(document, { subtree: true, childList: true, characterData: true,
                                                   attributes: true });
})();
"""

UPLOADING = re.compile(r"^Uploading (\d+\.\d) of (\d+\.\d) MB \((\d+)%\)$")


def _row(i: int) -> str:
    body = {"id": f"big{i}", "messages": [{"role": "user", "content": f"Book room {i} for the team offsite"}],
            "ground_truth": [{"name": "book", "arguments": {"room": i}}], "category": "calendar"}
    return json.dumps({"task": body, "trajectory": None, "result": None})


def _big_file(tmp_path, rows: int = 14_000, name: str = "big.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(_row(i) for i in range(rows)) + "\n")
    return path


@pytest.fixture
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    return settings.DATA_DIR


@pytest.fixture
def recorded(page):
    page.add_init_script(RECORDER)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return errors


def _log(page) -> list[dict]:
    return page.evaluate("() => JSON.parse(sessionStorage.getItem('longSubmitLog') || '[]')")


def _clear_log(page) -> None:
    page.evaluate("() => sessionStorage.removeItem('longSubmitLog')")


def _slow_uploads(page, bytes_per_second: int) -> None:
    """Chromium's network emulation, so a few MB take a second or two to go up over loopback."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": 0, "downloadThroughput": -1,
                                                  "uploadThroughput": bytes_per_second})


def test_a_dataset_upload_shows_its_progress_then_the_report(page, live_server, project_team, data_dir, tmp_path,
                                                              recorded):
    seen = watch(page)
    path = _big_file(tmp_path)
    size_mb = path.stat().st_size / 1024 / 1024
    assert 2.5 < size_mb < 5
    login(page, live_server, "editor")
    slug = project_team["project"].slug
    page.goto(f"{live_server.url}/p/{slug}/datasets/import/")
    assert page.get_attribute("#import-form [data-long-submit-status]", "role") == "status"
    assert page.get_attribute("#import-form [data-long-submit-status]", "aria-live") == "polite"
    _slow_uploads(page, 2 * 1024 * 1024)
    page.set_input_files("#import-file", str(path))
    page.fill("#import-name", "big")
    page.click("#check-file")
    page.wait_for_url(re.compile(r"/datasets/import/[A-Za-z0-9_-]{24}/$"), timeout=60_000)
    assert page.inner_text("#report-accepted") == "14,000"

    log = _log(page)
    uploads = [e for e in log if UPLOADING.match(e["text"])]
    assert uploads, log
    assert all(e["role"] == "status" and e["disabled"] for e in log), log
    # The bar follows the bytes sent, and some of them were seen in mid-upload.
    for entry in uploads:
        sent, total, percent = UPLOADING.match(entry["text"]).groups()
        assert float(total) == pytest.approx(size_mb, abs=0.15)
        assert isinstance(entry["bar"], (int, float)) and entry["bar"] * 100 == pytest.approx(int(percent), abs=1)
        assert float(sent) <= float(total)
    assert any(0 < e["bar"] < 1 for e in uploads), uploads
    # Then the server's turn: an indeterminate bar and a seconds counter.
    checking = [e for e in log if re.fullmatch(r"Checking the file… \d+ s", e["text"])]
    assert checking and all(e["bar"] == "indeterminate" for e in checking), log
    assert log.index(checking[0]) > log.index(uploads[-1])
    assert seen == {"dialogs": [], "csp": []} and recorded == []


def test_a_refused_file_comes_back_in_place_and_the_page_still_works(page, live_server, project_team, data_dir,
                                                                     tmp_path, settings, recorded):
    seen = watch(page)
    settings.CRUCIBLE_IMPORT_MAX_BYTES = 1024 * 1024
    big = _big_file(tmp_path, rows=8_000)
    small = tmp_path / "small.jsonl"
    small.write_text("\n".join(_row(i) for i in range(20)) + "\n")
    login(page, live_server, "editor")
    slug = project_team["project"].slug
    url = f"{live_server.url}/p/{slug}/datasets/import/"
    page.goto(url)
    page.set_input_files("#import-file", str(big))
    page.fill("#import-name", "too-big")
    page.click("#check-file")
    page.wait_for_selector("#file-error")
    assert "over the 1 MB limit" in page.inner_text("#file-error")
    assert page.url == url
    assert page.input_value("#import-name") == "too-big"  # what was typed is kept
    log = _log(page)
    assert any(UPLOADING.match(e["text"]) for e in log), log  # it went up through long_submit.js

    # The replaced page is whole: its styles apply, its scripts run (the shell's "?" key), one status.
    assert page.evaluate("() => getComputedStyle(document.querySelector('.dataset-form .form-actions')).display") \
        == "flex"
    assert page.evaluate("() => document.querySelectorAll('[data-long-submit-status]').length") == 1
    page.keyboard.press("?")
    page.wait_for_function("() => document.getElementById('help').open")
    page.keyboard.press("Escape")
    page.wait_for_function("() => !document.getElementById('help').open")

    # A second upload from the replaced page goes through long_submit.js again and lands on the report.
    _clear_log(page)
    page.set_input_files("#import-file", str(small))
    page.fill("#import-name", "small")
    page.click("#check-file")
    page.wait_for_url(re.compile(r"/datasets/import/[A-Za-z0-9_-]{24}/$"))
    assert page.inner_text("#report-accepted") == "20"
    log = _log(page)
    assert any(UPLOADING.match(e["text"]) for e in log), log
    assert any(re.fullmatch(r"Checking the file… \d+ s", e["text"]) for e in log), log
    assert seen == {"dialogs": [], "csp": []} and recorded == []


def test_a_lost_upload_says_so_and_can_be_sent_again(page, live_server, project_team, data_dir, tmp_path, recorded):
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join(_row(i) for i in range(20)) + "\n")
    login(page, live_server, "editor")
    slug = project_team["project"].slug
    page.goto(f"{live_server.url}/p/{slug}/datasets/import/")
    cut = lambda route: route.abort() if route.request.method == "POST" else route.continue_()  # noqa: E731
    page.route("**/datasets/import/", cut)
    page.set_input_files("#import-file", str(path))
    page.fill("#import-name", "small")
    page.click("#check-file")
    page.wait_for_function("() => document.querySelector('[data-long-submit-status]').textContent"
                           ".includes('did not get through')")
    assert page.locator("#check-file").is_enabled()
    assert page.get_attribute("#import-form", "data-long-submit-busy") is None
    page.unroute("**/datasets/import/", cut)
    page.click("#check-file")
    page.wait_for_url(re.compile(r"/datasets/import/[A-Za-z0-9_-]{24}/$"))
    assert page.inner_text("#report-accepted") == "20"
    assert recorded == []


def test_a_run_import_that_is_not_a_zip_shows_its_error_in_place(page, live_server, project_team, data_dir,
                                                                  tmp_path, recorded):
    seen = watch(page)
    archive = tmp_path / "run.zip"
    archive.write_bytes(b"not a zip at all\n" * 40_000)
    login(page, live_server, "editor")
    slug = project_team["project"].slug
    url = f"{live_server.url}/p/{slug}/runs/import/"
    page.goto(url)
    for attempt in range(2):  # the second from the page the first one wrote in place
        _clear_log(page)
        page.set_input_files("#id_archive", str(archive))
        page.fill("#id_name", f"attempt {attempt}")
        page.click("#run-import-submit")
        page.wait_for_function(f"() => document.querySelector('#id_name').value === 'attempt {attempt}'"
                               " && !!document.querySelector('.field-error')"
                               " && !document.querySelector('#run-import-submit').disabled")
        assert page.url == url
        log = _log(page)
        assert any(UPLOADING.match(e["text"]) for e in log), log
        assert any(re.fullmatch(r"Importing the run… \d+ s", e["text"]) for e in log), log
    assert page.inner_text("#run-import-progress") == ""  # the new page's status is empty again
    assert seen == {"dialogs": [], "csp": []} and recorded == []


def test_a_run_import_shows_its_report_in_place_and_the_page_still_works(
        page, live_server, project_team, data_dir, run_copy, tmp_path, recorded):  # noqa: F811
    seen = watch(page)
    archive = tmp_path / "grpo-run.zip"
    archive.write_bytes(_zip_folder(run_copy))
    login(page, live_server, "editor")
    slug = project_team["project"].slug
    page.goto(f"{live_server.url}/p/{slug}/runs/import/")
    page.set_input_files("#id_archive", str(archive))
    page.click("#run-import-submit")
    page.wait_for_selector("#import-report")
    assert "Imported as a new run" in page.inner_text("#import-report")
    log = _log(page)
    assert any(UPLOADING.match(e["text"]) for e in log), log
    assert any(re.fullmatch(r"Importing the run… \d+ s", e["text"]) for e in log), log
    run = Run.objects.get()
    assert run.is_imported
    page.keyboard.press("?")  # the shell's keys work on the page written in place
    page.wait_for_function("() => document.getElementById('help').open")
    page.keyboard.press("Escape")
    page.click(f"#import-report a[href='/p/{slug}/runs/{run.pk}/']")
    page.wait_for_url(re.compile(rf"/p/{slug}/runs/{run.pk}/$"))
    assert seen == {"dialogs": [], "csp": []} and recorded == []


def test_the_generate_form_says_it_is_working_and_cannot_be_sent_twice(page, live_server, project_team, data_dir,
                                                                       recorded):
    seen = watch(page)
    login(page, live_server, "editor")
    slug = project_team["project"].slug
    page.goto(f"{live_server.url}/p/{slug}/datasets/generate/")
    page.fill("#gen-n", "200")
    page.click("#preview-tasks")
    page.wait_for_selector("#generation-report")
    log = _log(page)
    working = [e for e in log if re.fullmatch(r"Working… \d+ s", e["text"])]
    assert working, log
    assert working[0]["bar"] == "indeterminate"
    assert any(e["disabled"] for e in working), log  # disabled after the submit event
    # The post carried the pressed button (action=preview): a preview, nothing created.
    assert page.inner_text("#gen-accepted") == "200"
    assert page.locator("#create-generated").is_enabled()
    assert seen == {"dialogs": [], "csp": []} and recorded == []
