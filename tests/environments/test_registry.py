"""Registry: listing with versions and schemas, lazy loading, config validation."""

from __future__ import annotations

import pytest

from environments import registry
from environments.json_tool_call import JsonToolCallEnvironment, JsonToolCallVerifier
from environments.registry import (
    ConfigError,
    RegistryError,
    get_environment,
    get_verifier,
    list_environments,
    list_verifiers,
)


def _by_name(entries: list[dict]) -> dict[str, dict]:
    return {e["name"]: e for e in entries}


def test_listing_names_every_registered_entry() -> None:
    assert set(_by_name(list_environments())) == {"workplace", "json_tool_call"}
    assert set(_by_name(list_verifiers())) == {"workplace", "json_tool_call", "python", "llm_judge"}


def test_json_tool_call_entries_carry_version_and_schema() -> None:
    entry = _by_name(list_verifiers())["json_tool_call"]
    assert entry["available"] and entry["version"] == "1"
    assert entry["config_schema"]["properties"]["mode"]["enum"] == ["strict", "lenient"]
    assert _by_name(list_environments())["json_tool_call"]["version"] == "1"


def test_broken_entry_is_listed_unavailable_with_its_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.VERIFIERS, "ghost", "environments.does_not_exist:Ghost")
    entry = _by_name(list_verifiers())["ghost"]
    assert entry["available"] is False
    assert "does_not_exist" in entry["error"]
    assert _by_name(list_verifiers())["json_tool_call"]["available"]
    with pytest.raises(RegistryError, match="cannot be loaded"):
        get_verifier("ghost")


def test_unknown_name_lists_available_ones() -> None:
    with pytest.raises(RegistryError, match="json_tool_call"):
        get_verifier("jsn_tool_call")
    with pytest.raises(RegistryError, match="unknown environment"):
        get_environment("nope")


def test_get_verifier_applies_config() -> None:
    verifier = get_verifier("json_tool_call", {"mode": "strict"})
    assert isinstance(verifier, JsonToolCallVerifier) and verifier.mode == "strict"
    assert isinstance(get_environment("json_tool_call"), JsonToolCallEnvironment)


@pytest.mark.parametrize(
    ("config", "names"),
    [
        ({"mode": "loose"}, "'mode'"),
        ({"case_insensitive_strings": "yes"}, "'case_insensitive_strings'"),
        ({"mdoe": "strict"}, "mdoe"),
        ({"weights": {"bonus": 1}}, "weights.bonus"),
        ({"weights": {"completion": "high"}}, "'weights.completion'"),
    ],
)
def test_bad_config_error_names_the_key(config: dict, names: str) -> None:
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        get_verifier("json_tool_call", config)


@pytest.mark.parametrize("name", ["workplace", "python", "llm_judge"])
def test_other_verifiers_list_without_crashing(name: str) -> None:
    entry = _by_name(list_verifiers())[name]
    if entry["available"]:
        assert isinstance(entry["config_schema"], dict) and entry["version"]
    else:
        assert entry["error"] and entry["config_schema"] is None


def test_seed_names_resolve_to_json_tool_call():
    from environments.registry import get_verifier

    assert get_verifier("tool_call_verifier").name == "json_tool_call"
    assert get_verifier("tool_call_eval").name == "json_tool_call"
