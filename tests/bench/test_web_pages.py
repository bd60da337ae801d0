"""bench/web_pages.py (issues 24-27): the page speed benchmark keeps working.

The end-to-end tests run the script with --tiny against throwaway PostgreSQL databases of
their own (one a scale, dropped afterwards) on the server DATABASE_URL names, else
127.0.0.1:5432, and are skipped when no PostgreSQL answers there. They check that every page
gets a row at each scale and in the table of both scales and that the script exits 0, not the
times: those are for the README, from a full run of the script.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from urllib.parse import urlsplit

import pytest

from tests.bench.bench_scripts import BENCH, load_bench_script

SCRIPT = BENCH / "web_pages.py"
# Each page's row starts with its label (the numbers in some labels depend on the fill).
PAGE_ROWS = [
    # runs, checkpoints, jobs, experiments, settings (issue 24)
    r"project list \(home\)", r"overview", r"runs table, page 1", r"runs table, page \d+ \(after cursors\)",
    r"runs table, text 'grpo-01'", r"runs table, by held-out success", r"runs table, by reward",
    r"runs table, by learning rate",
    r"run detail \([\d,]+-point run\)", r"run detail, live panel",
    r"series, [\d,]+ reward points", r"metric names API", r"run API", r"compare \d runs", r"runs API, page 1",
    r"runs API, page \d+ \(limit=10\)", r"checkpoints", r"checkpoints API", r"alias history \(production\)",
    r"aliases API", r"alias history API", r"jobs", r"jobs API", r"job API \(log tail\)", r"queues API",
    r"workers API", r"experiments", r"experiment \(\w+\)", r"experiment, live panel", r"experiment API",
    r"new experiment page", r"new run page", r"run import page", r"project settings",
    # failures
    r"failures page \([\d,]+-trajectory run\)", r"failures API, run per step", r"failures API, two evaluations",
    # trajectories (issue 25)
    r"trajectories, page 1", r"trajectories, [\d,]+ rows in \(cursor\)", r"trajectories, run \+ bucket \w+",
    r"trajectories, run \+ step \d+", r"trajectories, failed in the project", r"trajectories, rescore disagreements",
    r"trajectories API, page 1", r"trajectories API, [\d,]+ rows in", r"trajectories API, run \+ bucket",
    r"inspector \(in a run \+ bucket filter\)", r"trajectory API \(turns, trace\)", r"GRPO group view",
    r"GRPO group API", r"same-task API", r"diff of two samples",
    # review
    r"review queues page", r"review queue page", r"review, next item \(claims it\)",
    r"queue labels export \(jsonl\)", r"all labels export \(csv\)", r"review queues API", r"review queue API",
    r"reviews API", r"reviews export API \(jsonl\)",
    # datasets (issue 26), over the big version (1,000,000 tasks at full size, 300 with --tiny)
    r"datasets page", r"task browser, page 1 \(300 tasks\)", r"task browser, 200 tasks in \(cursor\)",
    r"task browser, split held_out", r"task browser, text 'ticket 225'", r"task browser, text 'meeting'",
    r"task page", r"dataset import page", r"dataset generate page", r"dataset export \(first block\)",
    r"datasets API", r"dataset API", r"tasks API, page 1", r"tasks API, text 'ticket 225'", r"task API",
    r"dataset export API \(first block\)",
    # verifiers
    r"verifiers page", r"verifier \(2 versions\)", r"verifier version v2", r"playground page",
    r"playground, find 'ticket 225'", r"sanity check form", r"sanity check \(\d+ outputs\)",
    r"sanity check, judge next", r"rescore form", r"rescore \(finished\)", r"verifiers API", r"verifier API",
    r"sanity checks API", r"sanity check API", r"rescore API",
]
ROW_END = r"\s+[\d.]+\s+[\d.]+\s+\d+\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d,]*\s+(OK|SLOW \(> 150 ms\))$"
# The table of both scales: median at 150 and at 300, p95 at 300, SQL ms at 150 and 300, KB, growth, verdict.
SCALES_ROW_END = (r"\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+\d+\s+\d+\s+[\d.]+\s+x[\d.]+\s+"
                  r"(OK|SLOW \(> 150 ms\)|GROWS x[\d.]+|SLOW \(> 150 ms\), GROWS x[\d.]+)$")


@pytest.fixture(scope="module")
def web_pages():
    return load_bench_script("web_pages.py")


def server_url() -> str:
    """The PostgreSQL server of DATABASE_URL (a test database is never touched), else the local default."""
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.netloc}"
    return "postgres://postgres@127.0.0.1:5432"


@pytest.fixture(scope="module")
def throwaway_database(web_pages):
    import psycopg

    url = f"{server_url()}/crucible_bench_web_test_{uuid.uuid4().hex[:8]}"
    try:
        web_pages.server_connect(url).close()
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL reachable at {server_url()}: {exc}")
    yield url
    with web_pages.server_connect(url) as conn:  # the database of each scale: the name, then _150 and _300
        for count in ("", *(f"_{n}" for n in web_pages.TINY_SCALES)):
            conn.execute(f'DROP DATABASE IF EXISTS "{web_pages.database_name(url)}{count}" WITH (FORCE)')


def run_script(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True,
                          cwd=BENCH.parent, timeout=600)


@pytest.mark.slow
def test_a_tiny_fill_prints_a_row_for_every_page_at_both_scales_and_exits_0(throwaway_database):
    result = run_script("--tiny", "--database-url", throwaway_database)

    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    name = throwaway_database.rsplit("/", 1)[1]
    for scale in (150, 300):
        assert f"database {name}_{scale}: creating it afresh" in result.stdout
        assert re.search(rf"stored: runs \d+, jobs \d+, metric_points [\d,]+, checkpoints \d+, trajectories {scale}, "
                         rf"step_rollups \d+, tasks {scale + 40},", result.stdout), result.stdout
    # Each scale's own table, then the table of both.
    own_tables, both = result.stdout.split("median server time by scale")
    lines = own_tables.splitlines()
    for row in PAGE_ROWS:
        assert any(re.fullmatch(row + ROW_END, line) for line in lines), f"no row for {row!r}:\n{result.stdout}"
    series = next(line for line in lines if line.startswith("series, 2,500 reward points"))
    assert re.search(r"\s1,\d{3}\s+(OK|SLOW)", series), series  # downsampled, under 2,000 points
    table = both.splitlines()
    assert re.search(r"^page\s+ms @150\s+ms @300\s+p95 @300\s+SQL @150\s+SQL @300\s+KB\s+growth\s+result$",
                     table[1]), table[1]
    for row in PAGE_ROWS:
        assert any(re.fullmatch(row + SCALES_ROW_END, line) for line in table), f"no row for {row!r}:\n{both}"
    assert len([line for line in table if re.search(SCALES_ROW_END, line)]) == len(PAGE_ROWS)


@pytest.mark.slow
def test_keep_measures_the_filled_databases_again_without_filling_them(throwaway_database):
    result = run_script("--tiny", "--keep", "--requests", "1", "--database-url", throwaway_database)

    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert result.stdout.count("already filled") == 2 and "creating it afresh" not in result.stdout
    assert "server time over 1 requests per page" in result.stdout
    assert "median server time by scale" in result.stdout


def test_a_database_whose_name_lacks_bench_is_never_dropped(web_pages, capsys):
    with pytest.raises(SystemExit) as exit_info:
        web_pages.parse_args(["--database-url", "postgres://postgres@127.0.0.1:5432/test"])
    assert exit_info.value.code == 2
    assert "its name must contain 'bench'" in capsys.readouterr().err


def test_tiny_and_full_sizes(web_pages):
    full = web_pages.parse_args([]).sizes
    assert (full.runs, full.trajectories, full.tasks, full.metric_points, full.series_points) == (
        100, 1_000_000, 1_000_000, 100_000, 50_000)
    tiny = web_pages.parse_args(["--tiny"])
    assert tiny.sizes.trajectories == 300 and tiny.sizes.tasks == 300 and tiny.requests == 3
    assert web_pages.parse_args(["--tiny", "--trajectories", "1000"]).sizes.trajectories == 1_000


def test_two_scales_by_default_each_in_a_database_of_its_own(web_pages):
    args = web_pages.parse_args([])
    assert [(s.trajectories, s.tasks) for s in args.all_sizes] == [(100_000, 100_000), (1_000_000, 1_000_000)]
    assert args.urls == ["postgres://postgres@127.0.0.1:5432/crucible_bench_web_100k",
                         "postgres://postgres@127.0.0.1:5432/crucible_bench_web_1m"]
    assert [s.trajectories for s in web_pages.parse_args(["--tiny"]).all_sizes] == [150, 300]
    assert web_pages.parse_args(["--scales", "1000000,20000"]).urls[0].endswith("/crucible_bench_web_20k")
    # One scale in --database-url itself; the tasks stay at a million unless --tasks says otherwise.
    one = web_pages.parse_args(["--trajectories", "20000"])
    assert one.urls == [web_pages.DEFAULT_DATABASE_URL] and (one.sizes.trajectories, one.sizes.tasks) == (
        20_000, 1_000_000)


def test_the_table_of_both_scales_flags_slow_and_growing_pages(web_pages):
    def row(key, median, status=200):
        return {"key": key, "label": key, "status": status, "median": median, "p95": median + 1, "sql_ms": 3.0,
                "size_bytes": 2048, "points": None}

    small, large = web_pages.parse_args([]).all_sizes
    text, slow, grows = web_pages.scales_table([
        (small, [row("flat", 20.0), row("grows", 12.0), row("noise", 3.0), row("slow", 140.0)]),
        (large, [row("flat", 22.0), row("grows", 30.0), row("noise", 7.0), row("slow", 160.0)]),
    ])
    lines = {line.split()[0]: line for line in text.splitlines()[2:]}
    assert text.splitlines()[0].split() == ["page", "ms", "@100k", "ms", "@1m", "p95", "@1m", "SQL", "@100k", "SQL",
                                            "@1m", "KB", "growth", "result"]
    assert lines["flat"].endswith("x1.1  OK") and lines["noise"].endswith("x2.3  OK")  # +4 ms is not growth
    assert lines["grows"].endswith("x2.5  GROWS x2.5") and lines["slow"].endswith("SLOW (> 150 ms)")
    assert (slow, grows) == (["slow"], ["grows"])


def test_the_metrics_filled_add_up_to_the_sizes(web_pages):
    long_run = list(web_pages.long_series_events(2_500, 3))
    assert sum(len(e["metrics"]) for e in long_run) == 2_503
    assert min(e["metrics"].get("reward", 0) for e in long_run) == -1.0  # the spike is there
    for budget in (0, 7, 505, 2_000):
        assert sum(len(e["metrics"]) for e in web_pages.run_metric_events(budget, 3)) == budget


def test_p95_is_the_nearest_rank(web_pages):
    assert web_pages.percentile([float(v) for v in range(1, 21)], 95) == 19.0
    assert web_pages.percentile([5.0], 95) == 5.0
