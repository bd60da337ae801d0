"""json_tool_call verifications per second on one core.

    python bench/verify_json_tool_call.py [--seconds 3]

Scores a realistic mix of single-call outputs (exact, fenced, prose-wrapped, wrong
arguments, malformed) against tasks with five tools, cycling through them, and prints
verifications/s for the mix and for the all-correct fast path.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

from environments.json_tool_call import JsonToolCallVerifier, make_task  # noqa: E402
from environments.types import Task, ToolCall, ToolSpec, Trajectory  # noqa: E402


def _tools() -> list[ToolSpec]:
    def obj(props: dict, required: list[str]) -> dict:
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}

    s, i = {"type": "string"}, {"type": "integer"}
    return [
        ToolSpec("get_weather", "Weather for a city.", obj({"city": s, "days": i}, ["city"])),
        ToolSpec("search_emails", "Search the inbox.", obj({"query": s, "limit": i}, ["query"])),
        ToolSpec("send_email", "Send an email.", obj({"to": s, "subject": s, "body": s}, ["to", "subject", "body"]), writes=True),
        ToolSpec("create_event", "Create an event.", obj({"title": s, "start": s, "minutes": i}, ["title", "start"]), writes=True),
        ToolSpec("delete_email", "Delete an email.", obj({"email_id": s}, ["email_id"]), writes=True, destructive=True),
    ]


def _workload() -> tuple[list[tuple[Task, Trajectory]], list[tuple[Task, Trajectory]]]:
    tools = _tools()
    task = make_task("bench", "Email ana about the Q3 report.", tools, ToolCall(
        "send_email", {"to": "ana@example.com", "subject": "Q3 report", "body": "Draft attached."}
    ))
    good = '{"name": "send_email", "arguments": {"to": "ana@example.com", "subject": "Q3 report", "body": "Draft attached."}}'
    outputs = [
        good,
        f"```json\n{good}\n```",
        f"<tool_call>\n{good}\n</tool_call>",
        f"Sure! Here is the call:\n{good}",
        good.replace("ana@", "bob@"),
        '{"name": "search_emails", "arguments": {"query": "Q3 report"}}',
        "{'name': 'send_email', 'arguments': {'to': 'ana@example.com'}}",
        '{"name": "send_email", "arguments": {"to": "ana@example.com", "subject": "Q3 report"}}',
    ]
    mix = [(task, Trajectory.from_completion(text)) for text in outputs]
    return mix, [(task, Trajectory.from_completion(good))]


def rate(verifier: JsonToolCallVerifier, pairs: list[tuple[Task, Trajectory]], seconds: float) -> float:
    """Verifications per second over at least `seconds` of wall time."""
    done, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for task, trajectory in pairs * 50:
            verifier.verify(task, trajectory)
        done += len(pairs) * 50
    return done / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    args = parser.parse_args()
    mix, exact = _workload()
    verifier = JsonToolCallVerifier()
    print(f"json_tool_call mixed outputs:   {rate(verifier, mix, args.seconds):>10,.0f} verifications/s")
    print(f"json_tool_call correct outputs: {rate(verifier, exact, args.seconds):>10,.0f} verifications/s")


if __name__ == "__main__":
    main()
