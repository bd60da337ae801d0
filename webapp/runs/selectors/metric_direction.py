"""Which way is better for each metric: the minimum of a loss, the maximum of a success rate.

"Best" on the compare page and anywhere else a run's best value is shown reads this, so a
loss's best is its lowest point. Names are REFERENCE.md's (and the training process's
system/, timing/ and cost/ families); a metric with no better direction (the learning
rate, entropy, completion length) has none, and pages show its final value only.
"""

from __future__ import annotations

from typing import Literal

Direction = Literal["min", "max"]

_LOWER_IS_BETTER_PREFIXES = ("timing/", "cost/", "clip_ratio/", "buckets/", "system/memory", "latency")
_LOWER_IS_BETTER = frozenset({
    "loss", "kl", "grad_norm", "unsafe_action_rate", "truncation_rate", "verifier_error_rate",
    "frac_reward_zero_std", "completions/clipped_ratio", "tools/failure_frequency", "latency_p50", "latency_p95",
})
_HIGHER_IS_BETTER_PREFIXES = ("rewards/", "pass@")
_HIGHER_IS_BETTER = frozenset({
    "reward", "reward_mean", "success_rate", "valid_json_rate", "correct_tool_rate", "correct_arguments_rate",
    "execution_success_rate", "tokens_per_second", "generation/tokens_per_second", "rewards/accuracies",
    "rewards/margins", "rewards/chosen",
})


def metric_direction(name: str) -> Direction | None:
    """"min" or "max" for a metric whose better value has a direction, else None."""
    if name in _LOWER_IS_BETTER or name.startswith(_LOWER_IS_BETTER_PREFIXES):
        return "min"
    if name in _HIGHER_IS_BETTER or name.startswith(_HIGHER_IS_BETTER_PREFIXES):
        return "max"
    return None
