"""Run tags and notes: the service's checks and normalisation, the list's tag filter and search, config columns."""

from __future__ import annotations

import re

import pytest

from training.config import RUN_CONFIG_SCHEMA
from webapp.projects.models import AuditEvent
from webapp.runs.models import MAX_RUN_TAGS, RUN_NOTE_LENGTH, RUN_TAG_PATTERN, Run
from webapp.runs.selectors.runs import (
    CONFIG_COLUMNS,
    config_columns,
    config_value_text,
    run_list,
    run_tag_filter,
    run_tags_in_use,
)
from webapp.runs.services.runs import RunAnnotationError, run_annotate, run_tags_from_text


@pytest.fixture
def project(project_team):
    return project_team["project"]


@pytest.fixture
def run(project):
    return Run.objects.create(project=project, name="grpo a", kind="grpo", note="old note", tags=["old"])


def _ids(page) -> set[int]:
    return {run.pk for run in page.items}


# --- setting them ------------------------------------------------------------------------


def test_tags_are_trimmed_lowered_deduplicated_and_the_note_saved(project_team, run):
    saved = run_annotate(run=run, actor=project_team["editor"],
                         tags=["  Baseline ", "LR  sweep", "baseline", "ds:wp/v2", "ünïcode_1.0"],
                         note="  first line\r\nsecond line  ")
    stored = Run.objects.get(pk=run.pk)
    assert stored.tags == saved.tags == ["baseline", "lr sweep", "ds:wp/v2", "ünïcode_1.0"]
    assert stored.note == "first line\nsecond line"
    event = AuditEvent.objects.get(action="run.annotate", target_id=str(run.pk))
    assert event.actor == project_team["editor"] and event.data["tags"] == stored.tags


def test_a_field_left_out_keeps_its_value(project_team, run):
    run_annotate(run=run, actor=project_team["editor"], note="only the note")
    assert Run.objects.get(pk=run.pk).tags == ["old"]
    run_annotate(run=run, actor=project_team["editor"], tags=[])
    stored = Run.objects.get(pk=run.pk)
    assert stored.tags == [] and stored.note == "only the note"


@pytest.mark.parametrize(("tags", "words"), [
    (["ok", "a<b"], ["'a<b'", "'<'", "letters, digits"]),
    (["x" * 41], ["41 characters", "at most 40"]),
    (["   "], ["tag 1 is empty"]),
    (["a\x00b"], ["NUL"]),
    ([f"t{i}" for i in range(MAX_RUN_TAGS + 3)], ["23 tags", "at most 20", "remove 3"]),
    ("baseline", ["list of tags"]),
])
def test_bad_tags_are_refused_naming_the_field_and_nothing_is_written(project_team, run, tags, words):
    with pytest.raises(RunAnnotationError) as caught:
        run_annotate(run=run, actor=project_team["editor"], tags=tags, note="a new note that must not be saved")
    assert list(caught.value.errors) == ["tags"]
    for word in words:
        assert word in caught.value.errors["tags"], caught.value.errors
    stored = Run.objects.get(pk=run.pk)
    assert stored.tags == ["old"] and stored.note == "old note"
    assert not AuditEvent.objects.filter(action="run.annotate").exists()


def test_a_long_note_and_a_bad_tag_are_both_reported(project_team, run):
    with pytest.raises(RunAnnotationError) as caught:
        run_annotate(run=run, actor=project_team["editor"], tags=["bad!"], note="n" * (RUN_NOTE_LENGTH + 1))
    assert set(caught.value.errors) == {"tags", "note"}
    assert "5,001 characters" in caught.value.errors["note"] and "5,000" in caught.value.errors["note"]
    assert str(caught.value).startswith("tags: ")
    assert Run.objects.get(pk=run.pk).note == "old note"


def test_twenty_tags_and_a_note_of_the_limit_fit(project_team, run):
    run_annotate(run=run, actor=project_team["editor"], tags=[f"t{i}" for i in range(MAX_RUN_TAGS)],
                 note="n" * RUN_NOTE_LENGTH)
    stored = Run.objects.get(pk=run.pk)
    assert len(stored.tags) == MAX_RUN_TAGS and len(stored.note) == RUN_NOTE_LENGTH


@pytest.mark.parametrize("tag", ["a", "x" * 40, " ab cd ", "a-b_c.d:e/f", "Äbc 123"])
def test_what_the_documented_pattern_allows_the_service_accepts(project_team, run, tag):
    assert re.fullmatch(RUN_TAG_PATTERN, tag)
    run_annotate(run=run, actor=project_team["editor"], tags=[tag])


@pytest.mark.parametrize("tag", ["", " ", "x" * 41, "a<b", "a,b", "a\tb\n"])
def test_the_documented_pattern_refuses_what_the_service_refuses_or_splits(tag):
    assert not re.fullmatch(RUN_TAG_PATTERN, tag)


def test_the_forms_text_box_splits_on_commas_and_new_lines():
    assert run_tags_from_text("a, b ,,\nc,  ") == ["a", " b ", "c"]
    assert run_tags_from_text("") == []


# --- finding them ------------------------------------------------------------------------


@pytest.fixture
def tagged(project_team, project):
    actor = project_team["owner"]
    runs = {
        "a": Run.objects.create(project=project, name="alpha", kind="grpo"),
        "b": Run.objects.create(project=project, name="beta", kind="grpo"),
        "c": Run.objects.create(project=project, name="gamma", kind="sft"),
        "d": Run.objects.create(project=project, name="delta 100%", kind="sft"),
    }
    run_annotate(run=runs["a"], actor=actor, tags=["baseline", "lr sweep"], note="Diverged after step 40.")
    run_annotate(run=runs["b"], actor=actor, tags=["baseline"], note="fine")
    run_annotate(run=runs["c"], actor=actor, tags=["lr sweep", "ds:wp/v2"], note="")
    elsewhere = Run.objects.create(project=project_team["other"], name="alpha elsewhere", kind="grpo")
    run_annotate(run=elsewhere, actor=project_team["outsider"], tags=["baseline"], note="diverged")
    return runs


@pytest.mark.parametrize(("tag", "expected"), [
    ("baseline", {"a", "b"}),
    (["baseline", "lr sweep"], {"a"}),  # every tag given
    ("baseline,lr sweep", {"a"}),  # a comma list
    (["BASELINE "], {"a", "b"}),  # any case, trimmed
    ("ds:wp/v2", {"c"}),
    ("base", set()),  # whole tags only
    ([], {"a", "b", "c", "d"}),
    (None, {"a", "b", "c", "d"}),
])
def test_the_tag_filter_keeps_runs_having_every_tag(project, tagged, tag, expected):
    assert _ids(run_list(project, tag=tag)) == {tagged[key].pk for key in expected}


@pytest.mark.parametrize(("text", "expected"), [
    ("diverged", {"a"}),  # the note, any case
    ("sweep", {"a", "c"}),  # part of a tag
    ("LR SW", {"a", "c"}),
    ("wp/v", {"c"}),
    ("alpha", {"a"}),  # the name still
    ("%", {"d"}),  # a LIKE wildcard is a plain character
    ("_", set()),
])
def test_the_search_matches_the_note_and_the_tags(project, tagged, text, expected):
    assert _ids(run_list(project, text=text)) == {tagged[key].pk for key in expected}


def test_tag_filter_and_search_combine_with_the_other_filters(project, tagged):
    assert _ids(run_list(project, tag="lr sweep", kind="sft")) == {tagged["c"].pk}
    assert _ids(run_list(project, tag="baseline", text="fine")) == {tagged["b"].pk}


def test_the_filter_reads_repeated_values_and_comma_lists_once_each():
    assert run_tag_filter(["A,b", " a ", "", "c"]) == ["a", "b", "c"]
    assert run_tag_filter("x") == ["x"] and run_tag_filter(None) == []


def test_tags_in_use_are_the_projects_most_used_first(project, tagged):
    assert run_tags_in_use(project) == ["baseline", "lr sweep", "ds:wp/v2"]


# --- config columns ----------------------------------------------------------------------


def test_every_config_column_is_a_field_of_the_training_config():
    assert {column.key for column in CONFIG_COLUMNS} <= set(RUN_CONFIG_SCHEMA["properties"])
    keys = {column.key for column in CONFIG_COLUMNS}
    assert {"learning_rate", "algorithm", "num_generations_per_prompt", "num_prompts_per_step", "max_steps",
            "lora_r", "model", "seed"} <= keys


def test_unknown_columns_are_ignored_and_each_is_kept_once_in_the_order_asked():
    chosen = config_columns(["seed,nope,learning_rate", "seed", "<script>", ""])
    assert [column.key for column in chosen] == ["seed", "learning_rate"]
    assert config_columns(None) == [] and config_columns("max_steps")[0].key == "max_steps"


@pytest.mark.parametrize(("config", "key", "text"), [
    ({"learning_rate": 5e-05}, "learning_rate", "5e-05"),
    ({"max_steps": 200}, "max_steps", "200"),
    ({"algorithm": "grpo"}, "algorithm", "grpo"),
    ({"leave_one_out": True}, "leave_one_out", "true"),
    ({"lora_target_modules": ["q_proj", "v_proj"]}, "lora_target_modules", '["q_proj", "v_proj"]'),
    ({}, "seed", None),
    ({"algorithm": None}, "algorithm", None),
    ("not a dict", "seed", None),
])
def test_config_values_as_the_table_shows_them(config, key, text):
    assert config_value_text(config, key) == text
