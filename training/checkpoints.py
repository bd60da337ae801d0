"""Checkpoint folders of a run: atomic writes, discovery, retention, optimizer and RNG state.

Layout: RUN_DIR/checkpoints/step_N/. A checkpoint is written into a temporary sibling
(step_N.tmp-<random>) and renamed into place only when complete, with a COMPLETE marker
holding its step, content hash and metrics; a crash therefore leaves either the previous
checkpoints untouched plus a tmp folder that is ignored, or a whole new checkpoint.

Only the folder logic lives here; what goes inside (adapter or full weights, tokenizer,
config) is written by the trainer into the folder `begin_checkpoint` returns.
`save_training_state` / `load_training_state` add the optimizer, scheduler, RNG and step.
torch is imported inside those two only, so the folder logic works without it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

CHECKPOINTS_DIR = "checkpoints"
COMPLETE_MARKER = "COMPLETE"
TRAINING_STATE_FILE = "training_state.pt"
RNG_STATE_FILE = "rng_state.json"
STATE_FILE = "state.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint folder and what its COMPLETE marker records."""

    step: int
    path: Path
    content_hash: str
    metrics: dict[str, float | None]


def checkpoints_root(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR


# ---------------------------------------------------------------------------------------
# Hashing
# ---------------------------------------------------------------------------------------


def content_hash(directory: str | os.PathLike[str]) -> str:
    """sha256 over the sorted relative paths and bytes of every file (the marker excluded).

    Two folders with the same files hash the same wherever they live, so the hash in a
    checkpoint event identifies the weights when the folder is copied or moved.
    """
    root = Path(directory)
    digest = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != COMPLETE_MARKER)
    for path in files:
        relative = path.relative_to(root).as_posix().encode("utf-8")
        digest.update(len(relative).to_bytes(8, "big") + relative)
        digest.update(path.stat().st_size.to_bytes(8, "big"))
        with open(path, "rb") as f:
            for block in iter(lambda f=f: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------


def begin_checkpoint(run_dir: str | os.PathLike[str], step: int) -> Path:
    """A fresh temporary folder to write the checkpoint of `step` into."""
    root = checkpoints_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"step_{step}.tmp-{uuid.uuid4().hex[:12]}"
    tmp.mkdir()
    return tmp


def _fsync_tree(directory: Path) -> None:
    """Flush every file (and the folder) so that the rename publishes durable bytes."""
    for path in directory.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit_checkpoint(
    tmp_dir: str | os.PathLike[str],
    run_dir: str | os.PathLike[str],
    step: int,
    metrics: Mapping[str, float | int | None] | None = None,
) -> Checkpoint:
    """Seal `tmp_dir` (hash, COMPLETE marker) and rename it to checkpoints/step_N atomically.

    An existing step_N (a run resumed from an earlier step re-reaches it) is replaced.
    `metrics` are the evaluation metrics at this step; retention ranks by them.
    """
    tmp = Path(tmp_dir)
    final = checkpoints_root(run_dir) / f"step_{step}"
    clean_metrics = {k: _finite_or_none(v) for k, v in (metrics or {}).items()}
    digest = content_hash(tmp)
    marker = {"step": step, "content_hash": digest, "metrics": clean_metrics}
    (tmp / COMPLETE_MARKER).write_text(json.dumps(marker, sort_keys=True))
    _fsync_tree(tmp)
    if final.exists():
        stale = final.with_name(f"{final.name}.old-{uuid.uuid4().hex[:12]}")
        os.rename(final, stale)
        os.rename(tmp, final)
        shutil.rmtree(stale)
    else:
        os.rename(tmp, final)
    return Checkpoint(step=step, path=final, content_hash=digest, metrics=clean_metrics)


def _finite_or_none(value: float | int | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


# ---------------------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------------------


def read_checkpoint(path: str | os.PathLike[str]) -> Checkpoint | None:
    """The checkpoint in `path`, or None when the folder is not a complete checkpoint."""
    folder = Path(path)
    match = _STEP_DIR.match(folder.name)
    marker_path = folder / COMPLETE_MARKER
    if not match or not marker_path.is_file():
        return None
    try:
        marker = json.loads(marker_path.read_text())
    except ValueError:
        return None
    return Checkpoint(
        step=int(match.group(1)),
        path=folder,
        content_hash=marker.get("content_hash", ""),
        metrics=marker.get("metrics") or {},
    )


def list_checkpoints(run_dir: str | os.PathLike[str]) -> list[Checkpoint]:
    """Complete checkpoints of a run, oldest step first; tmp and unmarked folders are skipped."""
    root = checkpoints_root(run_dir)
    if not root.is_dir():
        return []
    found = (read_checkpoint(p) for p in root.iterdir() if p.is_dir())
    return sorted((c for c in found if c is not None), key=lambda c: c.step)


def latest_checkpoint(run_dir: str | os.PathLike[str]) -> Path | None:
    """The folder of the complete checkpoint with the highest step, or None."""
    checkpoints = list_checkpoints(run_dir)
    return checkpoints[-1].path if checkpoints else None


def discard_incomplete(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Delete folders a crashed writer left behind (tmp and replaced copies).

    Call only when no other process writes checkpoints of this run, e.g. at the start
    of a resumed attempt.
    """
    root = checkpoints_root(run_dir)
    if not root.is_dir():
        return []
    leftovers = [
        p for p in root.iterdir() if p.is_dir() and re.match(r"^step_\d+\.(tmp|old)-", p.name)
    ]
    for path in leftovers:
        shutil.rmtree(path)
    return leftovers


# ---------------------------------------------------------------------------------------
# Retention
# ---------------------------------------------------------------------------------------


def _ranked_steps(scores: Mapping[int, float | None], mode: str) -> list[int]:
    """Steps with a finite score, best first; a later step wins a tie."""
    scored = [(s, v) for s, v in scores.items() if v is not None and math.isfinite(v)]
    sign = 1 if mode == "max" else -1
    return [s for s, _ in sorted(scored, key=lambda sv: (sign * sv[1], sv[0]), reverse=True)]


def kept_steps(scores: Mapping[int, Any], *, keep_top_k: int, mode: str) -> set[int]:
    """The retention rule: the best `keep_top_k` finite scores (a later step wins a tie), plus the
    latest step. Applied save after save it ends where one application to all steps does, so the
    web app recomputes which folders survive from recorded metrics with this same function."""
    if not scores:
        return set()
    numbers = {s: v for s, v in scores.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    return set(_ranked_steps(numbers, mode)[:keep_top_k]) | {max(scores)}


def retain_checkpoints(
    run_dir: str | os.PathLike[str],
    *,
    keep_top_k: int,
    metric: str,
    mode: Literal["max", "min"] = "max",
    scores: Mapping[int, float | None] | None = None,
) -> list[Path]:
    """Delete checkpoints outside the best `keep_top_k` by `metric`, keeping the latest too.

    Scores come from `scores` (step -> value) when given, else from the `metric` entry of
    each checkpoint's recorded metrics. Checkpoints without a score only survive as the
    latest. Returns the deleted folders.
    """
    if keep_top_k < 1:
        raise ValueError(f"keep_top_k must be >= 1, got {keep_top_k}")
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    checkpoints = list_checkpoints(run_dir)
    if not checkpoints:
        return []
    if scores is None:
        scores = {c.step: c.metrics.get(metric) for c in checkpoints}
    present = {c.step for c in checkpoints}
    keep = kept_steps({s: v for s, v in scores.items() if s in present} | {checkpoints[-1].step: scores.get(
        checkpoints[-1].step)}, keep_top_k=keep_top_k, mode=mode)
    deleted = [c.path for c in checkpoints if c.step not in keep]
    for path in deleted:
        shutil.rmtree(path)
    return deleted


# ---------------------------------------------------------------------------------------
# Optimizer, scheduler, RNG and step
# ---------------------------------------------------------------------------------------


def _numpy_random() -> Any | None:
    try:
        import numpy
    except ImportError:
        return None
    return numpy.random


def _capture_host_rng() -> dict[str, Any]:
    """Python's and NumPy's global RNG states as JSON (no pickle, so loading is safe)."""
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {"python": [version, list(internal), gauss]}
    np_random = _numpy_random()
    if np_random is not None:
        name, keys, pos, has_gauss, cached = np_random.get_state()
        state["numpy"] = [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]
    return state


def _restore_host_rng(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_random = _numpy_random()
    if np_random is not None and "numpy" in state:
        import numpy

        name, keys, pos, has_gauss, cached = state["numpy"]
        np_random.set_state((name, numpy.array(keys, dtype=numpy.uint32), pos, has_gauss, cached))


def save_training_state(
    directory: str | os.PathLike[str],
    optimizer: Any,
    scheduler: Any | None,
    step: int,
    rng: Any | None = None,
) -> None:
    """Write what resuming needs besides the weights: optimizer, scheduler, RNGs, step.

    Saves the global RNGs (Python, NumPy when installed, torch CPU and every CUDA device)
    and, when given, the state of `rng`, a torch.Generator the trainer samples with.
    state.json is written last, so its presence means the rest is there.
    """
    import torch

    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "torch_cpu": torch.get_rng_state(),
        "torch_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "generator": rng.get_state() if rng is not None else None,
    }
    torch.save(tensors, folder / TRAINING_STATE_FILE)
    (folder / RNG_STATE_FILE).write_text(json.dumps(_capture_host_rng()))
    (folder / STATE_FILE).write_text(json.dumps({"step": step}))


def load_training_state(
    directory: str | os.PathLike[str],
    optimizer: Any,
    scheduler: Any | None = None,
    rng: Any | None = None,
) -> int:
    """Restore what save_training_state wrote into the given objects; return the step.

    Call after the model's weights are loaded and the optimizer is built over the same
    parameters in the same order.
    """
    import torch

    folder = Path(directory)
    if not (folder / STATE_FILE).is_file():
        raise FileNotFoundError(
            f"{folder} holds no {STATE_FILE}; it is not a checkpoint written by "
            "save_training_state (pick a folder from RUN_DIR/checkpoints/step_N)"
        )
    step = int(json.loads((folder / STATE_FILE).read_text())["step"])
    tensors = torch.load(folder / TRAINING_STATE_FILE, map_location="cpu", weights_only=True)
    optimizer.load_state_dict(tensors["optimizer"])
    if scheduler is not None and tensors["scheduler"] is not None:
        scheduler.load_state_dict(tensors["scheduler"])
    torch.set_rng_state(tensors["torch_cpu"])
    if tensors["torch_cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(tensors["torch_cuda"])
    if rng is not None and tensors["generator"] is not None:
        rng.set_state(tensors["generator"])
    _restore_host_rng(json.loads((folder / RNG_STATE_FILE).read_text()))
    return step
