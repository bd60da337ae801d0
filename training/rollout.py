"""One generation interface, two backends: HF generate (here) and vLLM (vllm_backend.py).

Every backend returns, per completion, the token ids, the text, and the log-probability of
each generated token under `log_softmax(logits / temperature)`: the same quantity the trainer
computes, so `logp_old` for the GRPO ratio can come straight from generation when the policy
has not changed since.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LogitsProcessor,
    LogitsProcessorList,
    StaticCache,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.cache_utils import DynamicCache, DynamicLayer

from training.distributed import seed_for
from training.models import autocast_context, autocast_keeps_frozen_weight_copies

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. temperature 0 means greedy; n completions per prompt.

    dropout: sample with the model in train mode, so its dropout layers (LoRA dropout) are
    active and every completion, prompt included, comes from its own randomly thinned
    policy. TRL's GRPOTrainer samples this way with transformers generate (it generates
    inside its training step); it adds exploration noise. Off, the model samples in eval mode.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    n: int = 1
    seed: int | None = None
    dropout: bool = False
    prompt_seeds: tuple[int, ...] | None = None
    """One seed per prompt of the call: sample j of prompt i draws from its own generator
    (seeded from prompt_seeds[i] and j), so what a prompt samples does not depend on which
    other prompts share its batch, or on which data-parallel rank generates it."""

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.n < 1:
            raise ValueError(f"n (completions per prompt) must be >= 1, got {self.n}")
        if self.dropout and self.temperature == 0:
            raise ValueError("dropout sampling needs temperature > 0; greedy decoding is an eval")
        if self.prompt_seeds is not None and any(not 0 <= s < 2**63 for s in self.prompt_seeds):
            raise ValueError("prompt_seeds must be integers in [0, 2**63)")

    def row_seeds(self, prompts: int) -> list[int] | None:
        """The generator seed of each of the prompts * n rows (prompt-major), or None."""
        if self.prompt_seeds is None or self.greedy:
            return None
        if len(self.prompt_seeds) != prompts:
            raise ValueError(f"prompt_seeds has {len(self.prompt_seeds)} seeds for {prompts} prompts")
        return [seed_for(seed, j) for seed in self.prompt_seeds for j in range(self.n)]

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def logprob_temperature(self) -> float:
        """The temperature log-probs are computed at: the sampling one, 1 for greedy."""
        return 1.0 if self.greedy else self.temperature


@dataclass
class Generation:
    """One completion of one prompt.

    completion_ids ends at (and includes) the first stop token when finish_reason is "stop";
    logprobs[i] is the log-probability of completion_ids[i] at the sampling temperature.

    latency_ms is the time to this completion's last token: wall time from the start of the
    generate call that produced it (prompt prefill included) to the step that produced its
    stop token, or its last token when it ran to max_new_tokens. A short completion batched
    with a long one gets its own, shorter time, but every row of a batch shares the batch's
    prefill and per-step cost, so compare latencies of equal batch sizes only (the
    evaluation's latency_p50 / latency_p95 are measured at batch size 1: training.evaluate).
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    text: str
    logprobs: list[float]
    finish_reason: FinishReason
    latency_ms: float


class RolloutEngine(Protocol):
    """What the trainer and the agent loop need from a generator."""

    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Generation]]:
        """params.n generations for each prompt text, in prompt order."""
        ...

    def generate_ids(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Generation]]:
        """The same from token ids (multi-turn episodes extend their own token sequence)."""
        ...

    def sync_weights(self, model: Any) -> None:
        """Make the generator sample from `model`'s current weights."""
        ...


def stop_token_ids(tokenizer: Any, model: Any = None) -> list[int]:
    """Tokens that end a completion: the tokenizer's EOS plus the generation config's."""
    ids: list[int] = []
    candidates: list[Any] = [tokenizer.eos_token_id]
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        candidates.append(generation.eos_token_id)
    for value in candidates:
        for token in value if isinstance(value, (list, tuple)) else [value]:
            if token is not None and token not in ids:
                ids.append(int(token))
    if not ids:
        raise ValueError("the tokenizer defines no EOS token, so completions could never stop")
    return ids


def cut_at_stop(
    ids: Sequence[int], logprobs: Sequence[float], stops: set[int]
) -> tuple[list[int], list[float], FinishReason]:
    """Keep everything up to and including the first stop token (later tokens are padding)."""
    for i, token in enumerate(ids):
        if token in stops:
            return list(ids[: i + 1]), list(logprobs[: i + 1]), "stop"
    return list(ids), list(logprobs), "length"


class _TokenLogprobRecorder(LogitsProcessor):
    """Records log p(chosen token) from the raw logits at each step, one step late.

    generate passes custom processors the logits before temperature / top-p warping. The token
    sampled at step t is only known at step t+1 (the last column of input_ids), so each call
    gathers the previous step's log-probs and keeps this step's for the next call: memory stays
    at one (batch, vocab) tensor instead of one per generated token.
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.pending: torch.Tensor | None = None  # (N, V) log-probs of the last step
        self.gathered: list[torch.Tensor] = []  # per step: (N,)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.pending is not None:
            self._collect(input_ids[:, -1])
        self.pending = torch.log_softmax(scores.float() / self.temperature, dim=-1)  # (N, V)
        return scores

    def _collect(self, chosen: torch.Tensor) -> None:
        assert self.pending is not None
        # Stays on the logits' device: a copy to the host here would stall a GPU every token.
        self.gathered.append(self.pending.gather(1, chosen[:, None].to(self.pending.device)).squeeze(1))

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """(N, T) log-probs on the logits' device, once generation returned.

        `last_tokens` may live anywhere; it is moved to the logits' device, so a caller that
        already copied the completions to the host cannot make the gather mix devices.
        """
        if self.pending is None:
            raise RuntimeError("generate produced no tokens")
        self._collect(last_tokens)
        self.pending = None
        return torch.stack(self.gathered, dim=1)


class _RowSampler(LogitsProcessor):
    """Samples every row from its own generator (Gumbel-max), for generate's greedy pick.

    argmax(logits / T + Gumbel noise) is a draw from softmax(logits / T); top-p first keeps
    the smallest set of tokens whose probability reaches top_p, as transformers' warper does.
    The chosen token is left as the only finite score, so greedy decoding takes it. Each row
    draws its noise from its own torch.Generator, so its samples depend on its seed and its
    own logits only, not on its batch.
    """

    def __init__(self, seeds: Sequence[int], temperature: float, top_p: float, device: torch.device) -> None:
        self.temperature = temperature
        self.top_p = top_p
        self.generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        logits = scores.float() / self.temperature  # (N, V)
        if self.top_p < 1.0:
            logits = top_p_filtered(logits, self.top_p)
        vocab = logits.shape[-1]
        uniform = torch.stack(
            [torch.rand(vocab, generator=g, device=logits.device) for g in self.generators]
        ).clamp_(min=torch.finfo(torch.float32).tiny)  # (N, V)
        choice = (logits - torch.log(-torch.log(uniform))).argmax(dim=-1)  # (N,)
        chosen = torch.full_like(scores, float("-inf"))
        chosen.scatter_(1, choice[:, None], 0.0)
        return chosen


def top_p_filtered(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Logits outside the nucleus set to -inf (the most likely token always stays)."""
    ordered, order = torch.sort(logits, dim=-1, descending=False)
    cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
    drop_sorted = cumulative <= (1 - top_p)
    drop_sorted[..., -1] = False
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


class _FinishClock(StoppingCriteria):
    """Notes when each row produced its last token; never stops a row itself.

    generate calls its stopping criteria right after appending each step's token, so the
    clock reads the time a stop token was produced, not one forward pass later (a logits
    processor only sees a step's token at the next step). Rows that never stop end at the
    final step. `clock` is injectable so tests can count forward passes instead of seconds.
    """

    def __init__(self, stops: Sequence[int], clock: Callable[[], float]) -> None:
        self.stops = torch.tensor(list(stops))
        self.clock = clock
        self.start = clock()
        self.finished_at: torch.Tensor | None = None  # (N,) seconds after start, nan while running
        self.last_step_at = 0.0

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        newest = input_ids[:, -1].cpu()  # first: the copy waits for a GPU to finish the step
        now = self.clock() - self.start
        if self.finished_at is None:
            self.finished_at = torch.full((input_ids.shape[0],), float("nan"), dtype=torch.float64)
        stopped = torch.isin(newest, self.stops) & self.finished_at.isnan()
        self.finished_at[stopped] = now
        self.last_step_at = now
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def seconds(self) -> torch.Tensor:
        """(N,) seconds from the start to each row's last token."""
        if self.finished_at is None:
            raise RuntimeError("generate produced no tokens")
        return self.finished_at.nan_to_num(self.last_step_at)


def cache_kwarg(model: Any) -> str:
    """transformers renamed forward's `past_key_values` to `cache`; use whichever it takes."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return (
        "cache"
        if "cache" in inspect.signature(type(base).forward).parameters
        else "past_key_values"
    )


def left_pad(
    sequences: Sequence[Sequence[int]], pad_id: int, device: str | torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L) ids left-padded with pad_id, and the attention mask built from the lengths."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        if seq:
            ids[row, width - len(seq) :] = torch.tensor(list(seq), dtype=torch.long)
            mask[row, width - len(seq) :] = 1
    return ids.to(device), mask.to(device)


def position_ids_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Positions counting real tokens only (left padding gets position 0), as generate does."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def padding_id(tokenizer: Any, model: Any = None) -> int:
    """The id used to fill padded positions (never used to build masks)."""
    pad = tokenizer.pad_token_id
    return int(pad) if pad is not None else stop_token_ids(tokenizer, model)[0]


class HFGenerateEngine:
    """Batched `model.generate` with left padding, explicit masks and shared prompt prefill.

    The prompts are encoded once: a forward pass fills the KV cache for the B prompts, the
    cache is copied n times into a preallocated cache, and generate continues from it, so the
    prompt is not recomputed for each of the n samples and the cache never grows by copying.

    `compile`: let transformers' generate torch.compile the decoding step when it holds a
    static cache on a GPU (config compile_generation). Off, generate never compiles: on an
    H200 the compilation of a 135M model idled the GPU ~75 s per step for ~5 s of decoding,
    and the cache width changed with each batch, so it compiled again. On, the preallocated
    cache length is rounded up to a power of two, so a run compiles once per length bucket.

    `clock` times each completion's latency_ms (time.perf_counter; tests pass a counter).

    `synced_gpus`: generate keeps running forward passes on a rank whose rows are done until
    every rank's are (a model sharded with FSDP needs every rank in each forward pass:
    training/fsdp.py, which also turns share_prefill off so that one call is one generate).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        device: str | torch.device = "cpu",
        *,
        autocast: bool = False,
        share_prefill: bool = True,
        compile: bool = False,
        synced_gpus: bool = False,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.autocast = autocast
        self.share_prefill = share_prefill
        self.compile = compile
        self.synced_gpus = synced_gpus
        self.clock = clock
        self.stops = stop_token_ids(tokenizer, model)
        self.pad_id = padding_id(tokenizer, model)

    def sync_weights(self, model: Any) -> None:
        """HF generate samples from the live training model, so syncing is pointing at it."""
        self.model = model

    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Generation]]:
        encoded = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        return self.generate_ids(encoded, params)

    def generate_ids(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Generation]]:
        if not prompt_ids:
            return []
        if any(not ids for ids in prompt_ids):
            raise ValueError("every prompt needs at least one token; got an empty prompt")
        was_training = self.model.training
        self.model.train(params.dropout)
        try:
            with torch.no_grad(), _seeded(params.seed, self.device):
                completions, logprobs, seconds = self._sample(prompt_ids, params)
        finally:
            self.model.train(was_training)
        return self._package(prompt_ids, params, completions, logprobs, seconds)

    def _sample(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B*n, T) generated ids, their (B*n, T) log-probs and (B*n,) finish times."""
        ids, mask = left_pad(prompt_ids, self.pad_id, self.device)  # (B, L)
        n = params.n
        if params.dropout:  # each sample's own dropout noise, from its prompt on: no shared prefill
            ids, mask, n = ids.repeat_interleave(n, dim=0), mask.repeat_interleave(n, dim=0), 1
        clock = _FinishClock(self.stops, self.clock)  # started before the prompt's prefill
        recorder = _TokenLogprobRecorder(params.logprob_temperature)
        processors: list[LogitsProcessor] = [recorder]
        row_seeds = params.row_seeds(len(prompt_ids))
        if row_seeds is not None:
            processors.append(_RowSampler(row_seeds, params.temperature, params.top_p, self.device))
        extra: dict[str, Any] = {}
        caches_casts = self.autocast and not self.synced_gpus  # FSDP re-gathers its weights
        with autocast_context(self.device, self.autocast), autocast_keeps_frozen_weight_copies(
            self.model, caches_casts
        ):
            if self._prefills(ids, n):
                extra[cache_kwarg(self.model)] = self._prefill(ids, mask, n, params.max_new_tokens)
            out = self.model.generate(
                input_ids=ids.repeat_interleave(n, dim=0),  # (B*n, L)
                attention_mask=mask.repeat_interleave(n, dim=0),
                generation_config=self._generation_config(params, own_sampler=row_seeds is not None),
                logits_processor=LogitsProcessorList(processors),
                stopping_criteria=StoppingCriteriaList([clock]),
                **({"synced_gpus": True} if self.synced_gpus else {}),
                **extra,
            )
        sequences = out if isinstance(out, torch.Tensor) else out.sequences  # (B*n, L+T), on device
        completions = sequences[:, ids.shape[1] :]  # (B*n, T)
        logprobs = recorder.finish(completions[:, -1])  # (B*n, T), same device
        # The one deliberate copy to the host: packaging turns rows into Python lists.
        return completions.cpu(), logprobs.cpu(), clock.seconds()

    def _prefills(self, ids: torch.Tensor, n: int) -> bool:
        """Prefill ourselves when it saves work: n copies of a prompt, or a cache we can preallocate."""
        if not self.share_prefill or ids.shape[1] < 2:
            return False
        return n > 1 or has_plain_kv_cache(self.model)

    def _prefill(self, ids: torch.Tensor, mask: torch.Tensor, n: int, max_new_tokens: int) -> Any:
        """The KV cache of all prompt tokens but the last, n copies per prompt, preallocated.

        generate then feeds only the uncached last token, with positions computed from the
        full attention mask exactly as here. The copies go into a StaticCache sized for the
        whole completion: transformers' DynamicCache grows by concatenation, copying every
        row's keys and values at every token, which on a CPU was over half of generation time.
        """
        head, head_mask = ids[:, :-1], mask[:, :-1]  # (B, L-1)
        out = self.model(
            input_ids=head,
            attention_mask=head_mask,
            position_ids=position_ids_from_mask(head_mask),
            use_cache=True,
            logits_to_keep=1,
        )
        prompt_cache = getattr(out, "cache", None) or out.past_key_values
        if not has_plain_kv_cache(self.model) or not self._static_cache_fits():
            # Sliding windows, recurrent state, or keys and values of two dtypes that this
            # transformers' StaticCache would allocate as one: copy the grown cache as is.
            prompt_cache.batch_repeat_interleave(n)
            return prompt_cache
        length = ids.shape[1] + max_new_tokens
        return _preallocated_copy(prompt_cache, self.model.config, n, bucketed(length) if self.compile else length)

    def _static_cache_fits(self) -> bool:
        """Whether a preallocated cache can hold what generation will write into it.

        A bf16 model, or no autocast, writes keys and values of one dtype. A float32 model
        under bf16 autocast writes bf16 values and float32 keys (rotary embeddings promote
        them), which only a StaticCache that allocates each in its own dtype can take. The
        prompt's own cache cannot tell: transformers 5.18 promotes its values to the keys'
        dtype on the first write, and generation then writes bf16.
        """
        if not self.autocast or getattr(self.model, "dtype", None) == torch.bfloat16:
            return True
        return _static_layer_splits_dtypes()

    def _generation_config(self, params: SamplingParams, *, own_sampler: bool = False) -> GenerationConfig:
        """Only what we ask for: no processors from the model's own generation config.

        own_sampler: _RowSampler has already drawn each row's token, so generate picks greedily.
        """
        sampling: dict[str, Any] = {"do_sample": False}
        if not params.greedy and not own_sampler:
            sampling = {
                "do_sample": True,
                "temperature": params.temperature,
                "top_p": params.top_p,
                "top_k": 0,
            }
        return GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            eos_token_id=self.stops,
            pad_token_id=self.pad_id,
            use_cache=True,
            disable_compile=not self.compile,
            **sampling,
        )

    def _package(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        completions: torch.Tensor,
        logprobs: torch.Tensor,
        seconds: torch.Tensor,
    ) -> list[list[Generation]]:
        stops = set(self.stops)
        results: list[list[Generation]] = []
        for p, prompt in enumerate(prompt_ids):
            group = []
            for row in range(p * params.n, (p + 1) * params.n):
                ids, lps, reason = cut_at_stop(
                    completions[row].tolist(), logprobs[row].tolist(), stops
                )
                group.append(
                    Generation(
                        prompt_ids=list(prompt),
                        completion_ids=ids,
                        text=self.tokenizer.decode(ids, skip_special_tokens=True),
                        logprobs=lps,
                        finish_reason=reason,
                        latency_ms=float(seconds[row]) * 1000.0,
                    )
                )
            results.append(group)
        return results


def has_plain_kv_cache(model: Any) -> bool:
    """Whether every layer of `model` caches full-attention keys and values and nothing else.

    Only then can a prompt's cache be copied into other rows or a preallocated cache and be
    extended token by token; sliding-window layers keep a window and hybrid (Mamba) layers a
    recurrent state, so those models take transformers' own path.
    """
    try:
        layers = DynamicCache(config=model.config).layers
    except (AttributeError, KeyError, TypeError, ValueError):
        return False
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def bucketed(length: int) -> int:
    """The next power of two >= length (at least 64): few distinct shapes for a compiled step."""
    return max(64, 1 << (max(length, 1) - 1).bit_length())


@functools.cache
def _static_layer_splits_dtypes() -> bool:
    """Whether this transformers' StaticCache allocates values in their own dtype.

    Under bf16 autocast a float32 model writes bf16 values but float32 keys (rotary
    embeddings promote them). transformers 5.25 allocates each tensor in its own dtype;
    4.57 to 5.17 allocate both in the keys' dtype and then fail with "index_copy_(): self and
    source expected to have the same dtype". Asked of the installed version by writing one
    position, rather than by a version number.
    """
    probe = StaticCache(config=_PROBE_CONFIG, max_cache_len=2)
    keys = torch.zeros(1, 1, 1, 2, dtype=torch.float32)
    try:
        probe.update(keys, keys.to(torch.bfloat16), 0, {"cache_position": torch.tensor([0])})
    except RuntimeError:
        return False
    return probe.layers[0].values.dtype == torch.bfloat16


_PROBE_CONFIG = LlamaConfig(hidden_size=2, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1,
                            vocab_size=2, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def _preallocated_copy(cache: Any, config: Any, n: int, max_len: int) -> StaticCache:
    """A StaticCache of max_len positions holding n consecutive copies of each row of `cache`.

    Its tensors take the dtype (and device) of the keys and values the prompt wrote, which are
    the ones generation goes on writing: the cache is allocated in the dtype generation writes.
    """
    static = StaticCache(config=config, max_cache_len=max_len)
    for index, layer in enumerate(cache.layers):
        static.update(layer.keys.repeat_interleave(n, dim=0), layer.values.repeat_interleave(n, dim=0), index)
    return static


@contextlib.contextmanager
def _seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    """Seed torch's RNG for one call and restore the caller's RNG state afterwards.

    Without a seed the global RNG is used as is, so a seeded training run stays reproducible.
    """
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield
