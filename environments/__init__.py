"""Crucible environments: tools, verifiers, tool-call parsing and tasks.

Pure Python: importable without Django, torch or a database. The web app, the
workers and the training process all depend on this package, never the reverse.
"""

from environments.types import (
    FailureBucket,
    Task,
    ToolCall,
    ToolSpec,
    Trajectory,
    VerifyResult,
)

__all__ = ["FailureBucket", "Task", "ToolCall", "ToolSpec", "Trajectory", "VerifyResult"]
