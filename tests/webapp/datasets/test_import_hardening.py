"""Hostile and careless input to the dataset import and the run import: a clear 4xx, never a 500,
and nothing written by a request that failed (no dataset, task or run row, no file left behind).

Run on SQLite and on PostgreSQL (where non-finite numbers used to fail inside COPY and the
concurrent races are real); the race tests skip on SQLite, which serialises every write.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client

from tests.webapp.races import needs_postgres as _needs_postgres
from tests.webapp.races import race as _race
from training.events import EventWriter
from webapp.common.strict_json import NonFiniteNumber, error_text, loads
from webapp.datasets.models import Task, TaskDataset
from webapp.datasets.services.imports import (
    ImportFileError,
    import_check,
    import_create,
    import_target,
)
from webapp.projects.services.projects import api_token_issue
from webapp.runs.models import Checkpoint, MetricPoint, Run
from webapp.runs.services.run_import import RunImportError, run_import, run_import_zip
from webapp.trajectories.models import StepRollup, Trajectory

REPO = Path(__file__).resolve().parents[3]
BAD_NUMBERS = ["1e400", "-1e400", "NaN", "Infinity", "-Infinity", "1" + "0" * 400]
NEMO_ROWS = (Path(__file__).resolve().parents[3] / ".." / "shared" / "third_party" / "nemo_gym_workplace_assistant"
             / "rows")


@pytest.fixture(autouse=True)
def data_dir(settings, tmp_path):
    """A data directory of this test's own, so "nothing left behind" looks at this test's files only."""
    settings.DATA_DIR = str(tmp_path / "data")


def _row(i: int, **task) -> dict:
    body = {"id": f"t{i}", "messages": [{"role": "user", "content": f"Send report {i} to Ana"}],
            "tools": [{"name": "send", "description": "Send",
                       "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}],
            "ground_truth": [{"name": "send", "arguments": {"n": i}}], "category": "email", "split": "train", **task}
    return {"task": body}


def _line(row: dict, *, placeholder: str = "", literal: str = "") -> str:
    """The row as one JSON line, with the string `placeholder` replaced by a raw number literal."""
    text = json.dumps(row)
    return text.replace(json.dumps(placeholder), literal) if placeholder else text


def _upload(data: bytes, name: str = "tasks.jsonl", content_type: str = "application/x-ndjson"):
    return SimpleUploadedFile(name, data, content_type=content_type)


def _nothing_in(folder: Path) -> list[str]:
    return [str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def _nothing_written(settings) -> None:
    """No dataset, task or run row, and no upload or extraction left in the data directory."""
    data = Path(settings.DATA_DIR)
    assert TaskDataset.objects.count() == 0 and Task.objects.count() == 0
    assert Run.objects.count() == 0 and MetricPoint.objects.count() == 0 and Trajectory.objects.count() == 0
    assert _nothing_in(data / "imports") == [] and _nothing_in(data / "tmp" / "run-imports") == []


# ---------------------------------------------------------------------------------------
# The one rule for numbers
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("literal", BAD_NUMBERS)
def test_strict_json_names_the_field_of_a_non_finite_number(literal):
    with pytest.raises(NonFiniteNumber) as caught:
        loads('{"a": {"b": [1, 2.5, ' + literal + ']}, "ok": 1e-400}')
    assert caught.value.path == "a.b[2]" and "not a finite number" in str(caught.value)
    assert loads(b'{"x": 1.5e308, "y": "tree 1e400", "z": -0.0}') == {"x": 1.5e308, "y": "tree 1e400", "z": -0.0}


def test_a_json_error_keeps_its_column():
    with pytest.raises(ValueError) as caught:
        loads('{"a": "tab\there"}')
    assert error_text(caught.value) == "Invalid control character at column 11 (character 11)"


# ---------------------------------------------------------------------------------------
# Dataset import: numbers, positions, NeMo Gym ground truth
# ---------------------------------------------------------------------------------------

WHERE = {  # where a bad number goes in a Crucible row, and the path the report names
    "ground truth": (lambda: _row(2, ground_truth=[{"name": "send", "arguments": {"n": "@"}}]),
                     "task.ground_truth[0].arguments.n"),
    "tool schema": (lambda: _row(2, tools=[{"name": "send", "parameters": {"type": "object", "properties": {
        "n": {"type": "number", "maximum": "@"}}}}]), "task.tools[0].parameters.properties.n.maximum"),
    "metadata": (lambda: _row(2, metadata={"difficulty": "@"}), "task.metadata.difficulty"),
    "message part": (lambda: _row(2, messages=[{"role": "user", "content": [{"type": "text", "text": "x",
                                                                             "weight": "@"}]}]),
                     "task.messages[0].content[0].weight"),
}


@pytest.mark.parametrize("literal", BAD_NUMBERS)
@pytest.mark.parametrize("where", sorted(WHERE))
def test_a_dataset_row_with_a_non_finite_number_is_rejected_by_the_report_and_the_import_alike(
        project_team, tmp_path, literal, where):
    make, path = WHERE[where]
    file = tmp_path / "tasks.jsonl"
    file.write_text("\n".join([_line(_row(1)), _line(make(), placeholder="@", literal=literal), _line(_row(3))]))
    project = project_team["project"]
    check = import_check(file, target=import_target(project=project, name="numbers"))
    assert (check.accepted, [r["line"] for r in check.rejected]) == (2, [2])
    assert check.rejected[0]["reason"].startswith(f"{path} is ") and "not a finite number" in check.rejected[0]["reason"]
    dataset, written = import_create(file, project=project, target=import_target(project=project, name="numbers"),
                                     actor=project_team["editor"])
    assert (written.accepted, written.rejected) == (check.accepted, check.rejected)
    assert sorted(Task.objects.filter(dataset=dataset).values_list("external_id", flat=True)) == ["t1", "t3"]


@pytest.mark.parametrize("literal", ["1e400", "NaN", "-Infinity"])
def test_a_nemo_gym_row_with_a_non_finite_number_is_rejected_naming_the_field(project_team, tmp_path, literal):
    good = {"id": 1, "responses_create_params": {"input": [{"role": "user", "content": "hi"}], "tools": []},
            "ground_truth": [{"name": "email_delete_email", "arguments": '{"email_id": "1"}'}]}
    in_params = {**good, "id": 2, "responses_create_params": {**good["responses_create_params"], "temperature": "@"}}
    in_arguments = {**good, "id": 3, "ground_truth": [{"name": "x", "arguments": '{"n": ' + literal + '}'}]}
    file = tmp_path / "nemo.jsonl"
    file.write_text("\n".join([json.dumps(good), _line(in_params, placeholder="@", literal=literal),
                               json.dumps(in_arguments)]))
    report = import_check(file, target=import_target(project=project_team["project"], name="n"))
    reasons = {r["line"]: r["reason"] for r in report.rejected}
    assert report.accepted == 1 and set(reasons) == {2, 3}
    assert reasons[2].startswith("responses_create_params.temperature is ")
    assert "ground_truth[0].arguments is not JSON text of finite numbers" in reasons[3]


def test_a_file_whose_every_row_holds_a_bad_number_writes_nothing(client, project_team, bearer, settings):
    content = "\n".join(_line(_row(i, metadata={"w": "@"}), placeholder="@", literal="1e400")
                        for i in range(3)).encode()
    url = f"/api/projects/{project_team['project'].slug}/datasets/import"
    dry = client.post(url, {"file": _upload(content), "name": "bad", "dry_run": "true"}, **bearer("editor"))
    assert dry.status_code == 200 and dry.json()["report"]["rejected_count"] == 3
    assert "task.metadata.w is 1e400" in dry.json()["report"]["rejected"][0]["reason"]
    done = client.post(url, {"file": _upload(content), "name": "bad"}, **bearer("editor"))
    assert done.status_code == 422, done.content
    assert "No row of the file can be imported" in done.json()["errors"]["file"]
    _nothing_written(settings)


def test_the_api_import_agrees_with_its_dry_run_on_bad_numbers(client, project_team, bearer):
    content = "\n".join([_line(_row(1)), _line(_row(2, ground_truth="@"), placeholder="@", literal="-1e400"),
                         _line(_row(3))]).encode()
    url = f"/api/projects/{project_team['project'].slug}/datasets/import"
    dry = client.post(url, {"file": _upload(content), "name": "mixed", "dry_run": "true"}, **bearer("editor"))
    done = client.post(url, {"file": _upload(content), "name": "mixed"}, **bearer("editor"))
    assert (dry.status_code, done.status_code) == (200, 201), done.content
    for key in ("accepted", "rejected", "rejected_count"):
        assert dry.json()["report"][key] == done.json()["report"][key]
    assert done.json()["dataset"]["stats"]["tasks"] == 2


def test_a_json_error_in_the_report_keeps_its_line_and_column(project_team, tmp_path):
    file = tmp_path / "tasks.jsonl"
    file.write_text(_line(_row(1)) + "\n" + '{"task": {"id": "t2", "messages": "a\tb"}}\n')
    report = import_check(file, target=import_target(project=project_team["project"], name="x"))
    assert report.rejected == [{"line": 2, "reason": "not valid JSON (Invalid control character at column 37 "
                                                     "(character 37))"}]


def test_a_nemo_gym_row_without_ground_truth_is_imported_with_a_warning(client, project_team, bearer, tmp_path):
    rows = [json.loads(line) for line in (NEMO_ROWS / "example.jsonl").read_text().splitlines() if line.strip()] \
        if (NEMO_ROWS / "example.jsonl").exists() else []
    if not rows:
        pytest.skip("the NeMo Gym fixtures are not in ../shared/third_party")
    without = {k: v for k, v in rows[1].items() if k != "ground_truth"}
    nulled = {**rows[2], "ground_truth": None}
    content = "\n".join(json.dumps(r) for r in [rows[0], without, nulled]).encode()
    url = f"/api/projects/{project_team['project'].slug}/datasets/import"
    done = client.post(url, {"file": _upload(content), "name": "nemo"}, **bearer("editor"))
    assert done.status_code == 201, done.content
    report = done.json()["report"]
    assert report["accepted"] == 3 and report["no_ground_truth_count"] == 2 and report["no_ground_truth"] == [2, 3]
    assert len(report["warnings"]) == 1 and "no ground_truth (line(s) 2, 3)" in report["warnings"][0]
    assert "workplace verifier" in report["warnings"][0]
    # The page's report shows the same warning before the version is created.
    client.force_login(project_team["editor"])
    page = client.post(f"/p/{project_team['project'].slug}/datasets/import/",
                       {"file": _upload(content), "name": "nemo 2", "format": "auto", "split": "train"}, follow=True)
    assert page.status_code == 200 and "have no ground_truth" in page.content.decode()


# ---------------------------------------------------------------------------------------
# Malformed multipart bodies: access first, then a 400 that says so
# ---------------------------------------------------------------------------------------

MALFORMED = {
    "no boundary": "multipart/form-data",
    "empty boundary": "multipart/form-data; boundary=",
    "non-ASCII boundary": "multipart/form-data; boundary=grenzé",
}
BODY = b'--x\r\nContent-Disposition: form-data; name="name"\r\n\r\nx\r\n--x--\r\n'
ENDPOINTS = {
    "api datasets": ("/api/projects/{slug}/datasets/import", "file"),
    "api runs": ("/api/projects/{slug}/runs/import", "file"),
    "page datasets": ("/p/{slug}/datasets/import/", "file"),
    "page runs": ("/p/{slug}/runs/import/", "archive"),
}


@pytest.mark.parametrize("body", sorted(MALFORMED))
@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
@pytest.mark.parametrize(("who", "project", "status"), [
    ("editor", "own", 400), ("viewer", "own", 403), ("outsider", "own", 404), ("editor", "unknown", 404)])
def test_a_malformed_multipart_body_is_a_400_after_the_access_check(client, project_team, bearer, settings, body,
                                                                    endpoint, who, project, status):
    path, field = ENDPOINTS[endpoint]
    slug = project_team["project"].slug if project == "own" else "no-such-project"
    headers = {}
    if endpoint.startswith("api"):
        headers = bearer(who)
    else:
        client.force_login(project_team[who])
    response = client.generic("POST", path.format(slug=slug), BODY, content_type=MALFORMED[body], **headers)
    assert response.status_code == status, response.content[:500]
    if status == 400:
        text = response.content.decode()
        assert "could not be read" in text and "multipart" in text
        if endpoint.startswith("api"):
            assert "multipart" in response.json()["errors"][field]
    _nothing_written(settings)


@pytest.mark.parametrize("endpoint", ["page datasets", "page runs"])
@pytest.mark.parametrize(("who", "status"), [("editor", 400), ("outsider", 404)])
def test_with_csrf_enforced_the_pages_check_access_before_reading_a_broken_body(project_team, settings, endpoint,
                                                                                who, status):
    """As in production: the CSRF check reads the body, so it must come after the access check."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(project_team[who])
    path = ENDPOINTS[endpoint][0].format(slug=project_team["project"].slug)
    response = client.generic("POST", path, BODY, content_type=MALFORMED["empty boundary"])
    assert response.status_code == status, response.content[:500]
    _nothing_written(settings)


# ---------------------------------------------------------------------------------------
# Run import: numbers, damaged zips, all or nothing
# ---------------------------------------------------------------------------------------


def _run_folder(tmp_path: Path, name: str = "run") -> Path:
    run_dir = tmp_path / name
    with EventWriter(run_dir) as events:
        events.log("grpo job on cpu")
        events.metric(1, {"loss": 1.0, "reward": 0.5})
        events.trajectory(task_id="t1", step=1, split="train", reward=1.0, passed=True,
                          turns=[{"role": "user", "content": "hi"}], components={"format": 1.0}, flags=["ok"])
        events.checkpoint(step=1, path=str(run_dir / "checkpoints" / "step_1"), kind="adapter",
                          content_hash="a" * 64, metrics={"reward": 0.5})
        events.done(step=1)
    return run_dir


HOSTILE_EVENTS = {  # (the event, the path the report names); "@" is replaced by the bad literal
    "metric": ({"type": "metric", "step": 2, "split": "train", "metrics": {"loss": "@"}}, "metrics.loss"),
    "components": ({"type": "trajectory", "step": 2, "task_id": "t2", "turns": [], "reward": 1.0, "passed": True,
                    "components": {"format": "@"}}, "components.format"),
    "flags": ({"type": "trajectory", "step": 2, "task_id": "t3", "turns": [], "reward": 1.0, "passed": True,
               "flags": ["x", "@"]}, "flags[1]"),
    "reward": ({"type": "trajectory", "step": 2, "task_id": "t4", "turns": [], "reward": "@", "passed": True},
               "reward"),
    "turns": ({"type": "trajectory", "step": 2, "task_id": "t5", "passed": True, "reward": 0.0,
               "turns": [{"role": "tool", "content": "x", "score": "@"}]}, "turns[0].score"),
    "checkpoint metrics": ({"type": "checkpoint", "step": 2, "path": "/nowhere/step_2", "kind": "adapter",
                            "content_hash": "b" * 64, "metrics": {"reward": "@"}}, "metrics.reward"),
}


@pytest.mark.parametrize("literal", BAD_NUMBERS)
@pytest.mark.parametrize("kind", sorted(HOSTILE_EVENTS))
def test_a_run_event_with_a_non_finite_number_is_skipped_naming_the_field(project_team, tmp_path, literal, kind):
    run_dir = _run_folder(tmp_path)
    event, path = HOSTILE_EVENTS[kind]
    line = _line({"seq": 99, "time": 2.0, **event}, placeholder="@", literal=literal)
    with (run_dir / "events.jsonl").open("a") as handle:
        handle.write(line + "\n")
    report = run_import(project=project_team["project"], run_dir=run_dir, actor=None)
    assert report.skipped_total == 1 and report.skipped[0].line == 6
    assert report.skipped[0].reason.startswith(f"bad values: {path} is ")
    run = Run.objects.get(pk=report.run_id)
    assert MetricPoint.objects.filter(run=run).count() == 2 and Trajectory.objects.filter(run=run).count() == 1
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [1]


def test_a_config_with_a_non_finite_number_is_reported_and_not_stored(project_team, tmp_path):
    run_dir = _run_folder(tmp_path)
    (run_dir / "run.json").write_text('{"kind": "grpo", "learning_rate": 1e400}')
    report = run_import(project=project_team["project"], run_dir=run_dir, actor=None)
    run = Run.objects.get(pk=report.run_id)
    assert run.config == {} and "learning_rate is 1e400, not a finite number" in report.config_problems[0]


def _zip(run_dir: Path, method: int = zipfile.ZIP_DEFLATED) -> bytearray:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as zf:
        zf.write(run_dir / "events.jsonl", "run/events.jsonl")
    return bytearray(buffer.getvalue())


def _forge(data: bytearray, offset: int, value: int) -> bytearray:
    """Overwrite a 4-byte field of the first entry's central directory record (CRC 16, sizes 20 and 24)."""
    struct.pack_into("<I", data, data.index(b"PK\x01\x02") + offset, value)
    return data


def _flip(data: bytearray) -> bytearray:
    start = data.index(b"PK\x03\x04") + 30 + len("run/events.jsonl")
    data[start + 40] ^= 0xFF
    return data


DAMAGED = {
    "wrong CRC": lambda z: _forge(z, 16, 0x12345678),
    "size header too large": lambda z: _forge(z, 24, struct.unpack_from("<I", z, z.index(b"PK\x01\x02") + 24)[0] + 99),
    "size header too small": lambda z: _forge(z, 24, 10),
    "compressed size too small": lambda z: _forge(z, 20, 10),
    "a flipped byte": _flip,
    "a flipped byte, stored": lambda z: _flip(z),
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_a_damaged_zip_is_a_422_that_says_so_and_leaves_nothing(client, project_team, bearer, settings, tmp_path,
                                                                case):
    run_dir = _run_folder(tmp_path)
    method = zipfile.ZIP_STORED if "stored" in case else zipfile.ZIP_DEFLATED
    data = bytes(DAMAGED[case](_zip(run_dir, method)))
    with pytest.raises(RunImportError, match="damaged"):
        run_import_zip(project=project_team["project"], archive=io.BytesIO(data), actor=None)
    _nothing_written(settings)
    slug = project_team["project"].slug
    api = client.post(f"/api/projects/{slug}/runs/import", {"file": _upload(data, "run.zip", "application/zip")},
                      **bearer("editor"))
    assert api.status_code == 422 and "The zip is damaged" in api.json()["errors"]["file"]
    client.force_login(project_team["editor"])
    page = client.post(f"/p/{slug}/runs/import/", {"archive": _upload(data, "run.zip", "application/zip")})
    assert page.status_code == 422 and "The zip is damaged" in page.content.decode()
    _nothing_written(settings)


def _long_run(tmp_path: Path, steps: int = 2500) -> Path:
    run_dir = tmp_path / "long"
    with EventWriter(run_dir) as events:
        events.log("sft job on cpu")
        for step in range(steps):
            events.metric(step, {"loss": 1.0 / (step + 1), "lr": 0.001})
        events.done(step=steps)
    return run_dir


class WorkerTimeout(SystemExit):
    """What gunicorn's worker timeout raises inside a request (its SIGABRT handler calls sys.exit)."""


def test_an_import_killed_half_way_leaves_nothing_and_a_second_import_does_it_all(project_team, tmp_path):
    run_dir = _long_run(tmp_path)
    calls = []

    def killed(done: int, total: int) -> None:  # after the first batch was stored
        calls.append(done)
        raise WorkerTimeout(1)

    with pytest.raises(WorkerTimeout):
        run_import(project=project_team["project"], run_dir=run_dir, actor=None, progress=killed)
    assert calls and Run.objects.count() == 0 and MetricPoint.objects.count() == 0
    assert StepRollup.objects.count() == 0
    report = run_import(project=project_team["project"], run_dir=run_dir, actor=None)
    run = Run.objects.get(pk=report.run_id)
    assert report.created and run.status == "succeeded" and run.import_info["complete"]
    assert MetricPoint.objects.filter(run=run).count() == 5000 == report.stored["metric"]


def _database_url() -> str:
    """The URL of the test database, for a second process to use the same one."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.mark.django_db(transaction=True)
def test_an_import_process_killed_mid_way_leaves_nothing_and_a_second_import_does_it_all(project_team, tmp_path):
    """The real thing: `manage.py import_run` in its own process, SIGKILLed once it has stored batches."""
    run_dir = tmp_path / "big"
    run_dir.mkdir()
    steps = 60_000
    with (run_dir / "events.jsonl").open("w") as handle:
        handle.write(json.dumps({"type": "log", "seq": 1, "time": 1.0, "message": "sft job on cpu"}) + "\n")
        for step in range(steps):
            handle.write(json.dumps({"type": "metric", "seq": step + 2, "time": 2.0 + step, "step": step,
                                     "split": "train", "metrics": {"loss": 1.0, "lr": 0.1}}) + "\n")
        handle.write(json.dumps({"type": "done", "seq": steps + 2, "time": 3.0 + steps}) + "\n")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.config.settings.test", "DATABASE_URL": _database_url(),
           "CRUCIBLE_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "manage.py", "import_run", str(run_dir), "--project",
                                project_team["project"].slug], cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    line = process.stderr.readline()  # the first progress line: batches are stored by now
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert "read" in line and "% of events.jsonl" in line, line + process.stderr.read()
    assert Run.objects.count() == 0 and MetricPoint.objects.count() == 0
    report = run_import(project=project_team["project"], run_dir=run_dir, actor=None)
    assert report.created and MetricPoint.objects.filter(run_id=report.run_id).count() == 2 * steps
    assert Run.objects.get().status == "succeeded"


def test_an_import_that_fails_after_its_run_was_created_leaves_no_failed_run(project_team, tmp_path):
    run_dir = _long_run(tmp_path, steps=2100)

    def disk_full(done: int, total: int) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        run_import(project=project_team["project"], run_dir=run_dir, actor=None, progress=disk_full)
    assert not Run.objects.filter(status="failed").exists() and Run.objects.count() == 0


# ---------------------------------------------------------------------------------------
# Races: the same dataset name from 8 requests at once
# ---------------------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_eight_imports_of_one_new_dataset_name_create_it_once(project_team):
    _needs_postgres()
    token = api_token_issue(user=project_team["editor"], name="race").raw
    url = f"/api/projects/{project_team['project'].slug}/datasets/import"
    content = "\n".join(_line(_row(i)) for i in range(50)).encode()

    def post(i: int):
        return Client().post(url, {"file": _upload(content), "name": "raced"}, HTTP_AUTHORIZATION=f"Bearer {token}")

    responses = _race(8, post)
    statuses = [r.status_code for r in responses]
    # One status for one conflict: 409 whether the name was taken before this request checked it
    # ("exists already") or while it was writing (the race lost).
    assert sorted(statuses) == [201] + [409] * 7, [r.content[:300] for r in responses]
    for response in responses:
        if response.status_code == 409:
            assert re.search("at the same moment|created meanwhile|exists already", response.json()["errors"]["name"])
    assert list(TaskDataset.objects.filter(name="raced").values_list("version", flat=True)) == [1]
    assert Task.objects.count() == 50


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_eight_generations_of_one_new_dataset_name_create_it_once(project_team):
    _needs_postgres()
    token = api_token_issue(user=project_team["editor"], name="race").raw
    url = f"/api/projects/{project_team['project'].slug}/datasets/generate"

    def post(i: int):
        return Client().post(url, json.dumps({"n": 5, "seed": i, "name": "generated"}),
                             content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")

    responses = _race(8, post)
    statuses = [r.status_code for r in responses]
    assert statuses.count(201) == 1 and set(statuses) <= {201, 409, 422}, [r.content[:300] for r in responses]
    assert list(TaskDataset.objects.filter(name="generated").values_list("version", flat=True)) == [1]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_eight_new_versions_of_one_dataset_at_once_never_500(project_team):
    _needs_postgres()
    project = project_team["project"]
    target = import_target(project=project, name="base")
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as handle:
        handle.write(_line(_row(0)))
    parent, _ = import_create(handle.name, project=project, target=target, actor=project_team["editor"])
    token = api_token_issue(user=project_team["editor"], name="race").raw
    url = f"/api/projects/{project.slug}/datasets/import"

    def post(i: int):
        content = _line(_row(i + 1)).encode()
        return Client().post(url, {"file": _upload(content), "dataset": str(parent.pk)},
                             HTTP_AUTHORIZATION=f"Bearer {token}")

    responses = _race(8, post)
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {201, 409} and 201 in statuses, [r.content[:300] for r in responses]
    versions = list(TaskDataset.objects.filter(name="base").order_by("version").values_list("version", flat=True))
    assert versions == list(range(1, len(versions) + 1)) and len(versions) == 1 + statuses.count(201)


def test_a_dataset_name_taken_meanwhile_is_a_conflict_not_a_new_version(project_team, tmp_path):
    project = project_team["project"]
    file = tmp_path / "t.jsonl"
    file.write_text(_line(_row(1)))
    target = import_target(project=project, name="mine")  # checked before the other request wrote it
    import_create(file, project=project, target=import_target(project=project, name="mine"),
                  actor=project_team["owner"])
    with pytest.raises(ImportFileError, match="created meanwhile") as caught:
        import_create(file, project=project, target=target, actor=project_team["editor"])
    assert caught.value.field == "name"
    assert list(TaskDataset.objects.filter(name="mine").values_list("version", flat=True)) == [1]
