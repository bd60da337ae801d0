"""The compare page's "group by seed": groups drawn as one band, the table's mean and range, escaping."""

from __future__ import annotations

import json
import re

import pytest

from webapp.runs.models import MetricPoint, Run

HOSTILE = '<script>alert("x")</script>'


@pytest.fixture
def seeds(project_team):
    """Three runs of one config (seeds 1-3, the first with a hostile name) and one with another learning rate."""
    project = project_team["project"]

    def run(name, seed, lr, finals):
        made = Run.objects.create(project=project, name=name, kind="grpo",
                                  config={"learning_rate": lr, "seed": seed, "loss_type": "dapo"})
        MetricPoint.objects.bulk_create([MetricPoint(run=made, step=step, split="train", name="reward", value=v)
                                         for step, v in enumerate(finals)])
        return made

    return [run(f"a {HOSTILE}", 1, 1e-4, [0.0, 0.4]), run("b", 2, 1e-4, [0.0, 0.5]),
            run("c", 3, 1e-4, [0.0, 0.9]), run("other lr", 1, 5e-5, [0.0, 0.1])]


def _page(client, project_team, runs, extra: str = "") -> str:
    client.force_login(project_team["viewer"])
    ids = ",".join(str(r.pk) for r in runs)
    response = client.get(f"/p/{project_team['project'].slug}/runs/compare/?ids={ids}{extra}")
    assert response.status_code == 200
    return response.content.decode()


def _groups_json(body: str) -> dict:
    found = re.search(r'<script id="seed-groups" type="application/json">(.*?)</script>', body, re.S)
    assert found, "no seed-groups json_script"
    return json.loads(found.group(1))


def test_group_by_seed_draws_the_seed_runs_as_one_group(client, project_team, seeds):
    body = _page(client, project_team, seeds, "&group=seed")
    data = _groups_json(body)
    assert data["project"] == project_team["project"].slug
    assert data["groups"] == [{"runs": [r.pk for r in seeds[:3]], "label": "learning_rate 0.0001 (3 seeds)"}]
    assert 'data-groups="seed-groups"' in body
    assert f'data-seed-group="{seeds[0].pk},{seeds[1].pk},{seeds[2].pk}"' in body
    assert 'id="group-by-seed" checked' in body
    # The table: the group's final reward as mean (min-max), best the same; the lone run as before.
    assert "0.600 <span" in body and "(0.400–0.900)" in body
    assert body.count("data-group-cell") == 1
    assert "0.100 · 0.100" in body


def test_without_the_toggle_each_run_is_drawn_on_its_own(client, project_team, seeds):
    body = _page(client, project_team, seeds)
    assert 'id="seed-groups"' not in body and "data-groups=" not in body and "data-seed-group" not in body
    assert 'id="group-by-seed">' in body  # offered, off
    assert "data-group-cell" not in body and "0.400 · 0.400" in body and "0.900 · 0.900" in body


def test_group_by_seed_with_no_partners_says_so_and_draws_runs(client, project_team, seeds):
    body = _page(client, project_team, [seeds[0], seeds[3]], "&group=seed")
    assert "data-no-seed-group" in body and 'id="seed-groups"' not in body and "data-groups=" not in body


def test_hostile_names_and_config_values_are_escaped_in_the_group(client, project_team, seeds):
    seeds[3].config = {**seeds[3].config, "loss_type": HOSTILE}
    seeds[3].save()
    partner = Run.objects.create(project=project_team["project"], name=f"d {HOSTILE}", kind="grpo",
                                 config={**seeds[3].config, "seed": 9})
    body = _page(client, project_team, [*seeds, partner], "&group=seed")
    assert HOSTILE not in body
    assert "&lt;script&gt;" in body
    labels = [g["label"] for g in _groups_json(body)["groups"]]
    assert any(HOSTILE in label for label in labels)  # the JSON carries it as text (\u003C in the page)
