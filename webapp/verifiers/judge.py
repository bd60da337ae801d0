"""The operator's llm_judge policy as the web app and its workers apply it (from Django settings).

environments/ knows nothing of Django, so the app installs `judge_policy` as the judge's policy
source when it starts (VerifiersConfig.ready): every judge built in the web process or a Celery
worker then uses the settings below, read again on each use (a test's override applies at once).
A training process started by a worker has no Django: it reads the same CRUCIBLE_JUDGE_*
environment variables, which it inherits.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from environments.llm_judge import JudgePolicy, PolicyError, use_policy_source

JUDGE_KIND = "llm_judge"


def judge_policy() -> JudgePolicy:
    """The policy from the CRUCIBLE_JUDGE_* settings."""
    return JudgePolicy.from_settings(
        allowed_hosts=settings.CRUCIBLE_JUDGE_ALLOWED_HOSTS,
        allow_loopback=settings.CRUCIBLE_JUDGE_ALLOW_LOOPBACK,
        max_seconds=settings.CRUCIBLE_JUDGE_MAX_SECONDS,
        max_response_bytes=settings.CRUCIBLE_JUDGE_MAX_RESPONSE_BYTES,
    )


def install_judge_policy() -> None:
    """Check the settings once at start-up (a bad entry stops the process with its name) and install them."""
    try:
        judge_policy()
    except PolicyError as exc:
        raise ImproperlyConfigured(f"LLM judge settings: {exc}.") from None
    use_policy_source(judge_policy)


def judge_config_problems(config: dict[str, Any]) -> dict[str, str]:
    """Why an llm_judge config cannot be saved, by config key: a refused base_url, an unconfigured key."""
    policy = judge_policy()
    problems: dict[str, str] = {}
    base_url = config.get("base_url")
    if isinstance(base_url, str):
        try:
            policy.target(base_url.rstrip("/") + "/chat/completions")
        except PolicyError as exc:
            problems["base_url"] = _sentence(str(exc))
    key = config.get("api_key_env")
    if isinstance(key, str) and key:
        problem = policy.key_problem(key)
        if problem:
            problems["api_key_env"] = _sentence(problem)
    return problems


def judge_setup_summary() -> dict[str, Any]:
    """What the verifier form tells an editor about the operator's set-up (key names, never values)."""
    policy = judge_policy()
    return {
        "keys": policy.configured_keys(),
        "allowed_hosts": list(settings.CRUCIBLE_JUDGE_ALLOWED_HOSTS),
        "allow_loopback": policy.allow_loopback,
        "max_seconds": policy.max_seconds,
    }


def _sentence(text: str) -> str:
    return f"{text[:1].upper()}{text[1:]}."
