"""Per-project judge secrets: an owner stores a judge's API key in Settings; a judge verifier names it
as `api_key_secret` and sends it as its bearer token. The value is write-only (no page, API answer,
audit entry or database column shows it), only owners set or delete, a verifier of one project can
never send another project's secret, and a deleted secret sends nothing.

The judge is a local HTTP server on 127.0.0.1 (tests/webapp/verifiers/test_verifier_judge.py's), allowed by
CRUCIBLE_JUDGE_ALLOW_LOOPBACK.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connection

from environments.llm_judge import LLMJudgeVerifier
from environments.types import Task, Trajectory
from webapp.projects.models import AuditEvent, ProjectSecret
from webapp.projects.services.secrets import decrypt, judge_secrets_environ, project_secret_set
from webapp.verifiers.models import Verifier
from webapp.verifiers.services.judge import build_verifier

VALUE = "sk-project-judge-7f3a9c"
GOOD = json.dumps({"choices": [{"message": {"content": '{"score": 9, "reason": "fine"}'}}]}).encode()
TASK = {"messages": [{"role": "user", "content": "Summarise the memo."}]}


class Judge(BaseHTTPRequestHandler):
    """Records each request's headers and answers a score of 9 of 10."""

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


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.CRUCIBLE_JUDGE_ALLOW_LOOPBACK = True


def _settings(slug: str, tail: str = "") -> str:
    return f"/p/{slug}/settings/{tail}"


def _set(project, name: str = "JUDGE", value: str = VALUE, actor=None):
    return project_secret_set(project=project, name=name, value=value, actor=actor)[0]


def _score(client, bearer, verifier_id: int, who: str = "viewer"):
    return client.post(f"/api/verifiers/{verifier_id}/versions/1/score",
                       json.dumps({"task": TASK, "output": "The memo says Friday."}),
                       content_type="application/json", **bearer(who))


def test_an_owner_sets_a_secret_and_the_judge_sends_it_as_its_bearer_token(client, project_team, bearer, judge_server):
    slug = project_team["project"].slug
    client.force_login(project_team["owner"])
    response = client.post(_settings(slug, "secrets/"), {"name": "JUDGE", "value": VALUE})
    assert response.status_code == 302 and response["Location"].endswith("#judge-secrets")
    created = _create(client, project_team, bearer, _config(_local(judge_server), api_key_secret="JUDGE"))
    assert created.status_code == 201, created.content
    score = _score(client, bearer, created.json()["id"])
    assert score.status_code == 200 and score.json()["reward"] == pytest.approx(0.9)
    assert judge_server.requests[0]["Authorization"] == f"Bearer {VALUE}"
    assert VALUE not in score.content.decode() and VALUE not in created.content.decode()
    assert ProjectSecret.objects.get(project=project_team["project"], name="JUDGE").last_used_at is not None


def test_replacing_a_secret_sends_the_new_value(project_team, judge_server):
    project = project_team["project"]
    _set(project, value="sk-old")
    _set(project, value="sk-new")
    verifier = build_verifier("llm_judge", _config(_local(judge_server), api_key_secret="JUDGE"), project=project)
    result = verifier.verify(Task(id="t", messages=TASK["messages"]), Trajectory(turns=[]))
    assert result.error is None
    assert judge_server.requests[-1]["Authorization"] == "Bearer sk-new"
    assert ProjectSecret.objects.filter(project=project).count() == 1


def test_the_value_is_encrypted_at_rest(project_team):
    secret = _set(project_team["project"])
    with connection.cursor() as cursor:
        cursor.execute("SELECT ciphertext FROM projects_projectsecret WHERE id = %s", [secret.pk])
        stored = cursor.fetchone()[0]
    assert VALUE not in stored and decrypt(stored) == VALUE


def test_a_changed_secret_key_is_reported_and_a_fallback_still_decrypts(project_team, judge_server, settings):
    project = project_team["project"]
    _set(project)
    old = settings.SECRET_KEY
    settings.SECRET_KEY = "a-new-secret-key-" + "x" * 40
    verifier = build_verifier("llm_judge", _config(_local(judge_server), api_key_secret="JUDGE"), project=project)
    result = verifier.verify(Task(id="t", messages=TASK["messages"]), Trajectory(turns=[]))
    assert result.reward is None and "SECRET_KEY" in result.error and judge_server.requests == []
    settings.SECRET_KEY_FALLBACKS = [old]
    result = verifier.verify(Task(id="t", messages=TASK["messages"]), Trajectory(turns=[]))
    assert result.error is None and judge_server.requests[0]["Authorization"] == f"Bearer {VALUE}"


@pytest.mark.parametrize("who", ["viewer", "reviewer", "editor", "outsider"])
def test_only_an_owner_can_set_or_delete_a_secret(client, project_team, who):
    project = project_team["project"]
    secret = _set(project)
    client.force_login(project_team[who])
    expected = 404 if who == "outsider" else 403
    assert client.post(_settings(project.slug, "secrets/"), {"name": "JUDGE", "value": "sk-theirs"}).status_code == expected
    assert client.post(_settings(project.slug, f"secrets/{secret.pk}/delete/")).status_code == expected
    assert decrypt(ProjectSecret.objects.get(pk=secret.pk).ciphertext) == VALUE


@pytest.mark.parametrize("who", ["viewer", "editor", "owner"])
def test_the_value_never_appears_in_any_page_or_api_answer(client, project_team, bearer, judge_server, who):
    project = project_team["project"]
    _set(project, actor=project_team["owner"])
    created = _create(client, project_team, bearer, _config(_local(judge_server), api_key_secret="JUDGE"))
    verifier_id = created.json()["id"]
    _score(client, bearer, verifier_id)
    client.force_login(project_team[who])
    pages = [_settings(project.slug), f"/p/{project.slug}/verifiers/", f"/p/{project.slug}/verifiers/{verifier_id}/",
             f"/p/{project.slug}/verifiers/{verifier_id}/versions/1/", f"/p/{project.slug}/verifiers/playground/"]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        assert VALUE not in response.content.decode(), url
    settings_page = client.get(_settings(project.slug)).content.decode()
    assert 'data-secret="JUDGE"' in settings_page  # every member sees the name, to reference it
    assert (f'action="/p/{project.slug}/settings/secrets/"' in settings_page) == (who == "owner")
    for url in (f"/api/verifiers/{verifier_id}", f"/api/projects/{project.slug}",
                f"/api/projects/{project.slug}/verifiers"):
        response = client.get(url, **bearer(who))
        assert VALUE not in response.content.decode(), url
    assert not any(VALUE in json.dumps(e.data) for e in AuditEvent.objects.all())
    assert AuditEvent.objects.filter(action="secret.set", data={"name": "JUDGE"}).exists()


def test_an_error_beside_the_form_never_echoes_the_value(client, project_team):
    client.force_login(project_team["owner"])
    response = client.post(_settings(project_team["project"].slug, "secrets/"),
                           {"name": "9 bad name", "value": VALUE})
    assert response.status_code == 400
    body = response.content.decode()
    assert "starts with a letter" in body and VALUE not in body
    response = client.post(_settings(project_team["project"].slug, "secrets/"), {"name": "GOOD", "value": "a\nb"})
    assert response.status_code == 400 and "line break" in response.content.decode()
    assert not ProjectSecret.objects.exists()


def test_a_verifier_cannot_name_a_secret_its_project_lacks(client, project_team, bearer, judge_server):
    _set(project_team["other"], name="THEIRS", value="sk-other-project")
    response = _create(client, project_team, bearer, _config(_local(judge_server), api_key_secret="THEIRS"))
    assert response.status_code == 422
    assert "no judge secret named 'THEIRS'" in response.json()["errors"]["config.api_key_secret"]
    assert not Verifier.objects.filter(project=project_team["project"]).exists()
    both = _create(client, project_team, bearer, _config(_local(judge_server), api_key_secret="THEIRS",
                                                         api_key_env="OPENAI"))
    assert both.status_code == 422 and "not both" in json.dumps(both.json())


def test_the_form_refuses_a_secret_the_project_lacks_beside_the_field(client, project_team, judge_server):
    client.force_login(project_team["editor"])
    response = client.post(f"/p/{project_team['project'].slug}/verifiers/new/", {
        "kind": "llm_judge", "name": "judge", "cfg.base_url": _local(judge_server), "cfg.model": "judge",
        "cfg.rubric": "10 = right", "cfg.api_key_secret": "MISSING"})
    assert response.status_code == 422 and "no judge secret named" in response.content.decode()


def test_a_judge_of_one_project_never_reads_another_projects_secret(project_team, judge_server):
    """Same name in both projects: each judge sends its own; built without a project it sends none."""
    _set(project_team["project"], value="sk-ours")
    _set(project_team["other"], value="sk-theirs")
    config = _config(_local(judge_server), api_key_secret="JUDGE")
    task, trajectory = Task(id="t", messages=TASK["messages"]), Trajectory(turns=[])
    assert build_verifier("llm_judge", config, project=project_team["project"]).verify(task, trajectory).error is None
    assert judge_server.requests[-1]["Authorization"] == "Bearer sk-ours"
    unbound = LLMJudgeVerifier(config).verify(task, trajectory)  # the app's default lookup finds nothing
    assert unbound.reward is None and "not set in this project" in unbound.error
    assert len(judge_server.requests) == 1
    assert judge_secrets_environ(project_team["project"], ["JUDGE"]) == {"CRUCIBLE_JUDGE_SECRET_JUDGE": "sk-ours"}


def test_a_deleted_secret_is_a_verifier_error_that_sends_nothing(client, project_team, bearer, judge_server):
    project = project_team["project"]
    secret = _set(project)
    created = _create(client, project_team, bearer, _config(_local(judge_server), api_key_secret="JUDGE"))
    client.force_login(project_team["owner"])
    assert client.post(_settings(project.slug, f"secrets/{secret.pk}/delete/")).status_code == 302
    assert not ProjectSecret.objects.filter(pk=secret.pk).exists()
    score = _score(client, bearer, created.json()["id"])
    assert score.status_code == 200 and score.json()["reward"] is None
    assert "Settings page (Judge secrets)" in score.json()["error"]
    assert judge_server.requests == []
    assert AuditEvent.objects.filter(action="secret.delete", data={"name": "JUDGE"}).exists()


def test_an_old_config_with_an_operator_key_keeps_working(client, project_team, bearer, judge_server, monkeypatch):
    monkeypatch.setenv("CRUCIBLE_JUDGE_KEY_LOCAL", "sk-operator")
    created = _create(client, project_team, bearer, _config(_local(judge_server), api_key_env="LOCAL"))
    assert _score(client, bearer, created.json()["id"]).json()["reward"] == pytest.approx(0.9)
    assert judge_server.requests[0]["Authorization"] == "Bearer sk-operator"


def test_a_runs_training_process_gets_only_its_own_projects_judge_secret(project_team, judge_server):
    """A training process has no database: its worker passes the run's judge secret in its environment."""
    from webapp.runs.models import Run
    from webapp.verifiers.services.judge import run_judge_environ
    from webapp.verifiers.services.verifiers import verifier_create

    project = project_team["project"]
    _set(project, value="sk-ours")
    _set(project, name="UNUSED", value="sk-unused")
    _set(project_team["other"], value="sk-theirs")
    verifier = verifier_create(project=project, name="judge", kind="llm_judge", actor=None,
                               config=_config(_local(judge_server), api_key_secret="JUDGE"))
    run = Run.objects.create(project=project, name="grpo", kind="grpo", verifier_version=verifier.latest_version)
    assert run_judge_environ(run) == {"CRUCIBLE_JUDGE_SECRET_JUDGE": "sk-ours"}
    assert run_judge_environ(Run.objects.create(project=project, name="no judge", kind="sft")) == {}


def test_in_a_training_process_the_judge_reads_the_secret_its_worker_passed(judge_server, monkeypatch):
    """No Django there: environments' own lookup reads CRUCIBLE_JUDGE_SECRET_<NAME> (what run_judge_environ sets)."""
    from environments.llm_judge import environ_secret

    monkeypatch.setenv("CRUCIBLE_JUDGE_SECRET_JUDGE", "sk-from-worker")
    monkeypatch.setenv("CRUCIBLE_JUDGE_ALLOW_LOOPBACK", "true")  # a training process reads its policy from here
    config = _config(_local(judge_server), api_key_secret="JUDGE")
    result = LLMJudgeVerifier(config, secrets=environ_secret).verify(Task(id="t", messages=TASK["messages"]),
                                                                     Trajectory(turns=[]))
    assert result.error is None and judge_server.requests[0]["Authorization"] == "Bearer sk-from-worker"
    monkeypatch.delenv("CRUCIBLE_JUDGE_SECRET_JUDGE")
    missing = LLMJudgeVerifier(config, secrets=environ_secret).verify(Task(id="t", messages=TASK["messages"]),
                                                                      Trajectory(turns=[]))
    assert missing.reward is None and "api_key_secret" in missing.error and len(judge_server.requests) == 1
