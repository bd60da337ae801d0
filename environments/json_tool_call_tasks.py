"""Workplace tasks as json_tool_call tasks: one request, 3-6 tools, exactly one expected call.

A workplace task needs an agent loop: look someone up, search for the email or meeting, then
write. Its single-write tasks still make good one-call exercises once the lookups are done
for the model: the request is kept word for word and followed by what the lookups would have
returned (an email address, a record id) and today's date, so the one write call is fully
determined by the prompt. Converting dates ("Thursday, May 30" -> 2024-05-30), picking the
right tool among distractors and filling its arguments is what remains to be learned.

The tool list holds the right tool plus distractors drawn from its own toolkit (near misses)
and from other toolkits, chosen and ordered by a hash of the task id, so the same task always
shows the same tools. Split and template travel in the metadata unchanged, so tasks of the
held-out templates stay held out.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterable, Sequence
from typing import Any

from environments.json_tool_call import make_task
from environments.types import Task, ToolCall, ToolSpec
from environments.workplace.tools import TOOL_SPECS, TOOLS_BY_NAME, toolkit_of

MIN_TOOLS = 3
MAX_TOOLS = 6
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]+$")
_DATE_LINE = re.compile(r"Today's date is ([^.]*?) and the current time is ([0-9:]+)")


def _seeded_rng(task_id: str) -> random.Random:
    """A per-task RNG: same task id, same distractors and order, on every machine."""
    return random.Random(int(hashlib.sha256(f"json_tool_call:{task_id}".encode()).hexdigest(), 16))


def pick_tools(task_id: str, expected: str, count: int | None = None) -> list[ToolSpec]:
    """The expected tool plus distractors (about half from its own toolkit), shuffled."""
    rng = _seeded_rng(task_id)
    total = count if count is not None else rng.randint(MIN_TOOLS, MAX_TOOLS)
    if not MIN_TOOLS <= total <= MAX_TOOLS:
        raise ValueError(f"count must be in [{MIN_TOOLS}, {MAX_TOOLS}], got {total}")
    toolkit = toolkit_of(expected)
    same = [t for t in TOOL_SPECS if toolkit_of(t.name) == toolkit and t.name != expected]
    other = [t for t in TOOL_SPECS if toolkit_of(t.name) != toolkit]
    near = rng.sample(same, min(len(same), total // 2))
    far = rng.sample(other, total - 1 - len(near))
    tools = [TOOLS_BY_NAME[expected], *near, *far]
    rng.shuffle(tools)
    return tools


def _lookup_facts(reference: Sequence[dict[str, Any]], write: ToolCall, request: str) -> list[str]:
    """What the task's lookups would have told the agent, as short sentences.

    Only values the write needs and the request does not already spell out: record ids and
    email addresses (with the name that was looked up, when there was one).
    """
    names = [
        str(c["arguments"].get("name") or c["arguments"].get("customer_name") or "")
        for c in reference
        if c["name"] != write.name
    ]
    facts = []
    for argument, value in write.arguments.items():
        if not isinstance(value, str) or value.lower() in request.lower():
            continue
        if argument.endswith("_id"):
            facts.append(f"The {argument.removesuffix('_id').replace('_', ' ')} id is {value}.")
        elif _EMAIL.match(value):
            owner = next((n for n in names if n and _names_address(n, value)), "")
            facts.append(f"{owner}'s email address is {value}." if owner else f"Email address: {value}.")
    return facts


def _names_address(name: str, address: str) -> bool:
    local = address.split("@")[0].lower()
    return all(part.lower() in local for part in name.split())


def _today(task: Task) -> str:
    system = next((m.get("content") or "" for m in task.messages if m.get("role") == "system"), "")
    found = _DATE_LINE.search(system)
    return f"Today is {found.group(1)}, {found.group(2)}." if found else ""


def single_write(task: Task) -> ToolCall | None:
    """The one write call of a workplace task, or None when it has more than one."""
    truth = task.ground_truth if isinstance(task.ground_truth, list) else []
    if len(truth) != 1:
        return None
    return ToolCall.from_dict(truth[0])


def convert_task(task: Task) -> Task | None:
    """The json_tool_call version of one workplace task; None unless it has exactly one write."""
    write = single_write(task)
    if write is None or write.name not in TOOLS_BY_NAME:
        return None
    request = next((m["content"] for m in reversed(task.messages) if m.get("role") == "user"), "")
    reference = task.metadata.get("reference_calls") or []
    context = " ".join(filter(None, [_today(task), *_lookup_facts(reference, write, request)]))
    full_request = f"{request}\n{context}" if context else request
    converted = make_task(
        f"jtc-{task.id}",
        full_request,
        pick_tools(task.id, write.name),
        ToolCall(name=write.name, arguments=dict(write.arguments)),
        category=task.category,
        split=task.split,
    )
    converted.metadata.update(
        {"source_task_id": task.id, "template": task.metadata.get("template", "")}
    )
    return converted


def convert_tasks(tasks: Iterable[Task]) -> list[Task]:
    """Every convertible task, in order (multi-write tasks are skipped)."""
    return [t for t in (convert_task(task) for task in tasks) if t is not None]


def workplace_json_tasks(
    n_generated: int = 3000, seed: int = 0, *, min_held_out: int = 0
) -> list[Task]:
    """Generate workplace tasks and convert them; more are generated until min_held_out is met."""
    from environments.workplace.generator import generate_tasks

    generated = n_generated
    while True:
        tasks = convert_tasks(generate_tasks(generated, seed))
        held_out = sum(t.split == "held_out" for t in tasks)
        if held_out >= min_held_out:
            return tasks
        generated *= 2
