"""The GRPO trainer: learning on a toy task, log-prob alignment, loss normaliser, reference, DAPO."""

from __future__ import annotations

import functools
import math

import torch

from environments.base import Verifier
from environments.json_tool_call import JsonToolCallEnvironment
from environments.types import Task, VerifyResult
from training.agent_loop import Episode
from training.cli import execute
from training.config import validate_run_config
from training.data import TaskSource
from training.events import EventWriter, read_events
from training.grpo import (
    GRPOTrainer,
    TrainBatch,
    completion_logprobs,
    pack,
    prompts_for_step,
    shaped_reward,
)
from training.models import tiny_llama
from training.prompts import render_prompt
from training.runner import build_job

PROMPT = [{"role": "user", "content": "Pick a word."}]


class InMemoryTasks(TaskSource):
    """A TaskSource over a list, without a file."""

    def __init__(self, tasks: list[Task]) -> None:
        self.tasks, self.max_tasks, self.name = tasks, None, "test tasks"
        self.by_id = {t.id: t for t in tasks}


def toy_tasks(n_train: int = 8, n_validation: int = 2) -> InMemoryTasks:
    return InMemoryTasks(
        [Task(id=f"t{i}", messages=PROMPT, split="train") for i in range(n_train)]
        + [Task(id=f"v{i}", messages=PROMPT, split="validation") for i in range(n_validation)]
    )


class TextIs(Verifier):
    """Reward 1 when the completion is exactly `target` (a single token's text)."""

    name, version = "text_is", "1"

    def __init__(self, target: str) -> None:
        super().__init__({})
        self.target = target

    def verify(self, task, trajectory):
        ok = trajectory.turns[0]["content"] == self.target
        return VerifyResult(reward=float(ok), passed=ok, components={"hit": float(ok)})


class ConstantFor(Verifier):
    """Reward 1 for tasks whose id is in `always`, else reward from `inner`."""

    name, version = "constant_for", "1"

    def __init__(self, always: set[str], inner: Verifier) -> None:
        super().__init__({})
        self.always, self.inner = always, inner

    def verify(self, task, trajectory):
        if task.id in self.always:
            return VerifyResult(reward=1.0, passed=True)
        return self.inner.verify(task, trajectory)


def grpo_config(**overrides):
    base = dict(
        kind="grpo", device="cpu", bf16=False, num_prompts_per_step=2,
        num_generations_per_prompt=8, max_steps=12, max_completion_length=1, eval_interval=0,
        checkpoint_interval=0, lr_scheduler="constant", learning_rate=2e-3, lora_dropout=0.0,
    )
    return validate_run_config({**base, **overrides})


def peaked_model(tokenizer):
    """The tiny model with a sharper output head, so some first tokens are likely enough to
    be sampled (a random head is near-uniform over 49k tokens)."""
    model = tiny_llama(tokenizer, seed=0)
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    return model


def likely_first_token(model, tokenizer) -> str:
    ids = tokenizer.encode(render_prompt(tokenizer, PROMPT, None), add_special_tokens=False)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, -1]
    return tokenizer.decode([int(logits.argmax())])


def train_metrics(run_dir) -> list[dict]:
    events, _ = read_events(run_dir / "events.jsonl")
    return [e for e in events if e["type"] == "metric" and e["split"] == "train"]


def test_grpo_learns_to_emit_the_rewarded_first_token(tokenizer, tmp_path):
    model = peaked_model(tokenizer)
    verifier = TextIs(likely_first_token(model, tokenizer))
    with EventWriter(tmp_path) as events:
        execute(grpo_config(), tmp_path, events, model=model, tokenizer=tokenizer,
                environment=JsonToolCallEnvironment(), verifier=verifier, tasks=toy_tasks())
    rewards = [m["metrics"]["reward"] for m in train_metrics(tmp_path)]
    assert len(rewards) == 12
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.3, rewards
    assert sum(rewards[-3:]) / 3 > 0.7, rewards


def test_step_metrics_are_named_as_the_reference_says(tokenizer, tmp_path):
    model = peaked_model(tokenizer)
    cfg = grpo_config(max_steps=1, beta=0.05)
    with EventWriter(tmp_path) as events:
        execute(cfg, tmp_path, events, model=model, tokenizer=tokenizer,
                environment=JsonToolCallEnvironment(), verifier=TextIs("x"), tasks=toy_tasks())
    metrics = train_metrics(tmp_path)[0]["metrics"]
    for name in (
        "reward", "reward_std", "rewards/hit/mean", "frac_reward_zero_std", "loss", "grad_norm",
        "lr", "kl", "entropy", "clip_ratio/low_mean", "clip_ratio/high_mean",
        "clip_ratio/region_mean", "completions/mean_length", "completions/max_length",
        "completions/clipped_ratio", "tools/call_frequency", "tools/failure_frequency",
        "num_turns/mean", "timing/generation", "timing/training", "timing/step",
        "tokens_per_second", "cost/device_seconds", "cost/generated_tokens", "cost/trained_tokens",
    ):
        assert name in metrics, name
    assert metrics["kl"] is not None and abs(metrics["kl"]) < 1e-4  # first step: policy == ref
    assert metrics["frac_reward_zero_std"] == 1.0  # "x" is never produced


def _episodes(tokenizer, lengths):
    prompt = tokenizer.encode("hello there, how are you", add_special_tokens=False)
    episodes = []
    for i, n in enumerate(lengths):
        ids = list(range(100 + i, 100 + i + n))
        episodes.append(Episode(task=Task(id=f"e{i}", messages=[]), group=0, trajectory=None,
                                prompt_ids=prompt[: 3 + i], completion_ids=ids,
                                completion_mask=[1] * n, completion_logprobs=[0.0] * n))
    return episodes


def test_completion_logprobs_match_a_full_forward_per_sequence(tokenizer):
    model = tiny_llama(tokenizer, seed=1)
    episodes = _episodes(tokenizer, [2, 5, 3])
    packed = pack(episodes, tokenizer.pad_token_id, torch.device("cpu"))
    logp, _ = completion_logprobs(model, packed, temperature=0.7)
    for row, e in enumerate(episodes):
        ids = torch.tensor([e.prompt_ids + e.completion_ids])
        logits = model(ids).logits[0, len(e.prompt_ids) - 1 : -1] / 0.7
        expected = torch.log_softmax(logits, -1).gather(-1, ids[0, len(e.prompt_ids):, None])[:, 0]
        got = logp[row, : len(e.completion_ids)]
        assert torch.allclose(got, expected, atol=1e-4), row
        assert packed["completion_mask"][row].sum() == len(e.completion_ids)


def _grouped_episodes(tokenizer, completion_lengths):
    """Two groups of samples, each group on one prompt (of different lengths), like GRPO's G."""
    prompts = [tokenizer.encode(text, add_special_tokens=False)
               for text in ("hello there, how are you today", "pick a word")]
    episodes = []
    for p, prompt in enumerate(prompts):
        for i, n in enumerate(completion_lengths):
            ids = [200 + 7 * p + i + k for k in range(n)]
            mask = [1] * n
            if n > 3:
                mask[1:3] = [0, 0]  # tool output inside the completion: scored, not trained
            episodes.append(Episode(task=Task(id=f"g{p}-{i}", messages=[]), group=p,
                                    trajectory=None, prompt_ids=list(prompt), completion_ids=ids,
                                    completion_mask=mask, completion_logprobs=[0.0] * n))
    return episodes


def _scored(model, episodes, pad_id, share_prompts):
    """Log-probs and the gradient of a weighted sum of them, for every parameter."""
    model.zero_grad()
    packed = pack(episodes, pad_id, torch.device("cpu"), share_prompts=share_prompts)
    logp, _ = completion_logprobs(model, packed, temperature=0.8)
    weights = torch.linspace(-1.0, 1.0, logp.numel()).reshape(logp.shape)
    (logp * packed["completion_mask"] * weights).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return logp.detach() * packed["completion_mask"], grads


def test_shared_prompts_give_the_log_probs_and_gradients_of_full_sequences(tokenizer):
    model = tiny_llama(tokenizer, seed=4)
    for lengths in ([1, 5, 3, 6], [1, 1, 1]):  # the second: no completion forward at all
        episodes = _grouped_episodes(tokenizer, lengths)
        packed = pack(episodes, tokenizer.pad_token_id, torch.device("cpu"))
        assert packed["prompt_ids"].shape[0] == 2
        assert packed["prompt_index"].tolist() == [0] * len(lengths) + [1] * len(lengths)
        shared, shared_grads = _scored(model, episodes, tokenizer.pad_token_id, True)
        full, full_grads = _scored(model, episodes, tokenizer.pad_token_id, False)
        assert torch.allclose(shared, full, atol=1e-5), lengths
        assert shared_grads.keys() == full_grads.keys()
        assert "model.embed_tokens.weight" in shared_grads  # the prompt's activations get gradient
        for name, grad in full_grads.items():
            assert grad.abs().sum() > 0, name
            gap = (shared_grads[name] - grad).norm() / grad.norm()  # fp32 summation order differs
            assert gap < 1e-4, (lengths, name, float(gap))


def test_shared_prompts_are_run_once_per_micro_batch(tokenizer):
    model = tiny_llama(tokenizer, seed=4)
    seen: list[tuple[int, ...]] = []
    model.model.embed_tokens.register_forward_hook(lambda _m, args, _out: seen.append(tuple(args[0].shape)))
    episodes = _grouped_episodes(tokenizer, [2, 5, 3, 6])
    packed = pack(episodes, tokenizer.pad_token_id, torch.device("cpu"))
    width_p, width_c = packed["prompt_ids"].shape[1], packed["completion_ids"].shape[1]
    completion_logprobs(model, packed, temperature=1.0)
    assert seen == [(2, width_p), (8, width_c - 1)]  # 2 prompts, then 8 completions on their cache
    seen.clear()
    completion_logprobs(model, pack(episodes, tokenizer.pad_token_id, torch.device("cpu"),
                                    share_prompts=False), temperature=1.0)
    assert seen == [(8, width_p + width_c)]


def test_models_without_a_plain_kv_cache_score_every_row_in_full(tokenizer, sliding_window_model):
    model = sliding_window_model
    seen: list[tuple[int, ...]] = []
    model.model.embed_tokens.register_forward_hook(lambda _m, args, _out: seen.append(tuple(args[0].shape)))
    episodes = _grouped_episodes(tokenizer, [2, 5, 3, 6])
    packed = pack(episodes, tokenizer.pad_token_id, torch.device("cpu"))
    logp, _ = completion_logprobs(model, packed, temperature=1.0)
    assert seen == [(8, packed["input_ids"].shape[1])]
    assert torch.isfinite(logp).all()


def _gradient(tokenizer, run_dir, micro_batch_size, loss_type="dapo"):
    cfg = grpo_config(micro_batch_size=micro_batch_size, num_prompts_per_step=1,
                      loss_type=loss_type, adapter="full")
    with EventWriter(run_dir) as events:
        job = build_job(cfg, run_dir, events, model=tiny_llama(tokenizer, seed=2),
                        tokenizer=tokenizer, environment=JsonToolCallEnvironment(),
                        verifier=TextIs("x"), tasks=toy_tasks())
        trainer = GRPOTrainer(job)
        episodes = _episodes(tokenizer, [1, 4, 2, 6, 3, 5, 2, 1])
        advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 0.3, -0.3])
        batch = TrainBatch(episodes, torch.zeros(8), advantages, [True] * 8)
        trainer.optimizer.step = lambda: None  # keep the gradient for inspection
        trainer.optimizer.zero_grad = lambda set_to_none=True: None
        trainer.train_on(batch)
        return job.model.lm_head.weight.grad.clone()


def test_gradient_accumulation_gives_the_gradient_of_one_large_batch(tokenizer, tmp_path):
    # bnpo is left out on purpose: REFERENCE.md defines it per micro-batch (sum l*M / sum M of
    # the micro-batch, as TRL does), so its gradient depends on the split by definition.
    for loss_type in ("dapo", "grpo", "dr_grpo", "gspo"):
        whole = _gradient(tokenizer, tmp_path, 8, loss_type)
        accumulated = _gradient(tokenizer, tmp_path, 2, loss_type)
        assert whole.abs().sum() > 0
        assert torch.allclose(whole, accumulated, atol=1e-6, rtol=1e-4), loss_type


def test_kl_reference_is_the_model_with_adapters_disabled_not_a_copy(tokenizer, tmp_path):
    cfg = grpo_config(beta=0.1, max_steps=1)
    with EventWriter(tmp_path) as events:
        job = build_job(cfg, tmp_path, events, model=tiny_llama(tokenizer, seed=3),
                        tokenizer=tokenizer, environment=JsonToolCallEnvironment(),
                        verifier=TextIs("x"), tasks=toy_tasks())
    assert job.is_lora and job.reference is None
    calls = []
    original = job.model.disable_adapter

    def counting():
        calls.append(1)
        return original()

    job.model.disable_adapter = counting
    with EventWriter(tmp_path) as job.events:
        GRPOTrainer(job).step(1)
    assert calls  # the reference forward ran through disable_adapter
    no_kl = grpo_config(beta=0.0, max_steps=1)
    job.cfg = no_kl
    calls.clear()
    with EventWriter(tmp_path) as job.events:
        GRPOTrainer(job).step(1)
    assert not calls  # beta 0: no reference forward at all


def test_dynamic_sampling_drops_groups_without_reward_spread(tokenizer, tmp_path):
    model = peaked_model(tokenizer)
    target = likely_first_token(model, tokenizer)
    tasks = toy_tasks(n_train=8)
    always = {"t0", "t1", "t2", "t3"}  # reward 1 whatever the model says: zero spread
    cfg = grpo_config(algorithm="dapo", max_steps=1, max_generation_batches=4)
    with EventWriter(tmp_path) as events:
        job = build_job(cfg, tmp_path, events, model=model, tokenizer=tokenizer,
                        environment=JsonToolCallEnvironment(),
                        verifier=ConstantFor(always, TextIs(target)), tasks=tasks)
        trainer = GRPOTrainer(job)
        rollouts, groups = trainer.collect(1)
    g = cfg.num_generations_per_prompt
    for group in groups:
        assert rollouts.episodes[group * g].task.id not in always
        rewards = rollouts.rewards[group * g : (group + 1) * g]
        assert max(rewards) > min(rewards)
    assert 1 <= rollouts.rounds <= 4


def test_prompts_are_a_pure_function_of_the_step():
    tasks = [Task(id=str(i), messages=[]) for i in range(5)]
    first = [t.id for t in prompts_for_step(tasks, 3, 4, seed=7)]
    assert first == [t.id for t in prompts_for_step(tasks, 3, 4, seed=7)]
    epoch = [t.id for s in (1, 2) for t in prompts_for_step(tasks, s, 2, seed=7)][:4]
    assert len(set(epoch)) == 4  # within an epoch no task repeats


def test_dynamic_sampling_fills_the_step_with_groups_that_have_a_spread(tokenizer, tmp_path):
    model = peaked_model(tokenizer)
    target = likely_first_token(model, tokenizer)
    always = {"t0", "t1", "t2", "t3"}
    cfg = grpo_config(algorithm="dapo", max_steps=1, max_generation_batches=6)
    with EventWriter(tmp_path) as events:
        job = build_job(cfg, tmp_path, events, model=model, tokenizer=tokenizer,
                        environment=JsonToolCallEnvironment(),
                        verifier=ConstantFor(always, TextIs(target)), tasks=toy_tasks(n_train=8))
        rollouts, groups = GRPOTrainer(job).collect(1)
    assert len(groups) == cfg.num_prompts_per_step  # refilled, not trained short
    assert len(set(groups)) == len(groups)
    assert len(rollouts.episodes) == rollouts.rounds * cfg.num_prompts_per_step * cfg.num_generations_per_prompt


def test_dynamic_sampling_stops_at_the_cap_and_trains_on_the_last_round(tokenizer, tmp_path):
    """Every group scores 1 whatever is said: no round can help, so the cap ends the search."""
    tasks = toy_tasks(n_train=8)
    always = {t.id for t in tasks.tasks}
    cfg = grpo_config(algorithm="dapo", max_steps=1, max_generation_batches=3)
    with EventWriter(tmp_path) as events:
        job = build_job(cfg, tmp_path, events, model=peaked_model(tokenizer), tokenizer=tokenizer,
                        environment=JsonToolCallEnvironment(),
                        verifier=ConstantFor(always, TextIs("x")), tasks=tasks)
        rollouts, groups = GRPOTrainer(job).collect(1)
    assert rollouts.rounds == 3
    assert groups == [4, 5]  # the third round's two groups (zero advantages, nothing learnt)


def _truncation_batch(tokenizer):
    episodes = _episodes(tokenizer, [3, 2])
    episodes[0].stop_reason = "length"  # hit max_completion_length
    episodes[1].stop_reason = "single_step"
    return TrainBatch(episodes, torch.zeros(2), torch.tensor([1.0, -1.0]), [True, True])


def test_mask_truncated_completions_leaves_truncated_rows_out_of_the_loss(tokenizer, tmp_path):
    for masked in (False, True):
        cfg = grpo_config(mask_truncated_completions=masked, max_completion_length=3)
        with EventWriter(tmp_path) as events:
            job = build_job(cfg, tmp_path, events, model=tiny_llama(tokenizer, seed=2),
                            tokenizer=tokenizer, environment=JsonToolCallEnvironment(),
                            verifier=TextIs("x"), tasks=toy_tasks())
            trainer = GRPOTrainer(job)
        batch = _truncation_batch(tokenizer)
        packed = pack(batch.episodes, tokenizer.pad_token_id, torch.device("cpu"))
        mask = trainer._loss_mask(batch, range(2), packed)
        assert int(mask[0].sum()) == (0 if masked else 3), masked
        assert int(mask[1].sum()) == 2


class _Result:
    def __init__(self, reward):
        self.reward = reward


def test_overlong_shaping_ramps_the_reward_down_by_the_longest_turn():
    cfg = validate_run_config({"kind": "grpo", "max_completion_length": 100, "overlong_buffer": 20})

    def episode(mask):
        return Episode(task=Task(id="e", messages=[]), group=0, trajectory=None, prompt_ids=[1],
                       completion_ids=[5] * len(mask), completion_mask=mask,
                       completion_logprobs=[0.0] * len(mask))

    # The REFERENCE vector, on single-turn episodes: 80, 85, 90, 100 tokens.
    for length, penalty in ((80, 0.0), (85, -0.25), (90, -0.5), (100, -1.0)):
        assert shaped_reward(_Result(1.0), episode([1] * length), cfg) == 1.0 + penalty
    # Two turns of 60 with tool output between: 120 generated, but no turn is overlong.
    two_turns = [1] * 60 + [0] * 30 + [1] * 60
    assert shaped_reward(_Result(1.0), episode(two_turns), cfg) == 1.0
    assert shaped_reward(_Result(0.5), episode([1] * 60 + [0] * 5 + [1] * 90), cfg) == 0.0
    off = validate_run_config({"kind": "grpo", "max_completion_length": 100})
    assert shaped_reward(_Result(1.0), episode([1] * 100), off) == 1.0
    assert math.isnan(shaped_reward(_Result(None), episode([1] * 100), cfg))


def test_rollout_dropout_samples_in_train_mode_and_validation_never_does(tokenizer, tmp_path):
    seen: dict[str, set[bool]] = {}
    for dropout in (True, False):
        cfg = grpo_config(max_steps=1, lora_dropout=0.5, rollout_dropout=dropout)
        run_dir = tmp_path / str(dropout)
        with EventWriter(run_dir) as events:
            job = build_job(cfg, run_dir, events, model=tiny_llama(tokenizer, seed=3),
                            tokenizer=tokenizer, environment=JsonToolCallEnvironment(),
                            verifier=TextIs("x"), tasks=toy_tasks())
            trainer = GRPOTrainer(job)
            decoder = job.model.get_base_model().model
            for phase, run in (("rollout", functools.partial(trainer.generate_round, 1, 0)),
                               ("validation", functools.partial(trainer.validate, 1))):
                modes = seen.setdefault(f"{phase} dropout={dropout}", set())
                hook = decoder.register_forward_hook(lambda m, a, o, modes=modes: modes.add(m.training))
                run()
                hook.remove()
    assert seen == {
        "rollout dropout=True": {True},
        "validation dropout=True": {False},
        "rollout dropout=False": {False},
        "validation dropout=False": {False},
    }
