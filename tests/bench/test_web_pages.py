"""bench/web_pages.py (issue 24): the page speed benchmark keeps working.

The end-to-end tests run the script with --tiny against a throwaway PostgreSQL database of
their own (dropped afterwards) on the server DATABASE_URL names, else 127.0.0.1:5432, and are
skipped when no PostgreSQL answers there. They check that every page gets a row and the script
exits 0, not the times: those are for the README, from a full run of the script.
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
    r"overview", r"runs table, page 1", r"runs table, page \d+ \(after cursors\)",
    r"run detail \([\d,]+-point run\)", r"series, [\d,]+ reward points", r"compare \d runs", r"checkpoints",
    r"jobs", r"runs API, page 1", r"runs API, page \d+ \(limit=10\)",
    r"trajectories, page 1", r"trajectories, [\d,]+ rows in \(cursor\)", r"trajectories, run \+ bucket \w+",
    r"trajectories, run \+ step \d+", r"trajectories API, page 1", r"trajectories API, run \+ bucket",
    r"inspector \(in a run \+ bucket filter\)", r"trajectory API \(turns, trace\)", r"GRPO group view",
    r"review queue page", r"review, next item \(claims it\)", r"failures page \([\d,]+-trajectory run\)",
    r"failures API, run per step", r"failures API, two evaluations",
]
ROW_END = r"\s+[\d.]+\s+[\d.]+\s+\d+\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d,]*\s+(OK|SLOW \(> 150 ms\))$"


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
    with web_pages.server_connect(url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{web_pages.database_name(url)}" WITH (FORCE)')


def run_script(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True,
                          cwd=BENCH.parent, timeout=300)


@pytest.mark.slow
def test_a_tiny_fill_prints_a_row_for_every_page_and_exits_0(throwaway_database):
    result = run_script("--tiny", "--database-url", throwaway_database)

    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "creating it afresh" in result.stdout
    assert re.search(r"stored: runs 6, jobs \d+, metric_points 3,000, checkpoints \d+, trajectories 300,",
                     result.stdout), result.stdout
    lines = result.stdout.splitlines()
    for row in PAGE_ROWS:
        assert any(re.fullmatch(row + ROW_END, line) for line in lines), f"no row for {row!r}:\n{result.stdout}"
    series = next(line for line in lines if line.startswith("series, 2,500 reward points"))
    assert re.search(r"\s1,\d{3}\s+(OK|SLOW)", series), series  # downsampled, under 2,000 points


@pytest.mark.slow
def test_keep_measures_the_filled_database_again_without_filling_it(throwaway_database):
    result = run_script("--tiny", "--keep", "--requests", "1", "--database-url", throwaway_database)

    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "already filled" in result.stdout and "creating it afresh" not in result.stdout
    assert "server time over 1 requests per page" in result.stdout


def test_a_database_whose_name_lacks_bench_is_never_dropped(web_pages, capsys):
    with pytest.raises(SystemExit) as exit_info:
        web_pages.parse_args(["--database-url", "postgres://postgres@127.0.0.1:5432/test"])
    assert exit_info.value.code == 2
    assert "its name must contain 'bench'" in capsys.readouterr().err


def test_tiny_and_full_sizes(web_pages):
    full = web_pages.parse_args([]).sizes
    assert (full.runs, full.trajectories, full.metric_points, full.series_points) == (100, 1_000_000, 100_000, 50_000)
    tiny = web_pages.parse_args(["--tiny"])
    assert tiny.sizes.trajectories == 300 and tiny.requests == 3
    assert web_pages.parse_args(["--tiny", "--trajectories", "1000"]).sizes.trajectories == 1_000


def test_the_metrics_filled_add_up_to_the_sizes(web_pages):
    long_run = list(web_pages.long_series_events(2_500, 3))
    assert sum(len(e["metrics"]) for e in long_run) == 2_503
    assert min(e["metrics"].get("reward", 0) for e in long_run) == -1.0  # the spike is there
    for budget in (0, 7, 505, 2_000):
        assert sum(len(e["metrics"]) for e in web_pages.run_metric_events(budget, 3)) == budget


def test_p95_is_the_nearest_rank(web_pages):
    assert web_pages.percentile([float(v) for v in range(1, 21)], 95) == 19.0
    assert web_pages.percentile([5.0], 95) == 5.0
