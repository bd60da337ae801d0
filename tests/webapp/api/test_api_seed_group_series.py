"""The seed-group series endpoint the compare page's bands read: numbers, access, refusals."""

from __future__ import annotations

import pytest

from webapp.runs.models import MetricPoint, Run


@pytest.fixture
def trio(project_team):
    project = project_team["project"]
    runs = [Run.objects.create(project=project, name=f"s{seed}", kind="grpo", config={"seed": seed, "beta": 0.0})
            for seed in (1, 2, 3)]
    for run, values in zip(runs, ([0.1, 0.4], [0.3, 0.2], [0.2]), strict=True):
        MetricPoint.objects.bulk_create([MetricPoint(run=run, step=step, split="train", name="reward", value=v)
                                         for step, v in enumerate(values)])
    return runs


def _url(slug: str, ids, query: str = "names=reward") -> str:
    return f"/api/projects/{slug}/runs/seed-groups/metrics?ids={','.join(map(str, ids))}&{query}"


def test_the_group_series_is_mean_min_max_and_n_per_step(client, project_team, trio, bearer):
    response = client.get(_url(project_team["project"].slug, [r.pk for r in trio]), **bearer("viewer"))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["runs"] == [r.pk for r in trio] and body["x"] == "step"
    reward = body["series"]["reward"]
    assert reward["x"] == [0, 1] and reward["n"] == [3, 2] and reward["points"] == 5
    assert reward["mean"] == pytest.approx([0.2, 0.3]) and reward["min"] == [0.1, 0.2] and reward["max"] == [0.3, 0.4]


def test_outsiders_get_404_and_another_projects_run_is_refused_by_name(client, project_team, trio, bearer):
    slug = project_team["project"].slug
    ids = [r.pk for r in trio]
    assert client.get(_url(slug, ids), **bearer("outsider")).status_code == 404
    theirs = Run.objects.create(project=project_team["other"], name="theirs", kind="grpo")
    refused = client.get(_url(slug, [ids[0], theirs.pk]), **bearer("viewer"))
    assert refused.status_code == 422 and refused.json()["errors"] == {"ids": f"No run {theirs.pk} in this project."}
    for bad in ("", "1,,2", "x", ",".join(["1"] * 11)):
        response = client.get(f"/api/projects/{slug}/runs/seed-groups/metrics?ids={bad}&names=reward",
                              **bearer("viewer"))
        assert response.status_code == 422, bad
    assert client.get(_url(slug, ids, "names=reward&x=tokens"), **bearer("viewer")).status_code == 400
