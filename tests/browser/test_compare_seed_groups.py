"""The compare page's "group by seed" in a real browser: the toggle, the mean line, the filled band,
one legend entry per group, and a band that stays visible in the dark theme."""

from __future__ import annotations

import pytest
from browser_session import login

from webapp.runs.models import MetricPoint, Run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REWARDS = {1: [0.0, 0.2, 0.4], 2: [0.2, 0.4, 0.8], 3: [0.1, 0.3, 0.9]}


def _runs(project):
    made = []
    for seed, lr in ((1, 1e-4), (2, 1e-4), (3, 1e-4), (1, 5e-5)):
        run = Run.objects.create(project=project, name=f"lr {lr} seed {seed}", kind="grpo",
                                 config={"learning_rate": lr, "seed": seed})
        values = REWARDS[seed] if lr == 1e-4 else [0.5, 0.5, 0.5]
        MetricPoint.objects.bulk_create([MetricPoint(run=run, step=step, split="train", name="reward", value=v)
                                         for step, v in enumerate(values)])
        made.append(run)
    return made


CHART = "[data-chart][data-names='reward']"


def _figure(page) -> dict:
    return page.evaluate(f"""() => {{
        const el = document.querySelector("{CHART}");
        const band = el.data.find(t => t.meta && t.meta.band === "max");
        const mean = el.data.find(t => t.meta && t.meta.group === 0 && !t.meta.raw && !t.meta.band);
        return {{fills: el.querySelectorAll("path.js-fill").length, fill: band && band.fillcolor,
                 mean: mean && Array.from(mean.y), legend: Array.from(el.querySelectorAll(".legendtext"),
                 t => t.textContent)}};
    }}""")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_group_by_seed_draws_a_mean_line_and_a_filled_min_max_band(page, live_server, project_team, scheme):
    project = project_team["project"]
    runs = _runs(project)
    page.emulate_media(color_scheme=scheme)  # the user's theme is "auto": it follows the system
    login(page, live_server, "viewer")
    ids = ",".join(str(r.pk) for r in runs)
    page.goto(f"{live_server.url}/p/{project.slug}/runs/compare/?ids={ids}&smoothing=0")
    page.wait_for_function(f"() => document.querySelector(\"{CHART}\").dataset.points === '12'")
    assert page.locator(CHART).get_attribute("data-bands") == "0"

    page.check("#group-by-seed")
    page.wait_for_url("**group=seed*")
    page.wait_for_function(f"() => document.querySelector(\"{CHART}\").dataset.bands === '1'")
    drawn = _figure(page)
    assert drawn["fills"] >= 1
    assert drawn["mean"] == pytest.approx([0.1, 0.3, 0.7])
    assert drawn["fill"].endswith("4d" if scheme == "dark" else "2e")
    assert "learning_rate 0.0001 (3 seeds)" in drawn["legend"]
    assert sum("(3 seeds)" in text for text in drawn["legend"]) == 1  # the band has no legend entry of its own
    assert any(text.startswith("lr 5e-05") for text in drawn["legend"])  # the lone run stays a line
