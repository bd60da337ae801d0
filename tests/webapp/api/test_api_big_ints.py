"""Integers beyond 64 bits: refused with their JSON path by the API and by both imports.

PostgreSQL's jsonb and bigint refuse an integer outside [-2**63, 2**63 - 1] and SQLite's JSON
reads it as a float, so a body or an imported line that holds one anywhere is refused where it
comes in: the API with a 422 naming the path, the dataset import naming line and field (its dry
run agreeing with the import), the run import skipping the event naming the field. The edges
themselves are accepted.
"""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from training.events import EventWriter
from webapp.common.strict_json import NonFiniteNumber, loads
from webapp.datasets.models import Task
from webapp.datasets.services.imports import import_check, import_create, import_target
from webapp.runs.models import MetricPoint, Run
from webapp.runs.services.run_import import run_import

TOO_BIG = ["9223372036854775808", "-9223372036854775809", "1" + "0" * 30, "-" + "9" * 300]
EDGES = ["9223372036854775807", "-9223372036854775808", "0", "-0"]


@pytest.mark.parametrize("literal", TOO_BIG)
def test_strict_json_names_the_path_of_an_integer_beyond_64_bits(literal):
    with pytest.raises(NonFiniteNumber) as refused:
        loads('{"a": {"b": [1, ' + literal + "]}}")
    assert refused.value.path == "a.b[1]" and "beyond 64 bits" in str(refused.value)


@pytest.mark.parametrize("literal", EDGES)
def test_strict_json_keeps_the_edges(literal):
    assert loads('{"n": ' + literal + "}") == {"n": int(literal)}


@pytest.mark.parametrize("literal", TOO_BIG)
def test_the_api_refuses_one_anywhere_in_a_body_naming_its_path(client, project_team, bearer, literal):
    body = '{"kind": "noop", "payload": {"deep": [{"n": ' + literal + "}]}}"
    response = client.post(f"/api/projects/{project_team['project'].slug}/jobs", body,
                           content_type="application/json", **bearer("editor"))
    assert response.status_code == 422, response.content
    assert list(response.json()["errors"]) == ["payload.deep.0.n"]
    assert "beyond 64 bits" in response.json()["detail"]


def test_the_api_accepts_the_edges(client, project_team, bearer):
    body = '{"kind": "noop", "payload": {"max": 9223372036854775807, "min": -9223372036854775808}}'
    response = client.post(f"/api/projects/{project_team['project'].slug}/jobs", body,
                           content_type="application/json", **bearer("editor"))
    assert response.status_code == 201, response.content


def _row(i: int, **task) -> dict:
    body = {"id": f"t{i}", "messages": [{"role": "user", "content": f"Send report {i}"}],
            "ground_truth": [{"name": "send", "arguments": {"n": i}}], "split": "train", **task}
    return {"task": body}


def _line(row: dict, literal: str) -> str:
    return json.dumps(row).replace('"@"', literal)


@pytest.mark.parametrize("literal", TOO_BIG[:2])
def test_a_dataset_row_with_one_is_rejected_naming_line_and_field_by_the_dry_run_and_the_import(
        project_team, tmp_path, literal):
    file = tmp_path / "tasks.jsonl"
    file.write_text("\n".join([json.dumps(_row(1)), _line(_row(2, metadata={"id": "@"}), literal),
                               json.dumps(_row(3))]))
    project = project_team["project"]
    check = import_check(file, target=import_target(project=project, name="ints"))
    assert (check.accepted, [r["line"] for r in check.rejected]) == (2, [2])
    assert check.rejected[0]["reason"].startswith("task.metadata.id is ")
    assert "beyond 64 bits" in check.rejected[0]["reason"]
    dataset, written = import_create(file, project=project, target=import_target(project=project, name="ints"),
                                     actor=project_team["editor"])
    assert (written.accepted, written.rejected) == (check.accepted, check.rejected)
    assert sorted(Task.objects.filter(dataset=dataset).values_list("external_id", flat=True)) == ["t1", "t3"]


def test_the_api_dataset_import_agrees_with_its_dry_run(client, project_team, bearer):
    content = "\n".join([json.dumps(_row(1)), _line(_row(2, ground_truth="@"), "-9223372036854775809")]).encode()
    url = f"/api/projects/{project_team['project'].slug}/datasets/import"

    def upload():
        return SimpleUploadedFile("tasks.jsonl", content, content_type="application/x-ndjson")

    dry = client.post(url, {"file": upload(), "name": "ints", "dry_run": "true"}, **bearer("editor"))
    done = client.post(url, {"file": upload(), "name": "ints"}, **bearer("editor"))
    assert (dry.status_code, done.status_code) == (200, 201), done.content
    assert dry.json()["report"]["rejected"] == done.json()["report"]["rejected"]
    assert done.json()["report"]["rejected"][0]["line"] == 2
    assert "task.ground_truth is -9223372036854775809, an integer beyond 64 bits" in \
        done.json()["report"]["rejected"][0]["reason"]


def test_a_run_event_with_one_is_skipped_naming_the_field(project_team, tmp_path):
    run_dir = tmp_path / "run"
    with EventWriter(run_dir) as events:
        events.metric(1, {"loss": 1.0})
        events.done(step=1)
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    bad = json.dumps({"seq": 99, "time": 2.0, "type": "metric", "step": 2, "split": "train",
                      "metrics": {"tokens": "@"}}).replace('"@"', "18446744073709551616")
    (run_dir / "events.jsonl").write_text("\n".join([*lines[:-1], bad, lines[-1]]) + "\n")
    report = run_import(project=project_team["project"], run_dir=run_dir, actor=None)
    assert report.skipped_total == 1 and report.skipped[0].line == len(lines)
    assert report.skipped[0].reason.startswith("bad values: metrics.tokens is 18446744073709551616, an integer")
    assert MetricPoint.objects.filter(run=Run.objects.get(pk=report.run_id)).count() == 1


def test_the_document_states_the_rule_for_every_free_form_value():
    """Free-form objects (a job's payload) and a body's undeclared keys hold JsonValues, bounded to 64 bits."""
    from webapp.api.api import api

    schemas = api.get_openapi_schema()["components"]["schemas"]
    number = next(b for b in schemas["JsonValue"]["anyOf"] if b.get("type") == "number")
    assert (number["minimum"], number["maximum"]) == (-(2**63), 2**63 - 1)
    assert schemas["JobIn"]["properties"]["payload"]["additionalProperties"] == {"$ref": "#/components/schemas/JsonValue"}
    assert schemas["JobIn"]["additionalProperties"] == {"$ref": "#/components/schemas/JsonValue"}
