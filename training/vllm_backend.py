"""vLLM generation behind the RolloutEngine interface (GPU only; the `gpu` extra).

vllm is imported lazily so that training/ imports on machines without it. Weights reach the
generator in one of two ways, chosen by the model that is synced:

lora     a peft model: its adapter is saved to a fresh folder and used through a LoRARequest
         with a new adapter id, so vLLM can never serve a stale adapter from its cache.
weights  a full model: its state dict is loaded into vLLM's model in place, and the prefix
         cache is reset (cached prompt KV computed with the old weights would be wrong).

Each completion's latency_ms is its request's time to last token as vLLM's per-request stats
report it (queued to last token; see `request_seconds`), the same quantity HFGenerateEngine
measures per row; the n completions of one prompt are one request and share it.

Log-probs are requested as "processed_logprobs", i.e. after temperature scaling, which is
what the trainer computes (log_softmax(logits / T)); with top_p < 1 vLLM renormalises over
the kept tokens, so keep top_p = 1 when generation log-probs stand in for logp_old.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from training.rollout import Generation, SamplingParams, cut_at_stop, stop_token_ids


def _require_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(
            "the vLLM backend needs vllm and a CUDA GPU: install the gpu extra "
            "(pip install 'crucible[gpu]') or use the HF generate backend"
        ) from exc
    return vllm


def _is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def base_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """The base weights of a model, without LoRA tensors and with peft's key prefixes removed."""
    if not _is_peft(model):
        return {k: v.detach() for k, v in model.state_dict().items()}
    prefix = "base_model.model."
    weights = {}
    for key, value in model.state_dict().items():
        if "lora_" in key:
            continue
        clean = key.removeprefix(prefix).replace(".base_layer.", ".")
        weights[clean] = value.detach()
    return weights


class VLLMEngine:
    """A vllm.LLM serving the policy; generation matches HFGenerateEngine's outputs."""

    def __init__(
        self,
        model_dir: str | Path,
        tokenizer: Any,
        *,
        lora_rank: int | None = None,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.5,
        seed: int = 0,
        **llm_kwargs: Any,
    ) -> None:
        vllm = _require_vllm()
        self.tokenizer = tokenizer
        self.stops = stop_token_ids(tokenizer)
        self.lora_rank = lora_rank
        if lora_rank is not None:
            llm_kwargs.update(
                enable_lora=True, max_lora_rank=_vllm_lora_rank(lora_rank), max_loras=1
            )
        # vLLM keeps per-request timestamps (RequestOutput.metrics) only with stats on;
        # without them every completion's latency would be the whole call's.
        llm_kwargs.setdefault("disable_log_stats", False)
        self.llm = vllm.LLM(
            model=str(model_dir),
            tokenizer=str(model_dir),
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
            **llm_kwargs,
        )
        self._workdir = Path(tempfile.mkdtemp(prefix="crucible-vllm-"))
        self._adapter_id = 0
        self._lora_request: Any = None

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, **kwargs: Any) -> VLLMEngine:
        """Serve an in-memory model: its base weights are written once for vLLM to load."""
        from transformers import AutoModelForCausalLM

        folder = Path(tempfile.mkdtemp(prefix="crucible-vllm-base-"))
        base = model.get_base_model() if _is_peft(model) else model
        clean = AutoModelForCausalLM.from_config(base.config)
        clean.load_state_dict(base_state_dict(model))
        clean.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        rank = _lora_rank(model) if _is_peft(model) else None
        engine = cls(folder, tokenizer, lora_rank=rank, **kwargs)
        if rank is not None:
            engine.sync_weights(model)
        return engine

    def sync_weights(self, model: Any) -> None:
        """Point generation at `model`'s current weights (new adapter id, or in-place load)."""
        if self.lora_rank is not None:
            self._load_adapter(model)
            return
        weights = base_state_dict(model)
        self.llm.apply_model(lambda vllm_model: vllm_model.load_weights(weights.items()))
        self.llm.reset_prefix_cache()

    def _load_adapter(self, model: Any) -> None:
        from vllm.lora.request import LoRARequest

        if not _is_peft(model):
            raise TypeError(
                "this vLLM engine serves LoRA adapters; sync a peft model, or create the "
                "engine from a model without adapters for full-weight sync"
            )
        previous = self._workdir / f"adapter_{self._adapter_id}"
        self._adapter_id += 1
        folder = self._workdir / f"adapter_{self._adapter_id}"
        model.save_pretrained(folder)
        self._lora_request = LoRARequest(
            f"policy-{self._adapter_id}", self._adapter_id, str(folder)
        )
        shutil.rmtree(previous, ignore_errors=True)  # vLLM loaded it when it was used

    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Generation]]:
        encoded = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        return self.generate_ids(encoded, params)

    def generate_ids(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Generation]]:
        if params.dropout:
            raise ValueError("vLLM samples from the merged weights, without dropout; "
                             "use rollout_backend hf for dropout sampling")
        vllm = _require_vllm()
        from vllm.inputs import TokensPrompt

        def sampling(seed: int | None) -> Any:
            return vllm.SamplingParams(
                n=params.n,
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_new_tokens,
                seed=seed,
                logprobs=0,  # only the sampled token's log-prob
                stop_token_ids=self.stops,
            )

        # One seed per prompt when asked (a request's own seed in vLLM), else one per call.
        per_prompt = params.prompt_seeds if params.prompt_seeds is not None and not params.greedy else None
        started = time.perf_counter()
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(ids)) for ids in prompt_ids],
            [sampling(seed) for seed in per_prompt] if per_prompt is not None else sampling(params.seed),
            lora_request=self._lora_request,
            use_tqdm=False,
        )
        whole_call = time.perf_counter() - started
        return [
            [
                self._generation(ids, completion, request_seconds(output, whole_call) * 1000.0)
                for completion in output.outputs
            ]
            for ids, output in zip(prompt_ids, outputs, strict=True)
        ]

    def _generation(self, prompt_ids: list[int], completion: Any, latency_ms: float) -> Generation:
        ids = list(completion.token_ids)
        logprobs = [
            float(step[token].logprob) for step, token in zip(completion.logprobs, ids, strict=True)
        ]
        ids, logprobs, _ = cut_at_stop(ids, logprobs, set(self.stops))
        return Generation(
            prompt_ids=list(prompt_ids),
            completion_ids=ids,
            text=self.tokenizer.decode(ids, skip_special_tokens=True),
            logprobs=logprobs,
            finish_reason="stop" if completion.finish_reason == "stop" else "length",
            latency_ms=latency_ms,
        )


# (start, end) attribute pairs of vLLM's per-request stats, newest vLLM first: V1's
# RequestStateStats (monotonic timestamps), then V0's RequestMetrics (wall clock), whose
# last_token_time some versions never advance past arrival_time, hence finished_time.
_REQUEST_SPANS = (
    ("queued_ts", "last_token_ts"),
    ("arrival_time", "last_token_time"),
    ("arrival_time", "finished_time"),
)


def request_seconds(output: Any, fallback: float) -> float:
    """Seconds from a request's arrival to its last token, from `output.metrics`.

    Per-request timing is what makes a short completion's latency shorter than a long one's
    in the same generate call; where this vLLM version reports none (metrics None or
    incomplete), the whole call's time (`fallback`) stands in.
    """
    metrics = getattr(output, "metrics", None)
    for start_name, end_name in _REQUEST_SPANS:
        start, end = getattr(metrics, start_name, None), getattr(metrics, end_name, None)
        if isinstance(start, int | float) and isinstance(end, int | float) and end > start:
            return float(end - start)
    return fallback


def _lora_rank(model: Any) -> int:
    config = next(iter(model.peft_config.values()))
    return int(config.r)


def _vllm_lora_rank(rank: int) -> int:
    """vLLM accepts only some max_lora_rank values; the smallest allowed one >= rank."""
    for allowed in (8, 16, 32, 64, 128, 256, 320, 512):
        if rank <= allowed:
            return allowed
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest supported rank (512)")
