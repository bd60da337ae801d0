"""`python -m environments` end to end, through a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from environments.cli import build_parser, cmd_score, parse_verifier_spec, reward_histogram
from environments.json_tool_call import make_task
from environments.registry import ConfigError
from environments.types import ToolCall, ToolSpec, Trajectory

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / ".." / "shared" / "third_party" / "nemo_gym_workplace_assistant"

TOOLS = [
    ToolSpec("get_weather", "Weather.", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    ToolSpec("delete_file", "Delete.", {"type": "object", "properties": {"path": {"type": "string"}}}, writes=True, destructive=True),
]
TASK = make_task("t1", "Weather in Paris?", TOOLS, ToolCall("get_weather", {"city": "Paris"}))
GOOD = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def run_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "environments", *args],
        cwd=cwd, capture_output=True, text=True, timeout=60,
    )


def write_rows(path: Path, outputs: list[str], extra_lines: tuple[str, ...] = ()) -> Path:
    lines = [
        json.dumps({"task": TASK.to_dict(), "trajectory": Trajectory.from_completion(text).to_dict()})
        for text in outputs
    ]
    path.write_text("\n".join([*lines, *extra_lines]) + "\n", encoding="utf-8")
    return path


def test_list_prints_versions() -> None:
    proc = run_cli("list")
    assert proc.returncode == 0, proc.stderr
    assert "json_tool_call   v1" in proc.stdout
    assert "verifiers:" in proc.stdout and "llm_judge" in proc.stdout


def test_score_prints_one_object_per_row_and_a_summary(tmp_path: Path) -> None:
    rows = write_rows(tmp_path / "rows.jsonl", [GOOD, "no idea", '{"name": "delete_file", "arguments": {"path": "/"}}', GOOD])
    proc = run_cli("score", "--env", "json_tool_call", str(rows))
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["reward"] for r in results] == [1.0, 0.0, 0.0, 1.0]
    assert [r["failure_bucket"] for r in results] == [None, "no_tool_call", "unsafe_action", None]
    assert set(results[0]) >= {"id", "reward", "passed", "failure_bucket", "components"}
    assert results[0]["id"] == "t1" and results[2]["components"]["unsafe"] == 1.0
    assert "pass rate: 0.5" in proc.stderr
    assert "no_tool_call=1" in proc.stderr and "unsafe_action=1" in proc.stderr
    assert "reward histogram: 0: 2, 1: 2" in proc.stderr


def test_score_with_inline_verifier_config(tmp_path: Path) -> None:
    rows = write_rows(tmp_path / "rows.jsonl", [f"Sure! {GOOD}"])
    lenient = run_cli("score", "--env", "json_tool_call", str(rows))
    strict = run_cli("score", "--env", "json_tool_call", "--verifier", 'json_tool_call:{"mode": "strict"}', str(rows))
    assert json.loads(lenient.stdout)["passed"] is True
    assert json.loads(strict.stdout)["failure_bucket"] == "invalid_json"


def test_score_with_verifier_file(tmp_path: Path) -> None:
    rows = write_rows(tmp_path / "rows.jsonl", [GOOD.replace("Paris", "Oslo")])
    spec = tmp_path / "verifier.json"
    spec.write_text(json.dumps({"name": "json_tool_call", "config": {"reward": "shaped"}}))
    proc = run_cli("score", "--env", "json_tool_call", "--verifier", str(spec), str(rows))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["failure_bucket"] == "wrong_arguments"
    assert json.loads(proc.stdout)["reward"] == pytest.approx(0.1 + 0.2)


def test_bad_rows_are_reported_and_skipped(tmp_path: Path) -> None:
    rows = write_rows(tmp_path / "rows.jsonl", [GOOD], extra_lines=("{not json", '{"foo": 1}', "[1, 2]"))
    proc = run_cli("score", "--env", "json_tool_call", str(rows))
    assert proc.returncode == 0
    assert len(proc.stdout.splitlines()) == 1
    assert "row 2: skipped: not valid JSON" in proc.stderr
    assert "row 3: skipped: unrecognised row" in proc.stderr
    assert "row 4: skipped: expected a JSON object" in proc.stderr
    assert "3 failed to load" in proc.stderr


def test_all_rows_bad_exits_non_zero_and_says_so(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text("garbage\n{}\n")
    proc = run_cli("score", "--env", "json_tool_call", str(rows))
    assert proc.returncode == 1
    assert "no row" in proc.stderr and "could be loaded" in proc.stderr


def test_bad_verifier_config_is_a_usage_error(tmp_path: Path) -> None:
    rows = write_rows(tmp_path / "rows.jsonl", [GOOD])
    proc = run_cli("score", "--env", "json_tool_call", "--verifier", 'json_tool_call:{"mode": "loose"}', str(rows))
    assert proc.returncode == 2
    assert "'mode'" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_input_file_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_cli("score", "--env", "json_tool_call", str(tmp_path / "absent.jsonl"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (None, ("json_tool_call", {})),
        ("python", ("python", {})),
        ('json_tool_call:{"mode": "strict"}', ("json_tool_call", {"mode": "strict"})),
    ],
)
def test_parse_verifier_spec(spec: str | None, expected: tuple) -> None:
    assert parse_verifier_spec(spec, "json_tool_call") == expected


def test_verifier_file_with_bare_config_uses_env_name(tmp_path: Path) -> None:
    spec = tmp_path / "v.json"
    spec.write_text('{"mode": "strict"}')
    assert parse_verifier_spec(str(spec), "json_tool_call") == ("json_tool_call", {"mode": "strict"})


@pytest.mark.parametrize("spec", ['json_tool_call:{"mode": ', "json_tool_call:[1]"])
def test_bad_inline_config_raises_config_error(spec: str) -> None:
    with pytest.raises(ConfigError, match="json_tool_call"):
        parse_verifier_spec(spec, "json_tool_call")


# A python verifier long enough (over 255 bytes) that, tried as a file name, it is too long.
LONG_PYTHON_CODE = (
    "def verify(task, trajectory):\n"
    '    """Pass when the last assistant turn names Paris; the padding makes the spec long."""\n'
    + "".join(f"    unused_{n} = {n}  # padding line {n}\n" for n in range(12))
    + '    last = [t for t in trajectory["turns"] if t["role"] == "assistant"][-1]\n'
    + '    return 1.0 if "Paris" in (last.get("content") or "") else 0.0\n'
)
LONG_PYTHON_SPEC = "python:" + json.dumps({"code": LONG_PYTHON_CODE})


def test_long_inline_config_is_parsed_not_looked_up_as_a_path() -> None:
    assert len(LONG_PYTHON_SPEC) > 300
    assert parse_verifier_spec(LONG_PYTHON_SPEC, "json_tool_call") == ("python", {"code": LONG_PYTHON_CODE})
    huge = "json_tool_call:" + json.dumps({"mode": "strict", "_": "x" * 5000})
    with pytest.raises(ConfigError) as raised:
        parse_verifier_spec(huge[:-1], "json_tool_call")  # bad JSON: a config error, no OSError
    assert "not valid JSON" in str(raised.value)


def test_score_with_a_long_inline_python_verifier(tmp_path: Path) -> None:
    rows = write_rows(tmp_path / "rows.jsonl", [GOOD, "no idea"])
    proc = run_cli("score", "--env", "json_tool_call", "--verifier", LONG_PYTHON_SPEC, str(rows))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert [json.loads(line)["reward"] for line in proc.stdout.splitlines()] == [1.0, 0.0]


def test_state_with_a_verifier_that_takes_none_says_what_it_is_for(tmp_path: Path) -> None:
    rows = write_rows(tmp_path / "rows.jsonl", [GOOD])
    proc = run_cli(
        "score", "--env", "json_tool_call", "--verifier", LONG_PYTHON_SPEC,
        "--state", str(tmp_path), str(rows),
    )
    assert proc.returncode == 2
    assert "--state applies to the workplace verifier only" in proc.stderr
    assert "unknown config key" not in proc.stderr and "Traceback" not in proc.stderr


def test_state_still_reaches_the_workplace_verifier(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("environments.workplace")
    built = []
    monkeypatch.setattr("environments.cli.get_verifier", lambda name, config: built.append((name, config)) or _FakeVerifier())
    args = build_parser().parse_args(["score", "--env", "workplace", "--state", "/seed/csv", str(tmp_path / "absent")])
    assert cmd_score(args) == 2  # the input file is missing; the verifier was built first
    assert built[-1] == ("workplace", {"state_dir": "/seed/csv"})


class _FakeVerifier:
    config_schema = {"type": "object", "properties": {"state_dir": {"type": "string"}}}


def test_reward_histogram_bins_many_distinct_values() -> None:
    histogram = reward_histogram([i / 100 for i in range(100)])
    assert len(histogram) == 10 and sum(histogram.values()) == 100
    assert reward_histogram([0.0, 1.0, 1.0]) == {"0": 1, "1": 2}


def test_generate_workplace_tasks(tmp_path: Path) -> None:
    pytest.importorskip("environments.workplace.generator")
    out = tmp_path / "tasks.jsonl"
    proc = run_cli("generate", "--env", "workplace", "--n", "20", "--seed", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    tasks = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(tasks) == 20 and all(t["ground_truth"] for t in tasks)


def _ground_truth_as_rollout(row: dict) -> dict:
    """A NeMo Gym rollout row whose response makes exactly the task's ground-truth calls."""
    output = [
        {"type": "function_call", "name": call["name"], "arguments": call["arguments"], "call_id": f"c{i}"}
        for i, call in enumerate(row["ground_truth"])
    ]
    return {**row, "response": {"output": output}}


def test_score_ground_truth_rollouts_with_nemo_gym_state(tmp_path: Path) -> None:
    pytest.importorskip("environments.workplace")
    rows_file = FIXTURES / "rows" / "example.jsonl"
    if not rows_file.is_file():
        pytest.skip("NeMo Gym fixtures are not beside the checkout")
    rows = [json.loads(line) for line in rows_file.read_text().splitlines() if line.strip()]
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text("".join(json.dumps(_ground_truth_as_rollout(r)) + "\n" for r in rows))
    proc = run_cli("score", "--env", "workplace", "--state", str(FIXTURES / "csv"), str(rollouts))
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(rows)
    assert all(r["reward"] == 1.0 and r["passed"] for r in results), results
    assert "pass rate" in proc.stderr.lower()


def test_rollouts_without_ground_truth_are_verifier_errors_not_zeros() -> None:
    pytest.importorskip("environments.workplace")
    rollouts = FIXTURES / "rows" / "example_rollouts.jsonl"
    if not rollouts.is_file():
        pytest.skip("NeMo Gym fixtures are not beside the checkout")
    proc = run_cli("score", "--env", "workplace", "--state", str(FIXTURES / "csv"), str(rollouts))
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert results and all(r["reward"] is None and r["failure_bucket"] == "verifier_error" for r in results)
