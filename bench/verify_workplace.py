"""Workplace verifications per second on one core, with the full seed state.

Usage: python bench/verify_workplace.py [--tasks 400] [--seconds 3]

Builds trajectories of 1-5 calls from generated tasks (the reference calls, i.e. lookups
then writes, as structured tool calls; every third one as raw <tool_call> text so the
parser is measured too; every fifth one with a write dropped so failures and state diffs
are measured too), then verifies them in a loop on this one process. Target: >= 2,000/s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from environments.types import Trajectory  # noqa: E402
from environments.workplace import WorkplaceVerifier  # noqa: E402
from environments.workplace.generator import generate_tasks  # noqa: E402


def _trajectory(calls: list[dict], index: int) -> Trajectory:
    if index % 5 == 4 and len(calls) > 1:
        calls = calls[:-1]
    if index % 3 == 0:
        text = "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)
        return Trajectory(turns=[{"role": "assistant", "content": text}])
    return Trajectory(turns=[{"role": "assistant", "content": "", "tool_calls": calls}])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    tasks = [t for t in generate_tasks(args.tasks * 2, seed=1) if len(t.metadata["reference_calls"]) <= 5]
    pairs = [(t, _trajectory(t.metadata["reference_calls"], i)) for i, t in enumerate(tasks[:args.tasks])]
    verifier = WorkplaceVerifier()
    for task, trajectory in pairs:  # warm the state and ground-truth caches
        verifier.verify(task, trajectory)
    done, passed, start = 0, 0, time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        for task, trajectory in pairs:
            passed += verifier.verify(task, trajectory).passed
        done += len(pairs)
    elapsed = time.perf_counter() - start
    calls = sum(len(t.metadata["reference_calls"]) for t, _ in pairs) / len(pairs)
    print(f"workplace verifications/s: {done / elapsed:,.0f} "
          f"({done} verifications in {elapsed:.2f}s, {calls:.1f} calls per trajectory on average, "
          f"pass rate {passed / done:.0%})")


if __name__ == "__main__":
    main()
