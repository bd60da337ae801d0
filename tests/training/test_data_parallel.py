"""Data-parallel jobs on CPU (gloo): N processes train the weights one process trains.

Every job here is started as a person or a worker starts it, `python -m training run`, which
launches torchrun itself when num_processes > 1. The tolerance: 2 processes sum gradients in
a different order than 1 (an all-reduce of per-rank sums), so adapters agree to float32
rounding, 1e-5 absolute after two AdamW steps at lr 1e-3 (AdamW moves each weight by about
lr per step, so a wrong update differs by ~1e-3, a hundred times the tolerance).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from training.distributed import (
    Rendezvous,
    read_heartbeats,
    seed_for,
    shard_range,
    torchrun_command,
)
from training.events import read_events

REPO = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-5

# A reward with a spread on a random model's output, so advantages (and gradients) are not 0.
SPREAD_VERIFIER = {
    "name": "python",
    "config": {
        "code": (
            "def verify(task, trajectory):\n"
            "    text = ''.join(t.get('content') or '' for t in trajectory['turns'] if t['role'] == 'assistant')\n"
            "    return (sum(map(ord, text)) % 5) / 4\n"
        )
    },
}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def _run(config: Path, out: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "training", "run", "--config", str(config), "--out", str(out)],
                          cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout)


def _write_config(path: Path, **values) -> Path:
    path.write_text(json.dumps(values))
    return path


def _adapter(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "checkpoints" / f"step_{step}" / "adapter_model.safetensors"))


def _max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _events(run_dir: Path) -> list[dict]:
    return read_events(run_dir / "events.jsonl")[0]


def _train_samples(run_dir: Path) -> list[tuple]:
    return sorted((e["step"], e["task_id"], e["sample_index"], json.dumps(e["turns"]), e["reward"])
                  for e in _events(run_dir) if e["type"] == "trajectory" and e["split"] == "train")


@pytest.fixture
def common(tiny_model_dir, json_tasks_file):
    return {"model": str(tiny_model_dir), "dataset": str(json_tasks_file), "device": "cpu", "bf16": False,
            "max_completion_length": 8, "learning_rate": 1e-3, "lr_scheduler": "constant", "seed": 7}


def _grpo(common: dict, **values) -> dict:
    return {"kind": "grpo", "num_prompts_per_step": 4, "num_generations_per_prompt": 2, "micro_batch_size": 2,
            "max_steps": 2, "eval_interval": 0, "checkpoint_interval": 1, "keep_top_k": 3,
            "checkpoint_metric": "train/lr", "temperature": 1.0,
            "verifier": SPREAD_VERIFIER, **common, **values}


# --- pieces ---------------------------------------------------------------------------------


def test_shards_are_contiguous_cover_everything_and_differ_by_at_most_one():
    for count in range(0, 12):
        for size in range(1, 5):
            parts = [shard_range(count, rank, size) for rank in range(size)]
            assert [i for part in parts for i in part] == list(range(count))
            assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1


def test_seeds_depend_on_their_parts_only():
    assert seed_for(7, 1, 0, 3) == seed_for(7, 1, 0, 3)
    assert len({seed_for(7, step, 0, prompt) for step in range(4) for prompt in range(16)}) == 64
    assert 0 <= seed_for(-1, 2**70) < 2**63


def test_one_host_uses_a_standalone_rendezvous_and_several_need_an_endpoint(tmp_path):
    command = torchrun_command("run.json", tmp_path, 2, Rendezvous())
    assert "--standalone" in command and "--nproc-per-node=2" in command
    assert command[-6:] == ["training", "run", "--config", "run.json", "--out", str(tmp_path)]
    hosts = torchrun_command("run.json", tmp_path, 4, Rendezvous(nnodes=2, node_rank=1, endpoint="h0:29500"))
    assert "--nproc-per-node=2" in hosts and "--node-rank=1" in hosts and "--rdzv-endpoint=h0:29500" in hosts
    with pytest.raises(RuntimeError, match="does not split evenly"):
        Rendezvous(nnodes=3, endpoint="h0:1").check(4)
    with pytest.raises(RuntimeError, match="--rdzv-endpoint"):
        Rendezvous(nnodes=2).check(4)


def test_a_rank_process_ends_with_its_status_and_what_it_printed_reaches_the_pipes():
    """end_rank_process skips finalization (os._exit), which would drop unflushed output."""
    code = ("import sys; from training.distributed import end_rank_process; "
            "print('last words', end=''); sys.stderr.write('to stderr'); end_rank_process(3)")
    buffered = {k: v for k, v in _env().items() if k != "PYTHONUNBUFFERED"}  # as torchrun's ranks write
    ended = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=buffered, capture_output=True, text=True,
                           timeout=120)
    assert (ended.returncode, ended.stdout, ended.stderr) == (3, "last words", "to stderr")


def test_sampling_a_prompt_does_not_depend_on_its_batch(tiny_model, tokenizer):
    """Per-prompt seeds: prompt 2 sampled with prompts 0-3 or alone gives the same tokens."""
    from training.rollout import HFGenerateEngine, SamplingParams

    engine = HFGenerateEngine(tiny_model, tokenizer)
    prompts = [tokenizer.encode(f"request number {i}", add_special_tokens=False) for i in range(4)]
    seeds = tuple(seed_for(1, i) for i in range(4))
    params = SamplingParams(temperature=1.0, max_new_tokens=6, n=2, seed=5, prompt_seeds=seeds)
    together = engine.generate_ids(prompts, params)
    alone = engine.generate_ids(prompts[2:3], SamplingParams(temperature=1.0, max_new_tokens=6, n=2, seed=99,
                                                               prompt_seeds=seeds[2:3]))
    assert [g.completion_ids for g in together[2]] == [g.completion_ids for g in alone[0]]
    # and the two samples of a prompt, and different prompts, are different draws
    assert together[2][0].completion_ids != together[2][1].completion_ids
    assert len({tuple(g.completion_ids) for group in together for g in group}) > 4


def test_top_p_keeps_the_smallest_set_reaching_p():
    from training.rollout import top_p_filtered

    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(top_p_filtered(logits, 0.8))[0].tolist()
    assert kept == [True, True, False, False]
    assert torch.isfinite(top_p_filtered(logits, 0.01))[0].tolist() == [True, False, False, False]


# --- whole jobs -----------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", [{}, {"algorithm": "dapo", "max_generation_batches": 2}],
                         ids=["grpo-defaults", "dapo-dynamic-sampling"])
@pytest.mark.torchrun
def test_two_processes_train_the_grpo_weights_of_one(common, tmp_path, algorithm):
    """Dynamic sampling decides which groups to keep from the gathered rewards: the same on every rank."""
    one = _write_config(tmp_path / "one.json", **_grpo(common, **algorithm))
    two = _write_config(tmp_path / "two.json", **_grpo(common, num_processes=2, **algorithm))
    first = _run(one, tmp_path / "one")
    assert first.returncode == 0, first.stderr[-3000:]
    second = _run(two, tmp_path / "two")
    assert second.returncode == 0, second.stderr[-3000:]

    # the same samples, whichever rank generated them, and rewards with a spread
    samples = _train_samples(tmp_path / "one")
    assert samples == _train_samples(tmp_path / "two")
    assert len(samples) >= 2 * 4 * 2 and len(samples) % 8 == 0 and len({s[-1] for s in samples}) > 1
    # the same update: adapters equal to the tolerance, and far from where they started
    a, b = _adapter(tmp_path / "one", 2), _adapter(tmp_path / "two", 2)
    assert _max_difference(a, b) < TOLERANCE
    assert max(float(t.abs().max()) for k, t in b.items() if "lora_B" in k) > 100 * TOLERANCE
    # rank 0 alone wrote the events: one done, one metric per step, and it says 2 processes
    events = _events(tmp_path / "two")
    assert [e["type"] for e in events].count("done") == 1
    assert [e["step"] for e in events if e["type"] == "metric" and e["split"] == "train"] == [1, 2]
    assert any("2 processes (ddp)" in e.get("message", "") for e in events if e["type"] == "log")
    one_metrics = [e["metrics"] for e in _events(tmp_path / "one") if e["type"] == "metric"]
    two_metrics = [e["metrics"] for e in events if e["type"] == "metric"]
    for m1, m2 in zip(one_metrics, two_metrics, strict=True):
        assert m1["reward"] == pytest.approx(m2["reward"]) and m1["loss"] == pytest.approx(m2["loss"], abs=1e-6)
        assert m1["cost/trained_tokens"] == m2["cost/trained_tokens"]
    assert [b["rank"] for b in read_heartbeats(tmp_path / "two")] == [0, 1]


@pytest.mark.torchrun
def test_two_processes_train_the_sft_weights_of_one(common, tmp_path):
    sft = {"kind": "sft", "sft_source": "ground_truth", "micro_batch_size": 2, "gradient_accumulation_steps": 2,
           "max_steps": 2, "eval_interval": 2, "checkpoint_interval": 0, "max_completion_length": 32, **common}
    one = _write_config(tmp_path / "one.json", **sft)
    two = _write_config(tmp_path / "two.json", **{**sft, "num_processes": 2})
    assert (r := _run(one, tmp_path / "one")).returncode == 0, r.stderr[-3000:]
    assert (r := _run(two, tmp_path / "two")).returncode == 0, r.stderr[-3000:]
    a, b = _adapter(tmp_path / "one", 2), _adapter(tmp_path / "two", 2)
    assert _max_difference(a, b) < TOLERANCE
    assert max(float(t.abs().max()) for k, t in b.items() if "lora_B" in k) > 100 * TOLERANCE
    # the validation eval was sharded and gathered: the same trajectories, emitted once
    def validation(run_dir: Path) -> list[tuple]:
        return sorted((e["step"], e["task_id"], json.dumps(e["turns"]))
                      for e in _events(run_dir) if e["type"] == "trajectory")
    assert validation(tmp_path / "one") == validation(tmp_path / "two") != []


@pytest.mark.torchrun
def test_two_processes_train_the_dpo_weights_of_one(common, json_tasks_file, tmp_path):
    tasks = [json.loads(line) for line in json_tasks_file.read_text().splitlines()][:8]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"task_id": t["id"], "chosen": f"yes {i}", "rejected": "no"}) + "\n"
                             for i, t in enumerate(tasks)))
    dpo = {"kind": "dpo", "preference_pairs": str(pairs), "micro_batch_size": 2, "gradient_accumulation_steps": 2,
           "max_steps": 2, "eval_interval": 0, "checkpoint_interval": 0, **common}
    one = _write_config(tmp_path / "one.json", **dpo)
    two = _write_config(tmp_path / "two.json", **{**dpo, "num_processes": 2})
    assert (r := _run(one, tmp_path / "one")).returncode == 0, r.stderr[-3000:]
    assert (r := _run(two, tmp_path / "two")).returncode == 0, r.stderr[-3000:]
    a, b = _adapter(tmp_path / "one", 2), _adapter(tmp_path / "two", 2)
    assert _max_difference(a, b) < TOLERANCE
    assert max(float(t.abs().max()) for k, t in b.items() if "lora_B" in k) > 100 * TOLERANCE


@pytest.mark.torchrun
@pytest.mark.parametrize(("first", "then"), [(2, 1), (1, 2)])
def test_a_checkpoint_resumes_at_another_process_count(common, tmp_path, first, then):
    """Step 1 at one process count, step 2 at the other: the weights of an uninterrupted run."""
    straight = _write_config(tmp_path / "straight.json", **_grpo(common, num_processes=first))
    assert (r := _run(straight, tmp_path / "straight")).returncode == 0, r.stderr[-3000:]
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    # the run folder as it was after step 1: the step-1 checkpoint and the events up to it
    import shutil

    shutil.copytree(tmp_path / "straight" / "checkpoints" / "step_1", resumed / "checkpoints" / "step_1")
    changed = _write_config(tmp_path / "changed.json", **_grpo(common, num_processes=then))
    assert (r := _run(changed, resumed)).returncode == 0, r.stderr[-3000:]
    logs = [e["message"] for e in _events(resumed) if e["type"] == "log"]
    assert any("resuming from checkpoint step_1" in m for m in logs), logs
    assert [e["step"] for e in _events(resumed) if e["type"] == "metric"] == [2]
    assert _max_difference(_adapter(tmp_path / "straight", 2), _adapter(resumed, 2)) < TOLERANCE


@pytest.mark.torchrun
def test_a_killed_rank_fails_the_job_with_a_clear_error_and_the_retry_resumes(common, tmp_path):
    config = _write_config(tmp_path / "run.json", **_grpo(common, num_processes=2, max_steps=30))
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "training", "run", "--config", str(config), "--out", str(out)],
                            cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline:  # wait for rank 1 to be training (step 2, after a checkpoint)
            beats = {b["rank"]: b for b in read_heartbeats(out)}
            if (beats.get(1) or {}).get("step", 0) >= 2 and (out / "checkpoints" / "step_1").is_dir():
                break
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            time.sleep(0.2)
        else:
            pytest.fail("rank 1 never reached step 2")
        os.kill(beats[1]["pid"], signal.SIGKILL)
        assert proc.wait(timeout=120) == 1
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    errors = [e for e in _events(out) if e["type"] == "error"]
    assert len(errors) == 1, errors
    # rank 0 either reported losing its peer (then rank 1 is named) or was stopped first
    assert errors[0]["message"].startswith(("rank 1 of this 2-process job ended without an error message",
                                            "a process of this 2-process job ended without an error message"))
    # no rank is left behind
    for beat in read_heartbeats(out):
        with pytest.raises(ProcessLookupError):
            os.kill(beat["pid"], 0)

    retry = _write_config(tmp_path / "retry.json", **_grpo(common, num_processes=2, max_steps=3))
    result = _run(retry, out)
    assert result.returncode == 0, result.stderr[-3000:]
    logs = [e["message"] for e in _events(out) if e["type"] == "log"]
    assert any("resuming from checkpoint step_" in m for m in logs)
    assert _events(out)[-1]["type"] == "done"


@pytest.mark.torchrun
def test_killing_the_launcher_leaves_no_rank_behind(common, tmp_path):
    """What a worker's cancel does (it kills the job's process group): every rank ends too."""
    # so many steps that ranks left running would still be running when the test looks
    config = _write_config(tmp_path / "run.json", **_grpo(common, num_processes=2, max_steps=5000))
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "training", "run", "--config", str(config), "--out", str(out)],
                            cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 300
    while len(read_heartbeats(out)) < 2 and time.time() < deadline:
        time.sleep(0.2)
    pids = [beat["pid"] for beat in read_heartbeats(out)]
    assert len(pids) == 2
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.time() + 15
    while time.time() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.2)
    survivors = [pid for pid in pids if _alive(pid)]
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert not survivors


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie waiting for its (dead) parent's reaper counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_a_rank_that_raised_is_named_in_the_runs_error(tmp_path):
    """What the launcher reports: the lowest failing rank's own message, else what it knows."""
    from training.cli import _ranks_failure_message
    from training.distributed import World, clear_ranks, write_rank_error

    assert "ended without an error message" in _ranks_failure_message(tmp_path, 1, 2)
    write_rank_error(tmp_path, World(rank=0, size=2), "Connection closed by peer", peer_lost=True)
    message = _ranks_failure_message(tmp_path, 1, 2)
    assert message.startswith("rank 1 of this 2-process job ended without an error message") and "rank 0 then" in message
    write_rank_error(tmp_path, World(rank=1, size=2), "CUDA out of memory")
    assert _ranks_failure_message(tmp_path, 1, 2) == "rank 1 of 2 failed: CUDA out of memory"
    clear_ranks(tmp_path)
    assert "ended without an error message" in _ranks_failure_message(tmp_path, 1, 2)
