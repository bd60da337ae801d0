"""`python -m environments`: list, generate and score from the command line.

    list                                       environments and verifiers with versions
    generate --env workplace --n N --seed S --out FILE
    score --env NAME [--state DIR] [--verifier SPEC] FILE.jsonl

`score` is the "run your reward on 50-100 outputs and inspect them" step: one JSON object
per input row on stdout, a summary (pass rate, bucket counts, reward histogram) on stderr.
Input rows are Crucible JSONL ({"task": ..., "trajectory": ...}) or NeMo Gym rollout rows.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from environments.base import Verifier
from environments.cli_output import run_quietly_into_pipes
from environments.registry import (
    ConfigError,
    RegistryError,
    get_verifier,
    list_environments,
    list_verifiers,
)
from environments.types import Task, Trajectory, VerifyResult

EXIT_OK, EXIT_ALL_ROWS_FAILED, EXIT_USAGE = 0, 1, 2


class RowError(ValueError):
    """One input row that cannot be turned into a task and a trajectory."""


# --------------------------------------------------------------------------- list


def _print_entries(title: str, entries: list[dict[str, Any]], out: TextIO) -> None:
    print(f"{title}:", file=out)
    for entry in entries:
        if entry["available"]:
            print(f"  {entry['name']:<16} v{entry['version']}  {entry['description']}", file=out)
        else:
            print(f"  {entry['name']:<16} unavailable: {entry['error']}", file=out)


def cmd_list(_: argparse.Namespace) -> int:
    _print_entries("environments", list_environments(), sys.stdout)
    _print_entries("verifiers", list_verifiers(), sys.stdout)
    return EXIT_OK


# --------------------------------------------------------------------------- generate


def cmd_generate(args: argparse.Namespace) -> int:
    if args.env != "workplace":
        print(f"error: only the workplace environment has a task generator, not {args.env!r}", file=sys.stderr)
        return EXIT_USAGE
    generator = importlib.import_module("environments.workplace.generator")
    tasks = generator.generate_tasks(n=args.n, seed=args.seed)
    with Path(args.out).open("w", encoding="utf-8") as fh:
        for task in tasks:
            fh.write(json.dumps(task.to_dict(), ensure_ascii=False) + "\n")
    splits = Counter(t.split for t in tasks)
    print(f"wrote {len(tasks)} tasks to {args.out} ({dict(sorted(splits.items()))})", file=sys.stderr)
    return EXIT_OK


# --------------------------------------------------------------------------- score


def _is_inline_config(spec: str) -> bool:
    """`NAME:{...}`: a spec carrying JSON is never a path. Why ask first: a long inline
    config (a python verifier's code) is no valid file name, and looking it up on disk
    raises OSError (File name too long) instead of parsing it."""
    _, sep, raw = spec.partition(":")
    return bool(sep) and raw.lstrip()[:1] in ("{", "[")


def _is_file(path: Path) -> bool:
    """Path.is_file that answers False for names the OS refuses (too long, NUL bytes)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def parse_verifier_spec(spec: str | None, env: str) -> tuple[str, dict[str, Any]]:
    """`NAME`, `NAME:{json config}`, or a JSON file holding {"name", "config"} or a bare config."""
    if not spec:
        return env, {}
    path = Path(spec)
    if not _is_inline_config(spec) and (spec.endswith(".json") or _is_file(path)):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read verifier file {spec!r}: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"verifier file {spec!r} must hold a JSON object")
        if "name" in data:
            return str(data["name"]), dict(data.get("config") or {})
        return env, data
    name, sep, raw = spec.partition(":")
    if not sep:
        return name, {}
    try:
        config = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"the config after {name!r}: is not valid JSON ({exc}); e.g. {name}:{{\"mode\": \"strict\"}}") from exc
    if not isinstance(config, dict):
        raise ConfigError(f"the config after {name!r}: must be a JSON object")
    return name, config


def row_to_task_and_trajectory(row: Any) -> tuple[Task, Trajectory]:
    """A Crucible row {"task", "trajectory"} or a NeMo Gym rollout row."""
    if not isinstance(row, dict):
        raise RowError(f"expected a JSON object, got {type(row).__name__}")
    if "task" in row and "trajectory" in row:
        try:
            return Task.from_dict(row["task"]), Trajectory.from_dict(row["trajectory"])
        except (TypeError, AttributeError) as exc:
            raise RowError(f"malformed Crucible row ({exc})") from exc
    if "responses_create_params" in row:
        nemo_gym = importlib.import_module("environments.nemo_gym")
        try:
            return nemo_gym.rollout_row_to_task_and_trajectory(row)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RowError(f"malformed NeMo Gym rollout row ({type(exc).__name__}: {exc})") from exc
    raise RowError(
        f"unrecognised row with keys {sorted(row)[:8]}; expected {{\"task\", \"trajectory\"}} "
        "or a NeMo Gym rollout row (responses_create_params + response)"
    )


def _read_rows(path: Path) -> Iterator[tuple[int, Any | RowError]]:
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except ValueError as exc:
                yield number, RowError(f"not valid JSON ({exc})")


def _score_row(verifier: Verifier, task: Task, trajectory: Trajectory) -> VerifyResult:
    try:
        return verifier.verify(task, trajectory)
    except Exception as exc:  # a verifier bug is reported per row, never a crash
        return VerifyResult.failure(f"verifier raised {type(exc).__name__}: {exc}")


def reward_histogram(rewards: Sequence[float], bins: int = 10) -> dict[str, int]:
    """Exact counts when there are few distinct rewards (binary), else equal-width bins."""
    if not rewards:
        return {}
    distinct = sorted(set(rewards))
    if len(distinct) <= bins:
        counts = Counter(rewards)
        return {f"{value:g}": counts[value] for value in distinct}
    low, high = distinct[0], distinct[-1]
    width = (high - low) / bins
    counts = Counter(min(int((r - low) / width), bins - 1) for r in rewards)
    return {f"[{low + i * width:.3g}, {low + (i + 1) * width:.3g})": counts[i] for i in range(bins)}


def _summary(results: list[VerifyResult], failed_rows: int) -> dict[str, Any]:
    rewards = [r.reward for r in results if r.reward is not None]
    buckets = Counter(str(r.failure_bucket) for r in results if r.failure_bucket)
    return {
        "rows_scored": len(results),
        "rows_failed_to_load": failed_rows,
        "pass_rate": round(sum(r.passed for r in results) / len(results), 4) if results else None,
        "mean_reward": round(sum(rewards) / len(rewards), 4) if rewards else None,
        "verifier_errors": sum(r.error is not None for r in results),
        "failure_buckets": dict(buckets.most_common()),
        "reward_histogram": reward_histogram(rewards),
    }


def _print_summary(summary: dict[str, Any]) -> None:
    err = sys.stderr
    print(f"scored {summary['rows_scored']} rows ({summary['rows_failed_to_load']} failed to load)", file=err)
    print(f"pass rate: {summary['pass_rate']}  mean reward: {summary['mean_reward']}  "
          f"verifier errors: {summary['verifier_errors']}", file=err)
    print("failure buckets: " + (", ".join(f"{k}={v}" for k, v in summary["failure_buckets"].items()) or "none"), file=err)
    print("reward histogram: " + (", ".join(f"{k}: {v}" for k, v in summary["reward_histogram"].items()) or "empty"), file=err)
    print("summary " + json.dumps(summary), file=err)


def _result_line(task: Task, result: VerifyResult) -> dict[str, Any]:
    return {
        "id": task.id,
        "reward": result.reward,
        "passed": result.passed,
        "failure_bucket": str(result.failure_bucket) if result.failure_bucket else None,
        "components": result.components,
        "flags": result.flags,
        "error": result.error,
    }


def _build_verifier(args: argparse.Namespace) -> Verifier:
    name, config = parse_verifier_spec(args.verifier, args.env)
    verifier = get_verifier(name, config)
    if not args.state:
        return verifier
    if not _takes_state_dir(verifier):
        raise ConfigError(
            f"--state applies to the workplace verifier only; verifier {name!r} takes no "
            "state folder, so drop --state (or score with --verifier workplace)"
        )
    return get_verifier(name, {**config, "state_dir": args.state})


def _takes_state_dir(verifier: Verifier) -> bool:
    """Whether --state means anything to this verifier: its schema has `state_dir`.
    Why ask: passing it blindly made others fail on "unknown config key(s) state_dir"."""
    schema = getattr(verifier, "config_schema", None) or {}
    return "state_dir" in schema.get("properties", {})


def cmd_score(args: argparse.Namespace) -> int:
    try:
        verifier = _build_verifier(args)
    except (ConfigError, RegistryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    path = Path(args.file)
    if not path.is_file():
        print(f"error: input file {str(path)!r} does not exist", file=sys.stderr)
        return EXIT_USAGE
    results: list[VerifyResult] = []
    failed = 0
    for number, row in _read_rows(path):
        try:
            if isinstance(row, RowError):
                raise row
            task, trajectory = row_to_task_and_trajectory(row)
        except RowError as exc:
            failed += 1
            print(f"row {number}: skipped: {exc}", file=sys.stderr)
            continue
        result = _score_row(verifier, task, trajectory)
        results.append(result)
        print(json.dumps(_result_line(task, result), ensure_ascii=False), flush=False)
    sys.stdout.flush()
    _print_summary(_summary(results, failed))
    if not results:
        print(f"error: no row of {str(path)!r} could be loaded ({failed} failed); nothing was scored",
              file=sys.stderr)
        return EXIT_ALL_ROWS_FAILED
    return EXIT_OK


# --------------------------------------------------------------------------- entry point


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m environments", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list environments and verifiers").set_defaults(func=cmd_list)

    gen = sub.add_parser("generate", help="generate synthetic tasks as Task JSONL")
    gen.add_argument("--env", required=True, help="environment name (workplace)")
    gen.add_argument("--n", type=int, required=True, help="number of tasks")
    gen.add_argument("--seed", type=int, default=0, help="random seed (same seed, same tasks)")
    gen.add_argument("--out", required=True, help="output JSONL file")
    gen.set_defaults(func=cmd_generate)

    score = sub.add_parser("score", help="score rows of a JSONL file; results on stdout")
    score.add_argument("--env", required=True, help="environment name; the default verifier")
    score.add_argument("--state", help="workplace verifier only: folder of the five seed CSVs")
    score.add_argument("--verifier", help='NAME, NAME:{"json": "config"}, or a JSON file')
    score.add_argument("file", help="Crucible JSONL or NeMo Gym rollout JSONL")
    score.set_defaults(func=cmd_score)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse and run one command; a reader that stops early (`score ... | head`) ends it quietly."""
    args = build_parser().parse_args(argv)
    return run_quietly_into_pipes(lambda: args.func(args))
