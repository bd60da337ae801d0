"""Screenshots of every page for docs/guide.md, from the demo data, in light and dark.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots] [--themes light,dark]
                                            [--pages run-detail,inspector] [--data-dir DIR] [--keep]

It makes a throwaway data directory (SQLite, as `make demo` does), runs `migrate` and
`crucible_setup` (the demo project with its imported example run: the run, trajectories,
failures and review pages show that real recorded CPU-recipe run), adds pipeline data so that no page is empty
(runs whose trajectories were scored by the real verifier and ingested through
EventIngestor, a running job, checkpoints and a `production` alias, a review queue with
labels, a verifier sanity check, an experiment), starts `manage.py runserver` on a free
port, logs in with Playwright driving Debian's chromium, sets the theme (it is stored per
user) and saves a 1400x900 viewport PNG of each page as `<nn>-<page>-<theme>.png`.
The server is stopped and the data directory removed at the end, unless --keep.

Needs the dev install (`make install-dev`, for Playwright) and chromium (`apt-get install
chromium`, or CRUCIBLE_CHROMIUM=/path/to/chromium).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("CRUCIBLE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
VIEWPORT = {"width": 1400, "height": 900}
THEMES = ("light", "dark")
USERNAME = "admin"


@dataclass(frozen=True)
class Shot:
    """One screenshot: a name, a URL template filled from the seeded ids, and what to do before the shot."""

    name: str
    url: str
    action: str = ""  # "chart": wait for a drawn chart; "playground": score an output first


# In the order of the workflow (and of docs/guide.md). `{slug}`, `{dataset}` ... come from seed().
SHOTS: tuple[Shot, ...] = (
    Shot("overview", "/p/{slug}/"),
    Shot("datasets", "/p/{slug}/datasets/"),
    Shot("dataset", "/p/{slug}/datasets/{dataset}/"),
    Shot("task", "/p/{slug}/datasets/{dataset}/tasks/{task}/"),
    Shot("dataset-import", "/p/{slug}/datasets/import/"),
    Shot("verifiers", "/p/{slug}/verifiers/"),
    Shot("verifier-check", "/p/{slug}/verifiers/checks/{check}/"),
    Shot("playground", "/p/{slug}/verifiers/playground/", action="playground"),
    Shot("run-new", "/p/{slug}/runs/new/"),
    Shot("runs", "/p/{slug}/runs/?cols=learning_rate,algorithm"),
    Shot("run-detail", "/p/{slug}/runs/{ex_run}/", action="chart"),
    Shot("compare", "/p/{slug}/runs/compare/?ids={baseline},{run}", action="chart"),
    Shot("experiments", "/p/{slug}/experiments/"),
    Shot("experiment", "/p/{slug}/experiments/{ex_experiment}/"),
    Shot("trajectories", "/p/{slug}/trajectories/?run={ex_eval}"),
    Shot("trajectory-search", "/p/{slug}/trajectories/?run={ex_run}&q=crm"),
    # The example's tasks are imported with its runs, so its inspector shows the prompt and the trace.
    Shot("inspector", "/p/{slug}/trajectories/{ex_failed}/"),
    Shot("group", "/p/{slug}/trajectories/{ex_group}/group/"),
    Shot("diff", "/p/{slug}/trajectories/diff/?a={ex_passed}&b={ex_failed}"),
    Shot("review", "/p/{slug}/review/"),
    Shot("review-queue", "/p/{slug}/review/{queue}/"),
    Shot("labelling", "/p/{slug}/review/{ex_queue}/label/"),
    Shot("failures", "/p/{slug}/failures/?run={ex_run}", action="chart"),
    Shot("checkpoints", "/p/{slug}/checkpoints/"),
    Shot("jobs", "/p/{slug}/jobs/"),
    Shot("settings", "/p/{slug}/settings/"),
    Shot("webhooks", "/p/{slug}/settings/webhooks/"),
)


def file_name(index: int, shot: Shot, theme: str) -> str:
    return f"{index:02d}-{shot.name}-{theme}.png"


def plan(ids: dict, themes: list[str], pages: list[str] | None = None) -> list[tuple[str, str, Shot, str]]:
    """(file name, path, shot, theme) of every screenshot to take, pages in workflow order."""
    unknown = set(pages or ()) - {s.name for s in SHOTS}
    if unknown:
        raise SystemExit(f"Unknown page(s): {', '.join(sorted(unknown))}. Pages: {', '.join(s.name for s in SHOTS)}")
    out = []
    for theme in themes:
        for index, shot in enumerate(SHOTS, start=1):
            if pages and shot.name not in pages:
                continue
            out.append((file_name(index, shot, theme), shot.url.format(**ids), shot, theme))
    return out


# ---------------------------------------------------------------------------------------
# The data
# ---------------------------------------------------------------------------------------


def _manage(env: dict, *args: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _checkpoint_folder(path: Path, step: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "adapter_config.json").write_text('{"r": 8}')
    (path / "adapter_model.safetensors").write_bytes(b"demo weights %d" % step)


def seed(password: str) -> dict:
    """Pipeline data in the demo project, through the same services the workers and pages use."""
    import django

    sys.path.insert(0, str(ROOT / "tests"))
    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from pipeline_data import make_pipeline_project, make_pipeline_run

    from webapp.projects.models import Project
    from webapp.projects.services.webhooks import WebhookError, webhook_create
    from webapp.runs.models import Checkpoint
    from webapp.runs.services.demo import DEMO_SLUG
    from webapp.runs.services.promotion import alias_move
    from webapp.runs.services.runs import run_annotate
    from webapp.trajectories.models import Trajectory
    from webapp.trajectories.services.review import queue_claim_next, queue_create, review_save
    from webapp.trajectories.services.sanity_checks import (
        check_create,
        check_label,
        check_score_pending,
    )

    owner = get_user_model().objects.get(username=USERNAME)
    owner.set_password(password)
    owner.save()
    project = Project.objects.get(slug=DEMO_SLUG)
    setup = make_pipeline_project(project, owner, tasks=8)
    dataset, verifier, model = setup
    baseline = make_pipeline_run(project, owner, name="grpo baseline", steps=8, setup=setup)
    improved = make_pipeline_run(project, owner, name="grpo lr 2e-5", steps=8, improving=True, setup=setup,
                                 config={"learning_rate": 2e-5})
    make_pipeline_run(project, owner, name="eval held-out (before)", kind="eval", split="held_out", steps=1,
                      setup=setup)
    make_pipeline_run(project, owner, name="eval held-out (after)", kind="eval", split="held_out", steps=1,
                      improving=True, setup=setup)
    make_pipeline_run(project, owner, name="grpo lr 5e-5", steps=3, setup=setup, finish=False,
                      config={"learning_rate": 5e-5})
    run_annotate(run=baseline, actor=owner, tags=["baseline", "workplace"], note="the default learning rate")
    run_annotate(run=improved, actor=owner, tags=["lr sweep", "workplace"], note="twice the default learning rate")
    with contextlib.suppress(WebhookError):  # the URL must pass the operator's SSRF rule at save
        webhook_create(project=project, actor=owner, name="team channel", url="https://hooks.slack.com/services/T0/B0/x",
                       format="slack", events=["run.failed", "experiment.decided"])

    checkpoints = []
    for step, success in ((4, 0.25), (6, 0.5), (8, 1.0)):
        path = Path(settings.CRUCIBLE_RUNS_DIR) / improved.folder_name / "checkpoints" / f"step_{step}"
        _checkpoint_folder(path, step)
        checkpoints.append(Checkpoint.objects.create(
            run=improved, step=step, storage_uri=str(path), kind="adapter",
            metrics={"validation/success_rate": success, "validation/reward_mean": success, "train/loss": 1 - success}))
    alias_move(checkpoint=checkpoints[1], name="production", actor=owner, reason="first cut")
    alias_move(checkpoint=checkpoints[2], name="production", actor=owner, reason="held-out success 1.0")
    alias_move(checkpoint=checkpoints[2], name="candidate", actor=owner, reason="best validation")

    queue = queue_create(project=project, name="Failures of grpo baseline", filter={"run": baseline.pk, "passed": "no"},
                         limit=20, actor=owner)
    verdicts = [("agree", ""), ("agree", ""), ("disagree", "wrong_arguments"), ("agree", "")]
    for verdict, bucket in verdicts:
        item = queue_claim_next(queue=queue, reviewer=owner)
        if item is None:
            break
        with contextlib.suppress(Exception):
            review_save(item=item, reviewer=owner, verdict=verdict, failure_bucket=bucket,
                        note="the arguments are mistyped" if bucket else "")

    check = check_create(version=verifier.latest_version, actor=owner, size=12, run=baseline, seed=1)
    check_score_pending(check)
    for index, item in enumerate(check.items.filter(scored=True).order_by("position")[:8]):
        check_label(item=item, actor=owner, right=index != 3, bucket="" if index != 3 else "wrong_tool")

    with contextlib.suppress(Exception):
        from webapp.runs.services.experiments import experiment_create

        experiment_create(project=project, name="workplace: baseline → GRPO → held-out", dataset=dataset,
                          verifier_version=verifier.latest_version, model=model, actor=owner)

    rows = Trajectory.objects.filter(run=baseline, step=1).order_by("id")
    failed = rows.filter(failure_bucket="wrong_arguments").first() or rows.filter(passed=False).first()
    passed = rows.filter(group_id=failed.group_id, passed=True).first() or rows.filter(passed=True).first()
    task = dataset.tasks.order_by("id").first()
    ids = {"slug": project.slug, "dataset": dataset.pk, "task": task.pk, "run": improved.pk,
           "baseline": baseline.pk, "failed": failed.pk, "passed": passed.pk, "queue": queue.pk, "check": check.pk,
           "version": verifier.latest_version.pk}
    ids.update(example_ids(project, ids))
    from django.db import connections

    connections.close_all()
    return ids


def example_ids(project, seeded: dict) -> dict:
    """The example run's pages (crucible_setup imported it); the seeded runs stand in without it."""
    from webapp.runs.models import Experiment, Run
    from webapp.runs.services.example_run import EXAMPLE_EXPERIMENT, EXAMPLE_QUEUE, STAGES
    from webapp.trajectories.models import ReviewQueue, Trajectory

    runs = {r.name: r for r in Run.objects.filter(project=project, name__in=STAGES.values())}
    grpo, after, before = (runs.get(STAGES[k]) for k in ("grpo", "grpo_held_out", "sft_held_out"))
    queue = ReviewQueue.objects.filter(project=project, name=EXAMPLE_QUEUE).first()
    experiment = Experiment.objects.filter(project=project, name=EXAMPLE_EXPERIMENT).first()
    if not (grpo and after and before and queue and experiment):
        print("no example run in the demo project: its pages show the seeded runs", flush=True)
        any_experiment = Experiment.objects.filter(project=project).order_by("-id").first()
        return {"ex_experiment": any_experiment.pk if any_experiment else 0, "ex_run": seeded["run"], "ex_eval": seeded["baseline"], "ex_failed": seeded["failed"],
                "ex_passed": seeded["passed"], "ex_group": seeded["failed"], "ex_queue": seeded["queue"]}
    # A held-out task GRPO got wrong that SFT got right is rare; one SFT fixed and GRPO kept is the diff.
    failed_after = Trajectory.objects.filter(run=after, passed=False).order_by("id")
    failed = failed_after.filter(failure_bucket="wrong_arguments").first() or failed_after.first()
    passed = (Trajectory.objects.filter(run=before, passed=True, task_key=failed.task_key).first()
              or Trajectory.objects.filter(run=after, passed=True).order_by("id").first())
    group = (Trajectory.objects.filter(run=grpo, passed=False).order_by("-step", "id").first()
             or Trajectory.objects.filter(run=grpo).first())
    return {"ex_experiment": experiment.pk, "ex_run": grpo.pk, "ex_eval": after.pk, "ex_failed": failed.pk, "ex_passed": passed.pk,
            "ex_group": group.pk, "ex_queue": queue.pk}


# ---------------------------------------------------------------------------------------
# The server and the browser
# ---------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(url: str, server: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"runserver exited with {server.returncode}")
        with contextlib.suppress(OSError):
            urllib.request.urlopen(url, timeout=2)
            return
        time.sleep(0.3)
    raise SystemExit(f"runserver did not answer on {url} within {seconds:.0f} s")


def _settle(page, shot: Shot, ids: dict) -> None:
    if shot.action == "playground":
        page.select_option("#pg-version", str(ids["version"]))
        page.fill("#pg-trajectory", str(ids["failed"]))
        page.click("#score-button")
        page.wait_for_selector("#verdict",
                               timeout=15000)
    if shot.action == "chart":
        with contextlib.suppress(Exception):
            page.wait_for_selector(".main-svg", timeout=15000)
    with contextlib.suppress(Exception):
        page.wait_for_load_state("networkidle", timeout=5000)
    page.wait_for_timeout(400)


def shoot(base: str, password: str, ids: dict, out: Path, themes: list[str], pages: list[str] | None) -> list[Path]:
    from playwright.sync_api import sync_playwright

    written = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
        page = context.new_page()
        page.goto(f"{base}/login/")
        page.fill("input[name=username]", USERNAME)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/")
        current = None
        for name, path, shot, theme in plan(ids, themes, pages):
            if theme != current:
                # The theme is stored per user: post the toggle's form as the button would.
                page.goto(f"{base}/")
                token = page.input_value(".theme-toggle input[name=csrfmiddlewaretoken]")
                with page.expect_navigation():
                    page.evaluate("""([token, theme]) => {
                        const form = document.querySelector('.theme-toggle');
                        form.querySelector('button[name=theme]').value = theme;
                        form.querySelector('input[name=csrfmiddlewaretoken]').value = token;
                        form.requestSubmit(form.querySelector('button[name=theme]'));
                    }""", [token, theme])
                if page.get_attribute("html", "data-theme") != theme:
                    raise SystemExit(f"the theme toggle did not set {theme}")
                current = theme
            response = page.goto(base + path)
            if response is None or response.status >= 400:
                raise SystemExit(f"{path} answered {response.status if response else 'nothing'}")
            if "/login/" in page.url:
                raise SystemExit(f"{path} sent the browser to the login page")
            _settle(page, shot, ids)
            target = out / name
            page.screenshot(path=str(target), full_page=False)
            written.append(target)
            print(f"{target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}  {path}", flush=True)
        browser.close()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    parser.add_argument("--themes", default=",".join(THEMES), help="comma-separated: light,dark")
    parser.add_argument("--pages", default="", help="comma-separated page names (default: all): "
                        + ",".join(s.name for s in SHOTS))
    parser.add_argument("--data-dir", default="", help="where the throwaway data goes (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the data directory (and print where it is)")
    args = parser.parse_args(argv)
    themes = [t.strip() for t in args.themes.split(",") if t.strip()]
    if not themes or set(themes) - set(THEMES):
        parser.error(f"--themes takes {' and/or '.join(THEMES)}")
    pages = [p.strip() for p in args.pages.split(",") if p.strip()] or None
    plan({}, [], pages)  # reject unknown page names before doing any work
    if not shutil.which(CHROMIUM):
        parser.error(f"chromium not found at {CHROMIUM}: apt-get install -y chromium (or set CRUCIBLE_CHROMIUM)")

    data_dir = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="crucible-screens-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CRUCIBLE_DATA_DIR": str(data_dir), "DJANGO_SETTINGS_MODULE": "webapp.config.settings.local"}
    env.pop("DATABASE_URL", None)
    os.environ.update({k: env[k] for k in ("CRUCIBLE_DATA_DIR", "DJANGO_SETTINGS_MODULE")})
    os.environ.pop("DATABASE_URL", None)
    sys.path.insert(0, str(ROOT))
    server = None
    try:
        print(f"data: {data_dir}", flush=True)
        _manage(env, "migrate", "--noinput")
        _manage(env, "crucible_setup", "--username", USERNAME)
        password = secrets.token_urlsafe(12)
        ids = seed(password)
        port = _free_port()
        server = subprocess.Popen([sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
                                  cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        _wait_for(f"{base}/login/", server)
        written = shoot(base, password, ids, out, themes, pages)
        total = sum(p.stat().st_size for p in written)
        print(f"wrote {len(written)} screenshots to {out} ({total / 1e6:.1f} MB)")
    finally:
        if server is not None:
            server.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(timeout=10)
            if server.poll() is None:
                server.kill()
        if args.keep:
            print(f"kept the data in {data_dir} (CRUCIBLE_DATA_DIR={data_dir} .venv/bin/python manage.py runserver)")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
