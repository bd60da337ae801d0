"""Dataset services: import with a report before anything is written, NeMo Gym round trip, streamed
export in bounded memory, generation with the generator's validation, split moves, uploads kept
between the report and the confirmation, and `manage.py import_tasks` (the same service)."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from environments.workplace.generator import HELD_OUT_TEMPLATES, generate_tasks
from webapp.datasets.models import Lineage, Task, TaskDataset, search_text_of
from webapp.datasets.selectors.datasets import TaskFilter, filtered_tasks
from webapp.datasets.selectors.exports import export_filename, export_lines
from webapp.datasets.services.datasets import (
    dataset_content_hash,
    dataset_create,
    stored_content_hash,
)
from webapp.datasets.services.generation import (
    GenerationError,
    generate,
    generation_create,
    generation_spec,
    templates,
)
from webapp.datasets.services.imports import (
    ImportConflict,
    ImportFileError,
    import_check,
    import_create,
    import_target,
    upload_discard,
    upload_get,
    upload_store,
)
from webapp.datasets.services.splits import SplitMoveError, dataset_split_move

NEMO_ROWS = (Path(__file__).resolve().parents[3] / ".." / "shared" / "third_party" / "nemo_gym_workplace_assistant"
             / "rows")


def crucible_row(i: int, **task) -> str:
    body = {"id": f"t{i}", "messages": [{"role": "user", "content": f"Send the report number {i} to Ana"}],
            "tools": [{"name": "send", "description": "Send", "parameters": {"type": "object", "properties": {}}}],
            "ground_truth": [{"name": "send", "arguments": {"n": i}}], "category": "email",
            "split": "train", **task}
    return json.dumps({"task": body, "trajectory": None, "result": None})


def mixed_file(tmp_path) -> Path:
    """Three good rows, two malformed lines, a duplicate and a row of the wrong schema."""
    lines = [
        crucible_row(1),                                       # 1 good
        crucible_row(2, split="held_out"),                     # 2 good
        '{"task": {"id": "t3", "messages": [',                 # 3 malformed
        "",                                                    # (empty lines are skipped)
        crucible_row(4, category="calendar"),                  # 5 good
        "not json at all",                                     # 6 malformed
        crucible_row(1, id="t1-again"),                        # 7 duplicate of line 1 (same content)
        json.dumps({"prompt": "hello", "answer": 42}),         # 8 wrong schema
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def team(project_team, settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    return project_team


def test_the_report_is_exact_and_nothing_is_written_before_confirm(team, tmp_path):
    project = team["project"]
    path = mixed_file(tmp_path)
    target = import_target(project=project, name="mail tasks")

    report = import_check(path, target=target, filename="mixed.jsonl")

    assert (report.format, report.lines, report.accepted) == ("crucible", 7, 3)
    assert [r["line"] for r in report.rejected] == [3, 6, 8]
    assert report.rejected[0]["reason"].startswith("not valid JSON")
    assert report.rejected[1]["reason"].startswith("not valid JSON")
    assert "wrong schema for a Crucible row" in report.rejected[2]["reason"]
    assert "answer, prompt" in report.rejected[2]["reason"]
    assert report.duplicates == [{"line": 7, "reason": "duplicate of line 1 (same content hash)"}]
    assert (report.rejected_count, report.duplicate_count) == (3, 1)
    assert report.splits == {"train": 2, "held_out": 1}
    assert report.categories == {"email": 2, "calendar": 1}
    assert TaskDataset.objects.count() == 0 and Task.objects.count() == 0

    dataset, written = import_create(path, project=project, target=target, actor=team["editor"],
                                     filename="mixed.jsonl")

    assert TaskDataset.objects.count() == 1
    assert (dataset.name, dataset.version, dataset.lineage, dataset.created_by) == ("mail tasks", 1, Lineage.IMPORT,
                                                                                   team["editor"])
    assert written.accepted == 3 and written.dataset_id == dataset.pk
    tasks = list(dataset.tasks.order_by("id"))
    assert [t.external_id for t in tasks] == ["t1", "t2", "t4"]
    assert [t.metadata["provenance"] for t in tasks] == [
        {"kind": "import", "file": "mixed.jsonl", "line": line, "format": "crucible"} for line in (1, 2, 5)]
    assert {t.source for t in tasks} == {"imported"}
    assert dataset.stats == {"tasks": 3, "split": {"train": 2, "held_out": 1},
                             "category": {"email": 2, "calendar": 1}, "source": {"imported": 3}}
    assert dataset.content_hash == dataset_content_hash(t.content_hash for t in tasks)
    assert dataset.lineage_detail["file"] == "mixed.jsonl" and dataset.lineage_detail["rejected"] == 3


def test_a_new_version_skips_what_the_parent_holds(team, tmp_path):
    project = team["project"]
    first = tmp_path / "first.jsonl"
    first.write_text("\n".join(crucible_row(i) for i in range(3)) + "\n")
    parent, _ = import_create(first, project=project, target=import_target(project=project, name="d"),
                              actor=team["editor"])
    second = tmp_path / "second.jsonl"
    second.write_text("\n".join(crucible_row(i) for i in range(2, 5)) + "\n")
    target = import_target(project=project, parent_id=parent.pk)

    report = import_check(second, target=target)
    assert report.accepted == 2 and report.duplicates == [
        {"line": 1, "reason": "already in d v1 (same content hash)"}]
    assert (report.parent_version, report.parent_tasks, report.total_after) == (1, 3, 5)

    child, _ = import_create(second, project=project, target=target, actor=team["editor"])
    assert (child.version, child.parent_id, child.stats["tasks"]) == (2, parent.pk, 5)
    assert list(child.tasks.order_by("id").values_list("external_id", flat=True)) == [f"t{i}" for i in range(5)]
    assert parent.tasks.count() == 3
    assert child.content_hash == stored_content_hash(child)


def test_an_existing_name_or_an_unknown_parent_is_a_field_error(team):
    project = team["project"]
    dataset_create(project=project, name="taken", tasks=generate_tasks(2, 0), actor=team["owner"])
    with pytest.raises(ImportConflict) as taken:  # the API's 409: the name is fine, the project has it
        import_target(project=project, name="taken")
    assert taken.value.field == "name" and "exists already" in str(taken.value)
    other = dataset_create(project=team["other"], name="theirs", tasks=generate_tasks(2, 0), actor=team["outsider"])
    with pytest.raises(ImportFileError) as foreign:
        import_target(project=project, parent_id=other.pk)
    assert foreign.value.field == "dataset"
    with pytest.raises(ImportFileError) as split:
        import_target(project=project, name="x", default_split="test")
    assert split.value.field == "split"


@pytest.mark.parametrize(("content", "message"), [
    (b"\xff\xfe" + "id,messages\n".encode("utf-16-le"), "not UTF-8 text: line 1"),
    (b"id,messages\n1,hello\n2,bye\n", "The file is not JSONL: no line is a JSON object (line 1 is not)."),
    (b'[{"task": {"id": 1}}, {"task": {"id": 2}}]\n', "It looks like one JSON array"),
    (b"\n\n", "The file is empty"),
    (b"\x1f\x8b\x08\x00\x00\x00", "The file is compressed (gzip or zip)"),
    (b'{"a": 1}\n{"b": 2}\n', "Neither a Crucible nor a NeMo Gym file"),
])
def test_a_file_that_cannot_be_read_gets_a_clear_message(team, tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(ImportFileError) as error:
        import_check(path, target=import_target(project=team["project"], name="x"))
    assert message in str(error.value)


def test_a_line_that_is_not_utf8_late_in_the_file_is_named(team, tmp_path):
    path = tmp_path / "late.jsonl"
    path.write_bytes((crucible_row(1) + "\n").encode() + b'{"task": "caf\xe9"}\n')
    with pytest.raises(ImportFileError, match=r"line 2 has a byte that is not UTF-8 \(0xe9 at column 14\)"):
        import_check(path, target=import_target(project=team["project"], name="x"))


def test_a_file_over_the_limit_is_refused_before_reading(team, tmp_path, settings):
    settings.CRUCIBLE_IMPORT_MAX_BYTES = 1024
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(crucible_row(i) for i in range(20)))
    with pytest.raises(ImportFileError, match="over the 1 KB limit"):
        import_check(path, target=import_target(project=team["project"], name="x"))
    with pytest.raises(ImportFileError, match="over the 1 KB limit"):
        upload_store([path.read_bytes()], filename="big.jsonl", project=team["project"], user=team["editor"])
    assert list((settings.DATA_DIR / "imports").iterdir()) == []


def test_rows_the_database_cannot_store_are_rejected_with_the_reason(team, tmp_path):
    path = tmp_path / "odd.jsonl"
    path.write_text("\n".join([
        crucible_row(1, messages=[{"role": "user", "content": "nul \u0000 here"}]),
        crucible_row(2, split="test"),
        crucible_row(3, messages=[]),
        crucible_row(4, category="c" * 65),
        '{"task": {"id": 5, "messages": [{"role": "user", "content": "x"}], "ground_truth": NaN}}',
        crucible_row(6, id="x" * 201),
        crucible_row(7),
        '{"task": {"id": 8, "messages": [{"role": "user", "content": "lone \\ud800 half"}]}}',
    ]))
    report = import_check(path, target=import_target(project=team["project"], name="x"))
    reasons = {r["line"]: r["reason"] for r in report.rejected}
    assert report.accepted == 1
    assert "NUL" in reasons[1] and "split 'test' is not one of" in reasons[2]
    assert "messages must be a non-empty list" in reasons[3] and "category is longer" in reasons[4]
    assert "task.ground_truth is NaN, not a finite number" in reasons[5] and "task id is longer" in reasons[6]
    assert "lone UTF-16 surrogate" in reasons[8]


def test_a_nemo_gym_file_imports_and_exports_back_as_the_same_rows(team):
    project = team["project"]
    source = NEMO_ROWS / "example.jsonl"
    rows = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    target = import_target(project=project, name="nemo")

    report = import_check(source, target=target)
    assert (report.format, report.accepted, report.rejected_count, report.environment) == (
        "nemo_gym", len(rows), 0, "workplace")
    dataset, _ = import_create(source, project=project, target=target, actor=team["editor"],
                               filename="example.jsonl")

    assert dataset.environment == "workplace"
    exported = [json.loads(line) for line in "".join(export_lines(dataset, "nemo_gym")).splitlines()]
    assert exported == rows
    crucible = [json.loads(line) for line in "".join(export_lines(dataset, "crucible")).splitlines()]
    assert [c["task"]["id"] for c in crucible] == [str(r["id"]) for r in rows]
    assert crucible[0]["task"]["metadata"]["provenance"]["line"] == 1
    assert export_filename(dataset, "nemo_gym") == "nemo-v1.nemo-gym.jsonl"


def test_a_crucible_export_imports_back_as_the_same_dataset(team, tmp_path):
    project = team["project"]
    original = dataset_create(project=project, name="wp", tasks=generate_tasks(20, 3), actor=team["owner"],
                              environment="workplace")
    path = tmp_path / "wp.jsonl"
    path.write_text("".join(export_lines(original, "crucible")))
    copy, report = import_create(path, project=project, target=import_target(project=project, name="wp copy"),
                                 actor=team["editor"])
    assert report.accepted == 20 and copy.content_hash == original.content_hash
    assert copy.environment == "workplace"


def test_nemo_gym_rollout_rows_import_as_their_tasks(team):
    project = team["project"]
    target = import_target(project=project, name="rollouts", format="nemo_gym", default_split="held_out")
    report = import_check(NEMO_ROWS / "example_rollouts.jsonl", target=target)
    assert report.accepted >= 1 and report.splits == {"held_out": report.accepted}


def test_a_row_of_the_other_format_is_rejected_as_the_wrong_schema(team, tmp_path):
    nemo_line = (NEMO_ROWS / "example.jsonl").read_text().splitlines()[0]
    path = tmp_path / "mixed-formats.jsonl"
    path.write_text(crucible_row(1) + "\n" + nemo_line + "\n")
    report = import_check(path, target=import_target(project=team["project"], name="x"))
    assert report.accepted == 1
    assert "wrong schema for a Crucible row" in report.rejected[0]["reason"]
    assert "choose the NeMo Gym format" in report.rejected[0]["reason"]


def _add_tasks(dataset, first: int, last: int) -> None:
    tool = [{"name": "t", "description": "", "parameters": {"type": "object", "properties": {}}}]
    Task.objects.bulk_create(
        (Task(dataset=dataset, external_id=f"t{i}", messages=[{"role": "user", "content": f"request {i}"}],
              tools=tool, ground_truth=[{"name": "t", "arguments": {"i": i}}], content_hash=f"{i:064x}")
         for i in range(first, last)), batch_size=5_000)


def _export_peak(dataset) -> tuple[int, int, int]:
    """Lines and characters the export sent, and the most memory it held at any time."""
    tracemalloc.start()
    try:
        lines = size = 0
        for block in export_lines(dataset, "crucible"):
            lines += block.count("\n")
            size += len(block)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return lines, size, peak


def test_export_streams_in_memory_that_does_not_grow_with_the_version(team):
    """At 5,000 and at 30,000 tasks the export holds one database chunk of rows at most (about 10 MB
    of parsed JSON), so a version of a million tasks streams in the memory of one of five thousand;
    an export that read the version whole would hold six times more at 30,000."""
    dataset = TaskDataset.objects.create(project=team["project"], name="big", environment="json_tool_call")
    _add_tasks(dataset, 0, 5_000)
    small_lines, small_size, small_peak = _export_peak(dataset)
    _add_tasks(dataset, 5_000, 30_000)
    lines, size, peak = _export_peak(dataset)

    assert (small_lines, lines) == (5_000, 30_000)
    assert size > 5.9 * small_size  # six times the text went out ...
    assert peak < 1.3 * small_peak, (  # ... in about the memory the first sixth took
        f"peak {peak / 1e6:.1f} MB at 30,000 against {small_peak / 1e6:.1f} at 5,000")


def test_uploads_belong_to_their_user_and_project_and_cancel_deletes_them(team, tmp_path):
    project = team["project"]
    upload = upload_store([b"abc", b"def\n"], filename="../../etc/passwd", project=project, user=team["editor"])
    assert upload.path.read_bytes() == b"abcdef\n" and upload.path.parent.name == "imports"
    assert upload_get(upload.token, project=project, user=team["editor"]) is not None
    assert upload_get(upload.token, project=project, user=team["owner"]) is None
    assert upload_get(upload.token, project=team["other"], user=team["editor"]) is None
    assert upload_get("../" + upload.token[3:], project=project, user=team["editor"]) is None
    upload_discard(upload)
    assert upload_get(upload.token, project=project, user=team["editor"]) is None
    assert not upload.path.exists()


def test_the_command_prints_the_report_and_writes_only_without_dry_run(team, tmp_path, capsys):
    path = mixed_file(tmp_path)
    slug = team["project"].slug
    call_command("import_tasks", str(path), "--project", slug, "--name", "cli", "--dry-run")
    out = capsys.readouterr().out
    assert "accepted   3" in out and "line 6: not valid JSON" in out and "nothing was written" in out
    assert not TaskDataset.objects.filter(name="cli").exists()
    call_command("import_tasks", str(path), "--project", slug, "--name", "cli")
    dataset = TaskDataset.objects.get(name="cli")
    assert dataset.stats["tasks"] == 3 and dataset.created_by == team["owner"]
    with pytest.raises(CommandError, match="name: A dataset named 'cli' exists already"):
        call_command("import_tasks", str(path), "--project", slug, "--name", "cli")


# ---------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------


def _default_spec(n: int, seed: int, environment: str = "workplace"):
    names = [t.name for t in templates()]
    return generation_spec(environment=environment, n=n, seed=seed,
                           train_templates=[t for t in names if t not in HELD_OUT_TEMPLATES],
                           held_out_templates=sorted(HELD_OUT_TEMPLATES))


def test_generation_with_the_default_templates_is_the_generators_own_output():
    tasks, report = generate(_default_spec(60, 5))
    expected = generate_tasks(60, 5)
    assert [t.id for t in tasks] == [t.id for t in expected]
    assert [t.split for t in tasks] == [t.split for t in expected]
    assert report.accepted == 60 and report.attempts == 60 + report.no_draft + report.duplicates + \
        report.ground_truth_failed
    assert sum(report.by_template.values()) == 60 and sum(report.splits.values()) == 60
    assert tasks[0].metadata["provenance"] == {"kind": "generation", "generator": "workplace",
                                               "environment": "workplace", "template": tasks[0].metadata["template"],
                                               "seed": 5, "index": 0}


def test_held_out_templates_stay_held_out_and_disjoint_from_training_ones():
    spec = generation_spec(environment="workplace", n=40, seed=1, train_templates=["email_send_lookup", "pm_move_task"],
                           held_out_templates=["crm_update_status"])
    tasks, _ = generate(spec)
    for task in tasks:
        template = task.metadata["template"]
        assert template in ("email_send_lookup", "pm_move_task", "crm_update_status")
        if template == "crm_update_status":
            assert task.split == "held_out"
    with pytest.raises(GenerationError) as both:
        generation_spec(environment="workplace", n=5, seed=1, train_templates=["pm_move_task"],
                        held_out_templates=["pm_move_task"])
    assert "either trained on or held out" in both.value.errors["templates"]
    with pytest.raises(GenerationError) as bad:
        generation_spec(environment="nope", n=0, seed=-1, train_templates=["no_such"], held_out_templates=[])
    assert set(bad.value.errors) == {"environment", "n", "seed", "templates"}


def test_json_tool_call_generation_keeps_single_write_tasks():
    tasks, report = generate(_default_spec(20, 2, "json_tool_call"))
    assert len(tasks) == 20 and all(len(t.ground_truth) == 1 for t in tasks)
    assert all(t.id.startswith("jtc-") for t in tasks)
    # The workplace templates that need two writes were drawn and dropped, and counted as such.
    assert report.not_single_call > 0
    assert report.attempts == (report.accepted + report.no_draft + report.duplicates + report.ground_truth_failed
                               + report.not_single_call)


def test_generation_creates_a_version_and_adds_only_new_tasks_to_a_parent(team):
    project = team["project"]
    dataset, report = generation_create(project=project, spec=_default_spec(30, 0), actor=team["editor"],
                                        name="synthetic")
    assert (dataset.version, dataset.lineage, dataset.stats["tasks"], dataset.environment) == (
        1, Lineage.GENERATION, 30, "workplace")
    assert dataset.lineage_detail["seed"] == 0
    child, again = generation_create(project=project, spec=_default_spec(40, 0), actor=team["editor"],
                                     parent=dataset)
    assert again.already_in_parent == 30 and child.stats["tasks"] == 40 and child.parent_id == dataset.pk
    with pytest.raises(GenerationError, match="holds every generated task"):
        generation_create(project=project, spec=_default_spec(10, 0), actor=team["editor"], parent=child)


# ---------------------------------------------------------------------------------------
# Split moves
# ---------------------------------------------------------------------------------------


def test_a_split_move_makes_a_new_version_and_leaves_the_old_one(team):
    project = team["project"]
    dataset = dataset_create(project=project, name="wp", tasks=generate_tasks(40, 0), actor=team["owner"])
    email = filtered_tasks(dataset, TaskFilter(category="email")).exclude(split="validation").count()
    assert email

    moved_version, moved = dataset_split_move(dataset=dataset, flt=TaskFilter(category="email"),
                                              to_split="validation", actor=team["editor"])

    assert moved == email and moved_version.version == 2 and moved_version.lineage == Lineage.EDIT
    assert moved_version.lineage_detail == {"split_move": {"filter": {"category": "email"}, "to": "validation",
                                                           "moved": email}}
    assert set(moved_version.tasks.filter(category="email").values_list("split", flat=True)) == {"validation"}
    assert list(moved_version.tasks.order_by("id").values_list("external_id", flat=True)) == list(
        dataset.tasks.order_by("id").values_list("external_id", flat=True))
    assert dataset.tasks.filter(category="email").exclude(split="validation").count() == email
    assert moved_version.content_hash == dataset.content_hash  # same tasks, other splits
    assert moved_version.stats["split"]["validation"] >= email
    with pytest.raises(SplitMoveError, match="in validation already"):
        dataset_split_move(dataset=moved_version, flt=TaskFilter(category="email"), to_split="validation",
                           actor=team["editor"])
    with pytest.raises(SplitMoveError, match="matches no task"):
        dataset_split_move(dataset=moved_version, flt=TaskFilter(text="zzz-nothing"), to_split="train",
                           actor=team["editor"])


def test_the_search_text_holds_the_words_of_every_message():
    assert search_text_of([{"role": "system", "content": "Be Brief"},
                           {"role": "user", "content": [{"type": "input_text", "text": "Find ÉMILE"}, "x"]},
                           {"role": "assistant", "content": None}, "junk"]) == "be brief\nfind émile\nx"
