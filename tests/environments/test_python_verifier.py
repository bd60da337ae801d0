"""The python verifier: user verify() in the sandbox, every returned value validated."""

from __future__ import annotations

import math

import pytest

from environments.python_verifier import (
    EXAMPLE_CODE,
    PythonVerifier,
    VerdictError,
    verdict_from_value,
)
from environments.registry import ConfigError, get_verifier
from environments.sandbox import SandboxPool
from environments.types import FailureBucket, Task, Trajectory

TASK = Task(
    id="t1",
    messages=[{"role": "user", "content": "What is 6 * 7?"}],
    ground_truth="42",
    category="math",
)


@pytest.fixture(scope="module")
def pool():
    with SandboxPool() as pool:
        yield pool


def verifier(pool, code: str, **config) -> PythonVerifier:
    return PythonVerifier({"code": code, **config}, pool=pool)


# --- verdict validation (pure, no sandbox) --------------------------------------------


@pytest.mark.parametrize(
    ("value", "threshold", "reward", "passed"),
    [
        (1.0, 1.0, 1.0, True),
        (1, 1.0, 1.0, True),
        (0.0, 1.0, 0.0, False),
        (0.6, 0.5, 0.6, True),
        (-1, 1.0, -1.0, False),
        ({"reward": 0.3}, 0.3, 0.3, True),
        ({"passed": True}, 1.0, 1.0, True),
        ({"passed": False}, 1.0, 0.0, False),
        ({"reward": 0.2, "passed": True}, 1.0, 0.2, True),
    ],
)
def test_good_verdicts(value, threshold, reward, passed):
    result = verdict_from_value(value, pass_threshold=threshold)
    assert (result.reward, result.passed, result.error) == (reward, passed, None)


def test_dict_verdict_keeps_components_bucket_flags_and_info():
    result = verdict_from_value(
        {
            "reward": 0.5,
            "passed": False,
            "components": {"format": 1, "answer": 0.0},
            "failure_bucket": "wrong_arguments",
            "flags": ["slow"],
            "info": {"why": "off by one"},
        }
    )
    assert result.components == {"format": 1.0, "answer": 0.0}
    assert result.failure_bucket is FailureBucket.WRONG_ARGUMENTS
    assert result.flags == ["slow"]
    assert result.info == {"why": "off by one"}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "a bool"),
        ("1.0", "a str"),
        ([1.0], "a list"),
        (None, "a NoneType"),
        (math.inf, "finite"),
        ({}, "neither 'reward' nor 'passed'"),
        ({"reward": "high"}, "'reward' = 'high'; it must be a number"),
        ({"reward": True}, "must be a number"),
        ({"reward": 1, "score": 2}, "unknown key(s) 'score'"),
        ({"passed": "yes"}, "must be true or false"),
        ({"reward": 0, "components": [1]}, "must be a dict"),
        ({"reward": 0, "components": {"a": "x"}}, "component 'a'"),
        ({"reward": 0, "failure_bucket": "bad_vibes"}, "use one of: invalid_json"),
        ({"reward": 1, "failure_bucket": "wrong_tool"}, "for a passing trajectory"),
        ({"reward": 0, "flags": "x"}, "list of strings"),
        ({"reward": 0, "info": 3}, "'info' = 3"),
    ],
)
def test_bad_verdicts_say_what_was_wrong(value, message):
    with pytest.raises(VerdictError) as error:
        verdict_from_value(value)
    assert message in str(error.value)


# --- through the sandbox ----------------------------------------------------------------


def test_example_code_scores_the_trajectory(pool):
    check = verifier(pool, EXAMPLE_CODE)
    good = check.verify(TASK, Trajectory.from_completion("It is 42."))
    bad = check.verify(TASK, Trajectory.from_completion("It is 41."))
    assert (good.reward, good.passed) == (1.0, True)
    assert (bad.reward, bad.passed) == (0.0, False)
    assert good.info["sandbox"]["isolation"] in {"bwrap", "unshare", "rlimits-only"}


def test_task_and_trajectory_arrive_as_plain_dicts(pool):
    code = (
        "def verify(task, trajectory):\n"
        "    return {'reward': 0.0, 'info': {'task': task, 'trajectory': trajectory}}\n"
    )
    trajectory = Trajectory.from_completion("hi", truncated=True)
    result = verifier(pool, code).verify(TASK, trajectory)
    assert result.info["task"] == TASK.to_dict()
    assert result.info["trajectory"] == trajectory.to_dict()


def test_dict_verdict_through_sandbox(pool):
    code = (
        "def verify(task, trajectory):\n"
        "    print('debug line')\n"
        "    return {'reward': 0.25, 'components': {'format': 1}, 'failure_bucket': 'truncated'}\n"
    )
    result = verifier(pool, code, pass_threshold=0.5).verify(TASK, Trajectory.from_completion(""))
    assert (result.reward, result.passed) == (0.25, False)
    assert result.failure_bucket is FailureBucket.TRUNCATED
    assert result.info["sandbox"]["stdout_tail"] == "debug line\n"


def test_exception_is_a_verifier_error_not_a_zero(pool):
    code = "def verify(task, trajectory):\n    return 1 / 0\n"
    result = verifier(pool, code).verify(TASK, Trajectory.from_completion(""))
    assert result.reward is None and not result.passed
    assert result.failure_bucket is FailureBucket.VERIFIER_ERROR
    assert result.info["reason"] == "exception"
    assert "ZeroDivisionError" in result.error


def test_timeout_is_a_verifier_error(pool):
    code = "def verify(task, trajectory):\n    while True:\n        pass\n"
    result = verifier(pool, code, timeout_seconds=0.5).verify(TASK, Trajectory.from_completion(""))
    assert result.reward is None
    assert result.info["reason"] == "timeout"


def test_invalid_return_value_is_a_verifier_error(pool):
    code = "def verify(task, trajectory):\n    return {'reward': 1, 'failure_bucket': 'nope'}\n"
    result = verifier(pool, code).verify(TASK, Trajectory.from_completion(""))
    assert result.reward is None
    assert result.info["reason"] == "bad_result"
    assert "failure_bucket" in result.error and "use one of" in result.error


def test_nan_reward_is_a_verifier_error(pool):
    code = "def verify(task, trajectory):\n    return float('nan')\n"
    result = verifier(pool, code).verify(TASK, Trajectory.from_completion(""))
    assert result.reward is None
    assert result.info["reason"] == "bad_result"


def test_syntax_error_is_reported_when_verifying(pool):
    result = verifier(pool, "def verify(task, trajectory)\n    return 1\n").verify(
        TASK, Trajectory.from_completion("")
    )
    assert result.reward is None
    assert "SyntaxError" in result.error and "line 1" in result.error


def test_registry_builds_it_and_checks_config():
    assert isinstance(get_verifier("python", {"code": EXAMPLE_CODE}), PythonVerifier)
    with pytest.raises(ConfigError, match="code"):
        get_verifier("python", {})
    with pytest.raises(ConfigError, match="unknown config key"):
        get_verifier("python", {"code": EXAMPLE_CODE, "cmd": "rm -rf /"})
    with pytest.raises(ConfigError, match="verify"):
        get_verifier("python", {"code": "   "})


def test_non_json_task_is_a_verifier_error_not_a_crash(pool):
    task = Task(id="t2", messages=[], metadata={"when": {1, 2}})
    result = verifier(pool, EXAMPLE_CODE).verify(task, Trajectory.from_completion(""))
    assert result.reward is None
    assert result.info["reason"] == "bad_input"
    assert "plain JSON" in result.error
