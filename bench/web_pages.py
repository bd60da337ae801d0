"""Page speed benchmark (issue 24): server time of the main pages over a large PostgreSQL database.

UI.md "Speed" sets the target: under 150 ms server time for any page or data endpoint with
1,000,000 trajectories and 100,000 metric points in PostgreSQL. This script fills a database
of its own through the product's own write paths, then times the pages.

The fill (one project, --runs runs):
- project_create, then membership_add for a viewer, a reviewer and an editor;
- run_create for every run (grpo, with some sft and eval runs), which writes the run and its
  job; each job is claimed, marked running, heartbeated and finished (most succeed, some fail,
  some stay running) through webapp.runs.services.jobs, plus extra verify jobs without a run and
  three registered workers;
- EventIngestor (the workers' batch path: COPY on PostgreSQL, with the rollups) for every
  metric point, trajectory and checkpoint: 100,000 metric points in all, of which one run holds
  a 50,000-point `reward` series in split train; checkpoints for some runs (two promoted to
  aliases with checkpoint_promote); 1,000,000 trajectories spread over the runs;
- then VACUUM ANALYZE, as autovacuum would have done after such a load.

Then it logs in (Django's test Client with force_login: the full middleware stack and the
views run in this process, so the time measured is server time without a network) and, after
two warm-up requests, times --requests requests of each page, printing the median and p95,
the number of SQL queries one request makes, their total time and the slowest of them. The
deep pages are reached by following the run list API's `next` cursors up to 10 pages in: the
runs table shows 50 runs a page, so with 100 runs its deep page is page 2, while the API is
also followed with limit=10 to page 10. Every page must answer 200 (else exit 1); with
--strict a page whose median is over 150 ms, or a series response of more than 2,000 points,
also exits 1. For each page over the target (or every page with
--explain) the slowest query's EXPLAIN (ANALYZE, BUFFERS) is printed.

    python bench/web_pages.py                    # fill crucible_bench_web (2-3 minutes), measure
    python bench/web_pages.py --keep             # reuse the filled database: measure only
    python bench/web_pages.py --tiny             # a few hundred rows, seconds (what the tests run)
    python bench/web_pages.py --database-url postgres://postgres@127.0.0.1:5432/crucible_bench_web --strict

Settings: webapp.config.settings.production (DEBUG off, persistent connections, HTTPS redirect,
so requests are sent as HTTPS), pointed at --database-url, with a throwaway SECRET_KEY, a
temporary CRUCIBLE_DATA_DIR and Celery's in-memory broker (job messages go nowhere). The database
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


@dataclass(frozen=True)
class Sizes:
    runs: int
    series_points: int  # the one long train/reward series
    metric_points: int  # in all, the long series included
    trajectories: int
    checkpoint_runs: int
    checkpoints_per_run: int
    extra_jobs: int  # verify jobs without a run, besides one job per run


FULL = Sizes(runs=100, series_points=50_000, metric_points=100_000, trajectories=1_000_000, checkpoint_runs=30,
             checkpoints_per_run=10, extra_jobs=300)
TINY = Sizes(runs=6, series_points=2_500, metric_points=3_000, trajectories=300, checkpoint_runs=2,
             checkpoints_per_run=3, extra_jobs=5)


# ---------------------------------------------------------------------------------------
# Arguments and the database
# ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL,
                        help="the PostgreSQL database to fill (dropped and created; its name must contain 'bench')")
    parser.add_argument("--trajectories", type=int, default=None, help="trajectories to fill (default 1,000,000)")
    parser.add_argument("--runs", type=int, default=None, help="runs to fill (default 100)")
    parser.add_argument("--requests", type=int, default=None, help="timed requests per page (default 20)")
    parser.add_argument("--keep", action="store_true",
                        help="reuse the database if it is already filled with these sizes (else fill it again)")
    parser.add_argument("--tiny", action="store_true", help="a few hundred rows and 3 requests a page, for tests")
    parser.add_argument("--strict", action="store_true",
                        help=f"exit 1 when a page's median is over {TARGET_MS:.0f} ms or a series has more than "
                             f"{MAX_SERIES_POINTS:,} points")
    parser.add_argument("--explain", action="store_true",
                        help="print EXPLAIN ANALYZE of every page's slowest query, not only of slow pages")
    args = parser.parse_args(argv)
    base = TINY if args.tiny else FULL
    runs = base.runs if args.runs is None else args.runs
    trajectories = base.trajectories if args.trajectories is None else args.trajectories
    if not 2 <= runs <= 10_000:
        parser.error("--runs must be between 2 and 10,000")
    if not 0 <= trajectories <= 20_000_000:
        parser.error("--trajectories must be between 0 and 20,000,000")
    args.requests = (3 if args.tiny else 20) if args.requests is None else args.requests
    if not 1 <= args.requests <= 1_000:
        parser.error("--requests must be between 1 and 1,000")
    args.sizes = Sizes(**{**asdict(base), "runs": runs, "trajectories": trajectories,
                          "checkpoint_runs": min(base.checkpoint_runs, runs)})
    url = urlsplit(args.database_url)
    if url.scheme not in ("postgres", "postgresql") or not url.path.strip("/"):
        parser.error("--database-url must be a postgres://user@host:port/name URL")
    if "bench" not in url.path.strip("/"):
        parser.error(f"--database-url names the database {url.path.strip('/')!r}: this script drops and creates it, "
                     "so its name must contain 'bench'")
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


def trajectory_events(count: int, seed: int):
    """`count` GRPO samples: 64 a step (8 prompts x 8 generations), about 40% passing."""
    from webapp.trajectories.models import FAILURE_BUCKETS

    for i in range(count):
        step, prompt, sample = i // PER_STEP, (i % PER_STEP) // 8, i % 8
        mix = (i * 7_919 + seed * 104_729) % 100
        passed = mix < 40
        yield {
            "type": "trajectory", "task_id": f"task-{(step * 8 + prompt) % 5_000}", "sample_index": sample,
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


def fill(sizes: Sizes, say) -> dict:
    """Fill the database through the services; returns the counts ingested and the time taken."""
    from django.contrib.auth import get_user_model

    from webapp.projects.models import Role
    from webapp.projects.services import membership_add, project_create
    from webapp.runs.models import Checkpoint, ModelSpec
    from webapp.runs.services import jobs as job_services
    from webapp.runs.services.ingest import EventIngestor
    from webapp.runs.services.promotion import checkpoint_promote
    from webapp.runs.services.run_config import run_create
    from webapp.runs.services.workers import worker_register

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

    other_runs = sizes.runs - 1
    other_budget = min(sizes.metric_points - sizes.series_points, other_runs * 2_000)
    long_extra = sizes.metric_points - sizes.series_points - other_budget
    counts = {"metric_points": 0, "trajectories": 0, "checkpoints": 0}
    started = time.perf_counter()
    runs_with_checkpoints = 0
    for i in range(sizes.runs):
        kind = "grpo" if i == 0 or i % 10 < 8 else ("sft" if i % 10 == 8 else "eval")
        config = {"learning_rate": [1e-4, 5e-5, 2e-5][i % 3]} if kind != "eval" else {}
        run, job = run_create(project=project, name=f"{kind}-{i:03d}-lr{config.get('learning_rate', 0):g}",
                              kind=kind, config=config, actor=owner, model=model)
        claimed = job_services.job_claim(job_id=job.pk, worker=f"gpu@bench-{i % 3}")
        job_services.job_mark_running(job_id=job.pk, attempt=claimed.attempt)
        ingestor = EventIngestor(run, attempt=claimed.attempt)
        metrics = (long_series_events(sizes.series_points, long_extra) if i == 0
                   else run_metric_events(_share(other_budget, other_runs, i - 1), i))
        for batch in _batches(metrics, METRIC_BATCH):
            counts["metric_points"] += ingestor.ingest(batch).metrics
        for batch in _batches(trajectory_events(_share(sizes.trajectories, sizes.runs, i), i), TRAJECTORY_BATCH):
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
    promoted = list(Checkpoint.objects.filter(run__project=project).order_by("-step", "id")[:2])
    for alias, checkpoint in zip(("production", "candidate"), promoted, strict=False):
        checkpoint_promote(checkpoint=checkpoint, alias=alias, actor=owner, reason="bench fill", force=True)
    counts["fill_seconds"] = round(time.perf_counter() - started, 1)
    return counts


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
                             ("step_rollups", "trajectories_steprollup")):
            cursor.execute(f"SELECT count(*) FROM {table}")
            counts[label] = cursor.fetchone()[0]
        cursor.execute("SELECT pg_size_pretty(pg_total_relation_size('trajectories_trajectory')), "
                       "pg_size_pretty(pg_database_size(current_database()))")
        counts["trajectory_table"], counts["database"] = cursor.fetchone()
    return counts


# ---------------------------------------------------------------------------------------
# The measurement
# ---------------------------------------------------------------------------------------


@dataclass
class Result:
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


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (p95 of 20 values is the 19th smallest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def series_points(body: bytes) -> int:
    return sum(len(series["x"]) for series in json.loads(body)["series"].values())


def measure(client, label: str, path: str, requests: int, *, series: bool = False) -> Result:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    response = None
    for _ in range(WARMUP_REQUESTS):
        response = client.get(path, secure=True)
    times = []
    for _ in range(requests if response.status_code == 200 else 0):
        started = time.perf_counter()
        response = client.get(path, secure=True)
        times.append((time.perf_counter() - started) * 1000)
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path, secure=True)
    slowest = max(captured.captured_queries, key=lambda q: float(q["time"]), default={"time": "0", "sql": ""})
    return Result(label=label, path=path, status=response.status_code, times_ms=times or [float("nan")],
                  queries=len(captured.captured_queries),
                  sql_ms=sum(float(q["time"]) for q in captured.captured_queries) * 1000, slowest_query_ms=float(slowest["time"]) * 1000,
                  slowest_sql=slowest["sql"], size_bytes=len(response.content),
                  points=series_points(response.content) if series and response.status_code == 200 else None)


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
    from urllib.parse import quote

    from webapp.runs.models import Checkpoint, MetricPoint, Run

    slug = project.slug
    long_run = Run.objects.filter(project=project).order_by("created_at", "id").first()  # the fill's first run
    with_checkpoints = list(Checkpoint.objects.filter(run__project=project).exclude(run=long_run)
                            .order_by("run_id").values_list("run_id", flat=True).distinct()[:4])
    others = list(Run.objects.filter(project=project).exclude(pk__in=[long_run.pk, *with_checkpoints])
                  .values_list("pk", flat=True)[:4 - len(with_checkpoints)])
    compare = [long_run.pk, *with_checkpoints, *others][:5]
    stored = MetricPoint.objects.filter(run=long_run, name="reward", split="train").count()

    deep_page, deep_cursor = follow_cursors(client, f"/api/projects/{slug}/runs", DEEP_PAGES)
    api_page, api_cursor = follow_cursors(client, f"/api/projects/{slug}/runs?limit={API_DEEP_LIMIT}", DEEP_PAGES)
    plan = [
        ("overview", f"/p/{slug}/", {}),
        ("runs table, page 1", f"/p/{slug}/runs/", {}),
        (f"runs table, page {deep_page} (after cursors)",
         f"/p/{slug}/runs/" + (f"?after={quote(deep_cursor)}" if deep_cursor else ""), {}),
        (f"run detail ({stored:,}-point run)", f"/p/{slug}/runs/{long_run.pk}/", {}),
        (f"series, {stored:,} reward points", f"/api/runs/{long_run.pk}/metrics?names=reward&split=train",
         {"series": True}),
        (f"compare {len(compare)} runs", f"/p/{slug}/runs/compare/?ids={','.join(map(str, compare))}", {}),
        ("checkpoints", f"/p/{slug}/checkpoints/", {}),
        ("jobs", f"/p/{slug}/jobs/", {}),
        ("runs API, page 1", f"/api/projects/{slug}/runs", {}),
        (f"runs API, page {api_page} (limit={API_DEEP_LIMIT})",
         f"/api/projects/{slug}/runs?limit={API_DEEP_LIMIT}" + (f"&after={quote(api_cursor)}" if api_cursor else ""),
         {}),
        *failure_pages(slug, long_run),
    ]
    plan += trajectory_plan(project, long_run)
    plan += dataset_plan(project)
    return [measure(client, label, path, requests, **options) for label, path, options in plan]


def deep_trajectory_cursor(project) -> tuple[int, str]:
    """The list's cursor about 999,000 rows in (where OFFSET used to cost half a second), made
    from the row there, as if someone had followed `next` that far."""
    from webapp.api.pagination import encode_cursor
    from webapp.trajectories.models import Trajectory
    from webapp.trajectories.selectors import TRAJECTORY_ORDERING

    total = Trajectory.objects.filter(project=project).count()
    depth = max(0, min(total - 100, 999_000))
    row = Trajectory.objects.filter(project=project).order_by("-id").only("id")[depth]
    return depth, encode_cursor([*TRAJECTORY_ORDERING], row)


def trajectory_plan(project, long_run) -> list[tuple[str, str, dict]]:
    """The trajectory pages and endpoints (issue 25) over the filled million rows."""
    from urllib.parse import quote

    from webapp.trajectories.models import Trajectory

    slug = project.slug
    depth, cursor = deep_trajectory_cursor(project)
    failed = (Trajectory.objects.filter(run=long_run).exclude(failure_bucket="").order_by("-id")
              .only("id", "failure_bucket", "step").first())
    middle_step = (Trajectory.objects.filter(run=long_run).order_by("-id").values_list("step", flat=True).first()
                   or 0) // 2
    bucket = failed.failure_bucket
    queue = bench_queue(project, long_run)
    return [
        ("trajectories, page 1", f"/p/{slug}/trajectories/", {}),
        (f"trajectories, {depth:,} rows in (cursor)", f"/p/{slug}/trajectories/?after={quote(cursor)}", {}),
        (f"trajectories, run + bucket {bucket}", f"/p/{slug}/trajectories/?run={long_run.pk}&bucket={bucket}", {}),
        (f"trajectories, run + step {middle_step}", f"/p/{slug}/trajectories/?run={long_run.pk}&step={middle_step}",
         {}),
        ("trajectories API, page 1", f"/api/projects/{slug}/trajectories", {}),
        (f"trajectories API, {depth:,} rows in", f"/api/projects/{slug}/trajectories?after={quote(cursor)}", {}),
        ("trajectories API, run + bucket", f"/api/projects/{slug}/trajectories?run={long_run.pk}&bucket={bucket}", {}),
        ("inspector (in a run + bucket filter)",
         f"/p/{slug}/trajectories/{failed.pk}/?run={long_run.pk}&bucket={bucket}", {}),
        ("trajectory API (turns, trace)", f"/api/trajectories/{failed.pk}", {}),
        ("GRPO group view", f"/p/{slug}/trajectories/{failed.pk}/group/", {}),
        ("review queue page", f"/p/{slug}/review/{queue.pk}/", {}),
        ("review, next item (claims it)", f"/p/{slug}/review/{queue.pk}/label/", {}),
    ]


def bench_queue(project, run):
    """A review queue over the long run's failures (made once, outside the timed requests)."""
    from django.contrib.auth import get_user_model

    from webapp.trajectories.models import ReviewQueue
    from webapp.trajectories.services.review import queue_create

    queue = ReviewQueue.objects.filter(project=project, name="bench failures").first()
    if queue is None:
        owner = get_user_model().objects.get(username="bench-owner")
        queue = queue_create(project=project, name="bench failures", filter={"run": str(run.pk), "passed": "no"},
                             limit=500, actor=owner)
    return queue


def failure_pages(slug: str, run) -> list[tuple[str, str, dict]]:
    """The Failures page of a run (its buckets per step, top buckets with examples, reviews, and
    two evaluations compared: per bucket, per task category, transitions) and its two API endpoints.
    The evaluations are the two newest eval runs (the page's default), else the two newest runs."""
    from webapp.runs.models import Run, RunKind
    from webapp.trajectories.models import Trajectory

    newest = Run.objects.filter(project=run.project).order_by("-created_at", "-id")
    pair = list(newest.filter(kind=RunKind.EVAL)[:2]) if newest.filter(kind=RunKind.EVAL).count() >= 2 else list(
        newest[:2])
    compare = f"a={pair[1].pk}&b={pair[0].pk}"
    trajectories = Trajectory.objects.filter(run=run).count()
    return [
        (f"failures page ({trajectories:,}-trajectory run)", f"/p/{slug}/failures/?run={run.pk}&{compare}", {}),
        ("failures API, run per step", f"/api/runs/{run.pk}/failures", {}),
        ("failures API, two evaluations", f"/api/projects/{slug}/failures/compare?{compare}", {}),
    ]


DATASET_TASKS = 1_000_000  # the task browser's version (1,000 when the fill is smaller than FULL's runs)
DATASET_NAME = "bench tasks"


def dataset_plan(project) -> list[tuple[str, str, dict]]:
    """The datasets pages (issue 26) over a version of DATASET_TASKS json_tool_call tasks: the datasets
    page, the task browser's first page, a page 999,000 tasks in (a cursor), a split filter, text
    searches (one request's ticket number, a common word), a task, and the tasks API. The version is
    COPYed in (bench/datasets_io.py's fill) the first time, and kept for --keep."""
    import importlib.util
    from urllib.parse import quote

    from webapp.api.pagination import encode_cursor
    from webapp.datasets.models import Task, TaskDataset
    from webapp.datasets.selectors import TASK_ORDERING
    from webapp.runs.models import Run

    size = DATASET_TASKS if Run.objects.filter(project=project).count() >= FULL.runs else 1_000
    dataset = TaskDataset.objects.filter(project=project, name=DATASET_NAME).first()
    if dataset is None or (dataset.stats or {}).get("tasks") != size:
        spec = importlib.util.spec_from_file_location("datasets_io_bench", Path(__file__).with_name("datasets_io.py"))
        datasets_io = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(datasets_io)
        if dataset is not None:
            dataset.delete()
        dataset = TaskDataset.objects.create(project=project, name=DATASET_NAME, environment="json_tool_call",
                                             description="Filled by bench/web_pages.py.")
        print(f"filling {size:,} dataset tasks with COPY", flush=True)
        seconds = datasets_io.fill_tasks(dataset, size, lambda message: print(message, flush=True))
        print(f"filled {size:,} tasks in {seconds:.0f} s", flush=True)
    slug, pk = project.slug, dataset.pk
    depth = max(0, min(size - 100, 999_000))
    deep = Task.objects.filter(dataset=dataset).order_by("id").only("id")[depth]
    cursor = quote(encode_cursor([*TASK_ORDERING], deep))
    task = Task.objects.filter(dataset=dataset).order_by("id").only("id")[size // 2]
    ticket = f"ticket {size * 3 // 4}"
    return [
        ("datasets page", f"/p/{slug}/datasets/", {}),
        (f"task browser, page 1 ({size:,} tasks)", f"/p/{slug}/datasets/{pk}/", {}),
        (f"task browser, {depth:,} tasks in (cursor)", f"/p/{slug}/datasets/{pk}/?after={cursor}", {}),
        ("task browser, split held_out", f"/p/{slug}/datasets/{pk}/?split=held_out", {}),
        (f"task browser, text '{ticket}'", f"/p/{slug}/datasets/{pk}/?text={quote(ticket)}", {}),
        ("task browser, text 'meeting'", f"/p/{slug}/datasets/{pk}/?text=meeting", {}),
        ("task page", f"/p/{slug}/datasets/{pk}/tasks/{task.pk}/", {}),
        ("tasks API, page 1", f"/api/datasets/{pk}/tasks", {}),
        (f"tasks API, text '{ticket}'", f"/api/datasets/{pk}/tasks?text={quote(ticket)}", {}),
    ]


def explain(sql: str) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


def table(results: list[Result]) -> str:
    header = (f"{'page':<40} {'median ms':>9} {'p95 ms':>8} {'queries':>7} {'SQL ms':>6} {'slowest q ms':>12}"
              f" {'KB':>7} {'points':>7}  result")
    lines = [header, "-" * len(header)]
    for r in results:
        verdict = ("OK" if r.ok else
                   f"HTTP {r.status}" if r.status != 200 else
                   f"over {MAX_SERIES_POINTS:,} points" if r.too_many_points else f"SLOW (> {TARGET_MS:.0f} ms)")
        points = f"{r.points:,}" if r.points is not None else ""
        lines.append(f"{r.label:<40} {r.median:>9.1f} {r.p95:>8.1f} {r.queries:>7} {r.sql_ms:>6.0f}"
                     f" {r.slowest_query_ms:>12.1f} {r.size_bytes / 1024:>7.1f} {points:>7}  {verdict}")
    return "\n".join(lines)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} on {os.cpu_count()} CPUs"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = args.sizes

    def say(message: str) -> None:
        print(message, flush=True)

    name = database_name(args.database_url)
    reuse = args.keep and filled_with(args.database_url) == sizes
    if not reuse:
        say(f"database {name}: creating it afresh")
        recreate_database(args.database_url)
    setup_django(args.database_url)

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
            f"{filled['trajectories']:,}, checkpoints {filled['checkpoints']:,}); "
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


if __name__ == "__main__":
    sys.exit(main())
