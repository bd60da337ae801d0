"""Export a checkpoint as a plain Hugging Face model folder (LoRA merged into the base).

The result loads with AutoModelForCausalLM.from_pretrained alone, without peft, so it can be
served by any runtime (vLLM, llama.cpp after conversion, transformers).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from training.models import load_model_and_tokenizer, resolve_model
from training.runner import RUN_CONFIG_FILE, is_adapter_checkpoint, model_source


class ExportError(ValueError):
    """The folder cannot be exported; the message says why and what to pass instead."""


def base_model_of(checkpoint: Path) -> str:
    """The base model a LoRA checkpoint was trained on: its run config, else peft's record."""
    run_config = checkpoint / RUN_CONFIG_FILE
    if run_config.is_file():
        config = json.loads(run_config.read_text())
        init = config.get("init_checkpoint")
        if init and not is_adapter_checkpoint(init):
            return str(init)
        if config.get("model_gguf_file"):  # the converted folder of that GGUF file
            return str(resolve_model(config["model"], gguf_file=config["model_gguf_file"]))
        return model_source(config["model"])
    adapter = json.loads((checkpoint / "adapter_config.json").read_text())
    base = adapter.get("base_model_name_or_path")
    if not base:
        raise ExportError(f"{checkpoint} does not say which base model its adapters belong to")
    return str(base)


def export_checkpoint(checkpoint: str | Path, out: str | Path) -> Path:
    """Write `checkpoint` (LoRA merged, or full weights) as an HF model folder at `out`."""
    source, target = Path(checkpoint), Path(out)
    if not source.is_dir():
        raise ExportError(f"checkpoint folder {source} does not exist")
    if target.exists() and any(target.iterdir()):
        raise ExportError(f"output folder {target} is not empty; choose a new folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        if is_adapter_checkpoint(source):
            from peft import PeftModel

            base, tokenizer = load_model_and_tokenizer(base_model_of(source))
            merged = PeftModel.from_pretrained(base, str(source)).merge_and_unload()
        elif (source / "config.json").is_file():
            merged, tokenizer = load_model_and_tokenizer(str(source))
        else:
            raise ExportError(
                f"{source} holds neither LoRA adapters nor a full model; pass a "
                "RUN_DIR/checkpoints/step_N folder"
            )
        merged.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if target.exists():
            target.rmdir()
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
