"""llm_judge verifiers in the web app: the operator's judge policy is applied when a config is saved
(page and API, beside the field, nothing written) and again when the judge is called (a stored
version made before the policy, or one the policy has since closed, sends nothing).

The judge is a local HTTP server on 127.0.0.1, allowed by CRUCIBLE_JUDGE_ALLOW_LOOPBACK where a test
wants it to answer; no test sends traffic beyond loopback.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.exceptions import ImproperlyConfigured

from environments import llm_judge
from webapp.verifiers.models import Verifier, VerifierVersion
from webapp.verifiers.services.judge import install_judge_policy
from webapp.verifiers.services.verifiers import config_hash

GOOD = json.dumps({"choices": [{"message": {"content": '{"score": 9, "reason": "fine"}'}}]}).encode()
TASK = {"messages": [{"role": "user", "content": "Summarise the memo."}]}


class Judge(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.requests.append(dict(self.headers))
        self.send_response(200)
        self.send_header("Content-Length", str(len(GOOD)))
        self.end_headers()
        self.wfile.write(GOOD)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def judge_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
    server.daemon_threads = True
    server.requests = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _local(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


def _config(base_url: str, **extra) -> dict:
    return {"base_url": base_url, "model": "judge", "rubric": "10 = right", "timeout_seconds": 5, **extra}


def _create(client, project_team, bearer, config: dict, name: str = "judge"):
    return client.post(f"/api/projects/{project_team['project'].slug}/verifiers",
                       json.dumps({"name": name, "kind": "llm_judge", "config": config}),
                       content_type="application/json", **bearer("editor"))


@pytest.mark.parametrize(
    ("base_url", "words"),
    [
        ("http://169.254.169.254/latest/meta-data", "cloud metadata"),
        ("http://10.0.0.8:8000/v1", "private or internal"),
        ("http://127.0.0.1:5432/v1", "CRUCIBLE_JUDGE_ALLOW_LOOPBACK"),
        ("http://localhost:6379/v1", "CRUCIBLE_JUDGE_ALLOW_LOOPBACK"),
        ("http://[::1]:8000/v1", "loopback"),
    ],
)
def test_the_api_refuses_an_internal_judge_address_beside_the_field(client, project_team, bearer, base_url, words):
    response = _create(client, project_team, bearer, _config(base_url))
    assert response.status_code == 422
    assert words in response.json()["errors"]["config.base_url"]
    assert not Verifier.objects.filter(project=project_team["project"]).exists()


def test_the_api_refuses_a_server_variable_as_the_judge_key(client, project_team, bearer, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "the-django-secret")
    monkeypatch.setenv("CRUCIBLE_JUDGE_KEY_OPENAI", "sk-judge")
    for name in ("SECRET_KEY", "DATABASE_URL", "CRUCIBLE_JUDGE_KEY_MISSING"):
        response = _create(client, project_team, bearer, _config("https://judge.example/v1", api_key_env=name))
        assert response.status_code == 422, name
        message = response.json()["errors"]["config.api_key_env"]
        assert "CRUCIBLE_JUDGE_KEY_" in message and "configured: OPENAI" in message
        assert "the-django-secret" not in response.content.decode() and "sk-judge" not in response.content.decode()
    assert not Verifier.objects.filter(project=project_team["project"]).exists()
    ok = _create(client, project_team, bearer, _config("https://judge.example/v1", api_key_env="OPENAI"))
    assert ok.status_code == 201


def test_the_operator_allowlist_decides_the_judge_host(client, project_team, bearer, settings):
    settings.CRUCIBLE_JUDGE_ALLOWED_HOSTS = ["api.openai.com"]
    refused = _create(client, project_team, bearer, _config("https://judge.example/v1"))
    assert refused.status_code == 422
    assert "CRUCIBLE_JUDGE_ALLOWED_HOSTS" in refused.json()["errors"]["config.base_url"]
    assert _create(client, project_team, bearer, _config("https://api.openai.com/v1")).status_code == 201


def test_the_form_shows_the_refusal_beside_base_url_and_keeps_the_input(client, project_team):
    client.force_login(project_team["editor"])
    response = client.post(f"/p/{project_team['project'].slug}/verifiers/new/", {
        "kind": "llm_judge", "name": "judge", "cfg.base_url": "http://169.254.169.254/v1", "cfg.model": "judge",
        "cfg.rubric": "10 = right", "cfg.api_key_env": "SECRET_KEY"})
    assert response.status_code == 422
    body = response.content.decode()
    assert "cloud metadata" in body and "CRUCIBLE_JUDGE_KEY_SECRET_KEY" in body
    assert 'value="http://169.254.169.254/v1"' in body
    assert not Verifier.objects.filter(project=project_team["project"]).exists()


def test_a_local_judge_answers_from_the_playground_when_the_operator_allows_loopback(
        client, project_team, bearer, judge_server, settings, monkeypatch):
    settings.CRUCIBLE_JUDGE_ALLOW_LOOPBACK = True
    monkeypatch.setenv("CRUCIBLE_JUDGE_KEY_LOCAL", "sk-local")
    created = _create(client, project_team, bearer, _config(_local(judge_server), api_key_env="LOCAL"))
    assert created.status_code == 201
    score = client.post(f"/api/verifiers/{created.json()['id']}/versions/1/score",
                        json.dumps({"task": TASK, "output": "The memo says Friday."}),
                        content_type="application/json", **bearer("viewer"))
    assert score.status_code == 200 and score.json()["reward"] == pytest.approx(0.9)
    assert judge_server.requests[0]["Authorization"] == "Bearer sk-local"


def _stored_judge(project_team, config: dict) -> VerifierVersion:
    """A version written before the policy existed (straight to the table, as old rows are)."""
    verifier = Verifier.objects.create(project=project_team["project"], name="old judge", kind="llm_judge")
    return VerifierVersion.objects.create(verifier=verifier, version=1, config=config, kind_version="1",
                                          content_hash=config_hash("llm_judge", config))


def test_an_old_judge_naming_a_server_secret_sends_nothing_when_a_viewer_scores(
        client, project_team, bearer, judge_server, settings, monkeypatch):
    settings.CRUCIBLE_JUDGE_ALLOW_LOOPBACK = True
    monkeypatch.setenv("SECRET_KEY", "the-django-secret")
    version = _stored_judge(project_team, _config(_local(judge_server), api_key_env="SECRET_KEY"))
    score = client.post(f"/api/verifiers/{version.verifier_id}/versions/1/score",
                        json.dumps({"task": TASK, "output": "hi"}), content_type="application/json",
                        **bearer("viewer"))
    assert score.status_code == 200
    assert score.json()["reward"] is None and "CRUCIBLE_JUDGE_KEY_SECRET_KEY" in score.json()["error"]
    assert judge_server.requests == [] and "the-django-secret" not in score.content.decode()


def test_a_judge_the_policy_has_since_closed_is_refused_at_call_time(client, project_team, judge_server, settings):
    version = _stored_judge(project_team, _config(_local(judge_server)))
    client.force_login(project_team["viewer"])
    response = client.post(f"/p/{project_team['project'].slug}/verifiers/playground/",
                           {"version": version.pk, "action": "score", "output": "hi", "task_json": json.dumps(TASK)})
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="verifier-error"' in body and "CRUCIBLE_JUDGE_ALLOW_LOOPBACK" in body
    assert judge_server.requests == []


def test_the_form_lists_the_configured_judge_keys_but_never_their_values(client, project_team, monkeypatch):
    monkeypatch.setenv("CRUCIBLE_JUDGE_KEY_OPENAI", "sk-never-shown")
    client.force_login(project_team["editor"])
    body = client.get(f"/p/{project_team['project'].slug}/verifiers/new/?kind=llm_judge").content.decode()
    assert 'id="judge-setup"' in body and "OPENAI" in body and "sk-never-shown" not in body


def test_a_bad_judge_setting_stops_the_app_with_its_name(settings):
    settings.CRUCIBLE_JUDGE_ALLOWED_HOSTS = ["not a host"]
    try:
        with pytest.raises(ImproperlyConfigured, match="CRUCIBLE_JUDGE_ALLOWED_HOSTS"):
            install_judge_policy()
    finally:
        settings.CRUCIBLE_JUDGE_ALLOWED_HOSTS = []
        install_judge_policy()
    assert llm_judge.current_policy().allowed_hosts == ()
