"""Project settings → Models: every member sees the project's models; editors and owners add and remove them."""

from __future__ import annotations

import pytest
from django.test import Client

from webapp.projects.models import AuditEvent
from webapp.runs.models import ModelSpec, Run
from webapp.runs.services.models import ModelSpecError, model_spec_create

MEMBERS = ["viewer", "reviewer", "editor", "owner"]
EVERYONE = [*MEMBERS, "outsider"]


def _url(slug: str, tail: str = "") -> str:
    return f"/p/{slug}/settings/{tail}"


def _body(response) -> str:
    return response.content.decode()


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


@pytest.fixture
def slug(project_team) -> str:
    return project_team["project"].slug


@pytest.fixture
def model(project_team) -> ModelSpec:
    return ModelSpec.objects.create(project=project_team["project"], name="tiny <b>one</b>", hf_id="x/tiny",
                                    gguf_file="tiny-q8_0.gguf", tool_format="compact")


def _add(client, slug: str, **fields):
    data = {"name": "SmolLM2 hub", "source": "HuggingFaceTB/SmolLM2-135M-Instruct", "gguf_file": "",
            "tool_format": "auto", **fields}
    return client.post(_url(slug, "models/add/"), data)


# ---------------------------------------------------------------------------------------
# Who sees what, who may write
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", EVERYONE)
def test_every_member_sees_the_models_and_editors_get_the_forms(client, project_team, slug, model, who):
    client.force_login(project_team[who])
    response = client.get(_url(slug))
    if who == "outsider":
        assert response.status_code == 404
        return
    body = _body(response)
    assert 'id="models"' in body and f'data-model="{"tiny &lt;b&gt;one&lt;/b&gt;"}"' in body
    assert "<b>one</b>" not in body, "names are escaped"
    assert "<code>x/tiny</code>" in body and "<code>tiny-q8_0.gguf</code>" in body and "compact" in body
    editor_forms = ['id="model-source"', "/settings/models/add/", f"/settings/models/{model.pk}/remove/"]
    if who in ("editor", "owner"):
        assert all(form in body for form in editor_forms)
    else:
        assert not any(form in body for form in editor_forms)
        assert "Editors and owners register and remove them; you see them read-only." in body


@pytest.mark.parametrize("who", EVERYONE)
def test_add_role_matrix(client, project_team, slug, who):
    client.force_login(project_team[who])
    before = AuditEvent.objects.count()
    response = _add(client, slug)
    expected = {"outsider": 404, "editor": 302, "owner": 302}.get(who, 403)
    assert response.status_code == expected, (who, response.status_code)
    created = ModelSpec.objects.filter(project=project_team["project"], name="SmolLM2 hub").exists()
    assert created == (who in ("editor", "owner"))
    assert (AuditEvent.objects.count() > before) == created


@pytest.mark.parametrize("who", EVERYONE)
def test_remove_role_matrix(client, project_team, slug, model, who):
    client.force_login(project_team[who])
    response = client.post(_url(slug, f"models/{model.pk}/remove/"))
    expected = {"outsider": 404, "editor": 302, "owner": 302}.get(who, 403)
    assert response.status_code == expected, (who, response.status_code)
    assert ModelSpec.objects.filter(pk=model.pk).exists() == (who not in ("editor", "owner"))


def test_another_projects_model_is_not_found(client, project_team, slug):
    theirs = ModelSpec.objects.create(project=project_team["other"], name="theirs", hf_id="x/y")
    client.force_login(project_team["owner"])
    assert client.post(_url(slug, f"models/{theirs.pk}/remove/")).status_code == 404
    assert ModelSpec.objects.filter(pk=theirs.pk).exists()


def test_csrf_and_methods(project_team, slug, model):
    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(project_team["editor"])
    assert csrf_client.post(_url(slug, "models/add/"), {"name": "n", "source": "a/b"}).status_code == 403
    assert csrf_client.post(_url(slug, f"models/{model.pk}/remove/")).status_code == 403
    assert csrf_client.get(_url(slug, "models/add/")).status_code == 405
    assert csrf_client.get(_url(slug, f"models/{model.pk}/remove/")).status_code == 405
    assert ModelSpec.objects.filter(project=project_team["project"]).count() == 1


# ---------------------------------------------------------------------------------------
# Adding
# ---------------------------------------------------------------------------------------


def test_a_hub_id_is_stored_as_hf_id_audited(client, project_team, slug):
    client.force_login(project_team["editor"])
    response = client.post(_url(slug, "models/add/"),
                           {"name": "  SmolLM2 hub ", "source": " HuggingFaceTB/SmolLM2-135M-Instruct ",
                            "gguf_file": "", "tool_format": "native"}, follow=True)
    assert response.redirect_chain[-1][0].endswith("/settings/#models")
    model = ModelSpec.objects.get(project=project_team["project"], name="SmolLM2 hub")
    assert (model.hf_id, model.local_path, model.tool_format) == ("HuggingFaceTB/SmolLM2-135M-Instruct", "", "native")
    assert any("SmolLM2 hub" in m and "registered" in m for m in _messages(response))
    event = AuditEvent.objects.get(action="model.create")
    assert event.actor == project_team["editor"] and event.target_id == str(model.pk)
    assert 'data-model="SmolLM2 hub"' in _body(response)


def test_an_existing_folder_is_stored_as_local_path(client, project_team, slug, tmp_path):
    folder = tmp_path / "my model"
    folder.mkdir()
    (folder / "weights-q8_0.gguf").write_bytes(b"")
    client.force_login(project_team["owner"])
    response = _add(client, slug, name="local", source=str(folder), gguf_file="weights-q8_0.gguf")
    assert response.status_code == 302
    model = ModelSpec.objects.get(name="local")
    assert (model.local_path, model.hf_id, model.gguf_file) == (str(folder), "", "weights-q8_0.gguf")
    assert model.spec == str(folder)
    body = _body(client.get(_url(slug)))
    assert f"<code>{folder}</code>" in body and "folder</span>" in body


@pytest.mark.parametrize("alias", ["smollm2", "SmolLM2-135M-Instruct"])
def test_the_offline_aliases_are_hub_ids(client, project_team, slug, alias):
    client.force_login(project_team["editor"])
    assert _add(client, slug, name="offline", source=alias).status_code == 302
    assert ModelSpec.objects.get(name="offline").hf_id == alias.lower()


def test_a_missing_absolute_folder_is_refused(client, project_team, slug, tmp_path):
    client.force_login(project_team["editor"])
    response = _add(client, slug, name="gone", source=str(tmp_path / "nope"))
    assert response.status_code == 400
    body = _body(response)
    assert 'id="model-source-error"' in body and "There is no folder" in body
    assert not ModelSpec.objects.filter(name="gone").exists()


def test_a_gguf_file_must_be_in_the_folder(client, project_team, slug, tmp_path):
    (tmp_path / "a.gguf").write_bytes(b"")
    client.force_login(project_team["editor"])
    response = _add(client, slug, name="g", source=str(tmp_path), gguf_file="b.gguf")
    assert response.status_code == 400
    assert "There is no b.gguf in" in _body(response) and "a.gguf" in _body(response)


def test_a_duplicate_name_is_a_field_error_keeping_what_was_typed(client, project_team, slug, model):
    client.force_login(project_team["editor"])
    response = _add(client, slug, name=model.name, source="org/other-model", gguf_file="w.gguf", tool_format="native")
    assert response.status_code == 400
    body = _body(response)
    assert 'id="model-name-error"' in body and "has a model named" in body
    assert 'value="org/other-model"' in body and 'value="w.gguf"' in body
    assert '<option value="native" selected>' in body
    assert ModelSpec.objects.filter(project=project_team["project"]).count() == 1


def test_the_same_name_in_another_project_is_fine(client, project_team, slug):
    ModelSpec.objects.create(project=project_team["other"], name="SmolLM2 hub", hf_id="x/y")
    client.force_login(project_team["editor"])
    assert _add(client, slug).status_code == 302


@pytest.mark.parametrize(("fields", "field", "fragment"), [
    ({"name": "bad\x00name"}, "model-name", "NUL character"),
    ({"name": "x" * 201}, "model-name", "at most 200"),
    ({"name": "   "}, "model-name", "Give the model a name"),
    ({"source": ""}, "model-source", "Give a Hugging Face id"),
    ({"source": "org/\x00x"}, "model-source", "NUL character"),
    ({"gguf_file": "w\x00.gguf"}, "model-gguf", "NUL character"),
    ({"source": "not an id"}, "model-source", "no spaces"),
    ({"source": "o/" + "m" * 400}, "model-source", "at most"),
    ({"gguf_file": "weights.bin"}, "model-gguf", ".gguf file"),
    ({"gguf_file": "../up.gguf"}, "model-gguf", "not a path elsewhere"),
    ({"source": "smollm2", "gguf_file": "x.gguf"}, "model-gguf", "leave the GGUF file empty"),
    ({"tool_format": "fancy"}, "model-tool-format", "auto, native, compact"),
])
def test_bad_input_is_a_400_beside_its_field(client, project_team, slug, fields, field, fragment):
    client.force_login(project_team["editor"])
    response = _add(client, slug, **fields)
    assert response.status_code == 400
    body = _body(response)
    assert f'id="{field}-error"' in body and fragment in body, body[body.find('id="models"'):][:3000]
    assert not ModelSpec.objects.filter(project=project_team["project"]).exists()


def test_the_service_reports_every_field_at_once(project_team):
    with pytest.raises(ModelSpecError) as raised:
        model_spec_create(project=project_team["project"], name="", source="", gguf_file="", tool_format="x",
                          actor=project_team["owner"])
    assert set(raised.value.errors) == {"name", "source", "tool_format"}
    with pytest.raises(ModelSpecError, match="surrogate"):
        model_spec_create(project=project_team["project"], name="n", source="org/\ud800", actor=None)


# ---------------------------------------------------------------------------------------
# Removing
# ---------------------------------------------------------------------------------------


def test_remove_is_refused_while_runs_use_the_model(client, project_team, slug, model):
    project = project_team["project"]
    for n in range(2):
        Run.objects.create(project=project, name=f"run {n}", kind="eval", model=model)
    client.force_login(project_team["editor"])
    page = _body(client.get(_url(slug)))
    assert "2 runs" in page and "it cannot be removed while they exist" in page  # the button is disabled
    response = client.post(_url(slug, f"models/{model.pk}/remove/"))
    assert response.status_code == 400
    body = _body(response)
    assert f'id="model-error-{model.pk}"' in body and "is used by 2 runs" in body
    assert ModelSpec.objects.filter(pk=model.pk).exists()
    assert not AuditEvent.objects.filter(action="model.remove").exists()


def test_remove_an_unused_model_audited(client, project_team, slug, model):
    client.force_login(project_team["owner"])
    response = client.post(_url(slug, f"models/{model.pk}/remove/"), follow=True)
    assert response.redirect_chain[-1][0].endswith("/settings/#models")
    assert not ModelSpec.objects.filter(pk=model.pk).exists()
    assert any("was removed" in m for m in _messages(response))
    event = AuditEvent.objects.get(action="model.remove")
    assert event.target_id == str(model.pk) and event.data["name"] == model.name
    assert "No models yet" in _body(response)


# ---------------------------------------------------------------------------------------
# The forms that use models
# ---------------------------------------------------------------------------------------


def test_a_new_model_is_offered_by_the_run_and_experiment_forms(client, project_team, slug):
    client.force_login(project_team["editor"])
    assert _add(client, slug, name="fresh model", source="org/fresh").status_code == 302
    model = ModelSpec.objects.get(name="fresh model")
    run_form = _body(client.get(f"/p/{slug}/runs/new/"))
    assert f'<option value="{model.pk}"' in run_form and "fresh model" in run_form
    experiment_form = _body(client.get(f"/p/{slug}/experiments/new/"))
    assert f'<option value="{model.pk}"' in experiment_form and "fresh model · org/fresh" in experiment_form
