"""Importing a run trained elsewhere: `python -m training run` folders, zips, the command, the page, the API.

The folder under test is written by our own training process (a 2-step GRPO run of the tiny
random Llama on the CPU, once per session, about 15 s); the malformed, restarted and hostile
variants are copies of it or folders written with the training package's own EventWriter.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.training.conftest import tiny_model_dir, tokenizer  # noqa: F401  (fixtures)
from training.config import config_to_dict, validate_run_config
from training.events import EventWriter, read_events
from webapp.runs.models import Checkpoint, MetricPoint, ModelSpec, Run, RunStatus
from webapp.runs.services import run_import as service
from webapp.runs.services.run_import import RunImportError, run_import, run_import_zip
from webapp.trajectories.models import StepRollup, Trajectory

REPO = Path(__file__).resolve().parents[3]
HOSTILE = '<script>alert("x")</script>'
ESCAPED = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"


# ---------------------------------------------------------------------------------------
# Fixtures: a real run folder, copies of it, zips
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def real_run_dir(tiny_model_dir, tmp_path_factory):  # noqa: F811
    """A run folder written by `python -m training run`: GRPO, 2 steps, checkpoints, validation at 0 and 2."""
    from environments.json_tool_call_tasks import workplace_json_tasks

    root = tmp_path_factory.mktemp("real-run")
    tasks = workplace_json_tasks(400, seed=0)
    chosen = [t for t in tasks if t.split == "train"][:4] + [t for t in tasks if t.split == "validation"][:2]
    (root / "tasks.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in chosen))
    config = {"kind": "grpo", "model": str(tiny_model_dir), "dataset": str(root / "tasks.jsonl"), "device": "cpu",
              "bf16": False, "max_completion_length": 8, "num_prompts_per_step": 1, "num_generations_per_prompt": 2,
              "max_steps": 2, "eval_interval": 2, "checkpoint_interval": 1}
    (root / "grpo.json").write_text(json.dumps(config))
    run_dir = root / "grpo-run"
    result = subprocess.run(
        [sys.executable, "-m", "training", "run", "--config", str(root / "grpo.json"), "--out", str(run_dir)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


@pytest.fixture
def run_copy(real_run_dir, tmp_path):
    """A private copy of the real folder (its checkpoint events still name the original paths)."""
    return Path(shutil.copytree(real_run_dir, tmp_path / "grpo-run"))


def _events(run_dir: Path) -> list[dict]:
    return read_events(run_dir / "events.jsonl")[0]


def _zip_folder(run_dir: Path, *, prefix: str = "grpo-run/", extra: dict[str, bytes] | None = None,
                checkpoints: bool = True) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(run_dir.rglob("*")):
            if path.is_file() and (checkpoints or "checkpoints" not in path.relative_to(run_dir).parts):
                zf.write(path, prefix + path.relative_to(run_dir).as_posix())
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return buffer.getvalue()


def _snapshot(run: Run) -> tuple:
    run.refresh_from_db()
    rows = (MetricPoint.objects.filter(run=run).count(), Trajectory.objects.filter(run=run).count(),
            Checkpoint.objects.filter(run=run).count(),
            list(StepRollup.objects.filter(run=run).order_by("step", "split").values_list("step", "split", "count")))
    return (run.status, run.kind, run.name, run.config, run.import_info, run.started_at, run.finished_at, rows,
            Run.objects.count())


# ---------------------------------------------------------------------------------------
# The service on a real folder
# ---------------------------------------------------------------------------------------


def test_a_real_run_folder_imports_every_event(project_team, run_copy, tiny_model_dir):  # noqa: F811
    project, owner = project_team["project"], project_team["owner"]
    model = ModelSpec.objects.create(project=project, name="tiny", local_path=str(tiny_model_dir))
    events = _events(run_copy)
    report = run_import(project=project, run_dir=run_copy, actor=owner)

    run = Run.objects.get(pk=report.run_id)
    assert report.created and run.is_imported and run.import_key and run.import_info["complete"]
    assert (run.kind, run.status, run.name, run.created_by) == ("grpo", RunStatus.SUCCEEDED, "grpo-run", owner)
    assert run.model == model, "the config's model is linked to the project's model of that path"
    assert report.events == dict(Counter(e["type"] for e in events)) and report.lines == len(events)
    assert report.skipped_total == 0 and not report.skipped
    metric_values = {(e["step"], e["split"], name) for e in events if e["type"] == "metric"
                     for name, value in e["metrics"].items() if value is not None}
    trajectories = [e for e in events if e["type"] == "trajectory"]
    checkpoints = [e for e in events if e["type"] == "checkpoint"]
    assert MetricPoint.objects.filter(run=run).count() == len(metric_values) == report.stored["metric"]
    assert Trajectory.objects.filter(run=run).count() == len(trajectories) == report.stored["trajectory"] == 8
    assert Checkpoint.objects.filter(run=run).count() == len(checkpoints) == report.stored["checkpoint"] == 2
    assert report.already_present == {"metric": 0, "trajectory": 0, "checkpoint": 0}
    # Rollups came through the workers' ingest path.
    assert sum(StepRollup.objects.filter(run=run).values_list("count", flat=True)) == len(trajectories)
    # Checkpoints: metrics recorded, original path kept; keep_top_k deleted step 1's folder.
    for event in checkpoints:
        stored = Checkpoint.objects.get(run=run, step=event["step"])
        assert stored.metrics == event["metrics"] and stored.content_hash == event["content_hash"]
        assert stored.storage_uri == event["path"]
    seen = {c.step: c.exists for c in report.checkpoints}
    assert seen == {1: False, 2: True}
    assert run.import_info["missing_checkpoints"] == [1]
    assert any("not found on this machine" in w for w in report.warnings)
    # No config at the folder's top: the checkpoint's run_config.json, valid under the current schema.
    assert report.config_source == "checkpoints/step_2/run_config.json" and not report.config_problems
    assert run.config["max_steps"] == 2 and run.config["num_generations_per_prompt"] == 2
    assert run.resolved_config == config_to_dict(validate_run_config(run.config)), "as launched, defaults filled in"
    assert run.started_at.timestamp() == pytest.approx(events[0]["time"])
    assert run.finished_at.timestamp() == pytest.approx(events[-1]["time"])
    text = "\n".join(report.lines_text())
    assert "new run" in text and "trajectories 8" in text and "Skipped lines: none" in text


def test_importing_twice_changes_nothing_and_says_so(project_team, run_copy):
    project, owner = project_team["project"], project_team["owner"]
    first = run_import(project=project, run_dir=run_copy, actor=owner)
    run = Run.objects.get(pk=first.run_id)
    before = _snapshot(run)
    second = run_import(project=project, run_dir=run_copy, actor=project_team["editor"], name="another name")
    assert _snapshot(run) == before
    assert second.run_id == first.run_id and not second.created and second.nothing_new
    assert second.stored == {"metric": 0, "trajectory": 0, "checkpoint": 0}
    assert second.already_present == first.stored
    assert "already imported: nothing new" in second.lines_text()[0]
    # The same folder as a zip is the same run too.
    third = run_import_zip(project=project, archive=io.BytesIO(_zip_folder(run_copy)), actor=owner,
                           archive_name="grpo-run.zip")
    assert third.run_id == first.run_id and third.nothing_new and _snapshot(run) == before
    # A run imported before launched configs were kept gets its own on the next import, and only that.
    launched = Run.objects.get(pk=run.pk).resolved_config
    Run.objects.filter(pk=run.pk).update(resolved_config=None)
    fourth = run_import(project=project, run_dir=run_copy, actor=owner)
    assert fourth.nothing_new and Run.objects.get(pk=run.pk).resolved_config == launched is not None
    # Left without its checkpoint folders (and so without a config), it is still the same run.
    fourth = run_import_zip(project=project, archive=io.BytesIO(_zip_folder(run_copy, checkpoints=False)),
                            actor=owner)
    assert fourth.run_id == first.run_id and fourth.nothing_new and fourth.config_source == ""
    assert _snapshot(run) == before
    # Another project gets its own run.
    other = run_import(project=project_team["other"], run_dir=run_copy, actor=project_team["outsider"])
    assert other.created and other.run_id != first.run_id


def test_a_grown_folder_adds_only_what_is_new(project_team, run_copy):
    project, owner = project_team["project"], project_team["owner"]
    lines = (run_copy / "events.jsonl").read_bytes().splitlines(keepends=True)
    (run_copy / "events.jsonl").write_bytes(b"".join(lines[:6]))  # stopped early: no done event
    first = run_import(project=project, run_dir=run_copy, actor=owner)
    run = Run.objects.get(pk=first.run_id)
    assert run.status == RunStatus.FAILED and "without a done or error event" in run.import_info["note"]
    (run_copy / "events.jsonl").write_bytes(b"".join(lines))
    second = run_import(project=project, run_dir=run_copy, actor=owner)
    run.refresh_from_db()
    assert second.run_id == first.run_id and not second.created and not second.nothing_new
    assert run.status == RunStatus.SUCCEEDED and run.import_info["note"] == ""
    assert Trajectory.objects.filter(run=run).count() == 8
    assert second.already_present["trajectory"] == first.stored["trajectory"]
    assert first.stored["trajectory"] + second.stored["trajectory"] == 8


def test_malformed_lines_are_reported_by_number_and_the_rest_is_imported(project_team, run_copy):
    path = run_copy / "events.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    good = len(lines)
    bad = [
        b'{"type": "metric", "seq": 900, "time": 1.0, "step": 1, "split": "train", "metrics": {"x": 1\n',  # line 3
        b'{"type": "telemetry", "seq": 901, "time": 1.0}\n',  # line 4
        b'{"type": "metric", "seq": 902, "time": 1.0, "step": 1, "split": "train", "metrics": {"x": "high"}}\n',
        b"[1, 2]\n",
        b"\n",  # blank lines are not events and not errors
        b'{"type": "trajectory", "seq": 903, "time": 1.0, "task_id": "t", "turns": [], "reward": 1, '
        b'"passed": true, "tokens_in": -4}\n',
        b"\xc3\x28 not utf-8\n",
        b'{"type": "done", "seq": 904, "time": 1e300}\n',  # line 10
    ]
    torn = b'{"type": "log", "seq": 999, "time": 1.0, "mess'
    path.write_bytes(b"".join(lines[:2] + bad + lines[2:]) + torn)
    report = run_import(project=project_team["project"], run_dir=run_copy, actor=project_team["owner"])

    by_line = {s.line: s.reason for s in report.skipped}
    assert set(by_line) == {3, 4, 5, 6, 8, 9, 10, good + len(bad) + 1}
    assert by_line[3].startswith("malformed JSON")
    assert by_line[4].startswith("unknown type") and "'telemetry'" in by_line[4]
    assert by_line[5].startswith("bad values") and "metrics.x" in by_line[5]
    assert "must be a JSON object" in by_line[6]
    assert "'tokens_in'" in by_line[8]
    assert "UTF-8" in by_line[9]
    assert "'time' must be Unix seconds" in by_line[10]
    assert by_line[good + len(bad) + 1].startswith("incomplete last line")
    assert report.skipped_total == 8 and report.skipped_by_reason["malformed JSON"] == 3
    run = Run.objects.get(pk=report.run_id)
    events = _events_of(lines)
    assert report.events == dict(Counter(e["type"] for e in events))
    assert Trajectory.objects.filter(run=run).count() == 8 and run.status == RunStatus.SUCCEEDED
    assert "line 4: unknown type" in "\n".join(report.lines_text())


def _events_of(lines: list[bytes]) -> list[dict]:
    return [json.loads(line) for line in lines if line.strip()]


def test_a_config_the_schema_refuses_is_stored_and_reported(project_team, run_copy):
    (run_copy / "run.json").write_text(json.dumps({"kind": "grpo", "num_generation": 4, "max_steps": 2}))
    report = run_import(project=project_team["project"], run_dir=run_copy, actor=project_team["owner"])
    run = Run.objects.get(pk=report.run_id)
    assert report.config_source == "run.json"
    assert report.config_problems and "num_generation" in report.config_problems[0]
    assert run.config == {"kind": "grpo", "num_generation": 4, "max_steps": 2}
    assert run.resolved_config is None, "a config that does not validate has no launched form to show"
    assert run.import_info["config_problems"] == report.config_problems
    assert Trajectory.objects.filter(run=run).count() == 8


def test_a_restarted_run_keeps_what_the_last_process_wrote(project_team, tmp_path):
    run_dir = tmp_path / "resumed"
    with EventWriter(run_dir, attempt=1) as first:
        first.log("sft job on cpu (bf16 autocast off, LoRA)")
        for step in (1, 2, 3):
            first.metric(step, {"loss": 10.0 + step})
        first.checkpoint(step=2, path=str(run_dir / "checkpoints/step_2"), kind="adapter", content_hash="a" * 64)
    with EventWriter(run_dir, attempt=2) as second:  # crashed at step 3; the next attempt resumes from step 2
        second.log("sft job on cpu (bf16 autocast off, LoRA)")
        second.log("resuming from checkpoint step_2 at step 2")
        second.metric(3, {"loss": 3.0})
        second.metric(4, {"loss": 4.0})
        second.done(step=4)
    report = run_import(project=project_team["project"], run_dir=run_dir, actor=None)
    run = Run.objects.get(pk=report.run_id)
    assert report.restarts == 1 and report.superseded["metric"] == 1
    assert dict(MetricPoint.objects.filter(run=run).values_list("step", "value")) == {1: 11.0, 2: 12.0, 3: 3.0, 4: 4.0}
    assert (run.kind, run.status) == ("sft", RunStatus.SUCCEEDED)
    assert report.checkpoints[0].exists is False and report.config_source == ""


@pytest.mark.parametrize("case", ["missing", "file", "no events", "empty", "nothing valid"])
def test_a_folder_that_is_not_a_run_is_refused_with_what_to_do(project_team, tmp_path, case):
    target = tmp_path / "target"
    if case == "file":
        target.write_text("hello")
    elif case == "no events":
        (target / "sub").mkdir(parents=True)
        (target / "sub" / "events.jsonl").write_text("{}\n")
    elif case == "empty":
        target.mkdir()
        (target / "events.jsonl").write_text("")
    elif case == "nothing valid":
        target.mkdir()
        (target / "events.jsonl").write_text("not json\n{\"type\": \"nope\"}\n")
    with pytest.raises(RunImportError) as caught:
        run_import(project=project_team["project"], run_dir=target, actor=None)
    message = str(caught.value)
    expected = {"missing": "does not exist", "file": "is not a folder", "no events": "Did you mean",
                "empty": "is empty", "nothing valid": "line 1: malformed JSON"}[case]
    assert expected in message
    assert not Run.objects.exists()


# ---------------------------------------------------------------------------------------
# Zips
# ---------------------------------------------------------------------------------------


def _zip(entries: dict[str, bytes], *, link: str | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
        if link:
            info = zipfile.ZipInfo(link)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, "/etc/passwd")
    return buffer.getvalue()


EVENT = b'{"type": "log", "seq": 1, "time": 1.0, "message": "eval job on cpu"}\n'


@pytest.mark.parametrize(("entries", "link", "expected"), [
    ({"run/events.jsonl": EVENT, "../../evil.txt": b"x"}, None, "climbs out of the folder"),
    ({"run/events.jsonl": EVENT, "/etc/cron.d/evil": b"x"}, None, "absolute path"),
    ({"run/events.jsonl": EVENT}, "run/run.json", "symbolic link"),
    ({"run/notes.txt": b"x"}, None, "holds no events.jsonl"),
    ({"a/events.jsonl": EVENT, "b/events.jsonl": EVENT}, None, "several run folders"),
])
def test_unsafe_or_wrong_zips_are_refused(project_team, settings, entries, link, expected):
    with pytest.raises(RunImportError) as caught:
        run_import_zip(project=project_team["project"], archive=io.BytesIO(_zip(entries, link=link)), actor=None)
    assert expected in str(caught.value)
    assert not Run.objects.exists()
    assert not (Path(settings.DATA_DIR) / "evil.txt").exists()
    assert list((Path(settings.DATA_DIR) / "tmp" / "run-imports").iterdir()) == []


def test_not_a_zip_a_zip_bomb_and_a_too_large_run_are_refused(project_team, monkeypatch):
    project = project_team["project"]
    with pytest.raises(RunImportError, match="not a zip file"):
        run_import_zip(project=project, archive=io.BytesIO(b"PK? not really"), actor=None)
    bomb = _zip({"run/events.jsonl": EVENT + b" " * (8 * 1024 * 1024)})
    with pytest.raises(RunImportError, match="zip bomb"):
        run_import_zip(project=project, archive=io.BytesIO(bomb), actor=None)
    monkeypatch.setattr(service, "MAX_EXTRACTED_BYTES", 10)
    with pytest.raises(RunImportError, match="too large to import from an upload"):
        run_import_zip(project=project, archive=io.BytesIO(_zip({"run/events.jsonl": EVENT})), actor=None)
    assert not Run.objects.exists()


def test_a_zip_extracts_only_what_the_import_reads_and_keeps_paths_out_of_the_data_dir(project_team, settings,
                                                                                        tmp_path):
    run_dir = tmp_path / "zipped"
    inside = Path(settings.DATA_DIR) / "runs" / "9-abc" / "checkpoints" / "step_1"
    inside.mkdir(parents=True, exist_ok=True)
    with EventWriter(run_dir) as events:
        events.log("eval job on cpu")
        events.checkpoint(step=1, path=str(inside), kind="adapter", content_hash="b" * 64, metrics={"m": 1.0})
        events.done()
    data = _zip_folder(run_dir, prefix="", extra={"checkpoints/step_1/adapter_model.safetensors": b"\0" * 1000})
    report = run_import_zip(project=project_team["project"], archive=io.BytesIO(data), actor=None,
                            archive_name="my-run.zip")
    run = Run.objects.get(pk=report.run_id)
    assert run.name == "my-run" and report.source == "zip my-run.zip"
    checkpoint = Checkpoint.objects.get(run=run)
    # An upload may not point at a folder inside the data directory (other projects' checkpoints live there).
    assert checkpoint.storage_uri == f"imported://{inside}" and report.checkpoints[0].exists is False


# ---------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------


def test_the_import_run_command_prints_the_report_and_fails_with_the_message(project_team, run_copy, tmp_path):
    slug = project_team["project"].slug
    out = io.StringIO()
    call_command("import_run", str(run_copy), project=slug, user="owner", name="cluster run", stdout=out)
    text = out.getvalue()
    run = Run.objects.get(name="cluster run")
    assert "new run" in text and "Stored: metric points" in text and f"/p/{slug}/runs/{run.pk}/" in text
    assert run.created_by == project_team["owner"]
    again = io.StringIO()
    call_command("import_run", str(run_copy), project=slug, stdout=again)
    assert "already imported: nothing new" in again.getvalue()
    archive = tmp_path / "run.zip"
    archive.write_bytes(_zip_folder(run_copy))
    zipped = io.StringIO()
    call_command("import_run", str(archive), project=slug, stdout=zipped)
    assert "nothing new" in zipped.getvalue() and Run.objects.count() == 1
    for args, expected in (([str(tmp_path / "nope")], "does not exist"),
                           ([str(run_copy), "--user", "ghost"], "No user named 'ghost'")):
        with pytest.raises(CommandError, match=expected) as caught:
            call_command("import_run", *args, project=slug)
        assert caught.value.returncode == 1
    with pytest.raises(CommandError, match="No project"):
        call_command("import_run", str(run_copy), project="nope")


# ---------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------


def _upload(data: bytes, name: str = "run.zip"):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, data, content_type="application/zip")


@pytest.mark.parametrize(("who", "status"), [("viewer", 403), ("reviewer", 403), ("outsider", 404), ("editor", 200)])
def test_the_import_page_is_for_editors(client, project_team, run_copy, who, status):
    client.force_login(project_team[who])
    url = f"/p/{project_team['project'].slug}/runs/import/"
    assert client.get(url).status_code == status
    response = client.post(url, {"archive": _upload(_zip_folder(run_copy))}, follow=True)  # the report after a redirect
    assert response.status_code == status
    assert Run.objects.count() == (1 if status == 200 else 0)


def test_the_page_imports_a_zip_shows_the_report_and_marks_the_run(client, project_team, run_copy):
    slug = project_team["project"].slug
    client.force_login(project_team["editor"])
    page = client.get(f"/p/{slug}/runs/import/").content.decode()
    assert 'enctype="multipart/form-data"' in page and "run_import.js" in page
    response = client.post(f"/p/{slug}/runs/import/", {"archive": _upload(_zip_folder(run_copy)), "name": ""})
    assert response.status_code == 302  # a reload of the report sends nothing again
    body = client.get(response["Location"]).content.decode()
    run = Run.objects.get()
    assert run.name == "grpo-run" and run.is_imported
    assert "Imported</span> as a new run" in body and f'href="/p/{slug}/runs/{run.pk}/"' in body
    assert "None: every line was a valid event." in body
    assert 'id="import-report"' not in client.get(f"/p/{slug}/runs/import/").content.decode()  # shown once
    again = client.post(f"/p/{slug}/runs/import/", {"archive": _upload(_zip_folder(run_copy))},
                        follow=True).content.decode()
    assert "nothing new" in again and Run.objects.count() == 1
    listing = client.get(f"/p/{slug}/runs/").content.decode()
    assert f'href="/p/{slug}/runs/import/"' in listing and "· imported" in listing
    client.force_login(project_team["viewer"])
    listing = client.get(f"/p/{slug}/runs/").content.decode()
    assert f'href="/p/{slug}/runs/import/"' not in listing and "· imported" in listing
    detail = client.get(f"/p/{slug}/runs/{run.pk}/").content.decode()
    assert 'class="pill imported"' in detail and 'id="imported-run"' in detail


def test_the_page_says_what_is_wrong_with_an_upload(client, project_team, monkeypatch):
    slug = project_team["project"].slug
    client.force_login(project_team["editor"])
    url = f"/p/{slug}/runs/import/"
    missing = client.post(url, {"name": "x"})
    assert missing.status_code == 400 and "Choose a .zip" in missing.content.decode()
    not_zip = client.post(url, {"archive": _upload(b"hello", "notes.txt"), "name": "kept"})
    body = not_zip.content.decode()
    assert not_zip.status_code == 422 and "not a zip file" in body and 'value="kept"' in body
    traversal = client.post(url, {"archive": _upload(_zip({"run/events.jsonl": EVENT, "../x": b"x"}))})
    assert traversal.status_code == 422 and "climbs out of the folder" in traversal.content.decode()
    monkeypatch.setattr(service, "MAX_UPLOAD_BYTES", 1000)
    big = client.post(url, {"archive": _upload(b"PK" + b"\0" * 5000)})
    assert big.status_code == 413 and "upload limit" in big.content.decode()
    handler = service.UploadLimitHandler(limit=10)
    with pytest.raises(service.StopUpload):
        handler.receive_data_chunk(b"x" * 11, 0)
    assert handler.exceeded and not Run.objects.exists()


def test_hostile_text_from_the_folder_is_escaped(client, project_team, tmp_path):
    run_dir = tmp_path / "hostile"
    with EventWriter(run_dir) as events:
        events.log(f"eval job on cpu {HOSTILE}")
        events.trajectory(task_id=f"task {HOSTILE}", step=0, split="validation", reward=0.0, passed=False,
                          turns=[{"role": "user", "content": HOSTILE}, {"role": "assistant", "content": HOSTILE}])
        events.metric(0, {f"rate {HOSTILE}": 0.5}, split="validation")
        events.error(HOSTILE)
    with (run_dir / "events.jsonl").open("a") as f:
        f.write(json.dumps({"type": HOSTILE, "seq": 9, "time": 1.0}) + "\n")
    (run_dir / "run.json").write_text(json.dumps({"kind": "eval", HOSTILE: HOSTILE}))
    slug = project_team["project"].slug
    client.force_login(project_team["editor"])
    body = client.post(f"/p/{slug}/runs/import/", {"archive": _upload(_zip_folder(run_dir, prefix="")),
                                                    "name": f"run {HOSTILE}"}, follow=True).content.decode()
    run = Run.objects.get()
    assert run.status == RunStatus.FAILED and run.import_info["error"] == HOSTILE
    assert HOSTILE not in body and ESCAPED in body  # the skipped line's reason and the run's error
    detail = client.get(f"/p/{slug}/runs/{run.pk}/").content.decode()
    assert HOSTILE not in detail and detail.count(ESCAPED) >= 4  # name, error, log tail, config
    trajectory = Trajectory.objects.get(run=run)
    inspector = client.get(f"/p/{slug}/trajectories/{trajectory.pk}/").content.decode()
    assert HOSTILE not in inspector and ESCAPED in inspector


# ---------------------------------------------------------------------------------------
# The API
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("who", "status"), [("viewer", 403), ("outsider", 404), ("editor", 200), ("owner", 200)])
def test_the_api_imports_for_editors(client, project_team, bearer, run_copy, who, status):
    url = f"/api/projects/{project_team['project'].slug}/runs/import"
    response = client.post(url, {"file": _upload(_zip_folder(run_copy)), "name": "api run"}, **bearer(who))
    assert response.status_code == status, response.content
    if status == 200:
        report = response.json()
        assert report["created"] and report["run_name"] == "api run" and report["stored"]["trajectory"] == 8
        assert report["events"]["trajectory"] == 8 and report["skipped_total"] == 0
        again = client.post(url, {"file": _upload(_zip_folder(run_copy))}, **bearer(who)).json()
        assert again["run_id"] == report["run_id"] and again["nothing_new"] and not again["created"]
    else:
        assert not Run.objects.exists()


def test_the_api_answers_bad_uploads_with_the_field_and_the_reason(client, project_team, bearer, monkeypatch):
    url = f"/api/projects/{project_team['project'].slug}/runs/import"
    missing = client.post(url, {"name": "x"}, **bearer("editor"))
    assert missing.status_code == 400 and "file" in missing.json()["errors"]
    traversal = client.post(url, {"file": _upload(_zip({"run/events.jsonl": EVENT, "../x": b"x"}))},
                            **bearer("editor"))
    assert traversal.status_code == 422 and "climbs out" in traversal.json()["errors"]["file"]
    monkeypatch.setattr(service, "MAX_UPLOAD_BYTES", 1000)
    big = client.post(url, {"file": _upload(b"\0" * 5000)}, **bearer("editor"))
    assert big.status_code == 413 and "upload limit" in big.json()["detail"]
    assert not Run.objects.exists()
    client.force_login(project_team["editor"])
    schema = client.get("/api/openapi.json")
    assert schema.status_code == 200
    assert "multipart/form-data" in json.dumps(schema.json()["paths"]["/api/projects/{slug}/runs/import"])
