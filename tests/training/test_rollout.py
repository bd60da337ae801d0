"""HF generate engine: padding, masks, stop handling and log-probs that match the trainer's."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from training.models import apply_lora, autocast_keeps_frozen_weight_copies, tiny_llama
from training.rollout import (
    HFGenerateEngine,
    SamplingParams,
    cut_at_stop,
    has_plain_kv_cache,
    left_pad,
    stop_token_ids,
)

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
PROMPTS = [CHAT.format("hi"), CHAT.format("please list every open ticket for the sales team")]


def teacher_forced_logprobs(model, prompt_ids, completion_ids, temperature):
    """What the trainer computes: log_softmax(logits / T) of each completion token."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1]  # (T, V)
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(1, torch.tensor(completion_ids)[:, None]).squeeze(1)


def eos_biased_model(tokenizer, bias: float):
    """A tiny model whose head favours EOS, so completions stop at varied lengths."""
    model = tiny_llama(tokenizer, seed=3)
    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[tokenizer.eos_token_id] = bias
    model.lm_head = head
    return model


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"n": 0}, "n"),
        ({"temperature": 0, "dropout": True}, "dropout sampling needs temperature > 0"),
    ],
)
def test_sampling_params_reject_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


@pytest.mark.parametrize(
    ("ids", "expected_ids", "reason"),
    [
        ([5, 6, 2, 2, 2], [5, 6, 2], "stop"),
        ([2, 7], [2], "stop"),
        ([5, 6, 7], [5, 6, 7], "length"),
        ([5, 0, 6], [5, 0], "stop"),
    ],
)
def test_cut_at_stop_keeps_the_first_stop_token(ids, expected_ids, reason):
    logprobs = [-float(i) for i in range(len(ids))]
    kept, kept_lp, finish = cut_at_stop(ids, logprobs, {0, 2})
    assert (kept, finish) == (expected_ids, reason)
    assert kept_lp == logprobs[: len(kept)]


def test_left_pad_mask_comes_from_lengths_not_pad_id(tokenizer):
    eos = tokenizer.eos_token_id
    assert tokenizer.pad_token_id == eos  # the SmolLM2 case this guards against
    ids, mask = left_pad([[7, eos, 8], [eos]], pad_id=eos, device="cpu")
    assert ids.tolist() == [[7, eos, 8], [eos, eos, eos]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_stop_tokens_include_tokenizer_and_generation_config_eos(tokenizer, tiny_model):
    assert stop_token_ids(tokenizer, tiny_model) == [tokenizer.eos_token_id]


@pytest.mark.parametrize("share_prefill", [True, False])
def test_logprobs_match_teacher_forcing_with_left_padding(tokenizer, tiny_model, share_prefill):
    engine = HFGenerateEngine(tiny_model, tokenizer, share_prefill=share_prefill)
    params = SamplingParams(temperature=0.7, max_new_tokens=8, n=2, seed=11)
    groups = engine.generate(PROMPTS, params)
    assert [len(g) for g in groups] == [2, 2]
    for group in groups:
        for gen in group:
            assert len(gen.completion_ids) == len(gen.logprobs) == 8
            expected = teacher_forced_logprobs(tiny_model, gen.prompt_ids, gen.completion_ids, 0.7)
            torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("n", [1, 3])
def test_shared_prefill_samples_the_same_tokens(tokenizer, tiny_model, n):
    """Our prefill (n copies in a preallocated cache) changes no sample, for n = 1 too."""
    params = SamplingParams(temperature=1.0, max_new_tokens=6, n=n, seed=5)
    shared = HFGenerateEngine(tiny_model, tokenizer, share_prefill=True).generate(PROMPTS, params)
    plain = HFGenerateEngine(tiny_model, tokenizer, share_prefill=False).generate(PROMPTS, params)
    assert [[g.completion_ids for g in group] for group in shared] == [
        [g.completion_ids for g in group] for group in plain
    ]
    if n > 1:
        assert len({tuple(g.completion_ids) for g in shared[1]}) > 1  # n samples really differ


def test_sliding_window_models_keep_transformers_cache_and_sample_the_same(tokenizer, sliding_window_model):
    model = sliding_window_model
    assert not has_plain_kv_cache(model) and has_plain_kv_cache(tiny_llama(tokenizer))
    params = SamplingParams(temperature=1.0, max_new_tokens=6, n=2, seed=5)
    shared = HFGenerateEngine(model, tokenizer, share_prefill=True).generate(PROMPTS, params)
    plain = HFGenerateEngine(model, tokenizer, share_prefill=False).generate(PROMPTS, params)
    assert [[g.completion_ids for g in group] for group in shared] == [
        [g.completion_ids for g in group] for group in plain
    ]


def test_greedy_is_the_argmax_path_and_ignores_n(tokenizer, tiny_model):
    engine = HFGenerateEngine(tiny_model, tokenizer)
    (group,) = engine.generate([PROMPTS[1]], SamplingParams(temperature=0, max_new_tokens=5, n=2))
    assert group[0].completion_ids == group[1].completion_ids
    ids = list(group[0].prompt_ids)
    for token in group[0].completion_ids:
        with torch.no_grad():
            assert int(tiny_model(torch.tensor([ids])).logits[0, -1].argmax()) == token
        ids.append(token)
    expected = teacher_forced_logprobs(
        tiny_model, group[0].prompt_ids, group[0].completion_ids, 1.0
    )
    torch.testing.assert_close(torch.tensor(group[0].logprobs), expected, atol=1e-4, rtol=0)


def test_completions_stop_at_the_first_eos_and_keep_it(tokenizer):
    model = eos_biased_model(tokenizer, bias=11.0)
    engine = HFGenerateEngine(model, tokenizer)
    groups = engine.generate(
        PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=12, n=8, seed=0)
    )
    gens = [g for group in groups for g in group]
    eos = tokenizer.eos_token_id
    stopped = [g for g in gens if g.finish_reason == "stop"]
    assert stopped and len({len(g.completion_ids) for g in stopped}) > 1
    for gen in gens:
        assert eos not in gen.completion_ids[:-1]
        assert (gen.completion_ids[-1] == eos) == (gen.finish_reason == "stop")
        assert gen.finish_reason == "stop" or len(gen.completion_ids) == 12
        assert "<|im_end|>" not in gen.text
        expected = teacher_forced_logprobs(model, gen.prompt_ids, gen.completion_ids, 1.0)
        torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=1e-4, rtol=0)
    assert all(g.latency_ms > 0 for g in gens)


class ForwardCounter:
    """A clock that reads the model's forward passes so far: latency in passes, not seconds."""

    def __init__(self, model):
        self.count = 0
        model.register_forward_hook(self._tick)

    def _tick(self, *_args):
        self.count += 1

    def __call__(self) -> float:
        return float(self.count)


@pytest.mark.parametrize("share_prefill", [True, False])
def test_latency_is_each_completions_time_to_its_last_token(tokenizer, share_prefill):
    """A completion's latency counts the passes up to the one that produced its last token.

    So a short completion batched with longer ones gets a smaller latency than they do, and
    its stop token is timed when it was produced, not one pass later. share_prefill=True
    takes the preallocated StaticCache path (one prompt pass of our own before generate).
    """
    model = eos_biased_model(tokenizer, bias=11.0)
    clock = ForwardCounter(model)
    engine = HFGenerateEngine(model, tokenizer, share_prefill=share_prefill, clock=clock)
    groups = engine.generate(PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=12, n=8, seed=0))
    gens = [g for group in groups for g in group]
    prefill = 1 if share_prefill else 0
    assert [g.latency_ms for g in gens] == [1000.0 * (prefill + len(g.completion_ids)) for g in gens]
    short = min(gens, key=lambda g: len(g.completion_ids))
    long = max(gens, key=lambda g: len(g.completion_ids))
    assert short.finish_reason == "stop" and len(short.completion_ids) < len(long.completion_ids)
    assert short.latency_ms < long.latency_ms


def test_seed_reproduces_samples_without_touching_global_rng(tokenizer, tiny_model):
    engine = HFGenerateEngine(tiny_model, tokenizer)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, n=2, seed=42)
    before = torch.get_rng_state()
    first = engine.generate(PROMPTS, params)
    assert torch.equal(torch.get_rng_state(), before)
    second = engine.generate(PROMPTS, params)
    other = engine.generate(
        PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=6, n=2, seed=43)
    )
    ids = [[g.completion_ids for g in group] for group in first]
    assert ids == [[g.completion_ids for g in group] for group in second]
    assert ids != [[g.completion_ids for g in group] for group in other]


def test_generation_restores_training_mode(tokenizer):
    model = tiny_llama(tokenizer).train()
    HFGenerateEngine(model, tokenizer).generate(PROMPTS[:1], SamplingParams(max_new_tokens=2))
    assert model.training


def test_sync_weights_makes_generation_follow_the_new_model(tokenizer, tiny_model):
    engine = HFGenerateEngine(tiny_model, tokenizer)
    params = SamplingParams(temperature=0, max_new_tokens=6)
    before = engine.generate(PROMPTS, params)
    engine.sync_weights(tiny_llama(tokenizer, seed=9))
    after = engine.generate(PROMPTS, params)
    assert [g[0].completion_ids for g in before] != [g[0].completion_ids for g in after]


def test_empty_prompt_is_rejected(tokenizer, tiny_model):
    with pytest.raises(ValueError, match="empty prompt"):
        HFGenerateEngine(tiny_model, tokenizer).generate_ids([[]], SamplingParams())


def test_base_state_dict_strips_lora_and_loads_into_a_plain_model(tokenizer):
    from training.models import apply_lora
    from training.vllm_backend import base_state_dict

    base = tiny_llama(tokenizer, seed=6)
    original = {k: v.clone() for k, v in base.state_dict().items()}
    weights = base_state_dict(apply_lora(base, r=4, alpha=8))
    fresh = tiny_llama(tokenizer, seed=7)
    fresh.load_state_dict(weights, strict=True)
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, original[key]), key


def test_vllm_latency_is_each_requests_time_to_last_token():
    """vLLM's per-request stats give each request its own latency; without them, the call's."""
    from types import SimpleNamespace as NS

    from training.vllm_backend import request_seconds

    v1 = NS(metrics=NS(arrival_time=1.7e9, queued_ts=100.0, last_token_ts=100.25))
    v0_stale = NS(metrics=NS(arrival_time=50.0, last_token_time=50.0, finished_time=52.0))
    assert request_seconds(v1, fallback=9.0) == pytest.approx(0.25)
    assert request_seconds(v0_stale, fallback=9.0) == pytest.approx(2.0)
    assert request_seconds(NS(metrics=None), fallback=9.0) == 9.0
    assert request_seconds(NS(metrics=NS(queued_ts=None, last_token_ts=3.0)), fallback=9.0) == 9.0


def _vllm_available() -> bool:
    return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


@pytest.mark.gpu
@pytest.mark.skipif(not _vllm_available(), reason="needs a CUDA device and vllm (the gpu extra)")
def test_vllm_outputs_change_after_sync_and_logprobs_match_trainer(tokenizer):
    from training.models import apply_lora
    from training.vllm_backend import VLLMEngine

    model = apply_lora(tiny_llama(tokenizer, seed=1, hidden_size=128), r=8, alpha=16)
    engine = VLLMEngine.from_model(model, tokenizer, dtype="float32", gpu_memory_utilization=0.3)
    sampled = engine.generate(
        PROMPTS, SamplingParams(temperature=0.8, max_new_tokens=16, n=4, seed=0)
    )
    for gen in (g for group in sampled for g in group):
        expected = teacher_forced_logprobs(model, gen.prompt_ids, gen.completion_ids, 0.8)
        torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=5e-3, rtol=0)

    greedy = SamplingParams(temperature=0, max_new_tokens=16)
    before = [g[0].completion_ids for g in engine.generate(PROMPTS, greedy)]
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    assert [
        g[0].completion_ids for g in engine.generate(PROMPTS, greedy)
    ] == before  # not synced yet
    engine.sync_weights(model)
    after = engine.generate(PROMPTS, greedy)
    assert [g[0].completion_ids for g in after] != before
    for gen in (group[0] for group in after):
        expected = teacher_forced_logprobs(model, gen.prompt_ids, gen.completion_ids, 1.0)
        torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=5e-3, rtol=0)


def test_lora_model_generates_with_shared_prefill_and_matching_logprobs(tokenizer):
    from training.models import apply_lora

    model = apply_lora(tiny_llama(tokenizer, seed=2), r=4, alpha=8)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.2)
    engine = HFGenerateEngine(model, tokenizer)
    groups = engine.generate(PROMPTS, SamplingParams(temperature=0.9, max_new_tokens=6, n=2, seed=3))
    for gen in (g for group in groups for g in group):
        expected = teacher_forced_logprobs(model, gen.prompt_ids, gen.completion_ids, 0.9)
        torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=1e-4, rtol=0)


def _lora_with_dropout(tokenizer, dropout: float):
    """A tiny LoRA model whose adapters matter (lora_B non-zero), with LoRA dropout."""
    from training.models import apply_lora

    model = apply_lora(tiny_llama(tokenizer, seed=2), r=4, alpha=8, dropout=dropout)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    return model.eval()


def _record_forwards(model):
    """(training flag, rows) of every forward pass of the model's decoder."""
    seen = []
    decoder = model.get_base_model().model
    decoder.register_forward_hook(lambda module, args, kwargs, out: seen.append(
        (module.training, (kwargs.get("input_ids") if kwargs.get("input_ids") is not None else args[0]).shape[0])
    ), with_kwargs=True)
    return seen


def test_dropout_sampling_runs_in_train_mode_with_a_prompt_forward_per_sample(tokenizer):
    model = _lora_with_dropout(tokenizer, 0.5)
    seen = _record_forwards(model)
    engine = HFGenerateEngine(model, tokenizer)
    engine.generate(PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=4, n=3, seed=1, dropout=True))
    assert seen and all(training for training, _ in seen)
    assert seen[0][1] == 6  # the prefill: each of the 2 x 3 samples runs its own prompt
    assert not model.training  # the caller's mode is restored
    seen.clear()
    engine.generate(PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=4, n=3, seed=1))
    assert seen and not any(training for training, _ in seen)
    assert seen[0][1] == 2  # eval mode: one prefill per prompt, copied to its 3 samples


def test_dropout_sampling_draws_from_a_perturbed_policy_and_eval_sampling_does_not(tokenizer):
    model = _lora_with_dropout(tokenizer, 0.5)
    engine = HFGenerateEngine(model, tokenizer)

    def samples(dropout: bool) -> list[list[int]]:
        params = SamplingParams(temperature=1.0, max_new_tokens=8, n=4, seed=7, dropout=dropout)
        return [g.completion_ids for group in engine.generate(PROMPTS, params) for g in group]

    plain = samples(False)
    assert samples(False) == plain  # same seed, eval mode: the same samples
    assert samples(True) != plain  # the same seed under dropout noise samples other tokens


def _casts_while_generating(engine: HFGenerateEngine, params: SamplingParams) -> tuple[int, list]:
    """dtype casts (aten::_to_copy) of one generate call, and its completions."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        groups = engine.generate(PROMPTS, params)
    casts = sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy")
    return casts, [[(g.completion_ids, g.logprobs) for g in group] for group in groups]


def test_a_lora_model_under_autocast_casts_its_frozen_base_once_per_generate_not_per_token(tokenizer):
    """LoRA's frozen float32 base was cast to bf16 again at every decoding step (autocast keeps
    copies only of weights that require grad): it must cost what a fully trainable model does,
    sample the same tokens, and leave the base frozen afterwards."""
    model = apply_lora(tiny_llama(tokenizer, seed=3), r=4, alpha=8)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    engine = HFGenerateEngine(model, tokenizer, autocast=True)
    params = SamplingParams(temperature=1.0, max_new_tokens=8, n=2, seed=7)
    engine.generate(PROMPTS, params)  # the first call casts one thing once more, either way
    frozen_casts, frozen_out = _casts_while_generating(engine, params)
    assert {name for name, p in model.named_parameters() if p.requires_grad} == trainable
    model.requires_grad_(True)  # every weight cacheable: the cost the frozen base must match
    all_casts, all_out = _casts_while_generating(engine, params)
    assert frozen_out == all_out
    assert frozen_casts == all_casts, (frozen_casts, all_casts)  # re-cast: ~1 per Linear per token


def test_frozen_weight_copies_are_left_alone_where_a_graph_is_recorded(tokenizer):
    """With grad enabled, flagging the frozen base would train it: the flags must not change."""
    model = apply_lora(tiny_llama(tokenizer, seed=3), r=4, alpha=8)
    before = [p.requires_grad for p in model.parameters()]
    with autocast_keeps_frozen_weight_copies(model, True):
        assert [p.requires_grad for p in model.parameters()] == before
    with torch.no_grad(), autocast_keeps_frozen_weight_copies(model, True):
        assert all(p.requires_grad for p in model.parameters())
    assert [p.requires_grad for p in model.parameters()] == before
