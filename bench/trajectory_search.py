"""Trajectory search benchmark: the trajectory list and API searched over 1,000,000 trajectories.

UI.md's speed rule (under 150 ms server time for any page with 1,000,000 trajectories) applied to
the full-text search of issue 35: prompts, outputs and tool-call arguments, alone and combined
with the other filters. The script fills a PostgreSQL database of its own (crucible_bench_search:
--database-url's name) through the workers' write path (EventIngestor: COPY plus rollups), each
trajectory a workplace request, a tool call with arguments and a tool result, then VACUUM ANALYZE,
then times --requests requests of each search (Django's test Client with force_login: the whole
middleware stack, no network) and prints the median and p95 server time and how many rows match.

The searches: a term in 10 trajectories (a rare customer), one in about 1% (a colleague's
address), one in about a third (a common tool), the common one with a run and a bucket filter,
a term in none, and the API with the rare term. The slowest query's plan is printed with
--explain. Exit 1 when a page does not answer 200, and with --strict when a median is over 150 ms.

    python bench/trajectory_search.py                      # 1,000,000 trajectories (fill: several minutes)
    python bench/trajectory_search.py --keep               # measure the filled database again
    python bench/trajectory_search.py --trajectories 100000
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.web_pages import database_name, recreate_database, server_connect, setup_django  # noqa: E402

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/crucible_bench_search"
TARGET_MS = 150.0
RUNS = 20
BATCH = 5000
RARE = "zyxcorp industries"  # in exactly 10 trajectories
PEOPLE = [f"person{i:03d}@example.com" for i in range(100)]  # one of them: ~1% of the rows
TOOLS = ["email_send", "calendar_create_event", "crm_update_customer", "project_move_task"]


def _trajectory(index: int, rng: random.Random, rare: set[int]) -> dict:
    person = PEOPLE[rng.randrange(len(PEOPLE))]
    tool = TOOLS[index % 3] if index % 3 else TOOLS[rng.randrange(len(TOOLS))]
    customer = RARE if index in rare else f"customer {rng.randrange(50_000)}"
    request = f"Please ask {person} to update the account of {customer} and note ticket {rng.randrange(10**6)}."
    arguments = {"to": person, "subject": f"Account {customer}", "body": f"Ticket {rng.randrange(10**6)}"}
    passed = rng.random() < 0.4
    return {
        "type": "trajectory", "seq": 0, "time": time.time(), "task_id": f"task-{index % 20_000}",
        "sample_index": index // 20_000 % 8, "step": index // 160_000, "split": "train",
        "turns": [{"role": "system", "content": "You are a workplace assistant."},
                  {"role": "user", "content": request},
                  {"role": "assistant", "content": None,
                   "tool_calls": [{"type": "function", "function": {"name": tool, "arguments": arguments}}]},
                  {"role": "tool", "content": f"ok: {tool} done"}],
        "reward": 1.0 if passed else 0.0, "passed": passed,
        "failure_bucket": None if passed else rng.choice(["wrong_arguments", "wrong_tool", "invalid_json"]),
        "tokens_in": 120, "tokens_out": 40,
    }


def fill(count: int, say) -> None:
    from django.contrib.auth import get_user_model

    from webapp.projects.services.projects import project_create
    from webapp.runs.models import Run
    from webapp.runs.services.ingest import EventIngestor

    owner = get_user_model().objects.create_user("bench", password="x")
    project = project_create(name="Search bench", slug="search-bench", owner=owner)
    runs = [Run.objects.create(project=project, name=f"grpo-{i}", kind="grpo") for i in range(RUNS)]
    rng = random.Random(0)
    rare = set(rng.sample(range(count), 10))
    started = time.perf_counter()
    for first in range(0, count, BATCH):
        run = runs[first * RUNS // count]
        EventIngestor(run, attempt=1).ingest([_trajectory(i, rng, rare) for i in range(first, min(count, first + BATCH))])
        if (first // BATCH) % 40 == 0:
            say(f"  {first + BATCH:,} trajectories in {time.perf_counter() - started:.0f} s")


def _time(client, url: str, params: dict, requests: int) -> tuple[list[float], int, str]:
    times, status, body = [], 0, ""
    for i in range(requests + 2):
        started = time.perf_counter()
        response = client.get(url, params, secure=True)
        elapsed = (time.perf_counter() - started) * 1000
        status, body = response.status_code, response.content.decode()
        if i >= 2:  # two warm-up requests
            times.append(elapsed)
    return times, status, body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--trajectories", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=15)
    parser.add_argument("--keep", action="store_true", help="measure the database filled before")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a median is over 150 ms")
    parser.add_argument("--explain", action="store_true", help="print the plan of each search's query")
    args = parser.parse_args(argv)

    def say(text: str) -> None:
        print(text, flush=True)

    if not args.keep:
        say(f"database {database_name(args.database_url)}: creating it afresh")
        recreate_database(args.database_url)
    setup_django(args.database_url)
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from webapp.projects.models import Project
    from webapp.runs.models import Run
    from webapp.trajectories.selectors.trajectories import TrajectoryFilter, filtered_trajectories

    if not args.keep:
        call_command("migrate", verbosity=0)
        started = time.perf_counter()
        fill(args.trajectories, say)
        say(f"filled in {time.perf_counter() - started:.0f} s")
        with server_connect(args.database_url, database_name(args.database_url)) as conn:
            conn.autocommit = True
            conn.execute("VACUUM ANALYZE")
    project = Project.objects.get(slug="search-bench")
    stored = project.trajectories.count()
    client = Client(HTTP_HOST="localhost")
    client.force_login(project.memberships.get().user)
    run = Run.objects.filter(project=project).order_by("id")[RUNS // 2]
    page = f"/p/{project.slug}/trajectories/"
    searches = [
        ("rare term (10 rows)", page, {"q": RARE}),
        ("1% term (a colleague)", page, {"q": PEOPLE[7]}),
        ("common term (~40%)", page, {"q": "crm_update_customer"}),
        ("common + run + bucket", page, {"q": "crm_update_customer", "run": run.pk, "bucket": "wrong_tool"}),
        ("no match", page, {"q": "no such words anywhere"}),
        ("API, rare term", f"/api/projects/{project.slug}/trajectories", {"q": RARE, "limit": 50}),
    ]
    say(f"\n{stored:,} trajectories; {args.requests} requests each (after 2 warm-ups)\n")
    say(f"{'search':28} {'matches':>9} {'median ms':>10} {'p95 ms':>8}")
    failed = over = False
    for label, url, params in searches:
        times, status, _ = _time(client, url, params, args.requests)
        flt = TrajectoryFilter.from_query({k: str(v) for k, v in params.items() if k != "limit"})
        matches = filtered_trajectories(project, flt).count()
        median, p95 = statistics.median(times), sorted(times)[int(0.95 * (len(times) - 1))]
        flag = "" if status == 200 else f"  HTTP {status}"
        flag += "  over 150 ms" if median > TARGET_MS else ""
        say(f"{label:28} {matches:>9,} {median:>10.1f} {p95:>8.1f}{flag}")
        failed |= status != 200
        over |= median > TARGET_MS
        if args.explain:
            sql, sql_params = filtered_trajectories(project, flt).order_by("-id")[:51].query.sql_with_params()
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, sql_params)
                say("\n".join("    " + row[0] for row in cursor.fetchall()))
    return 1 if failed or (args.strict and over) else 0


if __name__ == "__main__":
    raise SystemExit(main())
