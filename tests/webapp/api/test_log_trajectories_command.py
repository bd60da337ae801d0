"""`manage.py log_trajectories`: the whole file is checked first; a bad line means nothing is written."""

from __future__ import annotations

import io
import json
import sys

import pytest
from django.core.management import CommandError, call_command

from webapp.trajectories.models import Trajectory


def _line(key: str, **extra) -> str:
    return json.dumps({"id": key, "turns": [{"role": "assistant", "content": "ok"}], **extra})


def _run(path, slug: str, *extra: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("log_trajectories", str(path), "--project", slug, *extra, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_a_bad_line_after_the_first_batch_writes_nothing_and_names_its_line(tmp_path, project_team):
    path = tmp_path / "prod.jsonl"
    lines = [_line(f"t{i}") for i in range(1499)] + [_line("bad", tokens_in=-5)]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CommandError) as error:
        _run(path, project_team["project"].slug)
    assert "line 1500: tokens_in" in str(error.value)
    assert "nothing was written" in str(error.value)
    assert Trajectory.objects.count() == 0


BAD_LINES = {
    2: _line("x" * 300),
    3: _line("neg", tokens_in=-1),
    4: _line("word", tokens_in="many"),
    5: _line("nul\u0000"),
    6: None,  # invalid UTF-8, written as bytes below
    7: "[1, 2]",
    8: json.dumps({"id": "norole", "turns": [{"content": "who am I"}]}),
}


def _mixed_file(tmp_path):
    path = tmp_path / "mixed.jsonl"
    with path.open("wb") as out:
        out.write((_line("good-1") + "\n").encode())
        for number in range(2, 9):
            raw = BAD_LINES[number]
            out.write(b'{"id": "\xff\xfe", "turns": []}\n' if raw is None else (raw + "\n").encode())
        out.write(b"\n")  # a blank line is not a trajectory, and not an error
        out.write((_line("good-2") + "\n").encode())
    return path


def test_every_bad_line_is_reported_with_its_number_and_reason(tmp_path, project_team):
    with pytest.raises(CommandError) as error:
        _run(_mixed_file(tmp_path), project_team["project"].slug)
    message = str(error.value)
    assert "7 bad line(s)" in message
    for number in range(2, 9):
        assert f"line {number}: " in message
    assert "line 2: id: String should have at most 200 characters" in message
    assert "line 5: id: Value error, text contains a NUL" in message
    assert "line 6: not valid UTF-8 (byte 0xff" in message
    assert "line 7: expected a JSON object" in message
    assert "line 8: turns: Value error, turn 0 has no `role`" in message
    assert Trajectory.objects.count() == 0


def test_skip_bad_lines_writes_the_good_ones_and_says_exactly_what(tmp_path, project_team):
    path = _mixed_file(tmp_path)
    out, err = _run(path, project_team["project"].slug, "--skip-bad-lines")
    assert "2 lines read: 2 new trajectories logged, 0 already present, 7 bad lines skipped" in out
    assert "line 3: tokens_in" in err
    assert set(Trajectory.objects.values_list("task_key", flat=True)) == {"good-1", "good-2"}
    out, _ = _run(path, project_team["project"].slug, "--skip-bad-lines")
    assert "2 lines read: 0 new trajectories logged, 2 already present" in out


def test_standard_input_is_read_like_a_file(monkeypatch, project_team):
    data = (_line("a") + "\n" + _line("b") + "\n" + _line("a") + "\n").encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    out, _ = _run("-", project_team["project"].slug)
    assert "3 lines read: 2 new trajectories logged, 1 already present" in out
    assert Trajectory.objects.count() == 2


def test_a_missing_or_empty_file_is_a_clear_error(tmp_path, project_team):
    with pytest.raises(CommandError, match="No file"):
        _run(tmp_path / "nope.jsonl", project_team["project"].slug)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(CommandError, match="no trajectories"):
        _run(empty, project_team["project"].slug)
