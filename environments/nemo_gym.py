"""NeMo Gym row formats <-> Crucible Task / Trajectory / VerifyResult, and JSONL files.

Task row: {id, responses_create_params: {input: [messages], tools: [Responses function
tools], ...}, ground_truth: [{name, arguments: "<json>"}], category, environment_name}.
Rollout row: the task row (often without id and ground truth) plus `response` (a
Responses object whose `output` items are message, function_call {name, arguments,
call_id} and function_call_output {call_id, output}) and `reward`.

NeMo Gym's `workplace_assistant` environment is Crucible's `workplace`; its categories
carry a `workplace_assistant_` prefix that Crucible drops. Everything a Task has no field
for (the original id, other request parameters) is kept under metadata["nemo_gym"] so a
row exported after import is the row imported.

Crucible JSONL: one {"task": ..., "trajectory": ..., "result": ...} object per line, each
the `to_dict()` of the value type (trajectory and result may be null).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from environments.types import Task, ToolSpec, Trajectory, VerifyResult

NEMO_WORKPLACE = "workplace_assistant"
CRUCIBLE_WORKPLACE = "workplace"
_CATEGORY_PREFIX = NEMO_WORKPLACE + "_"
_META = "nemo_gym"


def _environment_from_nemo(name: str | None) -> str:
    return CRUCIBLE_WORKPLACE if name == NEMO_WORKPLACE else (name or "")


def _environment_to_nemo(name: str) -> str:
    return NEMO_WORKPLACE if name == CRUCIBLE_WORKPLACE else name


def _tool_spec(tool: dict[str, Any]) -> dict[str, Any]:
    """A Responses tool as a ToolSpec dict; workplace tools get their read/write facts."""
    from environments.workplace.tools import TOOLS_BY_NAME

    spec = ToolSpec.from_dict(tool)
    known = TOOLS_BY_NAME.get(spec.name)
    if known is not None:
        spec = dataclasses.replace(spec, writes=known.writes, destructive=known.destructive)
    return spec.to_dict()


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:24]} is beyond a double's range")
    return value


def _call_dict(call: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """A ground-truth call with its arguments decoded (they arrive as JSON text).

    The text is held to JSON's own numbers (no NaN, no Infinity, nothing that overflows to
    infinity), as the row around it is: they could not be stored, scored or exported back."""
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = (json.loads(arguments, parse_constant=_refuse_constant, parse_float=_finite_number)
                         if arguments.strip() else {})
        except ValueError as exc:
            detail = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise ValueError(f"ground_truth[{index}].arguments is not JSON text of finite numbers ({detail})") from None
    return {"name": call["name"], "arguments": arguments}


def _stable_id(value: Any) -> str:
    digest = hashlib.sha1(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()
    return f"nemo-{digest[:12]}"


def task_row_to_task(row: dict[str, Any]) -> Task:
    """A NeMo Gym task row (or the task part of a rollout row) as a Crucible Task."""
    params = row.get("responses_create_params")
    if not isinstance(params, dict) or not isinstance(params.get("input"), list | str):
        raise ValueError(
            "not a NeMo Gym row: it needs responses_create_params.input (the request "
            "messages); see the NeMo Gym task row format"
        )
    messages = params["input"]
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    environment = row.get("environment_name")
    category = row.get("category") or ""
    if environment == NEMO_WORKPLACE and category.startswith(_CATEGORY_PREFIX):
        category = category[len(_CATEGORY_PREFIX):]
    truth = row.get("ground_truth")
    extras = {k: v for k, v in params.items() if k not in ("input", "tools")}
    meta = {
        "id": row.get("id"),
        "category": row.get("category"),
        "environment_name": environment,
        "responses_create_params": extras,
    }
    return Task(
        id=str(row["id"]) if row.get("id") is not None else _stable_id(messages),
        messages=[dict(m) for m in messages],
        tools=[_tool_spec(t) for t in params.get("tools") or []],
        ground_truth=[_call_dict(c, i) for i, c in enumerate(truth)] if isinstance(truth, list) else truth,
        category=category,
        environment=_environment_from_nemo(environment),
        metadata={_META: meta},
    )


def task_to_task_row(task: Task) -> dict[str, Any]:
    """A Crucible Task as a NeMo Gym task row (the inverse of task_row_to_task)."""
    meta = task.metadata.get(_META, {})
    environment = meta.get("environment_name") or _environment_to_nemo(task.environment)
    category = meta.get("category")
    if category is None:
        prefix = _CATEGORY_PREFIX if environment == NEMO_WORKPLACE else ""
        category = prefix + task.category if task.category else task.category
    truth = task.ground_truth
    if isinstance(truth, list):
        truth = [
            {"name": c["name"], "arguments": c["arguments"] if isinstance(c["arguments"], str)
             else json.dumps(c["arguments"])}
            for c in truth
        ]
    params = {
        "input": [dict(m) for m in task.messages],
        "tools": [ToolSpec.from_dict(t).to_responses() for t in task.tools],
        **meta.get("responses_create_params", {}),
    }
    return {
        "id": meta.get("id", task.id),
        "responses_create_params": params,
        "ground_truth": truth,
        "category": category,
        "environment_name": environment,
    }


def _output_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _turns_from_output(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses output items as chat turns; consecutive function calls share one turn."""
    turns: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            call = {"name": item.get("name"), "arguments": item.get("arguments", "{}"),
                    "call_id": item.get("call_id")}
            last = turns[-1] if turns else None
            if last and last["role"] == "assistant" and last.get("tool_calls") and not last["content"]:
                last["tool_calls"].append(call)
            else:
                turns.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            turns.append({
                "role": "tool",
                "tool_call_id": item.get("call_id"),
                "content": output if isinstance(output, str) else json.dumps(output),
            })
        elif kind == "message" or ("role" in item and "content" in item):
            turns.append({"role": item.get("role", "assistant"), "content": _output_text(item)})
    return turns


def rollout_row_to_task_and_trajectory(row: dict[str, Any]) -> tuple[Task, Trajectory]:
    """A NeMo Gym rollout row as the Task it answered and the Trajectory it took."""
    response = row.get("response")
    if not isinstance(response, dict) or not isinstance(response.get("output"), list):
        raise ValueError("not a NeMo Gym rollout row: it needs response.output (a list of items)")
    task = task_row_to_task(row)
    details = response.get("incomplete_details") or {}
    truncated = response.get("status") == "incomplete" and details.get("reason") == "max_output_tokens"
    metadata = {_META: {"reward": row.get("reward"), "response_id": response.get("id"),
                        "model": response.get("model")}}
    return task, Trajectory(turns=_turns_from_output(response["output"]), truncated=truncated,
                            metadata=metadata)


def _output_items(trajectory: Trajectory) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for index, turn in enumerate(trajectory.turns):
        role = turn.get("role")
        if role == "assistant":
            for n, call in enumerate(turn.get("tool_calls") or []):
                arguments = call.get("arguments", {})
                items.append({
                    "type": "function_call",
                    "name": call.get("name"),
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                    "call_id": call.get("call_id") or f"call_{index}_{n}",
                })
            if turn.get("content"):
                items.append({
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": turn["content"], "annotations": []}],
                })
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": turn.get("tool_call_id"),
                          "output": turn.get("content", "")})
    return items


def trajectory_to_rollout_row(
    task: Task, trajectory: Trajectory, result: VerifyResult | None
) -> dict[str, Any]:
    """A scored trajectory as a NeMo Gym rollout row (task row + response + reward)."""
    row = task_to_task_row(task)
    row["response"] = {
        "object": "response",
        "status": "incomplete" if trajectory.truncated else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if trajectory.truncated else None,
        "output": _output_items(trajectory),
    }
    row["reward"] = result.reward if result is not None else None
    if result is not None:
        row["crucible"] = {
            "passed": result.passed,
            "components": result.components,
            "failure_bucket": str(result.failure_bucket) if result.failure_bucket else None,
            "flags": result.flags,
            "error": result.error,
        }
    return row


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """The objects of a JSONL file; a bad line raises with its line number."""
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not a JSON object ({exc.msg})") from None


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> int:
    """Write one compact JSON object per line; returns how many were written."""
    count = 0
    with Path(path).open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
            count += 1
    return count


CrucibleRecord = tuple[Task, Trajectory | None, VerifyResult | None]


def crucible_record(
    task: Task, trajectory: Trajectory | None = None, result: VerifyResult | None = None
) -> dict[str, Any]:
    return {
        "task": task.to_dict(),
        "trajectory": trajectory.to_dict() if trajectory is not None else None,
        "result": result.to_dict() if result is not None else None,
    }


def read_crucible_jsonl(path: str | Path) -> Iterator[CrucibleRecord]:
    """Crucible JSONL records; a bare task object per line is accepted too."""
    for row in read_jsonl(path):
        task_data = row.get("task", row if "messages" in row else None)
        if task_data is None:
            raise ValueError(f"{path}: a line has neither 'task' nor task fields (id, messages)")
        trajectory = row.get("trajectory")
        result = row.get("result")
        yield (
            Task.from_dict(task_data),
            Trajectory.from_dict(trajectory) if trajectory else None,
            VerifyResult.from_dict(result) if result else None,
        )


def write_crucible_jsonl(path: str | Path, records: Iterable[CrucibleRecord]) -> int:
    return write_jsonl(path, (crucible_record(*record) for record in records))


def read_nemo_jsonl(path: str | Path) -> Iterator[tuple[Task, Trajectory | None]]:
    """NeMo Gym task rows (trajectory None) and rollout rows, told apart by `response`."""
    for row in read_jsonl(path):
        if "response" in row:
            yield rollout_row_to_task_and_trajectory(row)
        else:
            yield task_row_to_task(row), None
