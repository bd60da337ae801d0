"""How a selector's row dataclass documents a field once, for the pages' readers and the API document."""

from __future__ import annotations

from typing import Any

DESCRIPTION = "description"


def described(text: str) -> dict[str, Any]:
    """Field metadata: `x: int = field(metadata=described("what x means"))`; the API states it."""
    return {DESCRIPTION: text}
