"""The two interfaces every environment and verifier implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from environments.types import Task, ToolCall, ToolSpec, Trajectory, VerifyResult


class Environment(ABC):
    """A (possibly stateful) world the model acts on through tool calls.

    A single-step environment is the one-turn case: `step` is never called and the
    verifier reads the one assistant message. State must be JSON-serialisable so a
    trajectory can be replayed and stored.
    """

    name: ClassVar[str]
    version: ClassVar[str]
    single_step: ClassVar[bool] = False
    """True: the model answers once and the agent loop never calls `step` (json_tool_call)."""

    @abstractmethod
    def tools(self, task: Task) -> list[ToolSpec]:
        """The tools offered for this task."""

    @abstractmethod
    def reset(self, task: Task) -> Any:
        """A fresh state for this task."""

    @abstractmethod
    def step(self, state: Any, call: ToolCall) -> tuple[Any, str]:
        """Apply one call; return the new state and the observation text for the model."""

    def final_state(self, state: Any) -> Any:
        """The JSON-serialisable end state (default: the state itself)."""
        return state


class Verifier(ABC):
    """Scores a trajectory. Deterministic where it can be; reverifiable from stored data."""

    name: ClassVar[str]
    version: ClassVar[str]
    config_schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.config = dict(config or {})

    @abstractmethod
    def verify(self, task: Task, trajectory: Trajectory) -> VerifyResult:
        """Score one trajectory; infrastructure failures return VerifyResult.failure(...)."""
