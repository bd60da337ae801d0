"""The operator's llm_judge policy as the web app and its workers apply it (from Django settings).

environments/ knows nothing of Django, so the app installs `judge_policy` as the judge's policy
source when it starts (VerifiersConfig.ready): every judge built in the web process or a Celery
worker then uses the settings below, read again on each use (a test's override applies at once).
A training process started by a worker has no Django: it reads the same CRUCIBLE_JUDGE_*
environment variables, which it inherits.

Credentials are an operator's judge key (`api_key_env`) or a secret an owner stored in the
verifier's project (`api_key_secret`, webapp/projects/services/secrets.py). A project secret is read only
through `build_verifier(..., project=...)`, which hands the judge that project's lookup; the
default lookup the app installs finds nothing, so a judge built without its project (or for
another project) can never send one.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from environments.base import Verifier as EnvVerifier
from environments.llm_judge import JudgePolicy, PolicyError, use_policy_source, use_secret_source
from environments.registry import canonical_verifier_name, get_verifier

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
    use_secret_source(_no_secret)


def _no_secret(name: str) -> None:
    """The app's default secret lookup: none. A judge reads a project secret only via build_verifier."""
    return None


def build_verifier(kind: str, config: dict[str, Any], *, project) -> EnvVerifier:
    """A verifier of `project` ready to run: an llm_judge gets that project's secrets (and no other's).

    Every web and worker path that calls a stored or tried config goes through here; ConfigError
    as registry.get_verifier.
    """
    if canonical_verifier_name(kind) == JUDGE_KIND:
        from webapp.projects.services.secrets import project_secret_lookup

        return get_verifier(kind, config, secrets=project_secret_lookup(project))
    return get_verifier(kind, config)


def judge_secret_names(config: dict[str, Any]) -> list[str]:
    """The project secrets a verifier config sends (for a training process's environment)."""
    name = config.get("api_key_secret") if isinstance(config, dict) else None
    return [name] if isinstance(name, str) and name else []


def judge_config_problems(config: dict[str, Any], project=None) -> dict[str, str]:
    """Why an llm_judge config cannot be saved, by config key: a refused base_url, an unconfigured key,
    a project secret `project` does not have (not checked without a project)."""
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
    secret = config.get("api_key_secret")
    if isinstance(secret, str) and secret:
        from webapp.projects.services.secrets import secret_reference_problem

        if key:
            problems["api_key_secret"] = ("Give api_key_env (an operator's judge key) or api_key_secret (this "
                                          "project's secret), not both.")
        else:
            problem = secret_reference_problem(project, secret)
            if problem:
                problems["api_key_secret"] = _sentence(problem)
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


def run_judge_environ(run) -> dict[str, str]:
    """The environment a run's training process needs for its judge's project secret, if it names one.

    A training process has no database, so its worker passes the secret of the run's own project as
    CRUCIBLE_JUDGE_SECRET_<NAME> (environments.llm_judge.environ_secret reads it); never written to
    the run folder.
    """
    version = getattr(run, "verifier_version", None)
    if version is None or canonical_verifier_name(version.verifier.kind) != JUDGE_KIND:
        return {}
    from webapp.projects.services.secrets import judge_secrets_environ

    return judge_secrets_environ(run.project, judge_secret_names(version.config))
