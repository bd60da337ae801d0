"""Dataset import and export speed (issue 26): rows/s through the product's own services, on PostgreSQL.

- Import: a Crucible JSONL file of --rows json_tool_call tasks (the workplace generator's
  single-write requests, each row made unique by its request text: about 4.5 KB a row with its
  3-6 tool schemas) goes through webapp.datasets.services.imports as the page, the API and
  `manage.py import_tasks` do: the validation report (`import_check`, nothing written), then
  "create version" (`import_create`: the file read again, every row validated, hashed,
  deduplicated and inserted in one transaction, the trigram search index maintained).
- Delete: the exported version goes as its delete page's job deletes it
  (webapp.runs.services.dataset_delete: one transaction, timed per statement); the imported
  version must keep every task.
- Export: a version of --export-tasks tasks (filled with COPY, the same kind of rows) is
  streamed as Crucible JSONL and as NeMo Gym JSONL through webapp.datasets.selectors.exports (what the
  download and the API stream), in a child process that reports the rows/s and its peak
  resident memory above what it held before the export began.

    python bench/datasets_io.py                                    # 100,000 rows in, 1,000,000 out
    python bench/datasets_io.py --rows 20000 --export-tasks 200000
    python bench/datasets_io.py --tiny                             # seconds (what the tests run)

The database (--database-url, default crucible_bench_datasets) is dropped and created again;
its name must contain "bench". Settings as bench/web_pages.py: production settings, a temporary
CRUCIBLE_DATA_DIR, the import size limit raised to fit the file (a 100,000-row file of these
tasks is about 450 MB; the product's default limit is 200 MB).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/crucible_bench_datasets"
SLUG = "bench-datasets"
BASE_TASKS = 600  # generated workplace tasks; their single-write ones are the rows' models
COPY_BATCH = 50_000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL,
                        help="PostgreSQL database to use (dropped and created; its name must contain 'bench')")
    parser.add_argument("--rows", type=int, default=None, help="rows in the imported file (default 100,000)")
    parser.add_argument("--export-tasks", type=int, default=None, help="tasks exported (default 1,000,000)")
    parser.add_argument("--tiny", action="store_true", help="1,000 rows in, 5,000 out")
    parser.add_argument("--child-export", nargs=2, metavar=("DATASET_ID", "FORMAT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.rows = (1_000 if args.tiny else 100_000) if args.rows is None else args.rows
    args.export_tasks = (5_000 if args.tiny else 1_000_000) if args.export_tasks is None else args.export_tasks
    if not 1 <= args.rows <= 5_000_000 or not 1 <= args.export_tasks <= 20_000_000:
        parser.error("--rows must be 1-5,000,000 and --export-tasks 1-20,000,000")
    url = urlsplit(args.database_url)
    if url.scheme not in ("postgres", "postgresql") or "bench" not in url.path.strip("/"):
        parser.error("--database-url must be a postgres:// URL whose database name contains 'bench' "
                     "(this script drops and creates it)")
    return args


def server_connect(url: str, dbname: str = "postgres"):
    import psycopg

    parts = urlsplit(url)
    return psycopg.connect(host=parts.hostname or "127.0.0.1", port=parts.port or 5432,
                           user=unquote(parts.username or "postgres"),
                           password=unquote(parts.password) if parts.password else None,
                           dbname=dbname, autocommit=True, connect_timeout=10)


def recreate_database(url: str) -> None:
    name = unquote(urlsplit(url).path.strip("/"))
    quoted = '"' + name.replace('"', '""') + '"'
    with server_connect(url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {quoted}")


def setup_django(url: str, data_dir: str | None = None) -> str:
    if data_dir is None:
        data_dir = tempfile.mkdtemp(prefix="crucible-bench-datasets-")
        atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    os.environ.update(
        DJANGO_SETTINGS_MODULE="webapp.config.settings.production", DATABASE_URL=url,
        SECRET_KEY=os.environ.get("BENCH_SECRET_KEY") or secrets.token_urlsafe(50),
        ALLOWED_HOSTS="localhost,127.0.0.1", DEBUG="false", CRUCIBLE_DATA_DIR=data_dir,
        CELERY_BROKER_URL="memory://localhost/", CRUCIBLE_IMPORT_MAX_MB="100000",
    )
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    sys.path.insert(0, str(REPO_ROOT))
    import django

    django.setup()
    return data_dir


def model_tasks():
    from environments.json_tool_call_tasks import workplace_json_tasks

    return workplace_json_tasks(BASE_TASKS, 0)


def varied(base, i: int):
    """Task i: a model task whose request names a ticket number, so every row is a different task."""
    from environments.types import Task

    messages = [dict(m) for m in base.messages]
    messages[-1]["content"] = f"{messages[-1]['content']} (ticket {i})"
    return Task(id=f"{base.id}-{i}", messages=messages, tools=base.tools, ground_truth=base.ground_truth,
                category=base.category, split=base.split, environment="json_tool_call", metadata=dict(base.metadata))


def write_file(path: Path, rows: int) -> int:
    from environments.nemo_gym import crucible_record

    bases = model_tasks()
    with path.open("w", encoding="utf-8") as handle:
        for i in range(rows):
            handle.write(json.dumps(crucible_record(varied(bases[i % len(bases)], i)), ensure_ascii=False) + "\n")
    return path.stat().st_size


def fill_tasks(dataset, count: int, say) -> float:
    """`count` tasks COPYed into `dataset` (the trigram index rebuilt after); returns the seconds taken."""
    from django.db import connection

    from webapp.datasets.models import Task, search_text_of
    from webapp.datasets.services.datasets import task_content_hash, version_stats

    bases = model_tasks()
    columns = ("dataset_id", "external_id", "messages", "tools", "ground_truth", "category", "split", "source",
               "metadata", "content_hash", "search_text", "created_at")
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS task_search_text_trgm")
    now = time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime())
    written = 0
    while written < count:
        upto = min(count, written + COPY_BATCH)
        with connection.cursor() as cursor, cursor.cursor.copy(
                f"COPY {Task._meta.db_table} ({', '.join(columns)}) FROM STDIN") as copy:
            for i in range(written, upto):
                task = varied(bases[i % len(bases)], i)
                copy.write_row((dataset.pk, task.id, json.dumps(task.messages), json.dumps(task.tools),
                                json.dumps(task.ground_truth), task.category, task.split, "synthetic",
                                json.dumps(task.metadata), task_content_hash(task), search_text_of(task.messages),
                                now))
        written = upto
        if written % 200_000 == 0 or written == count:
            say(f"  {written:,} tasks copied ({time.perf_counter() - started:.0f} s)")
    with connection.cursor() as cursor:
        cursor.execute("CREATE INDEX task_search_text_trgm ON datasets_task USING gin (search_text gin_trgm_ops)")
        cursor.execute("ANALYZE datasets_task")
    dataset.stats = version_stats(dataset)
    dataset.save(update_fields=["stats"])
    return time.perf_counter() - started


def rss_mb() -> float:
    """The process's resident memory now (Linux), in MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child_export(dataset_id: int, fmt: str) -> None:
    """Run in a fresh process: stream the export to nowhere and report rows/s and memory (resident memory
    when the export starts and the most it reached, sampled every block of lines)."""
    from webapp.datasets.models import TaskDataset
    from webapp.datasets.selectors.exports import export_lines

    dataset = TaskDataset.objects.get(pk=dataset_id)
    before = highest = rss_mb()
    started = time.perf_counter()
    rows = size = 0
    for block in export_lines(dataset, fmt):
        rows += block.count("\n")
        size += len(block.encode("utf-8"))
        highest = max(highest, rss_mb())
    seconds = time.perf_counter() - started
    print(json.dumps({"rows": rows, "seconds": seconds, "bytes": size, "rss_before_mb": before,
                      "rss_peak_mb": highest}))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child_export:
        setup_django(args.database_url, os.environ["CRUCIBLE_DATA_DIR"])
        child_export(int(args.child_export[0]), args.child_export[1])
        return 0

    def say(message: str) -> None:
        print(message, flush=True)

    recreate_database(args.database_url)
    data_dir = setup_django(args.database_url)
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from webapp.datasets.models import TaskDataset
    from webapp.datasets.services.imports import import_check, import_create, import_target
    from webapp.projects.services.projects import project_create

    call_command("migrate", verbosity=0)
    owner = get_user_model().objects.create_user(username="bench-owner", password=secrets.token_urlsafe(16))
    project = project_create(name="Bench datasets", owner=owner, slug=SLUG)
    load = os.getloadavg()
    say(f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} on {os.cpu_count()} CPUs")

    path = Path(data_dir) / "import.jsonl"
    started = time.perf_counter()
    size = write_file(path, args.rows)
    say(f"wrote {args.rows:,} rows ({size / 1e6:.0f} MB) in {time.perf_counter() - started:.1f} s")
    target = import_target(project=project, name="imported")
    started = time.perf_counter()
    report = import_check(path, target=target, filename=path.name)
    check_s = time.perf_counter() - started
    started = time.perf_counter()
    dataset, written = import_create(path, project=project, target=target, actor=owner, filename=path.name)
    create_s = time.perf_counter() - started
    assert written.accepted == args.rows == dataset.stats["tasks"], (written.accepted, dataset.stats)
    say(f"import, validation report: {args.rows:,} rows in {check_s:.1f} s = {args.rows / check_s:,.0f} rows/s "
        f"(accepted {report.accepted:,}, rejected {report.rejected_count}, duplicates {report.duplicate_count})")
    say(f"import, create version:    {args.rows:,} rows in {create_s:.1f} s = {args.rows / create_s:,.0f} rows/s "
        f"(read, validated, hashed, deduplicated and inserted in one transaction)")
    say(f"import, report + create:   {args.rows / (check_s + create_s):,.0f} rows/s")

    big = TaskDataset.objects.create(project=project, name="export", environment="json_tool_call", created_by=owner)
    say(f"filling {args.export_tasks:,} tasks with COPY")
    fill_s = fill_tasks(big, args.export_tasks, say)
    say(f"filled in {fill_s:.0f} s ({args.export_tasks / fill_s:,.0f} tasks/s with the index rebuilt)")
    for fmt in ("crucible", "nemo_gym"):
        out = subprocess.run([sys.executable, __file__, "--database-url", args.database_url, "--child-export",
                              str(big.pk), fmt], capture_output=True, text=True, check=True,
                             env={**os.environ, "CRUCIBLE_DATA_DIR": data_dir}).stdout
        result = json.loads(out.strip().splitlines()[-1])
        say(f"export {fmt:<8}: {result['rows']:,} tasks, {result['bytes'] / 1e6:,.0f} MB in {result['seconds']:.1f} s "
            f"= {result['rows'] / result['seconds']:,.0f} rows/s; resident memory {result['rss_before_mb']:.0f} MB "
            f"before, {result['rss_peak_mb']:.0f} MB at most ({result['rss_peak_mb'] - result['rss_before_mb']:+.0f} MB)")
    delete_version(big, kept=dataset, owner=owner, say=say)
    return 0


def delete_version(big, *, kept, owner, say) -> None:
    """The exported version deleted as its delete page's job does (the plan, then one transaction of set-wise
    statements), timed per statement; the imported version must keep every task."""
    from webapp.datasets.models import Task
    from webapp.runs.selectors.dataset_delete import dataset_delete_plan
    from webapp.runs.services.dataset_delete import dataset_delete_execute

    kept_tasks = Task.objects.filter(dataset=kept).count()
    started = time.perf_counter()
    plan = dataset_delete_plan(big)
    plan_s = time.perf_counter() - started
    started = time.perf_counter()
    report = dataset_delete_execute(project_id=big.project_id, payload={
        "dataset_id": big.pk, "dataset_label": f"{big.name} v{big.version}", "actor_id": owner.pk})
    delete_s = time.perf_counter() - started
    assert Task.objects.filter(dataset_id=big.pk).count() == 0 and Task.objects.filter(dataset=kept).count() == kept_tasks
    say(f"delete, the page's plan:   {plan.tasks:,} tasks in {plan_s * 1000:.0f} ms")
    say(f"delete, the job:           {report.removed['tasks']:,} tasks in {delete_s:.1f} s = "
        f"{report.removed['tasks'] / delete_s:,.0f} rows/s; per statement {json.dumps(report.seconds)}; "
        f"the other version's {kept_tasks:,} tasks intact")


if __name__ == "__main__":
    sys.exit(main())
