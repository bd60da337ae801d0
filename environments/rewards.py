"""Composite reward: binary by default, shaped only with explicit, validated weights.

The seeds' advice: start with +1 pass / 0 otherwise; add intermediate signals only when they
measure real progress, and keep every part visible. So verifiers report each component
separately (each in [0, 1]: 1 means "happened"), and `combine_reward` turns them into one
number:

    binary (weights=None): 1.0 if `completion` is 1, else 0.0
    shaped: sum(weight[name] * components[name]) over the weighted names

SHAPED_WEIGHTS are the seeds' example values; `unsafe_action` is a penalty (-1 by default).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

COMPONENTS = ("right_tool", "valid_artifact", "partial_success", "completion", "unsafe_action")

SHAPED_WEIGHTS: dict[str, float] = {
    "right_tool": 0.1,
    "valid_artifact": 0.2,
    "partial_success": 0.3,
    "completion": 1.0,
    "unsafe_action": -1.0,
}

WEIGHTS_SCHEMA: dict = {
    "type": "object",
    "description": "Weight per reward component; omitted components count 0.",
    "properties": {name: {"type": "number", "default": SHAPED_WEIGHTS[name]} for name in COMPONENTS},
    "additionalProperties": False,
}


class RewardConfigError(ValueError):
    """Weights or components that cannot make a reward; the message says which and why."""


def validate_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """Weights as a plain dict of finite floats over known component names."""
    if not isinstance(weights, Mapping):
        raise RewardConfigError(
            f"reward weights must be an object mapping component names to numbers, "
            f"got {type(weights).__name__}"
        )
    unknown = sorted(set(weights) - set(COMPONENTS))
    if unknown:
        raise RewardConfigError(
            f"unknown reward component(s) {unknown}; use only {list(COMPONENTS)}"
        )
    clean: dict[str, float] = {}
    for name, value in weights.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise RewardConfigError(
                f"weight for {name!r} must be a finite number, got {value!r}"
            )
        clean[name] = float(value)
    return clean


def _component(components: Mapping[str, float], name: str) -> float:
    if name not in components:
        raise RewardConfigError(
            f"the verifier did not report reward component {name!r} (it reported "
            f"{sorted(components)}); remove its weight or use a verifier that reports it"
        )
    return float(components[name])


def combine_reward(
    components: Mapping[str, float], weights: Mapping[str, float] | None = None
) -> float:
    """One reward from named components: binary on `completion`, or the weighted sum."""
    if weights is None:
        return 1.0 if _component(components, "completion") >= 1.0 else 0.0
    clean = validate_weights(weights)
    return sum(w * _component(components, name) for name, w in clean.items() if w != 0.0)
