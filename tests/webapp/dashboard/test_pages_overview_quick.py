"""The overview's "Quick experiment" button: one POST starts the pipeline with QUICK_CONFIG and opens it."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.webapp.runs import test_experiment_pipeline as pipeline
from webapp.datasets.services.datasets import dataset_create
from webapp.runs.models import Experiment, ModelSpec
from webapp.runs.services.experiments import QUICK_CONFIG, experiment_config, experiment_inputs
from webapp.verifiers.services.verifiers import verifier_create

setup = pipeline.setup  # a dataset "wp", a verifier "v" with a version, a model "tiny"


def _url(slug: str) -> str:
    return f"/p/{slug}/experiments/quick/"


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


def test_editors_post_starts_a_quick_experiment_and_opens_it(client, project_team, setup):
    slug = setup["project"].slug
    client.force_login(project_team["editor"])
    overview = client.get(f"/p/{slug}/").content.decode()
    assert f'action="{_url(slug)}"' in overview and 'id="quick-experiment"' in overview
    assert f'href="/p/{slug}/experiments/new/?preset=quick"' in overview and "Customise…" in overview
    response = client.post(_url(slug))
    experiment = Experiment.objects.get(project=setup["project"])
    assert response.status_code == 302
    assert response["Location"] == f"/p/{slug}/experiments/{experiment.pk}/"
    assert experiment.config == experiment_config(QUICK_CONFIG)
    assert (experiment.dataset, experiment.verifier_version, experiment.model) == (
        setup["dataset"], setup["verifier"], setup["model"])
    assert experiment.created_by == project_team["editor"] and experiment.stages["baseline"]["run"]
    page = client.get(response["Location"])
    assert page.status_code == 200 and any("Quick experiment started" in m for m in _messages(page))


@pytest.mark.parametrize("who", ["viewer", "reviewer"])
def test_viewers_and_reviewers_get_403(client, project_team, setup, who):
    client.force_login(project_team[who])
    assert client.post(_url(setup["project"].slug)).status_code == 403
    assert not Experiment.objects.exists()
    assert 'id="quick-experiment"' not in client.get(f"/p/{setup['project'].slug}/").content.decode()


def test_outsiders_get_404(client, project_team, setup):
    client.force_login(project_team["outsider"])
    assert client.post(_url(setup["project"].slug)).status_code == 404
    assert not Experiment.objects.exists()


def test_get_is_not_allowed(client, project_team, setup):
    client.force_login(project_team["editor"])
    assert client.get(_url(setup["project"].slug)).status_code == 405
    assert not Experiment.objects.exists()


def test_csrf_is_required(project_team, setup):
    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(project_team["editor"])
    assert csrf_client.post(_url(setup["project"].slug)).status_code == 403
    assert not Experiment.objects.exists()


def test_a_missing_model_says_where_to_add_one_and_creates_nothing(client, project_team, setup):
    setup["model"].delete()
    slug = setup["project"].slug
    client.force_login(project_team["editor"])
    response = client.post(_url(slug), follow=True)
    assert response.redirect_chain == [(f"/p/{slug}/", 302)]
    [message] = _messages(response)
    assert "this project has no model yet" in message and "Settings → Models" in message
    assert "dataset" not in message.split("yet.")[1], "only the missing one is listed"
    assert not Experiment.objects.exists()


def test_an_empty_project_lists_everything_missing(client, project_team):
    slug = project_team["project"].slug
    client.force_login(project_team["owner"])
    response = client.post(_url(slug), follow=True)
    [message] = _messages(response)
    assert "no dataset, no verifier with a saved version and no model yet" in message
    assert "Datasets" in message and "Verifiers" in message and "Settings → Models" in message
    assert not Experiment.objects.exists()


def test_the_demo_seeds_names_come_first_then_the_newest(project_team, setup):
    from environments.workplace.generator import generate_tasks

    project, owner = setup["project"], setup["owner"]
    newer = ModelSpec.objects.create(project=project, name="newer", hf_id="x/newer")
    assert experiment_inputs(project).model == newer
    demo = ModelSpec.objects.create(project=project, name="SmolLM2-135M-Instruct (offline)", hf_id="smollm2")
    assert experiment_inputs(project).model == demo
    v2 = dataset_create(project=project, name="wp", tasks=generate_tasks(30, 1), actor=owner)
    assert experiment_inputs(project).dataset == v2, "the newest version of the dataset"
    verifier_create(project=project, name="exact tool call", kind="json_tool_call", config={}, actor=owner)
    assert experiment_inputs(project).verifier_version.verifier.name == "exact tool call"
    named = experiment_inputs(project, dataset="wp", verifier="v", model="missing")
    assert named.missing == ("model",) and named.verifier_version == setup["verifier"]
