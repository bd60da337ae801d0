"""Composite reward: binary default, explicit shaped weights, clear rejections."""

from __future__ import annotations

import math

import pytest

from environments.rewards import (
    SHAPED_WEIGHTS,
    RewardConfigError,
    combine_reward,
    validate_weights,
)

ALL_ZERO = dict.fromkeys(SHAPED_WEIGHTS, 0.0)


@pytest.mark.parametrize(
    ("components", "reward"),
    [
        ({**ALL_ZERO, "completion": 1.0}, 1.0),
        ({**ALL_ZERO, "completion": 0.0, "right_tool": 1.0, "valid_artifact": 1.0}, 0.0),
        ({**ALL_ZERO, "completion": 1.0, "unsafe_action": 1.0}, 1.0),
        ({"completion": 0.5}, 0.0),
    ],
)
def test_binary_is_completion_only(components: dict, reward: float) -> None:
    assert combine_reward(components) == reward


@pytest.mark.parametrize(
    ("components", "reward"),
    [
        ({**ALL_ZERO, "right_tool": 1.0}, 0.1),
        ({**ALL_ZERO, "right_tool": 1.0, "valid_artifact": 1.0, "partial_success": 1.0}, 0.6),
        ({"right_tool": 1, "valid_artifact": 1, "partial_success": 1, "completion": 1, "unsafe_action": 0}, 1.6),
        ({**ALL_ZERO, "right_tool": 1.0, "unsafe_action": 1.0}, -0.9),
    ],
)
def test_shaped_uses_seed_weights(components: dict, reward: float) -> None:
    assert math.isclose(combine_reward(components, SHAPED_WEIGHTS), reward)


def test_custom_weights_only_count_weighted_components() -> None:
    components = {"completion": 1.0, "right_tool": 1.0}
    assert combine_reward(components, {"completion": 2.0}) == 2.0


def test_unknown_component_name_is_rejected_with_the_allowed_names() -> None:
    with pytest.raises(RewardConfigError, match=r"unknown reward component.*'right_toll'.*right_tool"):
        validate_weights({"right_toll": 0.1})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "0.1", True, None])
def test_non_numeric_weights_are_rejected(value: object) -> None:
    with pytest.raises(RewardConfigError, match="right_tool"):
        validate_weights({"right_tool": value})


def test_missing_weighted_component_is_an_error_not_zero() -> None:
    with pytest.raises(RewardConfigError, match="did not report reward component 'partial_success'"):
        combine_reward({"completion": 1.0}, {"completion": 1.0, "partial_success": 0.3})


def test_binary_needs_completion() -> None:
    with pytest.raises(RewardConfigError, match="completion"):
        combine_reward({"right_tool": 1.0})


def test_weights_must_be_a_mapping() -> None:
    with pytest.raises(RewardConfigError, match="object"):
        validate_weights([("completion", 1.0)])  # type: ignore[arg-type]
