"""Page speed benchmark (issues 24-27): server time of every page and data endpoint over a large PostgreSQL database.

UI.md "Speed" sets the target: under 150 ms server time for any page or data endpoint with
1,000,000 trajectories, 1,000,000 tasks and 100,000 metric points in PostgreSQL. This script
fills a database of its own through the product's own write paths, then times the pages; by
default it does so at two scales (100,000 and 1,000,000 trajectories and tasks, one database
each) and prints one table with a median column per scale, so a page whose time grows with the
tables' size shows (issue 27).

The fill (one project, --runs runs):
- project_create, then membership_add for a viewer, a reviewer and an editor;
- a json_tool_call verifier (verifier_create) with a second version (verifier_update_config), and
  a small evaluation dataset (dataset_create) the eval runs are linked to;
- run_create for every run (grpo, with some sft and eval runs), which writes the run and its
  job; each job is claimed, marked running, heartbeated and finished (most succeed, some fail,
  some stay running) through webapp.runs.services.jobs, plus extra verify jobs without a run and
  three registered workers;
- EventIngestor (the workers' batch path: COPY on PostgreSQL, with the rollups) for every
  metric point, trajectory and checkpoint: 100,000 metric points in all, of which one run holds
  a 50,000-point `reward` series in split train; checkpoints for some runs (promoted to the
  production and candidate aliases with checkpoint_promote, production moved a few times);
  the trajectories (1,000,000 at full size) spread over the runs, the eval runs' answering the
  evaluation dataset's tasks;
- a dataset version of as many json_tool_call tasks as trajectories (1,000,000 at full size),
  COPYed in the way bench/datasets_io.py fills one;
- two experiments (experiment_create, their stage jobs played as a worker would: one finished
  with its gates, one at its GRPO stage), a review queue over the long run's failures with some
  labels saved (queue_claim_next, review_save), a verifier sanity check scored and partly judged
  (check_create, check_score_pending, check_label) and a rescore of an eval run executed
  (rescore_start, rescore_execute);
- then VACUUM ANALYZE, as autovacuum would have done after such a load.

Then it logs in (Django's test Client with force_login: the full middleware stack and the
views run in this process, so the time measured is server time without a network) and, after
two warm-up requests, times --requests requests of each page, printing the median and p95,
the number of SQL queries one request makes, their total time and the slowest of them. The
pages: the runs side (overview, runs table, run detail and its live panel, series, compare,
checkpoints, alias history, jobs, experiments, the new-run, run-import and settings pages and
the runs, checkpoints, jobs and experiments API), trajectories (list, filters, inspector, group,
diff, API), review (list, queue, label page, export, API), failures, datasets (list, task
browser, task page, import and generate pages, export, API) and verifiers (list, detail,
version, playground, sanity check, rescore, API). An export is timed to its first streamed
block (the whole of a million-task export is bench/datasets_io.py's). The deep pages are
reached by following the run list API's `next` cursors up to 10 pages in: the runs table
shows 50 runs a page, so with 105 runs its deep page is page 3, while the API is also followed
with limit=10 to page 10. Every page must answer 200 (else exit 1); with --strict a page whose
median is over 150 ms, or a series response of more than 2,000 points, also exits 1. For each
page over the target (or every page with --explain) the slowest query's EXPLAIN (ANALYZE,
BUFFERS) is printed.

With several scales (--scales, the default) each scale is filled and measured by a run of
this script of its own, on a database named after the scale (crucible_bench_web_100k,
crucible_bench_web_1m: --database-url's name with the scale after it), and the last table has,
for every page, its median at each scale, the p95 and size at the largest, and the growth from
the smallest scale to the largest; a page over 150 ms, or whose median grows 2x or more (and by
10 ms or more), is flagged.

    python bench/web_pages.py                    # 100,000 and 1,000,000 (about 20 minutes), both columns
    python bench/web_pages.py --keep             # reuse the filled databases: measure only
    python bench/web_pages.py --scales 1000000   # one scale, in crucible_bench_web_1m
    python bench/web_pages.py --tiny             # a few hundred rows at two scales, seconds (what the tests run)
    python bench/web_pages.py --trajectories 20000 --database-url postgres://postgres@127.0.0.1:5432/crucible_bench_web
                                                 # one scale in exactly that database (tasks: --tasks, else 1,000,000)

Settings: webapp.config.settings.production (DEBUG off, persistent connections, HTTPS redirect,
so requests are sent as HTTPS), pointed at the database, with a throwaway SECRET_KEY, a
temporary CRUCIBLE_DATA_DIR and Celery's in-memory broker (job messages go nowhere). A database
is dropped and created again unless --keep finds it filled with the same sizes; its name must
contain "bench", so the script never drops a database of the product or of the tests.
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/crucible_bench_web"
TARGET_MS = 150.0
MAX_SERIES_POINTS = 2_000
GROWTH_FLAG = 2.0  # a page whose median grows this many times from the smallest scale to the largest ...
GROWTH_MIN_MS = 10.0  # ... and by at least this much (a 3 -> 7 ms page is noise, not growth) is flagged
SLUG = "bench-web"
MARKER_TABLE = "bench_web_filled"  # one row: the sizes the database was filled with
WARMUP_REQUESTS = 2
DEEP_PAGES = 10  # the runs table and the run list API are followed this many `after` cursors in
API_DEEP_LIMIT = 10
TRAJECTORY_BATCH = 20_000  # events per EventIngestor.ingest call (a worker ingests 16 MB at a time)
METRIC_BATCH = 10_000
PER_STEP = 64  # trajectories per step: 8 prompts x 8 generations
TRAIN_NAMES = ("reward", "reward_std", "kl", "loss", "entropy")
VALIDATION_NAMES = ("success_rate", "valid_json_rate")
EPOCH = 1_767_225_600.0  # 2026-01-01, where the runs' event times start
DATASET_NAME = "bench tasks"  # the version of `tasks` tasks the task browser pages read
EVAL_DATASET_NAME = "bench eval tasks"  # the small version the eval runs and experiments use
VERIFIER_NAME = "bench tool calls"
QUEUE_NAME = "bench failures"


@dataclass(frozen=True)
class Sizes:
    runs: int
    series_points: int  # the one long train/reward series
    metric_points: int  # in all, the long series included
    trajectories: int
    tasks: int  # the big dataset version's
    checkpoint_runs: int
    checkpoints_per_run: int
    extra_jobs: int  # verify jobs without a run, besides one job per run
    eval_tasks: int  # the evaluation dataset's
    reviews: int  # labels saved in the review queue


FULL = Sizes(runs=100, series_points=50_000, metric_points=100_000, trajectories=1_000_000, tasks=1_000_000,
             checkpoint_runs=30, checkpoints_per_run=10, extra_jobs=300, eval_tasks=2_000, reviews=200)
TINY = Sizes(runs=6, series_points=2_500, metric_points=3_000, trajectories=300, tasks=300, checkpoint_runs=2,
             checkpoints_per_run=3, extra_jobs=5, eval_tasks=40, reviews=8)
FULL_SCALES = (100_000, 1_000_000)  # trajectories and tasks each, one database a scale
TINY_SCALES = (150, 300)


# ---------------------------------------------------------------------------------------
# Arguments and the database
# ---------------------------------------------------------------------------------------


def scale_tag(count: int) -> str:
    """100000 -> '100k', 1000000 -> '1m', 300 -> '300': the column heading and the database suffix."""
    for unit, size in (("m", 1_000_000), ("k", 1_000)):
        if count >= size and count % size == 0:
            return f"{count // size}{unit}"
    return str(count)


def scale_url(url: str, count: int) -> str:
    """--database-url with the scale after the database name (crucible_bench_web -> crucible_bench_web_1m)."""
    parts = urlsplit(url)
    return parts._replace(path=f"/{database_name(url)}_{scale_tag(count)}").geturl()


def parse_scales(text: str) -> list[int]:
    try:
        scales = sorted({int(part.replace("_", "")) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError("expected numbers separated by commas, e.g. 100000,1000000") from None
    if not scales or not all(1 <= n <= 20_000_000 for n in scales):
        raise argparse.ArgumentTypeError("each scale must be between 1 and 20,000,000")
    return scales


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL,
                        help="the PostgreSQL database to fill (dropped and created; its name must contain 'bench'); "
                             "with --scales, each scale's database is this name with the scale after it")
    parser.add_argument("--scales", type=parse_scales, default=None,
                        help="trajectories (and as many tasks) of each scale, comma-separated: each is filled in a "
                             "database of its own and the table shows a median column per scale "
                             "(default 100000,1000000; with --tiny 150,300)")
    parser.add_argument("--trajectories", type=int, default=None,
                        help="one scale in --database-url itself: trajectories to fill (default 1,000,000)")
    parser.add_argument("--tasks", type=int, default=None,
                        help="one scale in --database-url itself: tasks of the big dataset version (default 1,000,000)")
    parser.add_argument("--runs", type=int, default=None, help="runs to fill (default 100)")
    parser.add_argument("--requests", type=int, default=None, help="timed requests per page (default 20)")
    parser.add_argument("--keep", action="store_true",
                        help="reuse a database if it is already filled with these sizes (else fill it again)")
    parser.add_argument("--tiny", action="store_true", help="a few hundred rows and 3 requests a page, for tests")
    parser.add_argument("--strict", action="store_true",
                        help=f"exit 1 when a page's median is over {TARGET_MS:.0f} ms or a series has more than "
                             f"{MAX_SERIES_POINTS:,} points")
    parser.add_argument("--explain", action="store_true",
                        help="print EXPLAIN ANALYZE of every page's slowest query, not only of slow pages")
    parser.add_argument("--results-json", default=None, help=argparse.SUPPRESS)  # one scale's rows, for the caller
    args = parser.parse_args(argv)
    base = TINY if args.tiny else FULL
    runs = base.runs if args.runs is None else args.runs
    if not 2 <= runs <= 10_000:
        parser.error("--runs must be between 2 and 10,000")
    one_scale = args.trajectories is not None or args.tasks is not None
    if one_scale and args.scales is not None:
        parser.error("--scales fills a database per scale; --trajectories and --tasks fill --database-url alone")
    if one_scale:
        counts = [(base.trajectories if args.trajectories is None else args.trajectories,
                   base.tasks if args.tasks is None else args.tasks)]
    else:
        counts = [(n, n) for n in (args.scales or (TINY_SCALES if args.tiny else FULL_SCALES))]
    for trajectories, tasks in counts:
        if not 0 <= trajectories <= 20_000_000:
            parser.error("--trajectories must be between 0 and 20,000,000")
        if not 1 <= tasks <= 20_000_000:
            parser.error("--tasks must be between 1 and 20,000,000")
    args.requests = (3 if args.tiny else 20) if args.requests is None else args.requests
    if not 1 <= args.requests <= 1_000:
        parser.error("--requests must be between 1 and 1,000")
    args.all_sizes = [Sizes(**{**asdict(base), "runs": runs, "trajectories": trajectories, "tasks": tasks,
                               "checkpoint_runs": min(base.checkpoint_runs, runs)}) for trajectories, tasks in counts]
    args.sizes = args.all_sizes[-1]  # the largest
    url = urlsplit(args.database_url)
    if url.scheme not in ("postgres", "postgresql") or not url.path.strip("/"):
        parser.error("--database-url must be a postgres://user@host:port/name URL")
    if "bench" not in url.path.strip("/"):
        parser.error(f"--database-url names the database {url.path.strip('/')!r}: this script drops and creates it, "
                     "so its name must contain 'bench'")
    args.urls = ([args.database_url] if one_scale else
                 [scale_url(args.database_url, sizes.trajectories) for sizes in args.all_sizes])
    return args


def database_name(url: str) -> str:
    return unquote(urlsplit(url).path.strip("/"))


def server_connect(url: str, dbname: str = "postgres"):
    """An autocommit psycopg connection to another database of the same server."""
    import psycopg

    parts = urlsplit(url)
    return psycopg.connect(host=parts.hostname or "127.0.0.1", port=parts.port or 5432,
                           user=unquote(parts.username or "postgres"),
                           password=unquote(parts.password) if parts.password else None,
                           dbname=dbname, autocommit=True, connect_timeout=10)


def filled_with(url: str) -> Sizes | None:
    """The sizes the database was completely filled with, or None (absent, empty, unfinished)."""
    import psycopg

    try:
        with server_connect(url, database_name(url)) as conn:
            row = conn.execute(f"SELECT to_regclass('{MARKER_TABLE}') IS NOT NULL").fetchone()
            if not row[0]:
                return None
            found = conn.execute(f"SELECT sizes FROM {MARKER_TABLE}").fetchone()
    except psycopg.OperationalError:
        return None
    return Sizes(**json.loads(found[0])) if found else None


def recreate_database(url: str) -> None:
    name = database_name(url)
    quoted = '"' + name.replace('"', '""') + '"'
    with server_connect(url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {quoted}")


def setup_django(url: str) -> None:
    """Production settings on this database; nothing of the caller's environment can weaken them."""
    data_dir = tempfile.mkdtemp(prefix="crucible-bench-web-")
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    os.environ.update(
        DJANGO_SETTINGS_MODULE="webapp.config.settings.production",
        DATABASE_URL=url,
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="localhost,127.0.0.1",
        DEBUG="false",
        CRUCIBLE_DATA_DIR=data_dir,
        CELERY_BROKER_URL="memory://localhost/",
    )
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    sys.path.insert(0, str(REPO_ROOT))
    import django

    django.setup()


# ---------------------------------------------------------------------------------------
# The fill, through the product's services
# ---------------------------------------------------------------------------------------


def _batches(items, size: int):
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def long_series_events(points: int, extra: int):
    """The long run: `points` train/reward points (a rising curve with noise and rare spikes),
    then `extra` validation points spread over its steps."""
    spikes = max(1, points // 10)
    for step in range(1, points + 1):
        noise = ((step * 2_654_435_761) % 1_000) / 1_000 - 0.5
        reward = 0.2 + 0.6 * (1 - math.exp(-step / (points / 5))) + 0.1 * noise
        if step % spikes == spikes // 2:
            reward = -1.0  # ten spikes the downsampling must keep
        yield {"type": "metric", "step": step, "split": "train", "metrics": {"reward": reward},
               "time": EPOCH + step * 6.0}
    for i in range(extra):
        step = (i + 1) * max(1, points // (extra + 1))
        yield {"type": "metric", "step": step, "split": "validation",
               "metrics": {VALIDATION_NAMES[i % 2]: 0.3 + 0.5 * step / points}, "time": EPOCH + step * 6.0}


def run_metric_events(budget: int, seed: int):
    """A run's usual metrics (5 train names a step, 2 validation names every 10th), cut at `budget` points."""
    step, left = 0, budget
    while left > 0:
        step += 1
        metrics = {name: ((seed * 31 + step * 17 + i * 7) % 100) / 100 for i, name in enumerate(TRAIN_NAMES)}
        metrics = dict(list(metrics.items())[:left])
        left -= len(metrics)
        yield {"type": "metric", "step": step, "split": "train", "metrics": metrics, "time": EPOCH + step * 30.0}
        if step % 10 == 0 and left > 0:
            validation = {name: ((seed + step) % 50) / 50 for name in VALIDATION_NAMES[:left]}
            left -= len(validation)
            yield {"type": "metric", "step": step, "split": "validation", "metrics": validation,
                   "time": EPOCH + step * 30.0}


TURNS = [
    {"role": "system", "content": "You are a workplace assistant. Call exactly one tool."},
    {"role": "user", "content": "Schedule a 30 minute sync with Ana on Tuesday at 10:00 about the Q3 plan."},
    {"role": "assistant", "content": '{"name": "create_event", "arguments": {"title": "Q3 plan sync", '
                                     '"attendees": ["ana@example.com"], "start": "2026-03-03T10:00", "minutes": 30}}'},
]
TOOL_CALLS = [{"name": "create_event", "arguments": {"title": "Q3 plan sync", "attendees": ["ana@example.com"],
                                                     "start": "2026-03-03T10:00", "minutes": 30}}]


def trajectory_events(count: int, seed: int, task_keys: list[str] | None = None):
    """`count` GRPO samples: 64 a step (8 prompts x 8 generations), about 40% passing; the prompts are
    `task_keys` in turn (the external ids of the run's dataset), else task-0 ... task-4999 (no stored task)."""
    from webapp.trajectories.models import FAILURE_BUCKETS

    for i in range(count):
        step, prompt, sample = i // PER_STEP, (i % PER_STEP) // 8, i % 8
        mix = (i * 7_919 + seed * 104_729) % 100
        passed = mix < 40
        key = task_keys[(step * 8 + prompt) % len(task_keys)] if task_keys else f"task-{(step * 8 + prompt) % 5_000}"
        yield {
            "type": "trajectory", "task_id": key, "sample_index": sample,
            "step": step, "split": "train", "group_id": f"s{step}-p{prompt}", "turns": TURNS,
            "tool_calls": TOOL_CALLS, "reward": 1.0 if passed else round(mix / 200, 3), "passed": passed,
            "failure_bucket": None if passed else FAILURE_BUCKETS[mix % len(FAILURE_BUCKETS)],
            "components": {"valid_json": 1.0, "correct_tool": float(mix % 3 != 0), "correct_arguments": float(passed)},
            "advantage": (mix - 50) / 50, "tokens_in": 180, "tokens_out": 40 + mix, "latency_ms": 30.0 + mix,
            "time": EPOCH + step * 30.0,
        }


def checkpoint_events(run_index: int, count: int, last_step: int):
    for k in range(1, count + 1):
        step = max(1, last_step * k // count)
        quality = ((run_index * 13 + k * 7) % 40) / 100 + 0.4
        yield {"type": "checkpoint", "step": step, "path": f"/data/runs/bench-{run_index}/checkpoint-{step}",
               "kind": "adapter", "content_hash": f"{run_index:08x}{step:08x}",
               "metrics": {"validation/success_rate": quality, "validation/valid_json_rate": min(1.0, quality + 0.2),
                           "validation/reward_mean": quality, "held_out/success_rate": quality - 0.05}}


def _share(total: int, parts: int, index: int) -> int:
    return total // parts + (1 if index < total % parts else 0)


def load_datasets_io():
    """bench/datasets_io.py as a module: its task variations and its COPY fill of a big dataset version."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("datasets_io_bench", Path(__file__).with_name("datasets_io.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fill(sizes: Sizes, say) -> dict:
    """Fill the database through the services; returns the counts ingested and the time taken."""
    from django.contrib.auth import get_user_model

    from webapp.datasets.models import TaskDataset
    from webapp.datasets.services.datasets import dataset_create
    from webapp.projects.models import Role
    from webapp.projects.services.projects import membership_add, project_create
    from webapp.runs.models import Checkpoint, ModelSpec
    from webapp.runs.services import jobs as job_services
    from webapp.runs.services.ingest import EventIngestor
    from webapp.runs.services.promotion import checkpoint_promote
    from webapp.runs.services.run_config import run_config_check, run_create
    from webapp.runs.services.workers import worker_register
    from webapp.verifiers.services.verifiers import verifier_create, verifier_update_config

    datasets_io = load_datasets_io()
    users = get_user_model().objects
    owner = users.create_user(username="bench-owner", password=secrets.token_urlsafe(16))
    project = project_create(name="Bench web pages", owner=owner, slug=SLUG,
                             description="Filled by bench/web_pages.py.")
    for role in (Role.VIEWER, Role.REVIEWER, Role.EDITOR):
        member = users.create_user(username=f"bench-{role}", password=secrets.token_urlsafe(16))
        membership_add(project=project, user=member, role=role, actor=owner)
    model = ModelSpec.objects.create(project=project, name="SmolLM2-135M-Instruct",
                                     hf_id="HuggingFaceTB/SmolLM2-135M-Instruct")
    for w in range(3):
        worker_register(name=f"gpu@bench-{w}", hostname=f"bench-{w}", pid=1000 + w, queues=["train", "rollout"],
                        concurrency=1, gpus=[{"name": "H100", "memory_mb": 81_559}])
    verifier = verifier_create(project=project, name=VERIFIER_NAME, kind="json_tool_call", config={}, actor=owner,
                               description="Filled by bench/web_pages.py.")
    version = verifier_update_config(verifier=verifier, config={"mode": "strict", "reward": "shaped"}, actor=owner)
    bases = datasets_io.model_tasks()
    eval_dataset = dataset_create(project=project, name=EVAL_DATASET_NAME, environment="json_tool_call",
                                  tasks=(datasets_io.varied(bases[i % len(bases)], i) for i in range(sizes.eval_tasks)),
                                  actor=owner, description="The eval runs' tasks (bench/web_pages.py).")
    eval_keys = list(eval_dataset.tasks.order_by("id").values_list("external_id", flat=True))

    other_runs = sizes.runs - 1
    other_budget = min(sizes.metric_points - sizes.series_points, other_runs * 2_000)
    long_extra = sizes.metric_points - sizes.series_points - other_budget
    counts = {"metric_points": 0, "trajectories": 0, "checkpoints": 0}
    started = time.perf_counter()
    runs_with_checkpoints = 0
    for i in range(sizes.runs):
        kind = "grpo" if i == 0 or i % 10 < 8 else ("sft" if i % 10 == 8 else "eval")
        kind = "eval" if i == sizes.runs - 1 else kind  # at least one eval run, whatever --runs is
        config = {"learning_rate": [1e-4, 5e-5, 2e-5][i % 3]} if kind != "eval" else {}
        links = {"dataset": eval_dataset, "verifier_version": version} if kind == "eval" else {}
        checked = run_config_check(config, project=project, kind=kind, model=model, **links)
        run, job = run_create(name=f"{kind}-{i:03d}-lr{config.get('learning_rate', 0):g}", checked=checked,
                              actor=owner)
        claimed = job_services.job_claim(job_id=job.pk, worker=f"gpu@bench-{i % 3}")
        job_services.job_mark_running(job_id=job.pk, attempt=claimed.attempt)
        ingestor = EventIngestor(run, attempt=claimed.attempt)
        metrics = (long_series_events(sizes.series_points, long_extra) if i == 0
                   else run_metric_events(_share(other_budget, other_runs, i - 1), i))
        for batch in _batches(metrics, METRIC_BATCH):
            counts["metric_points"] += ingestor.ingest(batch).metrics
        samples = trajectory_events(_share(sizes.trajectories, sizes.runs, i), i, eval_keys if links else None)
        for batch in _batches(samples, TRAJECTORY_BATCH):
            counts["trajectories"] += ingestor.ingest(batch).trajectories
        if kind == "grpo" and runs_with_checkpoints < sizes.checkpoint_runs:
            runs_with_checkpoints += 1
            last = sizes.series_points if i == 0 else 100
            counts["checkpoints"] += ingestor.ingest(
                list(checkpoint_events(i, sizes.checkpoints_per_run, last))).checkpoints
        if i % 10 == 3:
            job_services.job_heartbeat(job_id=job.pk, attempt=claimed.attempt, progress=0.4,
                                       log_tail="step 40/100 reward 0.41\n" * 50)
        elif i % 10 == 5:
            job_services.job_fail(job_id=job.pk, attempt=claimed.attempt, error="CUDA out of memory",
                                  log_tail="Traceback (most recent call last):\n  ...\ntorch.OutOfMemoryError\n")
        else:
            job_services.job_succeed(job_id=job.pk, attempt=claimed.attempt, log_tail="done\n" * 20)
        if i % 10 == 9 or i == sizes.runs - 1:
            say(f"  {i + 1}/{sizes.runs} runs, {counts['metric_points']:,} metric points, "
                f"{counts['trajectories']:,} trajectories ({time.perf_counter() - started:.0f} s)")
    for j in range(sizes.extra_jobs):
        job = job_services.job_create(project=project, kind="verify", payload={"batch": j})
        if j % 20 == 0:
            continue  # stays queued
        claimed = job_services.job_claim(job_id=job.pk, worker=f"cpu@bench-{j % 3}")
        job_services.job_mark_running(job_id=job.pk, attempt=claimed.attempt)
        if j % 20 == 1:
            job_services.job_fail(job_id=job.pk, attempt=claimed.attempt, error="verifier timed out")
        else:
            job_services.job_succeed(job_id=job.pk, attempt=claimed.attempt, log_tail="verified\n")
    promoted = list(Checkpoint.objects.filter(run__project=project).order_by("-step", "id")[:8])
    for alias, checkpoint in zip(("production", "candidate"), promoted, strict=False):
        checkpoint_promote(checkpoint=checkpoint, alias=alias, actor=owner, reason="bench fill", force=True)
    for checkpoint in [*promoted[2:], promoted[0]] if len(promoted) > 2 else []:  # production: moves and a return
        checkpoint_promote(checkpoint=checkpoint, alias="production", actor=owner, reason="bench fill", force=True)
    say(f"  runs filled in {time.perf_counter() - started:.0f} s")

    dataset = TaskDataset.objects.create(project=project, name=DATASET_NAME, environment="json_tool_call",
                                         description="Filled by bench/web_pages.py.", created_by=owner)
    say(f"  filling {sizes.tasks:,} dataset tasks with COPY (bench/datasets_io.py's fill)")
    seconds = datasets_io.fill_tasks(dataset, sizes.tasks, lambda message: say(message))
    counts["tasks"] = sizes.tasks
    say(f"  filled {sizes.tasks:,} tasks in {seconds:.0f} s")
    fill_experiments(project, owner, eval_dataset, version, model)
    fill_review(project, sizes.reviews)
    fill_check_and_rescore(project, owner, version)
    counts["fill_seconds"] = round(time.perf_counter() - started, 1)
    return counts


def play_job(run, *, events: list[dict], worker: str = "gpu@bench-0") -> None:
    """A run's job as a worker plays it: claimed, running, its events ingested, succeeded."""
    from webapp.runs.services import jobs as job_services
    from webapp.runs.services.ingest import EventIngestor

    job = run.jobs.order_by("-id").first()
    claimed = job_services.job_claim(job_id=job.pk, worker=worker)
    job_services.job_mark_running(job_id=job.pk, attempt=claimed.attempt)
    EventIngestor(run, attempt=claimed.attempt).ingest(events)
    job_services.job_succeed(job_id=job.pk, attempt=claimed.attempt, log_tail="done\n")


def fill_experiments(project, owner, dataset, version, model) -> None:
    """Two experiments over the eval dataset: one through every stage to its gates, one at its GRPO stage."""
    from webapp.runs.models import Run
    from webapp.runs.services.experiments import experiment_advance, experiment_create

    baseline = {"valid_json_rate": 0.9, "success_rate": 0.3, "unsafe_action_rate": 0.05, "latency_p95": 100.0}
    held_out = {"valid_json_rate": 0.97, "success_rate": 0.55, "unsafe_action_rate": 0.0, "latency_p95": 110.0}
    for name, stages in (("tool calls, lr 5e-5", ("baseline", "grpo", "held_out")), ("tool calls, lr 1e-4",
                                                                                      ("baseline",))):
        experiment = experiment_create(project=project, name=name, dataset=dataset, verifier_version=version,
                                       model=model, actor=owner)
        for stage in stages:
            run = Run.objects.get(pk=experiment.stages[stage]["run"])
            if stage == "grpo":
                events = [{"type": "checkpoint", "step": step, "path": f"/data/runs/exp-{run.pk}/checkpoint-{step}",
                           "kind": "adapter", "content_hash": f"exp{run.pk:05d}{step:05d}",
                           "metrics": {"validation/success_rate": 0.4 + step / 1_000}} for step in (50, 100)]
            else:
                events = [{"type": "metric", "step": 0, "split": "held_out",
                           "metrics": baseline if stage == "baseline" else held_out}]
            play_job(run, events=events)
            experiment = experiment_advance(experiment_id=experiment.pk)


def fill_review(project, reviews: int) -> None:
    """The review queue over the long run's failures, with `reviews` labels saved by the reviewer."""
    from django.contrib.auth import get_user_model

    from webapp.trajectories.models import FAILURE_BUCKETS, Verdict
    from webapp.trajectories.services.review import queue_claim_next, queue_create, review_save

    users = get_user_model().objects
    long_run = first_run(project)
    queue = queue_create(project=project, name=QUEUE_NAME, filter={"run": str(long_run.pk), "passed": "no"},
                         limit=500, actor=users.get(username="bench-owner"))
    reviewer = users.get(username="bench-reviewer")
    for n in range(reviews):
        item = queue_claim_next(queue=queue, reviewer=reviewer)
        if item is None:
            break
        verdict = Verdict.DISAGREE if n % 4 == 0 else Verdict.AGREE
        review_save(item=item, reviewer=reviewer, verdict=verdict, note=f"bench label {n}",
                    failure_bucket=FAILURE_BUCKETS[n % len(FAILURE_BUCKETS)] if verdict == Verdict.AGREE else "")


def fill_check_and_rescore(project, owner, version) -> None:
    """A sanity check of the verifier's newest version over an eval run, scored, half of it judged; and a
    rescore of that run with the version, executed as its job would be."""
    from webapp.runs.models import Run, RunKind
    from webapp.runs.services import jobs as job_services
    from webapp.runs.services.rescore import rescore_execute, rescore_start
    from webapp.trajectories.services.sanity_checks import (
        CHECK_DEFAULT,
        check_create,
        check_label,
        check_score_pending,
    )

    run = (Run.objects.filter(project=project, kind=RunKind.EVAL, experiment__isnull=True)
           .order_by("id").first())
    check = check_create(version=version, actor=owner, size=CHECK_DEFAULT, run=run, seed=0)
    check_score_pending(check, budget_seconds=600)
    check.refresh_from_db()
    for n, item in enumerate(check.items.filter(scored=True).order_by("position")[:check.size // 2]):
        check_label(item=item, actor=owner, right=n % 5 != 0)
    rescore = rescore_start(run=run, verifier_version=version, actor=owner)
    claimed = job_services.job_claim(job_id=rescore.job_id, worker="cpu@bench-0")
    job_services.job_mark_running(job_id=rescore.job_id, attempt=claimed.attempt)
    rescore_execute(rescore_id=rescore.pk)
    job_services.job_succeed(job_id=rescore.job_id, attempt=claimed.attempt, log_tail="rescored\n")


def first_run(project):
    """The fill's first run: the long series, and the run the review queue and the trajectory pages look at."""
    from webapp.runs.models import Run

    return Run.objects.filter(project=project).order_by("created_at", "id").first()


def finish_fill(sizes: Sizes) -> None:
    """Statistics and visibility map as autovacuum would leave them, then the marker."""
    from django.db import connection

    connection.close()
    with server_connect(os.environ["DATABASE_URL"], connection.settings_dict["NAME"]) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute(f"CREATE TABLE {MARKER_TABLE} (sizes text NOT NULL)")
        conn.execute(f"INSERT INTO {MARKER_TABLE} VALUES (%s)", [json.dumps(asdict(sizes))])


def stored_counts() -> dict:
    from django.db import connection

    counts = {}
    with connection.cursor() as cursor:
        for label, table in (("runs", "runs_run"), ("jobs", "runs_job"), ("metric_points", "runs_metricpoint"),
                             ("checkpoints", "runs_checkpoint"), ("trajectories", "trajectories_trajectory"),
                             ("step_rollups", "trajectories_steprollup"), ("tasks", "datasets_task"),
                             ("reviews", "trajectories_review")):
            cursor.execute(f"SELECT count(*) FROM {table}")
            counts[label] = cursor.fetchone()[0]
        cursor.execute("SELECT pg_size_pretty(pg_total_relation_size('trajectories_trajectory')), "
                       "pg_size_pretty(pg_total_relation_size('datasets_task')), "
                       "pg_size_pretty(pg_database_size(current_database()))")
        counts["trajectory_table"], counts["task_table"], counts["database"] = cursor.fetchone()
    return counts


# ---------------------------------------------------------------------------------------
# The measurement
# ---------------------------------------------------------------------------------------


@dataclass
class Result:
    key: str  # the page's name across scales (the label's numbers depend on the fill)
    label: str
    path: str
    status: int
    times_ms: list[float]
    queries: int
    sql_ms: float  # all queries of one request, as the database driver timed them
    slowest_query_ms: float
    slowest_sql: str
    size_bytes: int
    points: int | None = None  # series responses: points sent

    @property
    def median(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def p95(self) -> float:
        return percentile(self.times_ms, 95)

    @property
    def too_many_points(self) -> bool:
        return self.points is not None and self.points > MAX_SERIES_POINTS

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.median <= TARGET_MS and not self.too_many_points

    def verdict(self) -> str:
        return ("OK" if self.ok else
                f"HTTP {self.status}" if self.status != 200 else
                f"over {MAX_SERIES_POINTS:,} points" if self.too_many_points else f"SLOW (> {TARGET_MS:.0f} ms)")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (p95 of 20 values is the 19th smallest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def series_points(body: bytes) -> int:
    return sum(len(series["x"]) for series in json.loads(body)["series"].values())


def fetch(client, path: str) -> tuple[int, bytes]:
    """One request: (status, body). A streamed response (an export) is read to its first block and closed:
    what is timed is the time to the first bytes of the download."""
    response = client.get(path, secure=True)
    if not response.streaming:
        return response.status_code, response.content
    try:
        first = next(iter(response.streaming_content), b"")
    finally:
        response.close()
    return response.status_code, first if isinstance(first, bytes) else first.encode()


def measure(client, key: str, label: str, path: str, requests: int, *, series: bool = False) -> Result:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    status = 0
    for _ in range(WARMUP_REQUESTS):
        status, body = fetch(client, path)
    times = []
    for _ in range(requests if status == 200 else 0):
        started = time.perf_counter()
        fetch(client, path)
        times.append((time.perf_counter() - started) * 1000)
    with CaptureQueriesContext(connection) as captured:
        status, body = fetch(client, path)
    slowest = max(captured.captured_queries, key=lambda q: float(q["time"]), default={"time": "0", "sql": ""})
    return Result(key=key, label=label, path=path, status=status, times_ms=times or [float("nan")],
                  queries=len(captured.captured_queries),
                  sql_ms=sum(float(q["time"]) for q in captured.captured_queries) * 1000,
                  slowest_query_ms=float(slowest["time"]) * 1000, slowest_sql=slowest["sql"], size_bytes=len(body),
                  points=series_points(body) if series and status == 200 else None)


def follow_cursors(client, path: str, pages: int) -> tuple[int, str | None]:
    """Follow the run list API's `next` cursors from `path`: (the page reached, its cursor)."""
    from urllib.parse import quote

    page, cursor = 1, None
    while page < pages:
        separator = "&" if "?" in path else "?"
        url = path if cursor is None else f"{path}{separator}after={quote(cursor)}"
        following = client.get(url, secure=True).json().get("next")
        if following is None:
            break
        page, cursor = page + 1, following
    return page, cursor


def pages_to_measure(client, project, requests: int) -> list[Result]:
    """Every page and data endpoint, measured in the order of the plan."""
    long_run = first_run(project)
    plan = [*runs_plan(client, project, long_run), *failure_pages(project.slug, long_run),
            *trajectory_plan(project, long_run), *review_plan(project), *dataset_plan(project),
            *verifier_plan(project)]
    keys = [key for key, *_ in plan]
    assert len(keys) == len(set(keys)), "two pages share a key"
    return [measure(client, key, label, path, requests, **options) for key, label, path, options in plan]


def runs_plan(client, project, long_run) -> list[tuple[str, str, str, dict]]:
    """The runs side (issue 24): overview, runs table, a run, its series, compare, checkpoints and aliases,
    jobs, experiments, the new-run, run-import and settings pages, and their API."""
    from urllib.parse import quote

    from webapp.runs.models import Checkpoint, Experiment, ExperimentState, MetricPoint, Run

    slug = project.slug
    with_checkpoints = list(Checkpoint.objects.filter(run__project=project).exclude(run=long_run)
                            .order_by("run_id").values_list("run_id", flat=True).distinct()[:4])
    others = list(Run.objects.filter(project=project).exclude(pk__in=[long_run.pk, *with_checkpoints])
                  .values_list("pk", flat=True)[:4 - len(with_checkpoints)])
    compare = [long_run.pk, *with_checkpoints, *others][:5]
    stored = MetricPoint.objects.filter(run=long_run, name="reward", split="train").count()
    deep_page, deep_cursor = follow_cursors(client, f"/api/projects/{slug}/runs", DEEP_PAGES)
    api_page, api_cursor = follow_cursors(client, f"/api/projects/{slug}/runs?limit={API_DEEP_LIMIT}", DEEP_PAGES)
    job = long_run.jobs.order_by("-id").first()
    finished = Experiment.objects.filter(project=project).exclude(state=ExperimentState.RUNNING).order_by("id").first()
    running = Experiment.objects.filter(project=project, state=ExperimentState.RUNNING).order_by("id").first()
    experiment = finished or running
    return [
        ("home", "project list (home)", "/", {}),
        ("overview", "overview", f"/p/{slug}/", {}),
        ("runs-table", "runs table, page 1", f"/p/{slug}/runs/", {}),
        ("runs-table-deep", f"runs table, page {deep_page} (after cursors)",
         f"/p/{slug}/runs/" + (f"?after={quote(deep_cursor)}" if deep_cursor else ""), {}),
        ("runs-table-text", "runs table, text 'grpo-01'", f"/p/{slug}/runs/?text=grpo-01", {}),
        ("runs-table-held-out", "runs table, by held-out success", f"/p/{slug}/runs/?sort=-held_out", {}),
        ("runs-table-reward", "runs table, by reward", f"/p/{slug}/runs/?sort=-reward", {}),
        ("runs-table-learning-rate", "runs table, by learning rate",
         f"/p/{slug}/runs/?sort=-config.learning_rate", {}),
        ("run-detail", f"run detail ({stored:,}-point run)", f"/p/{slug}/runs/{long_run.pk}/", {}),
        ("run-live", "run detail, live panel", f"/p/{slug}/runs/{long_run.pk}/live/", {}),
        ("series", f"series, {stored:,} reward points", f"/api/runs/{long_run.pk}/metrics?names=reward&split=train",
         {"series": True}),
        ("metric-names-api", "metric names API", f"/api/runs/{long_run.pk}/metrics/names", {}),
        ("run-api", "run API", f"/api/runs/{long_run.pk}", {}),
        ("compare", f"compare {len(compare)} runs", f"/p/{slug}/runs/compare/?ids={','.join(map(str, compare))}", {}),
        ("runs-api", "runs API, page 1", f"/api/projects/{slug}/runs", {}),
        ("runs-api-deep", f"runs API, page {api_page} (limit={API_DEEP_LIMIT})",
         f"/api/projects/{slug}/runs?limit={API_DEEP_LIMIT}" + (f"&after={quote(api_cursor)}" if api_cursor else ""),
         {}),
        ("checkpoints", "checkpoints", f"/p/{slug}/checkpoints/", {}),
        ("checkpoints-api", "checkpoints API", f"/api/projects/{slug}/checkpoints", {}),
        ("alias-history", "alias history (production)", f"/p/{slug}/checkpoints/aliases/production/", {}),
        ("aliases-api", "aliases API", f"/api/projects/{slug}/aliases", {}),
        ("alias-history-api", "alias history API", f"/api/projects/{slug}/aliases/production/history", {}),
        ("jobs", "jobs", f"/p/{slug}/jobs/", {}),
        ("jobs-api", "jobs API", f"/api/projects/{slug}/jobs", {}),
        ("job-api", "job API (log tail)", f"/api/jobs/{job.pk}", {}),
        ("queues-api", "queues API", f"/api/projects/{slug}/queues", {}),
        ("workers-api", "workers API", "/api/workers", {}),
        ("experiments", "experiments", f"/p/{slug}/experiments/", {}),
        ("experiment", f"experiment ({experiment.state})", f"/p/{slug}/experiments/{experiment.pk}/", {}),
        ("experiment-live", "experiment, live panel", f"/p/{slug}/experiments/{experiment.pk}/live/", {}),
        ("experiment-api", "experiment API", f"/api/experiments/{experiment.pk}", {}),
        ("experiment-new", "new experiment page", f"/p/{slug}/experiments/new/", {}),
        ("run-new", "new run page", f"/p/{slug}/runs/new/", {}),
        ("run-import", "run import page", f"/p/{slug}/runs/import/", {}),
        ("settings", "project settings", f"/p/{slug}/settings/", {}),
    ]


def deep_trajectory_cursor(project) -> tuple[int, str]:
    """The list's cursor about 999,000 rows in (where OFFSET used to cost half a second), made
    from the row there, as if someone had followed `next` that far."""
    from webapp.common.pagination import encode_cursor
    from webapp.trajectories.models import Trajectory
    from webapp.trajectories.selectors.trajectories import TRAJECTORY_ORDERING

    total = Trajectory.objects.filter(project=project).count()
    depth = max(0, min(total - 100, 999_000))
    row = Trajectory.objects.filter(project=project).order_by("-id").only("id")[depth]
    return depth, encode_cursor([*TRAJECTORY_ORDERING], row)


def trajectory_plan(project, long_run) -> list[tuple[str, str, str, dict]]:
    """The trajectory pages and endpoints (issue 25) over the filled trajectories."""
    from urllib.parse import quote

    from webapp.trajectories.models import Rescore, Trajectory

    slug = project.slug
    depth, cursor = deep_trajectory_cursor(project)
    failed = (Trajectory.objects.filter(run=long_run).exclude(failure_bucket="").order_by("-id")
              .only("id", "failure_bucket", "step", "group_id").first())
    sibling = (Trajectory.objects.filter(run=long_run, step=failed.step, group_id=failed.group_id)
               .exclude(pk=failed.pk).order_by("id").only("id").first()
               or Trajectory.objects.filter(run=long_run).exclude(pk=failed.pk).order_by("-id").only("id").first())
    middle_step = (Trajectory.objects.filter(run=long_run).order_by("-id").values_list("step", flat=True).first()
                   or 0) // 2
    bucket = failed.failure_bucket
    rescore = Rescore.objects.filter(project=project, run__isnull=False).order_by("-id").first()
    return [
        ("trajectories", "trajectories, page 1", f"/p/{slug}/trajectories/", {}),
        ("trajectories-deep", f"trajectories, {depth:,} rows in (cursor)",
         f"/p/{slug}/trajectories/?after={quote(cursor)}", {}),
        ("trajectories-bucket", f"trajectories, run + bucket {bucket}",
         f"/p/{slug}/trajectories/?run={long_run.pk}&bucket={bucket}", {}),
        ("trajectories-step", f"trajectories, run + step {middle_step}",
         f"/p/{slug}/trajectories/?run={long_run.pk}&step={middle_step}", {}),
        ("trajectories-passed", "trajectories, failed in the project", f"/p/{slug}/trajectories/?passed=no", {}),
        ("trajectories-rescore", "trajectories, rescore disagreements",
         f"/p/{slug}/trajectories/?rescore={rescore.pk}&disagree=yes", {}),
        ("trajectories-api", "trajectories API, page 1", f"/api/projects/{slug}/trajectories", {}),
        ("trajectories-api-deep", f"trajectories API, {depth:,} rows in",
         f"/api/projects/{slug}/trajectories?after={quote(cursor)}", {}),
        ("trajectories-api-bucket", "trajectories API, run + bucket",
         f"/api/projects/{slug}/trajectories?run={long_run.pk}&bucket={bucket}", {}),
        ("inspector", "inspector (in a run + bucket filter)",
         f"/p/{slug}/trajectories/{failed.pk}/?run={long_run.pk}&bucket={bucket}", {}),
        ("trajectory-api", "trajectory API (turns, trace)", f"/api/trajectories/{failed.pk}", {}),
        ("group", "GRPO group view", f"/p/{slug}/trajectories/{failed.pk}/group/", {}),
        ("group-api", "GRPO group API", f"/api/trajectories/{failed.pk}/group", {}),
        ("same-task-api", "same-task API", f"/api/trajectories/{failed.pk}/same-task", {}),
        ("diff", "diff of two samples", f"/p/{slug}/trajectories/diff/?a={failed.pk}&b={sibling.pk}", {}),
    ]


def review_plan(project) -> list[tuple[str, str, str, dict]]:
    """Review (issue 25): the queues page, a queue, its label page (which claims an item), the exports
    (to their first block) and the API, over the queue the fill made and labelled."""
    from webapp.trajectories.models import ReviewQueue

    slug = project.slug
    queue = ReviewQueue.objects.get(project=project, name=QUEUE_NAME)
    return [
        ("review-list", "review queues page", f"/p/{slug}/review/", {}),
        ("review-queue", "review queue page", f"/p/{slug}/review/{queue.pk}/", {}),
        ("review-label", "review, next item (claims it)", f"/p/{slug}/review/{queue.pk}/label/", {}),
        ("review-queue-export", "queue labels export (jsonl)", f"/p/{slug}/review/{queue.pk}/labels.jsonl", {}),
        ("review-export", "all labels export (csv)", f"/p/{slug}/review/labels.csv", {}),
        ("review-queues-api", "review queues API", f"/api/projects/{slug}/review-queues", {}),
        ("review-queue-api", "review queue API", f"/api/review-queues/{queue.pk}", {}),
        ("reviews-api", "reviews API", f"/api/projects/{slug}/reviews", {}),
        ("reviews-export-api", "reviews export API (jsonl)", f"/api/projects/{slug}/reviews/export?format=jsonl",
         {}),
    ]


def failure_pages(slug: str, run) -> list[tuple[str, str, str, dict]]:
    """The Failures page of a run (its buckets per step, top buckets with examples, reviews, and
    two evaluations compared: per bucket, per task category, transitions) and its two API endpoints.
    The evaluations are the two newest eval runs outside experiments (the page's default), else the
    two newest runs."""
    from webapp.runs.models import Run, RunKind
    from webapp.trajectories.models import Trajectory

    newest = Run.objects.filter(project=run.project, experiment__isnull=True).order_by("-created_at", "-id")
    pair = list(newest.filter(kind=RunKind.EVAL)[:2]) if newest.filter(kind=RunKind.EVAL).count() >= 2 else list(
        newest[:2])
    compare = f"a={pair[1].pk}&b={pair[0].pk}"
    trajectories = Trajectory.objects.filter(run=run).count()
    return [
        ("failures", f"failures page ({trajectories:,}-trajectory run)", f"/p/{slug}/failures/?run={run.pk}&{compare}",
         {}),
        ("failures-api", "failures API, run per step", f"/api/runs/{run.pk}/failures", {}),
        ("failures-compare-api", "failures API, two evaluations", f"/api/projects/{slug}/failures/compare?{compare}",
         {}),
    ]


def dataset_plan(project) -> list[tuple[str, str, str, dict]]:
    """The datasets pages (issue 26) over the version of `tasks` json_tool_call tasks the fill COPYed in: the
    datasets page, the task browser's first page, a page 999,000 tasks in (a cursor), a split filter, text
    searches (one request's ticket number, a common word), a task, the import and generate pages, the
    export (to its first block) and the API."""
    from urllib.parse import quote

    from webapp.common.pagination import encode_cursor
    from webapp.datasets.models import Task, TaskDataset
    from webapp.datasets.selectors.datasets import TASK_ORDERING

    dataset = TaskDataset.objects.get(project=project, name=DATASET_NAME)
    size = Task.objects.filter(dataset=dataset).count()
    slug, pk = project.slug, dataset.pk
    depth = max(0, min(size - 100, 999_000))
    deep = Task.objects.filter(dataset=dataset).order_by("id").only("id")[depth]
    cursor = quote(encode_cursor([*TASK_ORDERING], deep))
    task = Task.objects.filter(dataset=dataset).order_by("id").only("id")[size // 2]
    ticket = f"ticket {size * 3 // 4}"
    return [
        ("datasets", "datasets page", f"/p/{slug}/datasets/", {}),
        ("task-browser", f"task browser, page 1 ({size:,} tasks)", f"/p/{slug}/datasets/{pk}/", {}),
        ("task-browser-deep", f"task browser, {depth:,} tasks in (cursor)", f"/p/{slug}/datasets/{pk}/?after={cursor}",
         {}),
        ("task-browser-split", "task browser, split held_out", f"/p/{slug}/datasets/{pk}/?split=held_out", {}),
        ("task-browser-ticket", f"task browser, text '{ticket}'", f"/p/{slug}/datasets/{pk}/?text={quote(ticket)}",
         {}),
        ("task-browser-word", "task browser, text 'meeting'", f"/p/{slug}/datasets/{pk}/?text=meeting", {}),
        ("task", "task page", f"/p/{slug}/datasets/{pk}/tasks/{task.pk}/", {}),
        ("dataset-import", "dataset import page", f"/p/{slug}/datasets/import/", {}),
        ("dataset-generate", "dataset generate page", f"/p/{slug}/datasets/generate/", {}),
        ("dataset-export", "dataset export (first block)", f"/p/{slug}/datasets/{pk}/export/crucible/", {}),
        ("datasets-api", "datasets API", f"/api/projects/{slug}/datasets", {}),
        ("dataset-api", "dataset API", f"/api/datasets/{pk}", {}),
        ("tasks-api", "tasks API, page 1", f"/api/datasets/{pk}/tasks", {}),
        ("tasks-api-ticket", f"tasks API, text '{ticket}'", f"/api/datasets/{pk}/tasks?text={quote(ticket)}", {}),
        ("task-api", "task API", f"/api/datasets/{pk}/tasks/{task.pk}", {}),
        ("dataset-export-api", "dataset export API (first block)", f"/api/datasets/{pk}/export?format=nemo_gym", {}),
    ]


def verifier_plan(project) -> list[tuple[str, str, str, dict]]:
    """The verifiers pages: the list, the verifier, its newest version, the playground (plain, and finding a
    request in the big dataset version), the sanity-check form, the check and its judging page, the rescore
    form and the rescore, and the API."""
    from urllib.parse import quote

    from webapp.datasets.models import Task, TaskDataset
    from webapp.trajectories.models import Rescore
    from webapp.verifiers.models import Verifier, VerifierCheck

    slug = project.slug
    verifier = Verifier.objects.get(project=project, name=VERIFIER_NAME)
    version = verifier.latest_version
    check = VerifierCheck.objects.filter(version=version).order_by("-id").first()
    rescore = Rescore.objects.filter(project=project, run__isnull=False).order_by("-id").first()
    dataset = TaskDataset.objects.get(project=project, name=DATASET_NAME)
    ticket = f"ticket {Task.objects.filter(dataset=dataset).count() * 3 // 4}"
    base = f"/p/{slug}/verifiers"
    return [
        ("verifiers", "verifiers page", f"{base}/", {}),
        ("verifier", "verifier (2 versions)", f"{base}/{verifier.pk}/", {}),
        ("verifier-version", f"verifier version v{version.version}", f"{base}/{verifier.pk}/versions/{version.version}/",
         {}),
        ("playground", "playground page", f"{base}/playground/", {}),
        ("playground-find", f"playground, find '{ticket}'",
         f"{base}/playground/?dataset={dataset.pk}&q={quote(ticket)}&version={version.pk}", {}),
        ("check-new", "sanity check form", f"{base}/{verifier.pk}/versions/{version.version}/check/", {}),
        ("check", f"sanity check ({check.size} outputs)", f"{base}/checks/{check.pk}/", {}),
        ("check-label", "sanity check, judge next", f"{base}/checks/{check.pk}/label/", {}),
        ("rescore-new", "rescore form", f"{base}/rescores/new/", {}),
        ("rescore", "rescore (finished)", f"{base}/rescores/{rescore.pk}/", {}),
        ("verifiers-api", "verifiers API", f"/api/projects/{slug}/verifiers", {}),
        ("verifier-api", "verifier API", f"/api/verifiers/{verifier.pk}", {}),
        ("checks-api", "sanity checks API", f"/api/verifiers/{verifier.pk}/versions/{version.version}/checks", {}),
        ("check-api", "sanity check API", f"/api/verifier-checks/{check.pk}", {}),
        ("rescore-api", "rescore API", f"/api/rescores/{rescore.pk}", {}),
    ]


def explain(sql: str) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


def table(results: list[Result]) -> str:
    width = max(40, *(len(r.label) for r in results))
    header = (f"{'page':<{width}} {'median ms':>9} {'p95 ms':>8} {'queries':>7} {'SQL ms':>6} {'slowest q ms':>12}"
              f" {'KB':>7} {'points':>7}  result")
    lines = [header, "-" * len(header)]
    for r in results:
        points = f"{r.points:,}" if r.points is not None else ""
        lines.append(f"{r.label:<{width}} {r.median:>9.1f} {r.p95:>8.1f} {r.queries:>7} {r.sql_ms:>6.0f}"
                     f" {r.slowest_query_ms:>12.1f} {r.size_bytes / 1024:>7.1f} {points:>7}  {r.verdict()}")
    return "\n".join(lines)


def growth_flags(medians: list[float]) -> float | None:
    """The growth from the smallest scale to the largest, when it counts as growing (else None)."""
    first, last = medians[0], medians[-1]
    if first > 0 and last / first >= GROWTH_FLAG and last - first >= GROWTH_MIN_MS:
        return last / first
    return None


def scales_table(scales: list[tuple[Sizes, list[dict]]]) -> tuple[str, list[str], list[str]]:
    """One row a page: its median at each scale, p95 at the largest, the SQL time of one request at each scale
    (the database's part: on a busy machine the medians move with the load, this much less), size at the
    largest, growth; the table, the pages over the target and the pages that grow."""
    largest = scales[-1][1]
    by_scale = [{row["key"]: row for row in rows} for _, rows in scales]
    width = max(40, *(len(row["label"]) for row in largest))
    tags = [scale_tag(sizes.trajectories) for sizes, _ in scales]
    header = (f"{'page':<{width}} " + " ".join(f"{'ms @' + tag:>9}" for tag in tags)
              + f" {'p95 @' + tags[-1]:>9} " + " ".join(f"{'SQL @' + tag:>9}" for tag in tags)
              + f" {'KB':>7} {'growth':>7}  result")
    lines, slow, grows = [header, "-" * len(header)], [], []
    for row in largest:
        rows = [scale.get(row["key"]) for scale in by_scale]
        medians = [r["median"] if r else float("nan") for r in rows]
        ratio = medians[-1] / medians[0] if medians[0] > 0 else float("nan")
        flags = []
        if any(r is None or r["status"] != 200 for r in rows):
            flags.append("HTTP " + "/".join(str(r["status"]) if r else "-" for r in rows))
        if row["median"] > TARGET_MS:
            flags.append(f"SLOW (> {TARGET_MS:.0f} ms)")
            slow.append(row["label"])
        if row["points"] is not None and row["points"] > MAX_SERIES_POINTS:
            flags.append(f"over {MAX_SERIES_POINTS:,} points")
        if len(rows) > 1 and growth_flags(medians) is not None:
            flags.append(f"GROWS x{ratio:.1f}")
            grows.append(row["label"])
        sql = [r["sql_ms"] if r else float("nan") for r in rows]
        lines.append(f"{row['label']:<{width}} " + " ".join(f"{m:>9.1f}" for m in medians)
                     + f" {row['p95']:>9.1f} " + " ".join(f"{m:>9.0f}" for m in sql)
                     + f" {row['size_bytes'] / 1024:>7.1f} {'x' + format(ratio, '.1f'):>7}  "
                     + (", ".join(flags) or "OK"))
    return "\n".join(lines), slow, grows


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} on {os.cpu_count()} CPUs"


def measure_one(args, sizes: Sizes, url: str, say) -> int:
    """Fill (unless --keep finds it filled) and measure one database; 1 when a page fails (or, with --strict,
    misses the target)."""
    name = database_name(url)
    reuse = args.keep and filled_with(url) == sizes
    if not reuse:
        say(f"database {name}: creating it afresh")
        recreate_database(url)
    setup_django(url)

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from webapp.projects.models import Project

    if reuse:
        say(f"database {name}: already filled with {asdict(sizes)} (--keep)")
    else:
        started = time.perf_counter()
        call_command("migrate", verbosity=0)
        say(f"migrated in {time.perf_counter() - started:.1f} s; filling {asdict(sizes)}")
        filled = fill(sizes, say)
        started = time.perf_counter()
        finish_fill(sizes)
        say(f"filled in {filled['fill_seconds']} s (metric points {filled['metric_points']:,}, trajectories "
            f"{filled['trajectories']:,}, checkpoints {filled['checkpoints']:,}, tasks {filled['tasks']:,}); "
            f"VACUUM ANALYZE {time.perf_counter() - started:.1f} s")
    counts = stored_counts()
    say("stored: " + ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in counts.items()))

    project = Project.objects.get(slug=SLUG)
    client = Client(HTTP_HOST="localhost")
    client.force_login(get_user_model().objects.get(username="bench-owner"))
    say(f"before: {load()}")
    started = time.perf_counter()
    results = pages_to_measure(client, project, args.requests)
    say(f"after:  {load()} ({time.perf_counter() - started:.1f} s of requests)")
    say("")
    say(f"server time over {args.requests} requests per page (Django test Client as the project owner, "
        f"{WARMUP_REQUESTS} warm-up requests first; target {TARGET_MS:.0f} ms, series <= {MAX_SERIES_POINTS:,} points)")
    say(table(results))
    for r in results:
        if r.status == 200 and (args.explain or r.median > TARGET_MS) and r.slowest_sql:
            say(f"\n{r.label}: slowest query {r.slowest_query_ms:.1f} ms of {r.queries}\n{r.slowest_sql}\n"
                f"{explain(r.slowest_sql)}")
    if args.results_json:
        rows = [{"key": r.key, "label": r.label, "path": r.path, "status": r.status, "median": r.median,
                 "p95": r.p95, "sql_ms": r.sql_ms, "size_bytes": r.size_bytes, "points": r.points, "queries": r.queries}
                for r in results]
        Path(args.results_json).write_text(json.dumps({"sizes": asdict(sizes), "rows": rows}))
    failed = [r for r in results if r.status != 200]
    missed = [r for r in results if not r.ok]
    say("")
    if failed:
        say("FAIL: " + ", ".join(f"{r.label} answered {r.status}" for r in failed))
        return 1
    if missed:
        say(f"{len(missed)} of {len(results)} pages miss the target: " + ", ".join(r.label for r in missed))
        return 1 if args.strict else 0
    say(f"all {len(results)} pages meet the target")
    return 0


def child_arguments(args, sizes: Sizes, url: str, results: Path) -> list[str]:
    """This script's arguments for one scale: its database and sizes, the caller's options."""
    arguments = ["--database-url", url, "--trajectories", str(sizes.trajectories), "--tasks", str(sizes.tasks),
                 "--runs", str(sizes.runs), "--requests", str(args.requests), "--results-json", str(results)]
    return arguments + [flag for flag, on in (("--tiny", args.tiny), ("--keep", args.keep),
                                               ("--explain", args.explain)) if on]


def measure_scales(args, say) -> int:
    """Each scale filled and measured by a run of this script of its own (one Django setup a database), then
    one table with a median column per scale."""
    import subprocess

    measured: list[tuple[Sizes, list[dict]]] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="crucible-bench-web-") as folder:
        for sizes, url in zip(args.all_sizes, args.urls, strict=True):
            say(f"=== scale {scale_tag(sizes.trajectories)}: {sizes.trajectories:,} trajectories, {sizes.tasks:,} "
                f"tasks, database {database_name(url)} ===")
            results = Path(folder) / f"{scale_tag(sizes.trajectories)}.json"
            code = subprocess.call([sys.executable, str(Path(__file__).resolve()),
                                    *child_arguments(args, sizes, url, results)])
            if not results.exists():
                say(f"FAIL: the {scale_tag(sizes.trajectories)} scale stopped (exit {code}) before measuring")
                return 1
            failed = failed or code != 0
            measured.append((sizes, json.loads(results.read_text())["rows"]))
            say("")
    text, slow, grows = scales_table(measured)
    tags = [scale_tag(sizes.trajectories) for sizes, _ in measured]
    say(f"median server time by scale ({' / '.join(tags)} trajectories and as many tasks; {args.requests} requests "
        f"a page): target {TARGET_MS:.0f} ms at {tags[-1]}; GROWS: the median grows x{GROWTH_FLAG:g} or more "
        f"(and by {GROWTH_MIN_MS:.0f} ms or more) from {tags[0]} to {tags[-1]}")
    say(text)
    say("")
    rows = len(measured[-1][1])
    if slow:
        say(f"{len(slow)} of {rows} pages over {TARGET_MS:.0f} ms at {tags[-1]}: " + ", ".join(slow))
    if grows:
        say(f"{len(grows)} of {rows} pages grow from {tags[0]} to {tags[-1]}: " + ", ".join(grows))
    if not slow and not grows:
        say(f"all {rows} pages under {TARGET_MS:.0f} ms at {tags[-1]}, none growing")
    if failed:
        say("FAIL: a scale had a page that did not answer 200 (its table above)")
        return 1
    return 1 if args.strict and slow else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def say(message: str) -> None:
        print(message, flush=True)

    if len(args.all_sizes) > 1:
        return measure_scales(args, say)
    return measure_one(args, args.sizes, args.urls[0], say)


if __name__ == "__main__":
    sys.exit(main())
