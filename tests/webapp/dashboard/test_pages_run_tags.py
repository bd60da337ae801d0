"""The runs pages' tags, note and config columns: the inline edit (htmx and plain POST), roles, escaping,
chips that filter, the tag filter and columns kept in the URL."""

from __future__ import annotations

import html

import pytest

from webapp.runs.models import Run

HOSTILE = '<script>alert("x")</script>'
ESCAPED = html.escape(HOSTILE)


@pytest.fixture
def setup(project_team):
    project = project_team["project"]
    a = Run.objects.create(project=project, name="alpha", kind="grpo",
                           config={"learning_rate": 5e-05, "algorithm": "grpo", "num_generations_per_prompt": 8,
                                   "model": HOSTILE},
                           tags=["baseline", "lr sweep"], note="diverged at step 40")
    b = Run.objects.create(project=project, name="beta", kind="sft", config={"learning_rate": 0.0002},
                           tags=["baseline"])
    c = Run.objects.create(project=project, name="gamma", kind="eval", config={})
    return {"project": project, "slug": project.slug, "a": a, "b": b, "c": c}


def _detail(setup, key: str) -> str:
    return f"/p/{setup['slug']}/runs/{setup[key].pk}/"


def _annotate(setup, key: str) -> str:
    return f"/p/{setup['slug']}/runs/{setup[key].pk}/annotate/"


def _rows(body: str) -> int:
    return body.count('class="compare-box"')


# --- the run page ------------------------------------------------------------------------


def test_the_run_page_shows_tags_as_chips_that_filter_and_the_note(client, project_team, setup):
    client.force_login(project_team["viewer"])
    body = client.get(_detail(setup, "a")).content.decode()
    assert f'href="/p/{setup["slug"]}/runs/?tag=lr%20sweep"' in body and ">lr sweep</a>" in body
    assert "diverged at step 40" in body
    assert "Edit tags and note" not in body and "/annotate/" not in body, "viewers get no edit form"


def test_an_editor_sets_tags_and_note_with_a_plain_post(client, project_team, setup):
    client.force_login(project_team["editor"])
    body = client.get(_detail(setup, "c")).content.decode()
    assert 'hx-post="' + _annotate(setup, "c") + '"' in body and 'name="csrfmiddlewaretoken"' in body
    response = client.post(_annotate(setup, "c"), {"tags": " Eval, held-out , eval", "note": "first\r\nsecond"})
    assert response.status_code == 302 and response["Location"] == _detail(setup, "c")
    stored = Run.objects.get(pk=setup["c"].pk)
    assert stored.tags == ["eval", "held-out"] and stored.note == "first\nsecond"
    page = client.get(_detail(setup, "c")).content.decode()
    assert ">held-out</a>" in page and "saved" in page


def test_an_htmx_post_answers_the_section_only(client, project_team, setup):
    client.force_login(project_team["editor"])
    response = client.post(_annotate(setup, "b"), {"tags": "baseline, ready", "note": "ok"}, HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200
    assert 'id="run-annotation"' in body and "<html" not in body
    assert ">ready</a>" in body and "Tags and note saved." in body
    assert Run.objects.get(pk=setup["b"].pk).tags == ["baseline", "ready"]


def test_bad_tags_are_refused_beside_the_field_keeping_what_was_typed(client, project_team, setup):
    client.force_login(project_team["editor"])
    typed = "fine, not<ok>"
    response = client.post(_annotate(setup, "a"), {"tags": typed, "note": "changed"})
    body = response.content.decode()
    assert response.status_code == 422
    assert 'id="run-tags-error"' in body and "cannot hold" in body and "letters, digits" in body
    assert f'value="{html.escape(typed)}"' in body and ">changed</textarea>" in body
    assert "<details class=\"annotation-edit\" open>" in body
    stored = Run.objects.get(pk=setup["a"].pk)
    assert stored.tags == ["baseline", "lr sweep"] and stored.note == "diverged at step 40", "nothing half-written"
    htmx = client.post(_annotate(setup, "a"), {"tags": ",".join(f"t{i}" for i in range(25)), "note": ""},
                       HTTP_HX_REQUEST="true").content.decode()
    assert "25 tags given; a run has at most 20, remove 5" in htmx and "<html" not in htmx


def test_a_too_long_note_is_refused_beside_the_note(client, project_team, setup):
    client.force_login(project_team["editor"])
    body = client.post(_annotate(setup, "a"), {"tags": "x", "note": "n" * 5001}).content.decode()
    assert 'id="run-note-error"' in body and "5,001 characters" in body
    assert Run.objects.get(pk=setup["a"].pk).tags == ["baseline", "lr sweep"]


@pytest.mark.parametrize(("role", "status"), [("viewer", 403), ("reviewer", 403), ("editor", 302), ("owner", 302),
                                               ("outsider", 404)])
def test_editing_needs_an_editor(client, project_team, setup, role, status):
    client.force_login(project_team[role])
    assert client.post(_annotate(setup, "c"), {"tags": "x", "note": ""}).status_code == status
    assert (Run.objects.get(pk=setup["c"].pk).tags == ["x"]) is (status == 302)
    assert client.get(_annotate(setup, "c")).status_code in (404, 405)


def test_the_edit_needs_the_csrf_token(project_team, setup):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(project_team["editor"])
    assert browser.post(_annotate(setup, "c"), {"tags": "x", "note": ""}).status_code == 403
    assert Run.objects.get(pk=setup["c"].pk).tags == []


def test_hostile_note_and_tags_are_escaped_on_both_pages(client, project_team, setup):
    client.force_login(project_team["editor"])
    client.post(_annotate(setup, "c"), {"tags": "ok", "note": HOSTILE})
    # A tag the service would refuse, written around it (an old row, an admin): still only text on the page.
    Run.objects.filter(pk=setup["b"].pk).update(tags=[HOSTILE, '"><img src=x onerror=alert(1)>'])
    for url in (_detail(setup, "c"), _detail(setup, "b"), f"/p/{setup['slug']}/runs/",
                f"/p/{setup['slug']}/runs/?text=script&cols=model"):
        body = client.get(url).content.decode()
        assert HOSTILE not in body and "<img src=x" not in body, url
    assert ESCAPED in client.get(_detail(setup, "c")).content.decode()
    listing = client.get(f"/p/{setup['slug']}/runs/").content.decode()
    assert ESCAPED in listing and "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in listing
    edit = client.get(_detail(setup, "c")).content.decode()
    assert f">{ESCAPED}</textarea>" in edit


# --- the runs list -----------------------------------------------------------------------


def test_the_list_shows_chips_that_add_to_the_tag_filter_kept_in_the_url(client, project_team, setup):
    client.force_login(project_team["viewer"])
    slug = setup["slug"]
    body = client.get(f"/p/{slug}/runs/?kind=grpo").content.decode()
    assert 'href="?kind=grpo&amp;tag=lr+sweep"' in body and ">lr sweep</a>" in body
    both = client.get(f"/p/{slug}/runs/?tag=baseline").content.decode()
    assert _rows(both) == 2 and 'href="?tag=baseline&amp;tag=lr+sweep"' in both
    assert 'name="tag" value="baseline"' in both and 'title="Stop filtering by baseline"' in both


@pytest.mark.parametrize(("query", "names"), [
    ("tag=baseline", {"alpha", "beta"}),
    ("tag=baseline&tag=lr+sweep", {"alpha"}),
    ("tag=baseline,LR+Sweep", {"alpha"}),
    ("tag=nothing", set()),
    ("text=DIVERGED", {"alpha"}),
    ("text=sweep", {"alpha"}),
    ("text=gam", {"gamma"}),
])
def test_the_tag_filter_and_the_search_find_the_right_runs(client, project_team, setup, query, names):
    client.force_login(project_team["viewer"])
    body = client.get(f"/p/{setup['slug']}/runs/?{query}").content.decode()
    shown = {name for name in ("alpha", "beta", "gamma") if f">{name}</a>" in body}
    assert shown == names
    if not names:
        assert "No runs match these filters." in body


def test_a_chosen_config_column_shows_each_runs_value_and_unknown_ones_are_ignored(client, project_team, setup):
    client.force_login(project_team["viewer"])
    response = client.get(f"/p/{setup['slug']}/runs/?cols=learning_rate,bogus,<b>&cols=num_generations_per_prompt"
                          "&cols=model")
    body = response.content.decode()
    assert response.status_code == 200
    assert ">Learning rate</a></th>" in body and ">Group size</a></th>" in body
    assert body.count("<th class=\"num config-col\"") == 2 and body.count("<th class=\"config-col\"") == 1
    assert 'data-col="bogus"' not in body and "bogus</th>" not in body
    assert 'data-col="learning_rate">5e-05</td>' in body and 'data-col="learning_rate">0.0002</td>' in body
    assert 'data-col="num_generations_per_prompt">8</td>' in body
    assert 'data-col="learning_rate"><span class="muted">–</span></td>' in body  # gamma's config has none
    assert f'data-col="model">{ESCAPED}</td>' in body
    assert 'name="cols" value="learning_rate" checked' in body and 'name="cols" value="seed">' in body
    rows = client.get(f"/p/{setup['slug']}/runs/?cols=learning_rate", HTTP_HX_REQUEST="true").content.decode()
    assert "<thead" not in rows and rows.count('data-col="learning_rate"') == 3


def _order(body: str, setup) -> list[str]:
    keys = {"alpha": "a", "beta": "b", "gamma": "c"}
    return sorted(keys, key=lambda name: body.index(f'id="compare-{setup[keys[name]].pk}"'))


def test_a_config_column_header_sorts_by_it_and_a_second_click_reverses(client, project_team, setup):
    """A number column sorts highest first, then lowest first; a text column A to Z first. Runs without a value
    come last both ways; the links keep the filters and the columns; the menu offers the shown columns' sorts."""
    client.force_login(project_team["viewer"])
    url = f"/p/{setup['slug']}/runs/"
    body = client.get(f"{url}?cols=learning_rate,model&text=a").content.decode()
    assert 'href="?cols=learning_rate%2Cmodel&amp;text=a&amp;sort=-config.learning_rate" class="sort-link"' in body
    assert 'href="?cols=learning_rate%2Cmodel&amp;text=a&amp;sort=config.model" class="sort-link"' in body
    assert '<option value="-config.learning_rate">learning rate, highest first</option>' in body
    assert '<option value="config.model">model (config), A to Z</option>' in body
    assert "config.seed" not in body, "the sort menu offers only the columns shown"

    highest = client.get(f"{url}?cols=learning_rate&sort=-config.learning_rate").content.decode()
    assert _order(highest, setup) == ["beta", "alpha", "gamma"]
    assert 'aria-sort="descending"' in highest and 'href="?cols=learning_rate&amp;sort=config.learning_rate"' in highest
    assert '<option value="-config.learning_rate" selected>' in highest
    lowest = client.get(f"{url}?cols=learning_rate&sort=config.learning_rate").content.decode()
    assert _order(lowest, setup) == ["alpha", "beta", "gamma"] and 'aria-sort="ascending"' in lowest


def test_a_table_sorted_by_a_config_field_shows_that_column_and_its_links_keep_it(client, project_team, setup):
    client.force_login(project_team["viewer"])
    body = client.get(f"/p/{setup['slug']}/runs/?sort=-config.num_generations_per_prompt").content.decode()
    assert body.count('data-col="num_generations_per_prompt"') == 3 and ">Group size ↓</a></th>" in body
    assert 'name="cols" value="num_generations_per_prompt" checked' in body
    assert 'href="?sort=-reward&amp;cols=num_generations_per_prompt" class="sort-link"' in body
    assert _order(body, setup)[0] == "alpha"
    unknown = client.get(f"/p/{setup['slug']}/runs/?sort=config.{HOSTILE}").content.decode()
    assert "unknown sort" in unknown and HOSTILE not in unknown


def test_only_unknown_columns_is_the_plain_table(client, project_team, setup):
    client.force_login(project_team["viewer"])
    response = client.get(f"/p/{setup['slug']}/runs/?cols=nope&cols=" + "x" * 5000)
    assert response.status_code == 200 and "data-col=" not in response.content.decode()
    assert _rows(response.content.decode()) == 3
