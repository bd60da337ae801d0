"""The verifier's trace of one trajectory, for the inspector and the API.

The trace is not stored with the trajectory (a million rows of parse details would cost
more than they are read), so it is recomputed on view for the built-in verifiers, which are
deterministic and run in-process in milliseconds. User code (python) and remote judges are
never run just because someone opened a page: their trace shows what the parser sees, and
"re-verify" runs the verifier on request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from environments.parsing import calls_from_trajectory
from environments.registry import get_verifier
from webapp.common.timeline import CallPair, expected_against_actual, state_diff_rows
from webapp.trajectories.models import Trajectory
from webapp.trajectories.services.verification import env_task_of, env_trajectory_of, verify_one

RECOMPUTED_ON_VIEW = ("json_tool_call", "workplace")


@dataclass
class VerifierTrace:
    source: str  # "recomputed", "parsed" or "none"
    explanation: str
    parse_format: str | None = None
    parse_errors: list[dict] = field(default_factory=list)
    calls: list[CallPair] = field(default_factory=list)
    state_diff: list[dict] = field(default_factory=list)
    reward_parts: dict[str, float] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    recomputed_reward: float | None = None
    recomputed_bucket: str = ""
    error: str = ""
    info: dict[str, Any] = field(default_factory=dict)


def _weights(kind: str, config: dict) -> dict[str, float]:
    try:
        verifier = get_verifier(kind, config)
    except Exception:  # a config that no longer loads shows no weights, not a 500
        return {}
    return dict(getattr(verifier, "weights", None) or {}) if getattr(verifier, "reward_kind", "") == "shaped" else {}


def verifier_trace(trajectory: Trajectory) -> VerifierTrace:
    task = env_task_of(trajectory)
    if task is None:
        return VerifierTrace(source="none", explanation="No task was stored with this trajectory, so there is "
                                                        "nothing to compare its calls with.")
    version = trajectory.verifier_version
    kind = version.verifier.kind if version is not None else ""
    if version is not None and kind in RECOMPUTED_ON_VIEW:
        result = verify_one(version, trajectory)
        info = result.info or {}
        parse = info.get("parse") or {}
        return VerifierTrace(
            source="recomputed",
            explanation=f"Recomputed now with {version.verifier.name} v{version.version} (the version that scored it).",
            parse_format=parse.get("format"), parse_errors=parse.get("errors") or [],
            calls=expected_against_actual(task.ground_truth, parse.get("calls") or []),
            state_diff=state_diff_rows(info.get("state_diff")), reward_parts=info.get("reward_components") or {},
            weights=_weights(kind, version.config), recomputed_reward=result.reward,
            recomputed_bucket=str(result.failure_bucket or ""), error=result.error or "", info=info,
        )
    parsed = calls_from_trajectory(env_trajectory_of(trajectory), task.tool_specs() or None)
    why = (f"{version.verifier.name} is a {kind} verifier: it runs only when you re-verify."
           if version is not None else "No verifier version is recorded for this trajectory.")
    return VerifierTrace(source="parsed", explanation=f"{why} Shown: what the tool-call parser finds.",
                         parse_format=parsed.format, parse_errors=[e.to_dict() for e in parsed.errors],
                         calls=expected_against_actual(task.ground_truth, [c.to_dict() for c in parsed.calls]))
