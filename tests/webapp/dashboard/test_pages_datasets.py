"""The datasets pages: roles (viewer reads and exports, editor imports, generates and moves splits,
non-members 404), hostile task and file text escaped everywhere, the task browser's filters and keyset
pages, the import report before anything is written, generation with a preview, split moves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext

from environments.types import Task as EnvTask
from environments.workplace.generator import generate_tasks
from webapp.datasets.models import Task, TaskDataset
from webapp.datasets.services.datasets import dataset_create
from webapp.trajectories.models import Trajectory

XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def hostile_tasks() -> list[EnvTask]:
    return [EnvTask(id=f"{XSS}-{i}", messages=[{"role": "system", "content": XSS},
                                               {"role": "user", "content": f"Please {XSS} number {i}"}],
                    tools=[{"name": XSS, "description": XSS, "parameters": {"type": "object"}}],
                    ground_truth=[{"name": XSS, "arguments": {"x": XSS}}], category=XSS[:60],
                    split="held_out" if i % 3 == 0 else "train", metadata={"note": XSS}) for i in range(6)]


@pytest.fixture
def world(project_team, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    project = project_team["project"]
    wp = dataset_create(project=project, name="wp", tasks=generate_tasks(60, 0), actor=project_team["owner"],
                        environment="workplace")
    hostile = dataset_create(project=project, name=f"evil {XSS}", tasks=hostile_tasks(), actor=project_team["owner"],
                             description=XSS)
    return {**project_team, "slug": project.slug, "wp": wp, "hostile": hostile}


def _pages(world) -> list[str]:
    slug, wp = world["slug"], world["wp"]
    task = wp.tasks.order_by("id").first()
    return [f"/p/{slug}/datasets/", f"/p/{slug}/datasets/{wp.pk}/", f"/p/{slug}/datasets/{wp.pk}/tasks/{task.pk}/",
            f"/p/{slug}/datasets/{wp.pk}/export/crucible/"]


def test_members_read_outsiders_get_404_and_anonymous_log_in(client, world):
    for who, status in (("viewer", 200), ("owner", 200), ("outsider", 404)):
        client.force_login(world[who])
        for url in _pages(world):
            assert client.get(url).status_code == status, (who, url)
    client.logout()
    assert client.get(_pages(world)[0]).status_code == 302


def test_only_editors_import_generate_and_move_splits(client, world):
    slug, wp = world["slug"], world["wp"]
    writes = [("get", f"/p/{slug}/datasets/import/"), ("get", f"/p/{slug}/datasets/generate/"),
              ("post", f"/p/{slug}/datasets/{wp.pk}/split/")]
    for who, status in (("viewer", 403), ("reviewer", 403), ("outsider", 404)):
        client.force_login(world[who])
        for method, url in writes:
            assert getattr(client, method)(url).status_code == status, (who, url)
    client.force_login(world["editor"])
    for _method, url in writes[:2]:
        assert client.get(url).status_code == 200
    client.force_login(world["viewer"])
    listing = client.get(f"/p/{slug}/datasets/").content.decode()
    assert "Import a file" not in listing
    client.force_login(world["editor"])
    assert "Import a file" in client.get(f"/p/{slug}/datasets/").content.decode()


def test_the_datasets_page_lists_versions_with_counts_and_lineage(client, world):
    client.force_login(world["viewer"])
    html = client.get(f"/p/{world['slug']}/datasets/").content.decode()
    assert "v1" in html and world["wp"].content_hash[:12] in html and "Generation" in html
    stats = world["wp"].stats
    assert f">{stats['split']['train']}<" in html.replace("</td>", "<").replace('<td class="num">', ">")
    assert 'data-nav-key="d"' in html  # the navigation shows Datasets (g d)


def test_hostile_text_is_escaped_on_every_page(client, world):
    client.force_login(world["viewer"])
    slug, hostile = world["slug"], world["hostile"]
    task = hostile.tasks.order_by("id").first()
    for url in (f"/p/{slug}/datasets/", f"/p/{slug}/datasets/{hostile.pk}/",
                f"/p/{slug}/datasets/{hostile.pk}/?category={XSS[:60]}",
                f"/p/{slug}/datasets/{hostile.pk}/?text={XSS}",
                f"/p/{slug}/datasets/{hostile.pk}/tasks/{task.pk}/"):
        html = client.get(url).content.decode()
        assert XSS not in html, url
        assert "&lt;script&gt;" in html, url


def test_the_import_report_escapes_the_file_name_and_reasons(client, world):
    client.force_login(world["editor"])
    slug = world["slug"]
    content = json.dumps({XSS: 1}) + "\n" + json.dumps({"task": {"id": "a", "messages": [{"role": "u", "content": "x"}]}})
    response = client.post(f"/p/{slug}/datasets/import/", {
        "file": SimpleUploadedFile(f"{XSS}.jsonl", content.encode()), "name": "imp", "format": "auto",
        "split": "train"})
    assert response.status_code == 302
    html = client.get(response["Location"]).content.decode()
    assert XSS not in html and ESCAPED in html


def test_filters_and_keyset_pages_of_the_task_browser(client, world):
    client.force_login(world["viewer"])
    slug, wp = world["slug"], world["wp"]
    url = f"/p/{slug}/datasets/{wp.pk}/"
    first = client.get(url)
    ids = [int(i) for i in re.findall(r'data-task="(\d+)"', first.content.decode())]
    assert ids == list(wp.tasks.order_by("id").values_list("id", flat=True)[:50])
    cursor = first.context["page"].next_cursor
    second = client.get(url, {"after": cursor})
    assert [int(i) for i in re.findall(r'data-task="(\d+)"', second.content.decode())] == list(
        wp.tasks.order_by("id").values_list("id", flat=True)[50:])
    held = client.get(url, {"split": "held_out"})
    assert {t.split for t in held.context["page"].items} == {"held_out"}
    category = wp.tasks.order_by("id").first().category
    assert {t.category for t in client.get(url, {"category": category}).context["page"].items} == {category}
    word = " ".join(wp.tasks.order_by("id")[7].messages[-1]["content"].split()[:3]).lower()
    matching = set(Task.objects.filter(dataset=wp, search_text__contains=word).values_list("id", flat=True))
    assert matching and {t.pk for t in client.get(url, {"text": word.upper()}).context["page"].items} == matching
    bad = client.get(url, {"split": "test", "after": "garbage"})
    assert bad.status_code == 200 and "is not one of" in bad.content.decode()
    assert "start again from the first page" in bad.content.decode()


def test_the_task_page_shows_provenance_and_the_trajectories_that_ran_it(client, world):
    client.force_login(world["viewer"])
    slug, wp = world["slug"], world["wp"]
    task = wp.tasks.order_by("id").first()
    trajectory = Trajectory.objects.create(project=world["project"], task=task, task_key=task.external_id,
                                           turns=[], reward=1.0, passed=True)
    html = client.get(f"/p/{slug}/datasets/{wp.pk}/tasks/{task.pk}/").content.decode()
    assert task.metadata["template"] in html and f"/p/{slug}/trajectories/{trajectory.pk}/" in html
    assert f"/p/{slug}/trajectories/?task={task.external_id}" in html
    other = world["hostile"].tasks.first()
    assert client.get(f"/p/{slug}/datasets/{wp.pk}/tasks/{other.pk}/").status_code == 404


def test_import_upload_report_confirm(client, world):
    client.force_login(world["editor"])
    slug = world["slug"]
    lines = [json.dumps({"task": {"id": f"i{i}", "messages": [{"role": "user", "content": f"q {i}"}]}})
             for i in range(3)] + ["{oops", "nope"]
    response = client.post(f"/p/{slug}/datasets/import/", {
        "file": SimpleUploadedFile("mine.jsonl", "\n".join(lines).encode()), "name": "mine", "format": "auto",
        "split": "validation"})
    assert response.status_code == 302 and TaskDataset.objects.filter(name="mine").count() == 0
    report_url = response["Location"]
    page = client.get(report_url)
    assert page.context["report"].accepted == 3 and page.context["report"].rejected_count == 2
    assert page.context["report"].splits == {"validation": 3}
    client.force_login(world["owner"])  # not the uploader: the token is not theirs
    assert client.get(report_url).status_code == 302
    client.force_login(world["editor"])
    done = client.post(report_url, {"action": "create"})
    dataset = TaskDataset.objects.get(name="mine")
    assert done["Location"] == f"/p/{slug}/datasets/{dataset.pk}/"
    assert dataset.stats["tasks"] == 3 and dataset.lineage == "import"
    assert client.get(report_url).status_code == 302  # the upload is gone


def test_import_cancel_writes_nothing_and_deletes_the_upload(client, world, settings):
    client.force_login(world["editor"])
    slug = world["slug"]
    line = json.dumps({"task": {"id": "c", "messages": [{"role": "user", "content": "c"}]}})
    response = client.post(f"/p/{slug}/datasets/import/", {
        "file": SimpleUploadedFile("c.jsonl", line.encode()), "dataset": str(world["wp"].pk), "format": "auto",
        "split": "train"})
    assert len(list((Path(settings.DATA_DIR) / "imports").glob("*.jsonl"))) == 1
    client.post(response["Location"], {"action": "cancel"})
    assert list((Path(settings.DATA_DIR) / "imports").glob("*.jsonl")) == []
    assert TaskDataset.objects.filter(name="wp").count() == 1


@pytest.mark.parametrize(("content", "message"), [
    (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8"),
    (b"name,age\nann,3\n", "not JSONL"),
])
def test_import_of_a_bad_file_shows_the_message_beside_the_field(client, world, content, message):
    client.force_login(world["editor"])
    response = client.post(f"/p/{world['slug']}/datasets/import/", {
        "file": SimpleUploadedFile("bad.jsonl", content), "name": "bad", "format": "auto", "split": "train"})
    assert response.status_code == 422
    assert message in response.content.decode() and 'id="file-error"' in response.content.decode()
    assert 'value="bad"' in response.content.decode()  # what the person typed is kept


def test_a_too_large_upload_is_refused_with_a_message(client, world, settings):
    settings.CRUCIBLE_IMPORT_MAX_BYTES = 2048
    client.force_login(world["editor"])
    response = client.post(f"/p/{world['slug']}/datasets/import/", {
        "file": SimpleUploadedFile("big.jsonl", b"x" * 10_000), "name": "big", "format": "auto", "split": "train"})
    assert response.status_code == 422 and "The file is over the 2 KB limit" in response.content.decode()
    assert list((Path(settings.DATA_DIR) / "imports").glob("*.jsonl")) == []


def test_generate_preview_then_create(client, world):
    client.force_login(world["editor"])
    url = f"/p/{world['slug']}/datasets/generate/"
    form = client.get(url).context
    roles = {f"role_{row['t'].name}": row["role"] for row in form["templates"]}
    data = {"environment": "workplace", "n": "25", "seed": "3", "name": "gen", "dataset": "", **roles}
    preview = client.post(url, {**data, "action": "preview"})
    assert preview.status_code == 200 and len(preview.context["preview"]) == 10
    assert preview.context["report"].accepted == 25 and not TaskDataset.objects.filter(name="gen").exists()
    assert 'id="create-generated"' in preview.content.decode()
    made = client.post(url, {**data, "action": "create"})
    dataset = TaskDataset.objects.get(name="gen")
    assert made["Location"] == f"/p/{world['slug']}/datasets/{dataset.pk}/" and dataset.stats["tasks"] == 25
    both = client.post(url, {**data, "role_pm_move_task": "held_out", "n": "0", "action": "preview"})
    assert both.status_code == 422 and "between 1" in both.content.decode()


def test_a_split_move_from_the_browser_makes_a_version(client, world):
    client.force_login(world["editor"])
    slug, wp = world["slug"], world["wp"]
    response = client.post(f"/p/{slug}/datasets/{wp.pk}/split/", {"split": "train", "to_split": "held_out"})
    successor = TaskDataset.objects.get(name="wp", version=2)
    assert response["Location"] == f"/p/{slug}/datasets/{successor.pk}/"
    assert successor.stats["split"].get("train", 0) == 0 and wp.tasks.filter(split="train").exists()


def test_the_export_streams_jsonl(client, world):
    client.force_login(world["viewer"])
    response = client.get(f"/p/{world['slug']}/datasets/{world['wp'].pk}/export/nemo_gym/")
    assert response.streaming and "wp-v1.nemo-gym.jsonl" in response["Content-Disposition"]
    rows = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert len(rows) == 60 and rows[0]["environment_name"] == "workplace_assistant"
    assert client.get(f"/p/{world['slug']}/datasets/{world['wp'].pk}/export/xml/").status_code == 404


def test_the_pages_cost_a_fixed_number_of_queries(client, world):
    client.force_login(world["viewer"])
    slug = world["slug"]
    for _ in range(3):
        dataset_create(project=world["project"], name="wp", tasks=generate_tasks(5, _ + 7), actor=world["owner"])
    with CaptureQueriesContext(connection) as listing:
        client.get(f"/p/{slug}/datasets/")
    with CaptureQueriesContext(connection) as browser:
        client.get(f"/p/{slug}/datasets/{world['wp'].pk}/")
    assert len(listing.captured_queries) <= 12 and len(browser.captured_queries) <= 12


def test_an_older_version_can_be_chosen_to_import_into(client, world):
    client.force_login(world["editor"])
    newer = dataset_create(project=world["project"], name="wp", tasks=generate_tasks(3, 9), actor=world["owner"])
    html = client.get(f"/p/{world['slug']}/datasets/import/", {"dataset": world["wp"].pk}).content.decode()
    assert f'<option value="{world["wp"].pk}" selected>wp (v1 → v3)</option>' in html
    assert f'<option value="{newer.pk}">wp (v2 → v3)</option>' in html
