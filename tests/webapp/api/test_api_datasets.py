"""The datasets API: versions, tasks with filters and keyset pages, one task, import with the report and a
dry run, streamed export, split moves and generation; roles as on the pages (viewer reads, editor writes,
non-members 404), field errors as {"detail", "errors"}."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from environments.workplace.generator import generate_tasks
from webapp.datasets.models import Task, TaskDataset
from webapp.datasets.services.datasets import dataset_create

NEMO = (Path(__file__).resolve().parents[3] / ".." / "shared" / "third_party" / "nemo_gym_workplace_assistant"
        / "rows" / "example.jsonl")


@pytest.fixture
def world(project_team, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    project = project_team["project"]
    dataset = dataset_create(project=project, name="wp", tasks=generate_tasks(30, 0), actor=project_team["owner"],
                             environment="workplace")
    theirs = dataset_create(project=project_team["other"], name="theirs", tasks=generate_tasks(3, 1),
                            actor=project_team["outsider"])
    return {**project_team, "slug": project.slug, "dataset": dataset, "theirs": theirs}


def _upload(content: bytes, name: str = "tasks.jsonl") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content, content_type="application/x-ndjson")


def _row(i: int, **task) -> str:
    return json.dumps({"task": {"id": f"a{i}", "messages": [{"role": "user", "content": f"ask {i}"}], **task}})


def test_versions_are_listed_for_members_only(client, world, bearer):
    response = client.get(f"/api/projects/{world['slug']}/datasets", **bearer("viewer"))
    assert response.status_code == 200
    item = response.json()["items"][0]
    assert (item["name"], item["version"], item["stats"]["tasks"], item["environment"]) == ("wp", 1, 30, "workplace")
    assert item["lineage"] == "generation" and item["created_by"] == "owner"
    assert client.get(f"/api/projects/{world['slug']}/datasets", **bearer("outsider")).status_code == 404
    assert client.get(f"/api/datasets/{world['theirs'].pk}", **bearer("viewer")).status_code == 404
    assert client.get(f"/api/datasets/{world['theirs'].pk}/tasks", **bearer("viewer")).status_code == 404
    assert client.get(f"/api/projects/{world['slug']}/datasets").status_code == 401
    one = client.get(f"/api/datasets/{world['dataset'].pk}", **bearer("viewer")).json()
    assert one["content_hash"] == world["dataset"].content_hash


def test_tasks_filter_and_page_by_cursor(client, world, bearer):
    dataset = world["dataset"]
    url = f"/api/datasets/{dataset.pk}/tasks"
    seen, after = [], None
    while True:
        body = client.get(url, {"limit": 7, **({"after": after} if after else {})}, **bearer("viewer")).json()
        seen += [item["id"] for item in body["items"]]
        after = body["next"]
        if after is None:
            break
    assert seen == list(dataset.tasks.order_by("id").values_list("id", flat=True))
    held = client.get(url, {"split": "held_out"}, **bearer("viewer")).json()["items"]
    assert held and {t["split"] for t in held} == {"held_out"}
    task = dataset.tasks.order_by("id")[3]
    word = task.messages[-1]["content"].split()[1]
    found = client.get(url, {"text": word.upper()}, **bearer("viewer")).json()["items"]
    assert task.pk in [t["id"] for t in found]
    assert all(word.lower() in json.dumps(t["messages"]).lower() for t in found)
    bad = client.get(url, {"split": "test"}, **bearer("viewer"))
    assert bad.status_code == 422 and set(bad.json()["errors"]) == {"split"}
    assert client.get(url, {"after": "nonsense"}, **bearer("viewer")).status_code == 400


def test_one_task_has_its_provenance(client, world, bearer):
    task = world["dataset"].tasks.order_by("id").first()
    body = client.get(f"/api/datasets/{world['dataset'].pk}/tasks/{task.pk}", **bearer("viewer")).json()
    assert body["provenance"]["template"] == task.metadata["template"] and body["tools"] == task.tools
    other = world["theirs"].tasks.first()
    assert client.get(f"/api/datasets/{world['dataset'].pk}/tasks/{other.pk}", **bearer("viewer")).status_code == 404


def test_import_dry_run_reports_and_writes_nothing_then_imports(client, world, bearer, settings):
    content = "\n".join([_row(1), "{broken", _row(2), _row(1, id="a1-copy"), '{"x": 1}']).encode()
    url = f"/api/projects/{world['slug']}/datasets/import"
    before = TaskDataset.objects.count()

    dry = client.post(url, {"file": _upload(content), "name": "api tasks", "dry_run": "true"}, **bearer("editor"))

    assert dry.status_code == 200, dry.content
    report = dry.json()["report"]
    assert (report["accepted"], report["rejected_count"], report["duplicate_count"]) == (2, 2, 1)
    assert [r["line"] for r in report["rejected"]] == [2, 5] and report["duplicates"][0]["line"] == 4
    assert TaskDataset.objects.count() == before and dry.json()["dataset"] is None

    done = client.post(url, {"file": _upload(content), "name": "api tasks"}, **bearer("editor"))
    assert done.status_code == 201, done.content
    assert done.json()["dataset"]["stats"]["tasks"] == 2 and done.json()["dataset"]["lineage"] == "import"
    assert TaskDataset.objects.count() == before + 1
    assert list((settings.DATA_DIR / "imports").iterdir()) == []  # the upload is not kept

    again = client.post(url, {"file": _upload(content), "dataset": str(world["dataset"].pk)}, **bearer("editor"))
    assert again.status_code == 201 and again.json()["dataset"]["version"] == 2
    assert again.json()["dataset"]["stats"]["tasks"] == 32


def test_import_errors_are_field_errors(client, world, bearer, settings):
    url = f"/api/projects/{world['slug']}/datasets/import"
    not_utf8 = client.post(url, {"file": _upload(b"\xff\xfe\x00x"), "name": "x"}, **bearer("editor"))
    assert not_utf8.status_code == 422 and "not UTF-8" in not_utf8.json()["errors"]["file"]
    csv = client.post(url, {"file": _upload(b"a,b\n1,2\n"), "name": "x"}, **bearer("editor"))
    assert csv.status_code == 422 and "not JSONL" in csv.json()["errors"]["file"]
    taken = client.post(url, {"file": _upload(_row(1).encode()), "name": "wp"}, **bearer("editor"))
    assert taken.status_code == 409 and "exists already" in taken.json()["errors"]["name"]
    assert client.post(url, {"file": _upload(_row(1).encode()), "name": "wp", "dry_run": "true"},
                       **bearer("editor")).status_code == 409  # a check of the file that could not be created
    missing = client.post(url, {"name": "x"}, **bearer("editor"))
    assert missing.status_code == 422 and list(missing.json()["errors"]) == ["file"]
    settings.CRUCIBLE_IMPORT_MAX_BYTES = 100
    big = client.post(url, {"file": _upload(b"x" * 500), "name": "x"}, **bearer("editor"))
    assert big.status_code == 422 and "limit" in big.json()["errors"]["file"]
    assert client.post(url, {"file": _upload(b"{}"), "name": "x"}, **bearer("viewer")).status_code == 403
    assert client.post(url, {"file": _upload(b"{}"), "name": "x"}, **bearer("outsider")).status_code == 404
    assert not TaskDataset.objects.filter(name="x").exists()


def test_a_nemo_gym_file_goes_in_and_comes_back_out_the_same(client, world, bearer):
    url = f"/api/projects/{world['slug']}/datasets/import"
    done = client.post(url, {"file": _upload(NEMO.read_bytes(), "example.jsonl"), "name": "nemo"},
                       **bearer("editor"))
    assert done.status_code == 201 and done.json()["report"]["format"] == "nemo_gym"
    response = client.get(f"/api/datasets/{done.json()['dataset']['id']}/export", {"format": "nemo_gym"},
                          **bearer("viewer"))
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("application/x-ndjson")
    assert 'filename="nemo-v1.nemo-gym.jsonl"' in response["Content-Disposition"]
    exported = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert exported == [json.loads(line) for line in NEMO.read_text().splitlines() if line.strip()]
    bad = client.get(f"/api/datasets/{world['dataset'].pk}/export", {"format": "csv"}, **bearer("viewer"))
    assert bad.status_code == 422 and "format" in bad.json()["errors"]


def test_split_move_makes_a_version_for_editors(client, world, bearer):
    url = f"/api/datasets/{world['dataset'].pk}/split"
    body = {"to_split": "validation", "category": "email"}
    assert client.post(url, body, content_type="application/json", **bearer("viewer")).status_code == 403
    response = client.post(url, body, content_type="application/json", **bearer("editor"))
    assert response.status_code == 201, response.content
    moved = response.json()
    assert moved["dataset"]["version"] == 2 and moved["dataset"]["lineage"] == "edit"
    new = TaskDataset.objects.get(pk=moved["dataset"]["id"])
    assert set(new.tasks.filter(category="email").values_list("split", flat=True)) == {"validation"}
    nothing = client.post(url, {"to_split": "train", "text": "no such words anywhere"},
                          content_type="application/json", **bearer("editor"))
    assert nothing.status_code == 422 and "Nothing to move" in nothing.json()["errors"]["to_split"]


def test_generate_previews_then_creates(client, world, bearer):
    url = f"/api/projects/{world['slug']}/datasets/generate"
    dry = client.post(url, {"n": 12, "seed": 4, "dry_run": True}, content_type="application/json",
                      **bearer("editor"))
    assert dry.status_code == 200, dry.content
    assert len(dry.json()["preview"]) == 10 and dry.json()["report"]["accepted"] == 12
    assert not TaskDataset.objects.filter(project=world["project"], name="gen").exists()
    made = client.post(url, {"n": 12, "seed": 4, "name": "gen"}, content_type="application/json", **bearer("editor"))
    assert made.status_code == 201 and made.json()["dataset"]["stats"]["tasks"] == 12
    both = client.post(url, {"n": 5, "train_templates": ["pm_move_task"], "held_out_templates": ["pm_move_task"],
                             "name": "g2"}, content_type="application/json", **bearer("editor"))
    assert both.status_code == 422 and "templates" in both.json()["errors"]
    taken = client.post(url, {"n": 5, "name": "gen"}, content_type="application/json", **bearer("editor"))
    assert taken.status_code == 409 and "exists already" in taken.json()["errors"]["name"]
    unnamed = client.post(url, {"n": 5, "name": " "}, content_type="application/json", **bearer("editor"))
    assert unnamed.status_code == 422 and "Name the new dataset" in unnamed.json()["errors"]["name"]
    assert TaskDataset.objects.filter(project=world["project"], name="gen").count() == 1
    assert client.post(url, {"n": 5, "name": "g3"}, content_type="application/json",
                       **bearer("viewer")).status_code == 403


def test_the_endpoints_are_documented(client, world):
    client.force_login(world["viewer"])
    schema = client.get("/api/openapi.json").json()
    summaries = {op.get("summary") for path, ops in schema["paths"].items() if "dataset" in path for op in ops.values()}
    assert {"List dataset versions", "List a version's tasks", "Import a Crucible or NeMo Gym JSONL file",
            "Export a version as JSONL (streamed)"} <= summaries
    assert Task.objects.exists()
