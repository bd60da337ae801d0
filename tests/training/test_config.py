"""Run-config validation: the published schema, error messages, defaults and presets."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from training.config import (
    PRESETS,
    RUN_CONFIG_SCHEMA,
    ConfigError,
    RunConfig,
    VerifierSpec,
    config_to_dict,
    validate_run_config,
)

SEED_EXAMPLE = {
    "model": "nvidia/Nemotron-Nano-9B-v2",
    "algorithm": "grpo",
    "adapter": "lora",
    "num_generations_per_prompt": 8,
    "reward": "tool_call_verifier",
    "eval_interval": 10,
    "held_out_eval": "tool_call_eval",
}


def test_schema_is_valid_draft_2020_12():
    Draft202012Validator.check_schema(RUN_CONFIG_SCHEMA)
    assert RUN_CONFIG_SCHEMA["additionalProperties"] is False


def test_every_field_is_documented_in_the_schema():
    properties = RUN_CONFIG_SCHEMA["properties"]
    for f in dataclasses.fields(RunConfig):
        assert len(properties[f.name]["description"]) > 20, f.name
    assert all(len(p["description"]) > 20 for p in properties.values())


def test_every_default_satisfies_its_own_schema():
    validator = Draft202012Validator(RUN_CONFIG_SCHEMA)
    for name, prop in RUN_CONFIG_SCHEMA["properties"].items():
        errors = list(validator.iter_errors({name: prop["default"]})) if "default" in prop else []
        assert not errors, (name, errors)


def test_seed_example_validates_as_written():
    cfg = validate_run_config(dict(SEED_EXAMPLE))
    assert PRESETS["seed_example"] == SEED_EXAMPLE
    assert cfg.kind == "grpo"
    assert cfg.algorithm == "grpo"
    assert cfg.verifier == VerifierSpec(name="tool_call_verifier")
    assert cfg.num_generations_per_prompt == 8
    assert cfg.held_out_eval == "tool_call_eval"
    assert not list(Draft202012Validator(RUN_CONFIG_SCHEMA).iter_errors(SEED_EXAMPLE))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_validate_and_round_trip(name):
    cfg = validate_run_config(PRESETS[name])
    as_dict = config_to_dict(cfg)
    assert validate_run_config(json.loads(json.dumps(as_dict))) == cfg
    assert not list(Draft202012Validator(RUN_CONFIG_SCHEMA).iter_errors(as_dict))


def test_trl_defaults_apply_where_reference_names_them():
    cfg = validate_run_config({"kind": "grpo", "adapter": "full"})
    assert (cfg.num_generations_per_prompt, cfg.beta, cfg.epsilon, cfg.epsilon_high) == (
        8,
        0.0,
        0.2,
        0.2,
    )
    assert (cfg.loss_type, cfg.scale_rewards, cfg.temperature) == ("dapo", "group", 1.0)
    assert (cfg.max_completion_length, cfg.learning_rate) == (512, 1e-6)
    assert (cfg.keep_top_k, cfg.eval_interval) == (3, 10)


@pytest.mark.parametrize(
    ("algorithm", "expected"),
    [
        ("dapo", {"loss_type": "dapo", "epsilon_high": 0.28, "dynamic_sampling": True}),
        ("dr_grpo", {"loss_type": "dr_grpo", "scale_rewards": "none", "epsilon_high": 0.2}),
        ("gspo", {"loss_type": "gspo", "epsilon": 3e-4, "epsilon_high": 4e-4}),
        ("bnpo", {"loss_type": "bnpo", "dynamic_sampling": False}),
    ],
)
def test_algorithm_sets_defaults_of_missing_keys(algorithm, expected):
    cfg = validate_run_config({"algorithm": algorithm})
    assert {k: getattr(cfg, k) for k in expected} == expected


def test_explicit_keys_override_algorithm_defaults():
    cfg = validate_run_config({"algorithm": "dapo", "epsilon_high": 0.3, "dynamic_sampling": False})
    assert (cfg.epsilon_high, cfg.dynamic_sampling) == (0.3, False)


def test_lora_learning_rate_default_differs_from_full():
    assert validate_run_config({"kind": "sft", "adapter": "lora"}).learning_rate == 1e-4
    assert validate_run_config({"kind": "sft", "adapter": "full"}).learning_rate == 2e-5


def test_unknown_key_is_named_with_suggestion():
    with pytest.raises(ConfigError) as info:
        validate_run_config({**SEED_EXAMPLE, "learing_rate": 1e-5})
    message = str(info.value)
    assert message.startswith("unknown key 'learing_rate' in run config (allowed: ")
    assert "did you mean 'learning_rate'?" in message


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("learning_rate", -1, "'learning_rate' must be > 0, got -1"),
        ("num_generations_per_prompt", 1, "'num_generations_per_prompt' must be >= 2, got 1"),
        ("num_generations_per_prompt", "8", "'num_generations_per_prompt' must be of type integer"),
        ("num_generations_per_prompt", 8.5, "'num_generations_per_prompt' must be of type integer"),
        ("adapter", "qlora", '\'adapter\' must be one of "lora", "full", got "qlora"'),
        ("bf16", "yes", "'bf16' must be boolean or \"auto\""),
        ("max_tasks", "all", "'max_tasks' must be integer or null"),
        ("epsilon", 1.5, "'epsilon' must be < 1, got 1.5"),
        ("top_p", 0, "'top_p' must be > 0"),
        ("environment", "Work Place", "'environment' must match"),
        ("lora_target_modules", [], "'lora_target_modules' must not be empty"),
        ("verifier", {"name": "x", "cfg": {}}, "'verifier' has unknown key(s) \"cfg\""),
        ("verifier", {"config": {}}, "'verifier' needs the key(s) \"name\""),
        ("seed", None, "'seed' must be of type integer, got null"),
    ],
)
def test_bad_values_are_named(key, value, expected):
    data = {"kind": "grpo", key: value}
    with pytest.raises(ConfigError) as info:
        validate_run_config(data)
    assert str(info.value).startswith(expected)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({}, "needs 'kind'"),
        ({"kind": "sft", "algorithm": "dapo"}, "'algorithm' applies to kind grpo only"),
        (
            {"algorithm": "grpo", "reward": "a", "verifier": "b"},
            "either 'verifier' or its alias 'reward'",
        ),
        ({"kind": "grpo", "micro_batch_size": 7}, "'micro_batch_size' 7 must divide"),
        (
            {"kind": "grpo", "micro_batch_size": 8, "gradient_accumulation_steps": 2},
            "'micro_batch_size' 8 * 'gradient_accumulation_steps' 2 must equal",
        ),
        (
            {"kind": "eval", "eval_num_samples": 4},
            "'eval_num_samples' 4 > 1 needs 'eval_temperature'",
        ),
        ({"kind": "grpo", "warmup_steps": 200}, "'warmup_steps' must be <= max_steps"),
        (
            {"kind": "grpo", "overlong_buffer": 600},
            "'overlong_buffer' must be <= max_completion_length",
        ),
        (
            {"kind": "grpo", "rollout_backend": "vllm", "device": "cpu"},
            "'rollout_backend' vllm needs a GPU",
        ),
        (
            {"kind": "grpo", "rollout_backend": "vllm", "device": "cuda", "rollout_dropout": True},
            "'rollout_dropout' needs rollout_backend hf",
        ),
        ({"kind": "dpo"}, "'preference_pairs' is required"),
        ({"kind": "sft", "sft_source": "reviewed"}, "'reviewed_trajectories' is required"),
    ],
)
def test_inconsistent_combinations_are_rejected(data, expected):
    with pytest.raises(ConfigError) as info:
        validate_run_config(data)
    assert expected in str(info.value)


def test_non_object_is_rejected():
    with pytest.raises(ConfigError, match="must be a JSON object"):
        validate_run_config([SEED_EXAMPLE])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "micro", "accumulation"),
    [
        ({}, 8, 32),
        ({"micro_batch_size": 64}, 64, 4),
        ({"gradient_accumulation_steps": 2}, 128, 2),
        ({"num_prompts_per_step": 3, "num_generations_per_prompt": 6}, 2, 9),
    ],
)
def test_batch_split_is_resolved_consistently(given, micro, accumulation):
    cfg = validate_run_config({"kind": "grpo", **given})
    assert (cfg.micro_batch_size, cfg.gradient_accumulation_steps) == (micro, accumulation)
    assert micro * accumulation == cfg.num_prompts_per_step * cfg.num_generations_per_prompt


def test_verifier_forms_are_normalised():
    by_name = validate_run_config({"kind": "grpo", "verifier": "json_tool_call"})
    by_object = validate_run_config(
        {"kind": "grpo", "verifier": {"name": "python", "config": {"code": "x"}}}
    )
    assert by_name.verifier == VerifierSpec("json_tool_call")
    assert by_object.verifier == VerifierSpec("python", {"code": "x"})


def test_integral_floats_are_stored_as_int():
    cfg = validate_run_config({"kind": "grpo", "max_tasks": 5.0, "num_prompts_per_step": 4.0})
    assert type(cfg.max_tasks) is int and type(cfg.num_prompts_per_step) is int
    assert type(cfg.micro_batch_size) is int


def test_config_module_does_not_import_torch():
    code = "import sys, training.config; sys.exit('torch' in sys.modules)"
    repo_root = Path(__file__).resolve().parents[2]
    assert subprocess.run([sys.executable, "-c", code], cwd=repo_root, check=False).returncode == 0


def test_every_config_field_is_in_exactly_one_form_group():
    """The web form is built from the schema's x-group; a new field must be placed in a group."""
    import dataclasses

    from training.config import FIELD_GROUPS, RUN_CONFIG_SCHEMA, RunConfig

    grouped = [name for _, names in FIELD_GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(f.name for f in dataclasses.fields(RunConfig))
    assert len(grouped) == len(set(grouped))
    assert RUN_CONFIG_SCHEMA["properties"]["epsilon_high"]["x-group"] == "algorithm"
    assert RUN_CONFIG_SCHEMA["properties"]["epsilon_high"]["x-kinds"] == ["grpo"]
    assert RUN_CONFIG_SCHEMA["properties"]["epsilon_high"]["x-advanced"] is True


def test_config_problems_lists_every_problem_at_once_under_its_field():
    from training.config import ConfigProblem, config_problems

    problems = config_problems({"kind": "grpo", "lr": 1, "learning_rate": -1, "max_steps": "x"})
    assert all(isinstance(p, ConfigProblem) for p in problems)
    by_field = {p.field: p.message for p in problems}
    assert set(by_field) == {"lr", "learning_rate", "max_steps"}
    assert by_field["lr"].startswith("unknown key 'lr' in run config (allowed: ")
    assert by_field["learning_rate"] == "'learning_rate' must be > 0, got -1"
    assert by_field["max_steps"] == "'max_steps' must be of type integer, got \"x\""
    assert config_problems({"kind": "grpo"}) == []
    assert config_problems([1]) == [ConfigProblem("", "a run config must be a JSON object, got list")]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"verifier": {"name": ""}}, "verifier.name", "'verifier.name' must not be empty"),
        ({"verifier": {"name": "x", "cfg": {}}}, "verifier", "has unknown key(s) \"cfg\""),
        ({"lora_target_modules": ["q_proj", ""]}, "lora_target_modules.1", "must not be empty"),
    ],
)
def test_a_problem_inside_a_key_carries_its_json_path(data, field, words):
    from training.config import config_problems

    [problem] = config_problems({"kind": "grpo", **data})
    assert problem.field == field and words in problem.message


@pytest.mark.parametrize(
    ("data", "field", "other"),
    [
        ({}, "kind", "'algorithm'"),
        ({"kind": "sft", "algorithm": "dapo"}, "algorithm", "kind 'sft'"),
        ({"algorithm": "grpo", "reward": "a", "verifier": "b"}, "reward", "'verifier'"),
        ({"kind": "grpo", "micro_batch_size": 7}, "micro_batch_size", "num_generations_per_prompt"),
        ({"kind": "grpo", "gradient_accumulation_steps": 7}, "gradient_accumulation_steps", "num_prompts_per_step"),
        ({"kind": "grpo", "micro_batch_size": 8, "gradient_accumulation_steps": 2}, "micro_batch_size",
         "'gradient_accumulation_steps' 2"),
        ({"kind": "eval", "eval_num_samples": 4}, "eval_num_samples", "'eval_temperature' > 0"),
        ({"kind": "grpo", "warmup_steps": 200}, "warmup_steps", "max_steps (100)"),
        ({"kind": "grpo", "overlong_buffer": 600}, "overlong_buffer", "max_completion_length (512)"),
        ({"kind": "grpo", "rollout_backend": "vllm", "device": "cpu"}, "rollout_backend", "device cpu"),
        ({"kind": "grpo", "rollout_backend": "vllm", "device": "cuda", "num_processes": 2}, "num_processes",
         "rollout_backend hf"),
        ({"kind": "grpo", "rollout_backend": "vllm", "device": "cuda", "rollout_dropout": True}, "rollout_dropout",
         "rollout_backend hf"),
        ({"kind": "dpo"}, "preference_pairs", "kind dpo"),
        ({"kind": "sft", "sft_source": "reviewed"}, "reviewed_trajectories", "sft_source is reviewed"),
    ],
)
def test_a_check_between_fields_names_the_field_to_change_and_says_the_other(data, field, other):
    with pytest.raises(ConfigError) as info:
        validate_run_config(data)
    [problem] = info.value.problems
    assert problem.field == field and other in problem.message
    assert info.value.by_field() == {field: problem.message}


def test_every_combination_that_cannot_run_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        validate_run_config({"kind": "grpo", "warmup_steps": 200, "overlong_buffer": 600})
    assert [p.field for p in info.value.problems] == ["warmup_steps", "overlong_buffer"]
    assert str(info.value).startswith("'warmup_steps' must be <= max_steps") and "; 'overlong_buffer'" in str(info.value)


def test_a_config_error_keeps_its_problems_across_pickling():
    import pickle

    from training.config import ConfigProblem

    error = ConfigError("'x' is wrong", field="x")
    assert error.problems == (ConfigProblem("x", "'x' is wrong"),) and str(error) == "'x' is wrong"
    assert pickle.loads(pickle.dumps(error)).problems == error.problems
