"""The llm_judge verifier under the operator's policy: judge keys only from CRUCIBLE_JUDGE_KEY_*,
no loopback without the setting, no private, link-local or metadata address, the address checked
at request time and connected to as checked, no redirect followed, answers bounded in size and time.

Every judge here is a local HTTP server on 127.0.0.1; refusals of other addresses are shown to
happen before any lookup or connection (both are made to fail loudly if they are attempted).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from environments import llm_judge
from environments.llm_judge import JudgePolicy, LLMJudgeVerifier, PolicyError
from environments.registry import ConfigError, get_verifier
from environments.types import Task, Trajectory

TASK = Task(id="t1", messages=[{"role": "user", "content": "Summarise the memo."}])
TRAJECTORY = Trajectory.from_completion("Ship on Friday.")
GOOD = json.dumps({"choices": [{"message": {"content": '{"score": 8, "reason": "ok"}'}}]}).encode()
LOCAL = JudgePolicy(allow_loopback=True)


class Judge(BaseHTTPRequestHandler):
    """Path prefix -> behaviour; every request is recorded with its headers."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the verifier hung up, as meant
            self._answer()

    def _answer(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.requests.append({"path": self.path, "headers": dict(self.headers)})
        behaviour = self.path.split("/")[1]
        if behaviour == "redirect":
            self.send_response(302)
            self.send_header("Location", self.server.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif behaviour == "huge-declared":
            self.send_response(200)
            self.send_header("Content-Length", str(3_000_000))
            self.end_headers()
            self.wfile.write(b" " * 3_000_000)
        elif behaviour == "huge-streamed":
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            for _ in range(50):
                self.wfile.write(b" " * 65536)
        elif behaviour == "drip":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            for _ in range(100):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.1)
        else:
            self.send_response(200)
            self.send_header("Content-Length", str(len(GOOD)))
            self.end_headers()
            self.wfile.write(GOOD)

    def log_message(self, *args: object) -> None:
        pass


def _serve():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
    server.daemon_threads = True
    server.requests = []
    server.redirect_to = ""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def server():
    server = _serve()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def no_network(monkeypatch):
    """Any lookup or connection fails the test: a refusal must come before both."""

    def forbidden(*args, **kwargs):
        raise AssertionError(f"a refused judge must not be looked up or connected to: {args!r}")

    monkeypatch.setattr(socket, "getaddrinfo", forbidden)
    monkeypatch.setattr(socket, "create_connection", forbidden)


def _config(base_url: str, **extra) -> dict:
    return {"base_url": base_url, "model": "m", "rubric": "10 = right", "timeout_seconds": 2, **extra}


def _url(server, behaviour: str = "good", host: str = "127.0.0.1") -> str:
    return f"http://{host}:{server.server_address[1]}/{behaviour}/v1"


# --- credentials --------------------------------------------------------------------------


def test_a_server_secret_is_never_sent_as_the_judge_key(server, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "the-django-secret")
    monkeypatch.delenv("CRUCIBLE_JUDGE_KEY_SECRET_KEY", raising=False)
    result = LLMJudgeVerifier(_config(_url(server), api_key_env="SECRET_KEY"), policy=LOCAL).verify(TASK, TRAJECTORY)
    assert result.reward is None and result.info["reason"] == "missing_api_key"
    assert "CRUCIBLE_JUDGE_KEY_SECRET_KEY" in result.error and "the-django-secret" not in result.error
    assert server.requests == []


@pytest.mark.parametrize("name", ["OPENAI", "CRUCIBLE_JUDGE_KEY_OPENAI"])
def test_a_configured_judge_key_is_sent_by_its_name_or_full_variable(server, monkeypatch, name):
    monkeypatch.setenv("CRUCIBLE_JUDGE_KEY_OPENAI", "sk-judge")
    result = LLMJudgeVerifier(_config(_url(server), api_key_env=name), policy=LOCAL).verify(TASK, TRAJECTORY)
    assert result.error is None and result.reward == pytest.approx(0.8)
    assert server.requests[0]["headers"]["Authorization"] == "Bearer sk-judge"


def test_key_problems_name_the_prefix_and_the_configured_keys_never_their_values():
    policy = JudgePolicy(environ={"CRUCIBLE_JUDGE_KEY_OPENAI": "sk-1", "CRUCIBLE_JUDGE_KEY_LOCAL": "sk-2",
                                  "DATABASE_URL": "postgres://u:pw@db/x"})
    assert policy.configured_keys() == ["LOCAL", "OPENAI"]
    assert policy.key_problem("OPENAI") is None and policy.key_problem("CRUCIBLE_JUDGE_KEY_LOCAL") is None
    problem = policy.key_problem("DATABASE_URL")
    assert "CRUCIBLE_JUDGE_KEY_DATABASE_URL" in problem and "LOCAL, OPENAI" in problem
    assert "sk-1" not in problem and "pw" not in problem
    assert "not a judge key name" in policy.key_problem("CRUCIBLE_JUDGE_KEY_")


def test_the_schema_refuses_a_key_name_that_is_not_a_variable_name():
    with pytest.raises(ConfigError, match="api_key_env"):
        get_verifier("llm_judge", _config("http://judge.example", api_key_env="sk-abc 123"))


# --- hosts and addresses, refused before any lookup or connection ---------------------------


@pytest.mark.parametrize(
    ("base_url", "words"),
    [
        ("http://127.0.0.1:6379/v1", "loopback"),
        ("http://localhost:5432/v1", "loopback"),
        ("http://[::1]:8000/v1", "loopback"),
        ("http://[::ffff:127.0.0.1]/v1", "loopback"),
        ("http://169.254.169.254/latest/meta-data", "metadata"),
        ("http://[fd00:ec2::254]/v1", "metadata"),
        ("http://100.100.100.200/v1", "metadata"),
        ("http://[::ffff:169.254.169.254]/v1", "metadata"),
        ("http://[64:ff9b::a9fe:a9fe]/v1", "metadata"),
        ("http://169.254.1.1/v1", "link-local"),
        ("http://10.0.0.8/v1", "private"),
        ("http://192.168.1.1:8080/v1", "private"),
        ("http://172.16.0.1/v1", "private"),
        ("http://0.0.0.0:8000/v1", "not an address"),
        ("http://user:pw@judge.example/v1", "user name"),
        ("ftp://judge.example/v1", "http"),
    ],
)
def test_internal_addresses_are_refused_when_the_config_is_saved(no_network, base_url, words):
    with pytest.raises(ConfigError, match=words):
        get_verifier("llm_judge", _config(base_url))


def test_loopback_is_refused_without_the_operator_setting_and_allowed_with_it(no_network):
    with pytest.raises(PolicyError, match="CRUCIBLE_JUDGE_ALLOW_LOOPBACK"):
        LLMJudgeVerifier(_config("http://127.0.0.1:8000/v1"), policy=JudgePolicy())
    LLMJudgeVerifier(_config("http://127.0.0.1:8000/v1"), policy=LOCAL)


def test_a_listed_network_allows_an_internal_judge_but_never_metadata(no_network):
    policy = JudgePolicy.from_settings(allowed_hosts=["10.0.0.0/8", "169.254.0.0/16"])
    LLMJudgeVerifier(_config("http://10.1.2.3:8000/v1"), policy=policy)
    with pytest.raises(PolicyError, match="metadata"):
        LLMJudgeVerifier(_config("http://169.254.169.254/v1"), policy=policy)
    with pytest.raises(PolicyError, match="not allowed by the operator"):
        LLMJudgeVerifier(_config("http://192.168.0.2/v1"), policy=policy)


@pytest.mark.parametrize(
    ("allowed", "base_url", "ok"),
    [
        (["api.openai.com"], "https://api.openai.com/v1", True),
        (["api.openai.com"], "https://API.OpenAI.com./v1", True),
        (["api.openai.com"], "https://api.openai.com.evil.example/v1", False),
        (["api.openai.com"], "https://evil.example/v1#api.openai.com", False),
        (["*.example.com"], "https://judge.example.com/v1", True),
        (["*.example.com"], "https://example.com.evil.test/v1", False),
        (["judge.example.com:8443"], "https://judge.example.com:8443/v1", True),
        (["judge.example.com:8443"], "https://judge.example.com/v1", False),
    ],
)
def test_the_allowlist_decides_the_host(no_network, allowed, base_url, ok):
    policy = JudgePolicy.from_settings(allowed_hosts=allowed)
    if ok:
        LLMJudgeVerifier(_config(base_url), policy=policy)
    else:
        with pytest.raises(PolicyError, match="CRUCIBLE_JUDGE_ALLOWED_HOSTS"):
            LLMJudgeVerifier(_config(base_url), policy=policy)


@pytest.mark.parametrize("entry", ["not a host", "10.0.0.0/33", "judge.example:99999", "http://x"])
def test_a_bad_allowlist_entry_is_an_operator_error_naming_the_variable(entry):
    with pytest.raises(PolicyError, match="CRUCIBLE_JUDGE_ALLOWED_HOSTS"):
        JudgePolicy.from_settings(allowed_hosts=[entry])


def test_the_policy_reads_the_operator_variables():
    policy = JudgePolicy.from_environ({"CRUCIBLE_JUDGE_ALLOWED_HOSTS": "api.openai.com, 10.0.0.0/8",
                                       "CRUCIBLE_JUDGE_ALLOW_LOOPBACK": "true", "CRUCIBLE_JUDGE_MAX_SECONDS": "5",
                                       "CRUCIBLE_JUDGE_MAX_RESPONSE_BYTES": "4096"})
    assert policy.allow_loopback and policy.max_seconds == 5 and policy.max_response_bytes == 4096
    assert [r.name or str(r.network) for r in policy.allowed_hosts] == ["api.openai.com", "10.0.0.0/8"]
    assert JudgePolicy.from_environ({}).allow_loopback is False
    with pytest.raises(PolicyError, match="CRUCIBLE_JUDGE_ALLOW_LOOPBACK"):
        JudgePolicy.from_environ({"CRUCIBLE_JUDGE_ALLOW_LOOPBACK": "maybe"})


def test_without_a_source_the_policy_comes_from_the_environment(monkeypatch):
    # The web app's source (its settings) comes back afterwards: later tests in this process need it.
    monkeypatch.setattr(llm_judge, "_policy_source", llm_judge._policy_source)
    llm_judge.use_policy_source(None)
    monkeypatch.setenv("CRUCIBLE_JUDGE_ALLOW_LOOPBACK", "true")
    assert llm_judge.current_policy().allow_loopback is True
    monkeypatch.delenv("CRUCIBLE_JUDGE_ALLOW_LOOPBACK")
    assert llm_judge.current_policy().allow_loopback is False


# --- at request time ----------------------------------------------------------------------


def _resolving(monkeypatch, name: str, address: str) -> list:
    """`name` resolves to `address` (as a rebinding DNS server would answer); other names as usual."""
    real = socket.getaddrinfo
    connections: list = []
    real_connect = socket.create_connection

    def getaddrinfo(host, port, *args, **kwargs):
        if host == name:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]
        return real(host, port, *args, **kwargs)

    def create_connection(address_port, *args, **kwargs):
        connections.append(address_port)
        return real_connect(address_port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    return connections


def test_a_name_that_resolves_to_a_private_address_is_refused_before_connecting(monkeypatch):
    verifier = LLMJudgeVerifier(_config("http://judge.rebind.test:8000/v1"), policy=JudgePolicy())
    connections = _resolving(monkeypatch, "judge.rebind.test", "169.254.169.254")
    result = verifier.verify(TASK, TRAJECTORY)
    assert result.reward is None and result.info["reason"] == "refused_host"
    assert "metadata" in result.error
    assert connections == []


def test_a_name_that_resolves_to_loopback_needs_the_loopback_setting(server, monkeypatch):
    port = server.server_address[1]
    connections = _resolving(monkeypatch, "judge.rebind.test", "127.0.0.1")
    refused = LLMJudgeVerifier(_config(f"http://judge.rebind.test:{port}/good/v1"), policy=JudgePolicy())
    assert refused.verify(TASK, TRAJECTORY).info["reason"] == "refused_host"
    assert connections == [] and server.requests == []
    allowed = LLMJudgeVerifier(_config(f"http://judge.rebind.test:{port}/good/v1"),
                               policy=JudgePolicy.from_settings(allowed_hosts=["judge.rebind.test"],
                                                                allow_loopback=True))
    assert allowed.verify(TASK, TRAJECTORY).reward == pytest.approx(0.8)
    # It connected to the address it checked, and still named the host it was given.
    assert connections == [("127.0.0.1", port)]
    assert server.requests[0]["headers"]["Host"] == f"judge.rebind.test:{port}"


def test_a_policy_tightened_after_saving_applies_at_call_time(server, monkeypatch):
    verifier = LLMJudgeVerifier(_config(_url(server)), policy=LOCAL)
    verifier.policy = JudgePolicy()
    result = verifier.verify(TASK, TRAJECTORY)
    assert result.info["reason"] == "refused_host" and server.requests == []


def test_a_redirect_is_not_followed(server):
    other = _serve()
    try:
        server.redirect_to = f"http://127.0.0.1:{other.server_address[1]}/good/v1/chat/completions"
        result = LLMJudgeVerifier(_config(_url(server, "redirect")), policy=LOCAL).verify(TASK, TRAJECTORY)
    finally:
        other.shutdown()
        other.server_close()
    assert result.reward is None and result.info["reason"] == "redirect"
    assert "HTTP 302" in result.error and "not followed" in result.error
    assert len(server.requests) == 1 and other.requests == []


@pytest.mark.parametrize("behaviour", ["huge-declared", "huge-streamed"])
def test_a_huge_answer_is_cut_with_a_clear_verifier_error(server, behaviour):
    result = LLMJudgeVerifier(_config(_url(server, behaviour)), policy=LOCAL).verify(TASK, TRAJECTORY)
    assert result.reward is None and result.info["reason"] == "response_too_large"
    assert "larger than 2,000,000 bytes" in result.error


def test_a_dripping_answer_stops_at_the_deadline(server):
    started = time.monotonic()
    result = LLMJudgeVerifier(_config(_url(server, "drip"), timeout_seconds=0.5), policy=LOCAL).verify(
        TASK, TRAJECTORY)
    assert result.info["reason"] == "timeout"
    assert time.monotonic() - started < 2


def test_the_operator_caps_the_judge_timeout():
    policy = JudgePolicy.from_settings(max_seconds=5)
    verifier = LLMJudgeVerifier(_config("https://judge.example/v1", timeout_seconds=600), policy=policy)
    assert verifier.timeout == 5
