"""Writing a training process's events into the database, in batches, idempotently.

Idempotency: every row has a natural key (metric: run, step, split, name;
trajectory: run, step, task_key, sample_index; checkpoint: run, step) and inserts
skip rows that already exist. A re-delivered job that re-reads its event file, or
a resumed attempt that re-emits a step, therefore never duplicates anything.

Rollups (StepRollup, BucketRollup) are incremented only by the trajectories that
were actually inserted, so they stay exact under re-ingestion too.

On PostgreSQL trajectories not yet stored are COPYed straight into the table;
should another writer have stored some of them meanwhile (a stale attempt still
running), the batch goes through a temporary staging table and one INSERT … ON
CONFLICT DO NOTHING RETURNING instead. Elsewhere bulk inserts do the same job.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import PurePath

from django.db import IntegrityError, connection, transaction
from django.db.models import OuterRef, Subquery

from webapp.datasets.models import Task
from webapp.datasets.selectors.datasets import dataset_holding_task_ids
from webapp.runs.models import Checkpoint, MetricPoint, Run
from webapp.runs.services.headlines import is_headline_metric, run_headlines_refresh_around
from webapp.trajectories.models import (
    FAILURE_BUCKETS,
    BucketRollup,
    StepRollup,
    Trajectory,
    search_text_of_turns,
)
from webapp.trajectories.services.search_text import search_text_refresh

TRAJECTORY_COLUMNS = (
    "project_id", "run_id", "attempt", "task_id", "task_key", "step", "split", "group_id", "sample_index",
    "turns", "search_text", "tool_calls", "reward", "components", "advantage", "passed", "failure_bucket", "flags",
    "tokens_in", "tokens_out", "latency_ms", "source", "created_at", "verifier_version_id",
)
JSON_COLUMNS = {"turns", "tool_calls", "components", "flags"}


@dataclass
class IngestReport:
    metrics: int = 0
    trajectories: int = 0
    checkpoints: int = 0
    other: list[dict] = field(default_factory=list)


class EventIngestor:
    """Ingests batches of events for one run and one job attempt.

    `resumed_from` is the checkpoint step this attempt's training process resumes
    from (None: it starts from scratch). Events that an earlier attempt wrote after
    that step are superseded: the resumed process writes them again, so they are
    skipped here, and `discard_superseded_rows` removes what was already stored.
    """

    def __init__(self, run: Run, *, attempt: int, resumed_from: int | None = None) -> None:
        self.run = run
        self.attempt = attempt
        self.resumed_from = resumed_from
        self._task_ids: dict[str, int] | None = None
        self._dataset_sought = False

    def is_superseded(self, event: dict) -> bool:
        attempt = event.get("attempt")
        if attempt is None or attempt >= self.attempt:
            return False
        step = event.get("step")
        return step is None or self.resumed_from is None or int(step) > self.resumed_from

    def ingest(self, events: Sequence[dict]) -> IngestReport:
        report = IngestReport()
        metrics, trajectories, checkpoints = [], [], []
        for event in events:
            if self.is_superseded(event):
                continue
            kind = event.get("type")
            if kind == "metric":
                metrics.append(event)
            elif kind == "trajectory":
                trajectories.append(event)
            elif kind == "checkpoint":
                checkpoints.append(event)
            else:
                report.other.append(event)
        with transaction.atomic():
            report.metrics = self._ingest_metrics(metrics)
            report.trajectories = self._ingest_trajectories(trajectories)
            report.checkpoints = self._ingest_checkpoints(checkpoints)
            if any(_holds_headline(event) for event in metrics):
                run_headlines_refresh_around([self.run.pk])
        return report

    def _ingest_metrics(self, events: list[dict]) -> int:
        rows = {}
        for event in events:
            recorded = _event_time(event)
            for name, value in (event.get("metrics") or {}).items():
                if value is None or not math.isfinite(float(value)):
                    continue
                key = (int(event["step"]), str(event["split"]), str(name)[:128])
                rows[key] = MetricPoint(run_id=self.run.pk, step=key[0], split=key[1], name=key[2],
                                        value=float(value), recorded_at=recorded)
        MetricPoint.objects.bulk_create(rows.values(), ignore_conflicts=True, batch_size=2000)
        return len(rows)

    def _ingest_checkpoints(self, events: list[dict]) -> int:
        for event in events:
            Checkpoint.objects.get_or_create(
                run_id=self.run.pk, step=int(event["step"]),
                defaults={"storage_uri": str(event["path"]), "kind": event.get("kind", "adapter"),
                          "metrics": event.get("metrics") or {}, "content_hash": event.get("content_hash", "")},
            )
        return len(events)

    def _ingest_trajectories(self, events: list[dict]) -> int:
        if not events:
            return 0
        if self.run.dataset_id is None and self.run.import_key and not self._dataset_sought:
            self._link_imported_dataset(events)
        requests = self._task_messages({_text(e["task_id"], 200) for e in events})
        rows = _dedupe_by_key(self._trajectory_row(e, requests) for e in events)
        fresh = _not_yet_stored(self.run.pk, rows)
        if connection.vendor == "postgresql":
            inserted = _copy_trajectories(fresh)
        else:
            inserted = _bulk_insert_trajectories(fresh)
        _add_to_rollups(self.run.pk, inserted)
        return len(inserted)

    def _trajectory_row(self, event: dict, requests: dict[str, list]) -> dict:
        task_key = _text(event["task_id"], 200)
        bucket = event.get("failure_bucket") or ""
        return {
            "project_id": self.run.project_id,
            "run_id": self.run.pk,
            "attempt": int(event.get("attempt") or self.attempt),
            "task_id": self._task_pk(task_key),
            "task_key": task_key,
            "step": int(event.get("step") or 0),
            "split": _text(event.get("split") or "train", 32),
            "group_id": _text(event.get("group_id") or "", 64),
            "sample_index": int(event.get("sample_index") or 0),
            "turns": event.get("turns") or [],
            "search_text": search_text_of_turns(event.get("turns") or [], requests.get(task_key)),
            "tool_calls": event.get("tool_calls") or [],
            "reward": _finite(event.get("reward")),
            "components": event.get("components") or {},
            "advantage": _finite(event.get("advantage")),
            "passed": bool(event.get("passed")),
            "failure_bucket": bucket if bucket in FAILURE_BUCKETS else "",
            "flags": list(event.get("flags") or []),
            "tokens_in": int(event.get("tokens_in") or 0),
            "tokens_out": int(event.get("tokens_out") or 0),
            "latency_ms": _finite(event.get("latency_ms")),
            "source": "run",
            "created_at": _event_time(event) or datetime.now(UTC),
            # The run's verifier scored it: the inspector recomputes its trace with that version.
            "verifier_version_id": self.run.verifier_version_id,
        }

    def _link_imported_dataset(self, events: list[dict]) -> None:
        """A run trained elsewhere and imported without a dataset names its tasks only by id: the project's
        dataset version that holds most of them becomes the run's dataset, so its trajectories find their task
        (the inspector's prompt, re-verify, the sanity check), and the trajectories an earlier import stored
        without one are linked too. None holds them: the run stays without a dataset (import the dataset it
        used, then the run again)."""
        self._dataset_sought = True
        path = self.run.config.get("dataset") if isinstance(self.run.config, dict) else None
        hint = PurePath(path).stem if isinstance(path, str) and len(path) < 1000 else ""
        dataset = dataset_holding_task_ids(self.run.project_id, {_text(e["task_id"], 200) for e in events},
                                           name_hint=hint)
        if dataset is None or not Run.objects.filter(pk=self.run.pk, dataset__isnull=True).update(dataset=dataset):
            return
        self.run.dataset = dataset
        self._task_ids = None
        tasks = Task.objects.filter(dataset=dataset, external_id=OuterRef("task_key")).order_by("-id").values("pk")
        linked = Trajectory.objects.filter(run_id=self.run.pk, task__isnull=True)
        if linked.update(task_id=Subquery(tasks[:1])):
            search_text_refresh(Trajectory.objects.filter(run_id=self.run.pk, task__isnull=False))

    def _task_messages(self, task_keys: set[str]) -> dict[str, list]:
        """The messages of this batch's tasks (their request goes into the search text), one query a batch."""
        if not self.run.dataset_id or not task_keys:
            return {}
        return dict(Task.objects.filter(dataset_id=self.run.dataset_id, external_id__in=task_keys)
                    .values_list("external_id", "messages"))

    def _task_pk(self, task_key: str) -> int | None:
        if self._task_ids is None:
            self._task_ids = (
                dict(Task.objects.filter(dataset_id=self.run.dataset_id).values_list("external_id", "pk"))
                if self.run.dataset_id else {}
            )
        return self._task_ids.get(task_key)


@transaction.atomic
def discard_superseded_rows(run: Run, *, resumed_from: int | None) -> None:
    """Delete what earlier attempts stored after the checkpoint this attempt resumes from."""
    after = {"step__gt": resumed_from} if resumed_from is not None else {}
    MetricPoint.objects.filter(run=run, **after).delete()
    Trajectory.objects.filter(run=run, **after).delete()
    StepRollup.objects.filter(run=run, **after).delete()
    BucketRollup.objects.filter(run=run, **after).delete()
    Checkpoint.objects.filter(run=run, **after).exclude(aliases__isnull=False).delete()
    run_headlines_refresh_around([run.pk])


def _holds_headline(event: dict) -> bool:
    split = str(event.get("split"))
    return any(is_headline_metric(split, str(name)) for name in (event.get("metrics") or {}))


def _without_nul(value):
    """PostgreSQL text and jsonb cannot hold U+0000; model output sometimes does. Replace it."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    return value


def _text(value, limit: int) -> str:
    return _without_nul(str(value))[:limit]


def _json_text(value) -> str:
    """JSON for a jsonb column; U+0000 (which jsonb refuses) is replaced only when present."""
    text = json.dumps(value)
    return json.dumps(_without_nul(value)) if "\\u0000" in text else text


def _finite(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _event_time(event: dict) -> datetime | None:
    t = event.get("time")
    return datetime.fromtimestamp(float(t), tz=UTC) if t is not None else None


def _key(row: dict) -> tuple:
    return (row["step"], row["task_key"], row["sample_index"])


def _dedupe_by_key(rows: Iterable[dict]) -> list[dict]:
    unique: dict[tuple, dict] = {}
    for row in rows:
        unique.setdefault(_key(row), row)
    return list(unique.values())


def _not_yet_stored(run_id: int, rows: list[dict]) -> list[dict]:
    """Drop rows whose key is already stored (a resumed attempt replaying events)."""
    steps = {row["step"] for row in rows}
    existing = set(
        Trajectory.objects.filter(run_id=run_id, step__in=steps).values_list("step", "task_key", "sample_index")
    )
    return [row for row in rows if _key(row) not in existing]


def _bulk_insert_trajectories(rows: list[dict]) -> list[dict]:
    rows = [{**row, **{c: _without_nul(row[c]) for c in JSON_COLUMNS}} for row in rows]
    Trajectory.objects.bulk_create([Trajectory(**row) for row in rows], ignore_conflicts=True, batch_size=500)
    return rows


def _copy_trajectories(rows: list[dict]) -> list[dict]:
    """COPY straight into the table; if a concurrent writer stored some keys meanwhile, go through staging."""
    if not rows:
        return []
    try:
        with transaction.atomic():
            _copy_rows(Trajectory._meta.db_table, rows)
        return rows
    except IntegrityError:
        return _copy_insert_trajectories(rows)


def _copy_rows(table: str, rows: list[dict]) -> None:
    columns = ", ".join(TRAJECTORY_COLUMNS)
    with connection.cursor() as cursor, cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([_json_text(row[c]) if c in JSON_COLUMNS else row[c] for c in TRAJECTORY_COLUMNS])


_STAGE_DDL = """
CREATE TEMP TABLE IF NOT EXISTS crucible_trajectory_stage (
  project_id bigint, run_id bigint, attempt integer, task_id bigint, task_key varchar(200), step integer,
  split varchar(32), group_id varchar(64), sample_index integer, turns jsonb, search_text text, tool_calls jsonb,
  reward double precision, components jsonb, advantage double precision, passed boolean,
  failure_bucket varchar(32), flags jsonb, tokens_in integer, tokens_out integer,
  latency_ms double precision, source varchar(16), created_at timestamptz, verifier_version_id bigint
) ON COMMIT DELETE ROWS
"""


def _copy_insert_trajectories(rows: list[dict]) -> list[dict]:
    columns = ", ".join(TRAJECTORY_COLUMNS)
    table = Trajectory._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(_STAGE_DDL)
    _copy_rows("crucible_trajectory_stage", rows)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {columns} FROM crucible_trajectory_stage "
            "ON CONFLICT (run_id, step, task_key, sample_index) DO NOTHING "
            "RETURNING step, split, reward, passed, failure_bucket"
        )
        inserted = cursor.fetchall()
        cursor.execute("TRUNCATE crucible_trajectory_stage")
    return [{"step": s, "split": sp, "reward": r, "passed": p, "failure_bucket": b} for s, sp, r, p, b in inserted]


def _add_to_rollups(run_id: int, inserted: list[dict]) -> None:
    """Increment StepRollup / BucketRollup by the rows just inserted (one upsert per key)."""
    if not inserted:
        return
    steps: dict[tuple, list] = defaultdict(lambda: [0, 0, 0.0, None, None, 0])
    buckets: dict[tuple, int] = defaultdict(int)
    for row in inserted:
        agg = steps[(row["step"], row["split"])]
        agg[0] += 1
        if row["reward"] is not None:
            agg[1] += 1
            agg[2] += row["reward"]
            agg[3] = row["reward"] if agg[3] is None else min(agg[3], row["reward"])
            agg[4] = row["reward"] if agg[4] is None else max(agg[4], row["reward"])
        agg[5] += 1 if row["passed"] else 0
        if row["failure_bucket"]:
            buckets[(row["step"], row["split"], row["failure_bucket"])] += 1
    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO trajectories_steprollup (run_id, step, split, count, scored, reward_sum, reward_min, reward_max, passed) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (run_id, step, split) DO UPDATE SET "
            "count = trajectories_steprollup.count + excluded.count, "
            "scored = trajectories_steprollup.scored + excluded.scored, "
            "reward_sum = trajectories_steprollup.reward_sum + excluded.reward_sum, "
            "reward_min = CASE WHEN trajectories_steprollup.reward_min IS NULL OR excluded.reward_min < trajectories_steprollup.reward_min "
            "THEN excluded.reward_min ELSE trajectories_steprollup.reward_min END, "
            "reward_max = CASE WHEN trajectories_steprollup.reward_max IS NULL OR excluded.reward_max > trajectories_steprollup.reward_max "
            "THEN excluded.reward_max ELSE trajectories_steprollup.reward_max END, "
            "passed = trajectories_steprollup.passed + excluded.passed",
            [(run_id, step, split, *agg) for (step, split), agg in steps.items()],
        )
        if buckets:
            cursor.executemany(
                "INSERT INTO trajectories_bucketrollup (run_id, step, split, bucket, count) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (run_id, step, split, bucket) DO UPDATE SET "
                "count = trajectories_bucketrollup.count + excluded.count",
                [(run_id, step, split, bucket, n) for (step, split, bucket), n in buckets.items()],
            )
