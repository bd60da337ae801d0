"""Sharded data parallelism (config `parallel: fsdp`): the model's weights split over the ranks.

The data parallelism is that of training/distributed.py (each rank its share of the prompts
and micro-batches, losses normalised for the global batch, gradients summed); what changes
is where the weights live. PyTorch FSDP2's `fully_shard` is applied to every decoder layer
(the model's `_no_split_modules`) and then to the rest of the model (embeddings, final norm,
head): each rank keeps 1/N of every weight, and a unit's full weights exist on a rank only
while that unit runs (all-gathered before its forward and again for its backward, freed
after). So a base that does not fit one device trains over N devices.

- LoRA: the frozen base is sharded; the adapters (a few MB) are left whole on every rank
  (`ignored_params`), so their gradients, AdamW state and checkpoints are those of ddp: the
  gradients are summed by the same flat all-reduce (World.sum_gradients).
- Full fine-tuning: weights, gradients and AdamW state are all sharded. FSDP reduce-scatters
  each backward's gradients itself; its default divides them by N (a mean), which is set to
  a plain sum (`set_gradient_divide_factor(1.0)` with sum-only collectives: gloo has neither
  AVG nor PREMUL_SUM), because every micro-batch's loss is already normalised for the global
  batch. Checkpoints gather the full weights and optimizer state to rank 0 and write the
  files one process writes, so any world size and either strategy resumes them.

Lock step. Every all-gather is a collective, so every rank must run every forward (and
backward) pass that any rank runs, the same number of times:
- training: ranks run equally many micro-batches (a rank with one fewer repeats one with its
  loss multiplied by 0: runner.micro_batches), and each micro-batch is one forward pass
  (no shared-prompt KV-cache path, whose pass count depends on the batch's prompts);
- generation: `model.generate(..., synced_gpus=True)` keeps stepping a rank whose rows are
  done until every rank's are, and LockstepEngine makes ranks call generate equally often
  (a multi-turn episode, an uneven share or the latency probes of an evaluation make the
  counts differ): before each call a rank says so in a one-int all-reduce, and a rank that
  has finished its share (finish_generation) answers with one-token dummy calls until no
  rank is generating. The engine's shared prefill is off, so one call is one generate.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import torch

from training.distributed import DistributedError, World
from training.rollout import Generation, HFGenerateEngine, SamplingParams


def _base(model: Any) -> torch.nn.Module:
    """The transformers model inside a PEFT wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def transformer_blocks(model: Any) -> list[torch.nn.Module]:
    """The model's repeated layers: the classes transformers never splits across devices."""
    base = _base(model)
    names = set(getattr(base, "_no_split_modules", None) or [])
    blocks = [module for module in base.modules() if type(module).__name__ in names]
    if not blocks:
        raise DistributedError(
            f"parallel fsdp shards a model layer by layer, but {type(base).__name__} names no "
            "decoder layer class (_no_split_modules); use parallel ddp for this model"
        )
    return blocks


@functools.cache
def _mesh(device_type: str, size: int) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device_type, (size,))


def shard_model(model: Any, world: World, device: torch.device, *, whole: Iterable[torch.nn.Parameter] = ()) -> Any:
    """Shard `model` over the ranks with FSDP2, in place; `whole` parameters stay unsharded.

    The model arrives on the CPU (runner.build_job loads it there): fully_shard moves each
    unit's weights to `device` and keeps only this rank's shard, one layer at a time, so no
    rank holds the whole model on its device. `whole` (the LoRA adapters) is moved as is.
    """
    from torch.distributed.fsdp import FSDPModule, fully_shard

    keep = set(whole)
    with torch.no_grad():
        for param in keep:
            param.data = param.data.to(device)
    mesh = _mesh(device.type, world.size)
    ignored = keep or None
    for block in transformer_blocks(model):
        fully_shard(block, mesh=mesh, ignored_params=ignored)
    fully_shard(_base(model), mesh=mesh, ignored_params=ignored)
    for module in _base(model).modules():
        if isinstance(module, FSDPModule):
            # Losses are normalised for the global batch: gradients are summed, not averaged.
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return model


def sharded_fraction(model: Any) -> float:
    """The share of the model's parameters (by count) that FSDP shards; the rest is whole."""
    sizes = [(p.numel(), is_sharded(p)) for p in model.parameters()]
    total = sum(n for n, _ in sizes)
    return sum(n for n, sharded in sizes if sharded) / max(total, 1)


def is_sharded(tensor: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def _shard_like(full: torch.Tensor, target: Any) -> Any:
    """This rank's shard of `full`, laid out as the sharded `target` (no communication)."""
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(full.to(device=target.device, dtype=target.dtype), target.device_mesh,
                             target.placements, src_data_rank=None)


# ---------------------------------------------------------------------------------------
# Checkpoints: full tensors on rank 0, in the layout one process writes
# ---------------------------------------------------------------------------------------


def full_model_state(model: Any, world: World) -> dict[str, torch.Tensor] | None:
    """The model's whole state dict on rank 0's host memory (None elsewhere).

    A collective: every rank gathers every sharded tensor in the same order, one at a time,
    so a device holds one full tensor beyond its shards at most. A tensor tied to an earlier
    one (SmolLM2's head is its embedding) is kept once, under its first name, as
    save_pretrained leaves it when it reads the model itself.
    """
    state: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, value in model.state_dict(keep_vars=True).items():
        if id(value) in seen:
            continue
        seen.add(id(value))
        full = value.full_tensor() if is_sharded(value) else value
        if world.is_main:
            state[name] = full.detach().to("cpu", copy=True)
    return state if world.is_main else None


def load_full_state(model: Any, state: dict[str, torch.Tensor]) -> None:
    """Load full tensors (a checkpoint file's) into a sharded model: each rank keeps its shard."""
    current = model.state_dict()
    shards = {name: _shard_like(value, current[name]) if is_sharded(current.get(name)) else value
              for name, value in state.items()}
    model.load_state_dict(shards, strict=False)


class _Snapshot:
    """An optimizer state already gathered: what checkpoints.save_training_state writes."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def state_dict(self) -> dict[str, Any]:
        return self.state


class FullOptimizerState:
    """optimizer.state_dict() / load_state_dict() of an optimizer over sharded parameters, in
    the layout of one unsharded process (integer keys, full tensors), so the training state
    of a checkpoint does not depend on the world size or the strategy that wrote it."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer

    def gather(self, world: World) -> _Snapshot | None:
        """A collective: the full state on rank 0 (None elsewhere)."""
        local = self.optimizer.state_dict()
        state: dict[int, dict[str, Any]] = {}
        for index in sorted(local["state"]):
            entry = {}
            for key in sorted(local["state"][index]):
                value = local["state"][index][key]
                if is_sharded(value):
                    value = value.full_tensor()
                entry[key] = value.detach().to("cpu", copy=True) if torch.is_tensor(value) else value
            state[index] = entry
        return _Snapshot({"state": state, "param_groups": local["param_groups"]}) if world.is_main else None

    def load_state_dict(self, full: dict[str, Any]) -> None:
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        state = {}
        for index, entry in full["state"].items():
            param = params[int(index)]
            state[index] = {
                key: _shard_like(value, param)
                if is_sharded(param) and torch.is_tensor(value) and value.shape == param.shape else value
                for key, value in entry.items()
            }
        self.optimizer.load_state_dict({**full, "state": state})


# ---------------------------------------------------------------------------------------
# Generation in lock step
# ---------------------------------------------------------------------------------------


class LockstepEngine:
    """HF generate on a sharded model, called equally often by every rank (see the module doc).

    A rank's real call all-reduces 1 first; a rank in finish_generation all-reduces 0 and,
    while the sum is not 0, joins with a dummy call. generate itself runs with synced_gpus,
    so the ranks also step token by token together. Calls without prompts generate nothing
    and do not count.
    """

    def __init__(self, inner: HFGenerateEngine, world: World) -> None:
        if inner.share_prefill or not inner.synced_gpus:
            raise ValueError("a lock-step engine needs an HFGenerateEngine with share_prefill=False, synced_gpus=True")
        self.inner = inner
        self.world = world

    @property
    def model(self) -> Any:
        return self.inner.model

    def sync_weights(self, model: Any) -> None:
        self.inner.sync_weights(model)

    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Generation]]:
        encoded = [self.inner.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        return self.generate_ids(encoded, params)

    def generate_ids(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[list[Generation]]:
        if not prompt_ids:
            return []
        self._anyone_generating(True)
        return self.inner.generate_ids(prompt_ids, params)

    def finish_generation(self) -> int:
        """Join the other ranks' generate calls until none is left; returns the dummy calls made."""
        dummies = 0
        while self._anyone_generating(False):
            self.inner.generate_ids([[self.inner.pad_id]], SamplingParams(temperature=0.0, max_new_tokens=1))
            dummies += 1
        return dummies

    def _anyone_generating(self, me: bool) -> bool:
        flag = torch.tensor([1 if me else 0], dtype=torch.int64, device=self.inner.device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.SUM)
        return int(flag.item()) > 0


def finish_generation(engine: Any) -> None:
    """End a generation phase (a round of rollouts, an evaluation's share): with a lock-step
    engine, wait in dummy calls for the other ranks; any other engine has nothing to do."""
    finish = getattr(engine, "finish_generation", None)
    if finish is not None:
        finish()
