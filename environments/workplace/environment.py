"""The workplace environment: the 27-tool sandbox behind Crucible's Environment interface."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from environments.base import Environment
from environments.types import Task, ToolCall, ToolSpec
from environments.workplace.sandbox import Sandbox
from environments.workplace.state import BaseState, base_state
from environments.workplace.tools import TOOL_SPECS


def resolve_base(state_dir: str | Path | None) -> BaseState:
    """The cached base state for a CSV folder (absolute path as the key) or the seed."""
    if state_dir is None or str(state_dir) == "":
        return base_state(None)
    return base_state(str(Path(state_dir).expanduser().resolve()))


def offered_tools(task: Task) -> list[ToolSpec]:
    """The tools a task offers; a task that lists none is offered all 27."""
    return task.tool_specs() if task.tools else list(TOOL_SPECS)


class WorkplaceEnvironment(Environment):
    """Email, calendar, analytics, project management, CRM and a company directory.

    The state is a Sandbox (copy-on-write over a shared base); `final_state` renders it
    as JSON: the four writable tables as lists of rows, the analytics data, the plots.
    """

    name: ClassVar[str] = "workplace"
    version: ClassVar[str] = "1"

    def __init__(self, state_dir: str | Path | None = None) -> None:
        self.state_dir = state_dir

    def tools(self, task: Task) -> list[ToolSpec]:
        return offered_tools(task)

    def reset(self, task: Task) -> Sandbox:
        return Sandbox(resolve_base(self.state_dir))

    def step(self, state: Sandbox, call: ToolCall) -> tuple[Sandbox, str]:
        _, observation = state.observe(call.name, call.arguments)
        return state, observation

    def final_state(self, state: Sandbox) -> dict[str, Any]:
        return state.store.snapshot()
