"""Reads of runs and their metrics, shared by the pages and the REST API.

A page view and the matching endpoint call the same function here and differ only in
how they answer (UI.md "Where the code goes"). Access is checked by the caller
(webapp.projects.selectors.access) before a project or run reaches these functions.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter
from typing import Literal

from django.db import connection
from django.db.models import (
    BooleanField,
    Case,
    Count,
    Exists,
    F,
    FloatField,
    Func,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    TextField,
    Value,
    When,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.utils import timezone

from training.config import RUN_CONFIG_SCHEMA
from webapp.common.pagination import Page, keyset_page
from webapp.projects.models import Project
from webapp.runs.models import (
    Checkpoint,
    Experiment,
    Job,
    JobState,
    MetricPoint,
    Run,
    RunKind,
    RunStatus,
    headline_sort_key,
    run_tag_key,
)
from webapp.runs.selectors.checkpoints import checkpoint_measured_metrics
from webapp.runs.selectors.headlines import (
    BORROWED_SPLITS,
    HEADLINE_METRICS,
    METRIC_SORTS,
    Headline,
    latest_value,
)
from webapp.runs.selectors.metric_direction import metric_direction
from webapp.runs.selectors.series import DEFAULT_BUCKETS, downsample
from webapp.runs.services.run_config import LINKED_CONFIG_KEYS


class SeriesError(ValueError):
    """A series request this run cannot answer (e.g. x=tokens without a token metric)."""


# ---------------------------------------------------------------------------------------
# Run lists
# ---------------------------------------------------------------------------------------

# ?sort= value -> keyset ordering (the primary key is appended as tie-breaker).
RUN_SORTS: dict[str, list[str]] = {
    "-created": ["-created_at"],
    "created": ["created_at"],
    "name": ["name"],
    "-name": ["-name"],
    "status": ["status"],
    "-status": ["-status"],
    "kind": ["kind"],
    "-kind": ["-kind"],
}
RUN_SORTS.update({f"{sign}{name}": [f"{sign}{name}_value"] for name in METRIC_SORTS for sign in ("-", "")})
DEFAULT_RUN_SORT = "-created"
RUN_SORT_LABELS: dict[str, str] = {
    "-created": "newest first", "created": "oldest first", "name": "name, A to Z", "-name": "name, Z to A",
    "status": "status, A to Z", "-status": "status, Z to A", "kind": "kind, A to Z", "-kind": "kind, Z to A",
    "-reward": "reward, highest first", "reward": "reward, lowest first",
    "-validation": "validation success, highest first", "validation": "validation success, lowest first",
    "-held_out": "held-out success, highest first", "held_out": "held-out success, lowest first",
}
"""What the sort menu says for each ?sort= value (the URL keeps the short value)."""


def run_list(
    project: Project, *, kind: str | None = None, status: str | None = None, dataset: str | None = None,
    model: str | None = None, creator: str | None = None, experiment: int | None = None,
    text: str | None = None, tag: Iterable[str] | str | None = None, sort: str = DEFAULT_RUN_SORT,
    after: str | None = None, limit: int = 50,
) -> Page:
    """One keyset page of the project's runs, filtered as the runs page's query string says.

    dataset and model are names (every version of a dataset matches), creator a user
    name, experiment an id, text a case-insensitive part of the run's name, note or one of
    its tags, tag one or more tags (each may be a comma list) that a run must all have.
    Raises ValueError for an unknown sort and CursorError for a cursor that is not this
    list's. Headline metrics are not included: call run_headline_metrics(page.items).
    """
    if sort not in RUN_SORTS:
        raise ValueError(f"unknown sort {sort!r}; use one of {', '.join(RUN_SORTS)}")
    runs = _filtered_runs(Run.objects.filter(project=project), kind=kind, status=status, dataset=dataset,
                          model=model, creator=creator, experiment=experiment)
    runs = _with_tags(runs, run_tag_filter(tag))
    if text:
        runs = runs.filter(Q(name__icontains=text) | Q(note__icontains=text) | _has_tag_containing(text))
    runs = runs.select_related("dataset", "model", "verifier_version__verifier", "created_by")
    if sort.lstrip("-") in METRIC_SORTS:
        runs = _with_metric_sort_value(runs, sort.lstrip("-"), descending=sort.startswith("-"))
    elif (column := config_sort_column(sort)) is not None:
        runs = _with_config_sort_value(runs, column)
    return keyset_page(runs, ordering=RUN_SORTS[sort], after=after, limit=limit)


def _with_metric_sort_value(runs: QuerySet[Run], sort: str, *, descending: bool) -> QuerySet[Run]:
    """Annotate <sort>_value: the value the runs table shows for METRIC_SORTS[sort], to order by.

    It is the run's stored headline (Run.headline_<sort>, which webapp.runs.services.headlines
    keeps equal to headline_value(sort), the value of the table's cell), so that the project's
    index of that order answers the page instead of a subquery for every run of the project. The
    name differs per metric so that a cursor of one metric's order is refused by another's.
    """
    return runs.annotate(**{f"{sort}_value": headline_sort_key(sort, descending=descending)})


def _filtered_runs(runs: QuerySet[Run], **filters: str | int | None) -> QuerySet[Run]:
    lookups = {
        "kind": "kind", "status": "status", "dataset": "dataset__name", "model": "model__name",
        "creator": "created_by__username", "experiment": "experiment_id",
    }
    given = {lookups[key]: value for key, value in filters.items() if value not in (None, "")}
    return runs.filter(**given)


def run_tag_filter(tag: Iterable[str] | str | None) -> list[str]:
    """The tags of a `tag` filter as stored (run_tag_key), each once: repeated values and comma lists alike."""
    values = [tag] if isinstance(tag, str) else list(tag or [])
    wanted: list[str] = []
    for value in values:
        for piece in value.split(","):
            key = run_tag_key(piece)
            if key and key not in wanted:
                wanted.append(key)
    return wanted


def _with_tags(runs: QuerySet[Run], tags: list[str]) -> QuerySet[Run]:
    """Runs having every one of `tags`. PostgreSQL: jsonb containment (tags @> '["a","b"]'), which the GIN index
    of migration runs.0005 answers; SQLite (no JSON containment lookup): json_each per tag."""
    if not tags:
        return runs
    if connection.vendor == "postgresql":
        return runs.filter(tags__contains=tags)
    for tag in tags:
        runs = runs.filter(RawSQL('EXISTS (SELECT 1 FROM json_each("runs_run"."tags") WHERE json_each.value = %s)',
                                  [tag], output_field=BooleanField()))
    return runs


def _like_escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _has_tag_containing(text: str) -> RawSQL:
    """A run with a tag that contains `text` (tags are stored in lower case, so the text is lowered too)."""
    pattern = f"%{_like_escaped(run_tag_key(text) or text.lower())}%"
    if connection.vendor == "postgresql":
        sql = ('EXISTS (SELECT 1 FROM jsonb_array_elements_text("runs_run"."tags") AS t(tag) '
               "WHERE t.tag LIKE %s ESCAPE '\\')")
    else:
        sql = "EXISTS (SELECT 1 FROM json_each(\"runs_run\".\"tags\") WHERE json_each.value LIKE %s ESCAPE '\\')"
    return RawSQL(sql, [pattern], output_field=BooleanField())


def run_tags_in_use(project: Project, limit: int = 200) -> list[str]:
    """The tags of the project's latest 500 runs, most used first then A to Z (the tag filter's suggestions)."""
    counts: dict[str, int] = {}
    for tags in Run.objects.filter(project=project).order_by("-id").values_list("tags", flat=True)[:500]:
        for tag in tags if isinstance(tags, list) else []:
            if isinstance(tag, str):
                counts[tag] = counts.get(tag, 0) + 1
    return sorted(counts, key=lambda tag: (-counts[tag], tag))[:limit]


# ---------------------------------------------------------------------------------------
# Config columns
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigColumn:
    """A run config field the runs table can show as a column (?cols=learning_rate,algorithm)."""

    key: str
    label: str
    numeric: bool = False


CONFIG_COLUMNS: tuple[ConfigColumn, ...] = (
    ConfigColumn("model", "Model (config)"),
    ConfigColumn("algorithm", "Algorithm"),
    ConfigColumn("loss_type", "Loss"),
    ConfigColumn("adapter", "Adapter"),
    ConfigColumn("lora_r", "LoRA rank", numeric=True),
    ConfigColumn("learning_rate", "Learning rate", numeric=True),
    ConfigColumn("lr_scheduler", "LR schedule"),
    ConfigColumn("max_steps", "Max steps", numeric=True),
    ConfigColumn("num_epochs", "Epochs", numeric=True),
    ConfigColumn("num_prompts_per_step", "Prompts/step", numeric=True),
    ConfigColumn("num_generations_per_prompt", "Group size", numeric=True),
    ConfigColumn("beta", "KL beta", numeric=True),
    ConfigColumn("temperature", "Temperature", numeric=True),
    ConfigColumn("max_completion_length", "Max completion", numeric=True),
    ConfigColumn("max_turns", "Max turns", numeric=True),
    ConfigColumn("seed", "Seed", numeric=True),
    ConfigColumn("device", "Device"),
    ConfigColumn("num_processes", "Processes", numeric=True),
)
"""Every field named is one of training.config's RunConfig fields (a test holds them to it)."""
CONFIG_COLUMNS_BY_KEY: dict[str, ConfigColumn] = {column.key: column for column in CONFIG_COLUMNS}

CONFIG_SORT_PREFIX = "config."
"""?sort=config.<key> orders by a config column (A to Z, lowest first); -config.<key> the other way."""


def config_sort_column(sort: str) -> ConfigColumn | None:
    """The config column a ?sort= value orders by, None for the other sorts."""
    name = sort.lstrip("-")
    return CONFIG_COLUMNS_BY_KEY.get(name[len(CONFIG_SORT_PREFIX):]) if name.startswith(CONFIG_SORT_PREFIX) else None


def _config_sort_ordering(key: str, *, descending: bool) -> list[str]:
    """Runs with a value first in both directions, then the value, then the id the same way."""
    sign = "-" if descending else ""
    return [f"cfg_{key}_missing", f"{sign}cfg_{key}_value", f"{sign}id"]


def _menu_label(label: str) -> str:
    """A column's label as the sort menu words it: "Learning rate" -> "learning rate", "LoRA rank" kept."""
    return label[:1].lower() + label[1:] if label[1:2].islower() else label


for _column in CONFIG_COLUMNS:
    RUN_SORTS[f"{CONFIG_SORT_PREFIX}{_column.key}"] = _config_sort_ordering(_column.key, descending=False)
    RUN_SORTS[f"-{CONFIG_SORT_PREFIX}{_column.key}"] = _config_sort_ordering(_column.key, descending=True)
    RUN_SORT_LABELS[f"{CONFIG_SORT_PREFIX}{_column.key}"] = (
        f"{_menu_label(_column.label)}, {'lowest first' if _column.numeric else 'A to Z'}")
    RUN_SORT_LABELS[f"-{CONFIG_SORT_PREFIX}{_column.key}"] = (
        f"{_menu_label(_column.label)}, {'highest first' if _column.numeric else 'Z to A'}")
del _column


def _with_config_sort_value(runs: QuerySet[Run], column: ConfigColumn) -> QuerySet[Run]:
    """Annotate cfg_<key>_missing (0 or 1) and cfg_<key>_value: what config_cell shows in the column, to order by.

    The value is the launched config's (resolved_config, else the config as submitted); a
    numeric column orders by JSON numbers only, so a value of another type (an imported run's
    "3e-4" string) counts as missing, as does a default of a field that means nothing for the
    run's kind (the n/a cells). Keyset pagination needs non-null keys, hence the flag beside a
    value that is 0 or "" where missing; the JSON is read in the row, no subquery.
    """
    shown = _config_value_sql(column)
    key = column.key
    missing = Case(When(**{f"cfg_{key}_raw__isnull": True}, then=Value(1)), default=Value(0),
                   output_field=IntegerField())
    blank = Value(0.0) if column.numeric else Value("")
    return (runs.annotate(**{f"cfg_{key}_raw": shown})
            .annotate(**{f"cfg_{key}_missing": missing,
                         f"cfg_{key}_value": Coalesce(F(f"cfg_{key}_raw"), blank,
                                                      output_field=FloatField() if column.numeric else TextField())}))


def _config_value_sql(column: ConfigColumn) -> RawSQL:
    """The column's launched value in SQL, NULL where config_cell shows none (absent, n/a, or not a number)."""
    key = column.key
    kinds = RUN_CONFIG_SCHEMA["properties"].get(key, {}).get("x-kinds")
    can_be_na = kinds is not None and key not in LINKED_CONFIG_KEYS
    if connection.vendor == "postgresql":
        launched = ("(CASE WHEN jsonb_typeof(\"runs_run\".\"resolved_config\") = 'object' "
                    "THEN \"runs_run\".\"resolved_config\" ELSE \"runs_run\".\"config\" END)")
        typed = f"jsonb_typeof({launched} -> %s)"
        value = (f"CASE WHEN {typed} = 'number' THEN ({launched} ->> %s)::double precision END" if column.numeric
                 else f"CASE WHEN {typed} = 'null' THEN NULL ELSE {launched} ->> %s END")
        ref = key
        submitted_missing = "COALESCE(jsonb_typeof(\"runs_run\".\"config\" -> %s), 'null') = 'null'"
    else:
        launched = ("(CASE WHEN json_type(\"runs_run\".\"resolved_config\") = 'object' "
                    "THEN \"runs_run\".\"resolved_config\" ELSE \"runs_run\".\"config\" END)")
        typed = f"json_type({launched}, %s)"
        value = (f"CASE WHEN {typed} IN ('integer', 'real') THEN json_extract({launched}, %s) END" if column.numeric
                 else f"CASE WHEN {typed} = 'null' THEN NULL ELSE CAST(json_extract({launched}, %s) AS TEXT) END")
        ref = f'$."{key}"'  # a JSON path: the key is one of CONFIG_COLUMNS', and a parameter all the same
        submitted_missing = "COALESCE(json_type(\"runs_run\".\"config\", %s), 'null') = 'null'"
    params: list = [ref, ref]
    if can_be_na:
        placeholders = ", ".join(["%s"] * len(kinds))
        value = (f"CASE WHEN {submitted_missing} AND \"runs_run\".\"kind\" NOT IN ({placeholders}) "
                 f"THEN NULL ELSE {value} END")
        params = [ref, *kinds, *params]
    return RawSQL(value, params, output_field=FloatField() if column.numeric else TextField())


def config_columns(values: Iterable[str] | str | None) -> list[ConfigColumn]:
    """The columns a `cols` parameter asks for (repeated or comma lists), in its order, each once; names that are
    not in CONFIG_COLUMNS are ignored."""
    values = [values] if isinstance(values, str) else list(values or [])
    chosen: list[ConfigColumn] = []
    for value in values:
        for name in value.split(","):
            column = CONFIG_COLUMNS_BY_KEY.get(name.strip())
            if column is not None and column not in chosen:
                chosen.append(column)
    return chosen


def config_value_text(config: object, key: str) -> str | None:
    """One config field's value as the table shows it (text as is, other values as JSON); None when absent."""
    if not isinstance(config, dict) or config.get(key) is None:
        return None
    value = config[key]
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, sort_keys=True)


def launched_config(run: Run) -> dict:
    """The config the run was launched with: every default filled in where that was recorded
    (resolved_config), else the config as submitted."""
    if isinstance(run.resolved_config, dict):
        return run.resolved_config
    return run.config if isinstance(run.config, dict) else {}


def config_defaulted(run: Run, key: str) -> bool:
    """Whether `key`'s launched value is training's default: neither the submitted config nor a
    linked row (model, dataset, verifier, start checkpoint) set it."""
    submitted = run.config if isinstance(run.config, dict) else {}
    return submitted.get(key) is None and key not in LINKED_CONFIG_KEYS and launched_config(run).get(key) is not None


def config_field_applies(key: str, kind: str) -> bool:
    """Whether a run config field means something for a run of this kind (the schema's x-kinds)."""
    kinds = RUN_CONFIG_SCHEMA["properties"].get(key, {}).get("x-kinds")
    return kinds is None or kind in kinds


ConfigCellState = Literal["set", "default", "n/a"]
"""set: the run's config or a linked row gave it; default: training's, at launch; n/a: a default
of a field that means nothing for the run's kind (an eval run's learning rate)."""


def config_cell(run: Run, key: str) -> tuple[str | None, ConfigCellState]:
    """(text, state) of one config column for the runs table."""
    if not config_defaulted(run, key):
        return config_value_text(launched_config(run), key), "set"
    if not config_field_applies(key, run.kind):
        return None, "n/a"
    return config_value_text(launched_config(run), key), "default"


# ---------------------------------------------------------------------------------------
# Headline metrics
# ---------------------------------------------------------------------------------------


def run_headline_metrics(runs: Iterable[Run]) -> dict[int, dict[str, float | None]]:
    """Latest value of each HEADLINE_METRICS entry per run, keyed by run id then metric key.

    One query for a whole page of runs: a correlated subquery per metric, each an index
    seek, so the cost does not grow with the length of the series. None where the run
    has not recorded the metric.
    """
    ids = [run.pk for run in runs]
    if not ids:
        return {}
    columns = {f"h{i}": latest_value(m.split, m.name) for i, m in enumerate(HEADLINE_METRICS)}
    rows = Run.objects.filter(pk__in=ids).order_by().annotate(**columns).values_list("pk", *columns)
    return {pk: {m.key: value for m, value in zip(HEADLINE_METRICS, values, strict=True)} for pk, *values in rows}


# ---------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunDetail:
    """What the run header shows: the run, its latest job, checkpoints and headline metrics.

    headline: the run's own latest values. checkpoint_headline: (value, where from) for a
    headline the run did not record but an evaluation of one of its checkpoints did (a GRPO
    run's held-out success lives in the evaluation runs of its checkpoints); the page shows
    them with their source, the API keeps to the run's own metrics.
    """

    run: Run
    job: Job | None
    checkpoints: list[Checkpoint]
    headline: dict[str, float | None]
    eta_seconds: float | None
    checkpoint_headline: dict[str, tuple[float, str]] = field(default_factory=dict)


def run_latest_job(run: Run) -> Job | None:
    """The run's most recent job: the one cancel and retry act on and the header shows."""
    return Job.objects.filter(run=run).order_by("-created_at", "-id").first()


def run_detail(run: Run) -> RunDetail:
    """The run with its latest job, checkpoints (by step), headline metrics and an ETA."""
    job = run_latest_job(run)
    headline = run_headline_metrics([run]).get(run.pk, {})
    return RunDetail(
        run=run, job=job, checkpoints=list(run.checkpoints.order_by("step")), headline=headline,
        eta_seconds=job_eta_seconds(job),
        checkpoint_headline=checkpoint_headlines([run], {run.pk: headline}).get(run.pk, {}),
    )


def checkpoint_headlines(runs: Iterable[Run], headline: Mapping[int, Mapping[str, float | None]],
                         ) -> dict[int, dict[str, tuple[float, str]]]:
    """Per run, its missing evaluation headlines (validation, held_out) from its checkpoints' evaluations.

    `headline` is run_headline_metrics' answer for the same runs. A value comes from the latest of
    the run's checkpoints that an evaluation run or an experiment measured (_measured_checkpoints),
    as the checkpoint table shows it (its own metrics, overlaid by its latest finished evaluation
    run and the experiment that chose it), with the words that say where from. Train metrics are
    never borrowed. Four queries for a page of runs, and none when every run recorded its own.
    """
    wanted = {run.pk: [h for h in HEADLINE_METRICS if h.split in BORROWED_SPLITS
                       and headline.get(run.pk, {}).get(h.key) is None] for run in runs}
    wanted = {pk: missing for pk, missing in wanted.items() if missing}
    if not wanted:
        return {}
    checkpoints = list(_measured_checkpoints(list(wanted)).order_by("run_id", "-step")
                       .only("id", "run_id", "step", "metrics"))
    measured = checkpoint_measured_metrics(checkpoints)
    found: dict[int, dict[str, tuple[float, str]]] = defaultdict(dict)
    for checkpoint in checkpoints:  # latest step first within each run
        metrics = measured[checkpoint.pk]
        for h in wanted[checkpoint.run_id]:
            values = metrics.validation if h.split == "validation" else metrics.held_out
            if h.key not in found[checkpoint.run_id] and h.name in values:
                found[checkpoint.run_id][h.key] = (
                    values[h.name], f"the evaluation of its step-{checkpoint.step} checkpoint")
    return {pk: by_key for pk, by_key in found.items() if by_key}


HeadlineCell = tuple[float | None, str]
"""(value, source) as a page shows a headline: source is "" for the run's own value."""


def _measured_checkpoints(run_ids: list[int]) -> QuerySet[Checkpoint]:
    """The checkpoints of these runs that a finished evaluation run or an experiment measured.

    Only those can lend a number the run lacks: a checkpoint's own validation/held-out metrics
    come from its run's in-run evaluation, which recorded the same numbers as the run's own. A
    GRPO run saves hundreds of checkpoints, and a page of 50 such runs read in whole took 400 ms
    (15,000 checkpoints, SQLite); two index probes per checkpoint stay within the page's budget.
    """
    evaluations = Run.objects.filter(parent_checkpoint=OuterRef("pk"), kind=RunKind.EVAL,
                                     status=RunStatus.SUCCEEDED)
    chosen = Experiment.objects.filter(candidate_checkpoint=OuterRef("pk"))
    return Checkpoint.objects.filter(run_id__in=run_ids).filter(Exists(evaluations) | Exists(chosen))


def headline_cell(own: Mapping[str, float | None], borrowed: Mapping[str, tuple[float, str]],
                  h: Headline) -> HeadlineCell:
    """The run's own value of `h`, else the one its checkpoints' evaluation gave, with where from."""
    value = own.get(h.key)
    if value is not None or h.key not in borrowed:
        return value, ""
    return borrowed[h.key]


def run_headline_cells(runs: Sequence[Run]) -> dict[int, list[HeadlineCell]]:
    """Each run's HEADLINE_METRICS cells, in order, for a table of runs (the runs list, the overview)."""
    own = run_headline_metrics(runs)
    borrowed = checkpoint_headlines(runs, own)
    return {run.pk: [headline_cell(own.get(run.pk, {}), borrowed.get(run.pk, {}), h) for h in HEADLINE_METRICS]
            for run in runs}


def job_eta_seconds(job: Job | None, now: datetime | None = None) -> float | None:
    """Seconds left if the running job keeps its pace so far; None when there is no pace yet."""
    if job is None or job.state != JobState.RUNNING or job.started_at is None or not 0 < job.progress < 1:
        return None
    elapsed = ((now or timezone.now()) - job.started_at).total_seconds()
    return max(0.0, elapsed * (1 - job.progress) / job.progress)


# ---------------------------------------------------------------------------------------
# Metric series
# ---------------------------------------------------------------------------------------

X_AXES = ("step", "wall", "tokens")
# A fetched row (name, step, value[, epoch seconds]) -> its x, or None to leave the point out.
XMapper = Callable[[tuple], float | None]
# Tokens seen = running sum of this per-step metric (grpo and sft record it, split train).
TOKENS_METRIC = ("train", "cost/trained_tokens")


def metric_names(run: Run) -> list[tuple[str, str]]:
    """Distinct (split, name) pairs the run has recorded, sorted, for the chart pickers.

    The run page's live panel asks every few seconds while the run trains, so on PostgreSQL the
    pairs are found by skipping through the (run, name, split, step) index, a seek a series, not
    by reading every point (a run of 1,000,000 points: under a millisecond, not 250).
    """
    if connection.vendor == "postgresql":
        return [(m.split, m.name) for m in _series_last_points(run)]
    pairs = MetricPoint.objects.filter(run=run).order_by("split", "name").values_list("split", "name")
    return list(pairs.distinct())


@dataclass(frozen=True)
class Series:
    """One metric's chart points (x and y in x order) and how many stored points they stand for."""

    x: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)
    points: int = 0
    downsampled: bool = False


@dataclass(frozen=True)
class SeriesSet:
    """The series of one request; `last_step` is what the client sends back as `since`."""

    x: str
    split: str
    series: dict[str, Series]
    last_step: int | None


def metric_series(
    run: Run, names: Sequence[str], split: str, *, x: str = "step", since_step: int | None = None,
    buckets: int = DEFAULT_BUCKETS,
) -> SeriesSet:
    """Per name, the run's points of `split` as chart data, downsampled to keep extremes.

    x="step" plots against the step, "wall" against seconds since the run's first
    recorded point, "tokens" against tokens trained so far (SeriesError if the run has
    not recorded TOKENS_METRIC). since_step keeps only points after that step, for live
    pages that append; the wall and tokens origins stay those of the whole run, so the
    appended points line up. A name without points gets an empty series.
    """
    if x not in X_AXES:
        raise SeriesError(f"unknown x axis {x!r}; use one of {', '.join(X_AXES)}")
    to_x = _x_mapper(run, x)
    rows = MetricPoint.objects.filter(run=run, split=split, name__in=list(names))
    if since_step is not None:
        rows = rows.filter(step__gt=since_step)
    columns = ["name", "step", "value"]
    if x == "wall":
        rows, columns = rows.annotate(seconds=EpochSeconds("recorded_at")), [*columns, "seconds"]
    # Equality on run, name (IN) and split, a range on step: the (run, name, split, step) index.
    ordered = rows.order_by("name", "step").values_list(*columns)
    series = {name: Series() for name in names}
    last_steps: list[int] = []
    for name, group in itertools.groupby(ordered, key=itemgetter(0)):
        rows_of_name = list(group)
        last_steps.append(rows_of_name[-1][1])
        series[name] = _chart_points(rows_of_name, to_x, buckets)
    return SeriesSet(x=x, split=split, series=series, last_step=max(last_steps, default=since_step))


def _chart_points(rows: list[tuple], to_x: XMapper, buckets: int) -> Series:
    """One metric's fetched rows as downsampled chart points (rows without an x are dropped)."""
    xs, ys = [], []
    for row in rows:
        position = to_x(row)
        if position is not None:
            xs.append(position)
            ys.append(row[2])
    kept_x, kept_y = downsample(xs, ys, buckets)
    # Milliseconds for wall time (julianday's noise gone); steps and tokens are whole numbers already.
    kept_x = [round(position, 3) for position in kept_x]
    return Series(x=kept_x, y=kept_y, points=len(rows), downsampled=len(kept_x) < len(xs))


def _x_mapper(run: Run, x: str) -> XMapper:
    """How rows map to the chosen x axis; the wall and tokens origins are read once here."""
    if x == "step":
        return lambda row: row[1]
    if x == "wall":
        origin = _wall_origin(run)
        return lambda row: row[3] - origin if row[3] is not None and origin is not None else None
    steps, totals = _tokens_seen(run)
    return lambda row: _tokens_at(steps, totals, row[1])


class EpochSeconds(Func):
    """A datetime column as float seconds since 1970, computed by the database.

    Turning 50,000 timestamps into Python datetimes took longer than the rest of the
    request; a float per row is nearly free. PostgreSQL: date_part, which returns a
    double (EXTRACT returns a slow numeric since version 14). SQLite keeps datetimes as
    UTC text, which julianday() reads to about 0.05 ms; the chart points are rounded to
    milliseconds.
    """

    output_field = FloatField()

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="date_part('epoch', %(expressions)s)", **extra)

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="(julianday(%(expressions)s) - 2440587.5) * 86400.0",
                           **extra)


def _wall_origin(run: Run) -> float | None:
    """When the run recorded its first point (epoch seconds): the zero of the wall-time axis."""
    first = MetricPoint.objects.filter(run=run).aggregate(first=Min("recorded_at"))["first"]
    return first.timestamp() if first is not None else None


def _tokens_seen(run: Run) -> tuple[list[int], list[float]]:
    """Steps of the token metric and the running total of tokens through each of them."""
    split, name = TOKENS_METRIC
    rows = list(MetricPoint.objects.filter(run=run, split=split, name=name).order_by("step")
                .values_list("step", "value"))
    if not rows:
        raise SeriesError(
            f"x=tokens needs the metric {name!r} (split {split}), which this run has not recorded "
            "(evaluation runs train no tokens); plot against x=step or x=wall instead"
        )
    return [step for step, _ in rows], list(itertools.accumulate(value for _, value in rows))


def _tokens_at(steps: list[int], totals: list[float], step: int) -> float:
    """Tokens trained through `step` (0 before the first training step, e.g. validation at 0)."""
    position = bisect.bisect_right(steps, step)
    return totals[position - 1] if position else 0.0


@dataclass(frozen=True)
class LatestMetric:
    split: str
    name: str
    step: int
    value: float


def metric_latest(run: Run) -> list[LatestMetric]:
    """Each (split, name)'s value at its last step: an eval run's results, a training run's last values.

    On PostgreSQL one query of a few index seeks a series, whatever the run's length
    (_series_last_points). Elsewhere (the embedded SQLite, small projects) two: the last step
    per (split, name), which reads the run's points, then those points.
    """
    if connection.vendor == "postgresql":
        return _series_last_points(run)
    lasts = list(MetricPoint.objects.filter(run=run).values("split", "name").annotate(last=Max("step")))
    if not lasts:
        return []
    wanted = Q()
    for row in lasts:
        wanted |= Q(split=row["split"], name=row["name"], step=row["last"])
    points = MetricPoint.objects.filter(run=run).filter(wanted).order_by("split", "name")
    return [LatestMetric(p.split, p.name, p.step, p.value) for p in points]


_SERIES_LAST_SQL = """
    WITH RECURSIVE series(name, split) AS (
        (SELECT name, split FROM runs_metricpoint WHERE run_id = %(run)s ORDER BY name, split LIMIT 1)
        UNION ALL
        SELECT later.name, later.split FROM series CROSS JOIN LATERAL (
            SELECT name, split FROM runs_metricpoint
            WHERE run_id = %(run)s AND (name, split) > (series.name, series.split)
            ORDER BY name, split LIMIT 1
        ) AS later
    )
    SELECT series.split, series.name, last.step, last.value FROM series CROSS JOIN LATERAL (
        SELECT step, value FROM runs_metricpoint
        WHERE run_id = %(run)s AND name = series.name AND split = series.split ORDER BY step DESC LIMIT 1
    ) AS last
    ORDER BY series.split, series.name
"""


def _series_last_points(run: Run) -> list[LatestMetric]:
    """PostgreSQL: each series of the run with its last point, in (split, name) order, without reading
    the run's points: a skip scan of the (run, name, split, step) index finds each next (name, split)
    with one seek, and one backward seek a series reads its last step."""
    with connection.cursor() as cursor:
        cursor.execute(_SERIES_LAST_SQL, {"run": run.pk})
        return [LatestMetric(split, name, step, value) for split, name, step, value in cursor.fetchall()]


_SPARKLINES_SQL = """
    SELECT r.id, m.step, m.value
    FROM unnest(%s::bigint[]) AS r(id)
    CROSS JOIN LATERAL (
        SELECT step, value FROM runs_metricpoint
        WHERE run_id = r.id AND name = %s AND split = %s ORDER BY step DESC LIMIT %s
    ) AS m
"""


def run_sparklines(runs: Iterable[Run], *, split: str = "train", name: str = "reward",
                   points: int = 30) -> dict[int, list[float]]:
    """The last `points` values of one metric for each run of a table page, oldest first.

    Each run's newest `points` entries are read backwards from the (run, name, split, step)
    index, so a run with 50,000 points costs what a run with 30 does. PostgreSQL does it in
    one LATERAL query; elsewhere (the embedded SQLite) one small query per run.
    """
    ids = [run.pk for run in runs]
    rows: list[tuple[int, int, float]] = []
    if ids and connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_SPARKLINES_SQL, [ids, name, split, points])
            rows = cursor.fetchall()
    else:
        for run_id in ids:
            newest = (MetricPoint.objects.filter(run_id=run_id, name=name, split=split).order_by("-step")
                      .values_list("step", "value")[:points])
            rows += [(run_id, step, value) for step, value in newest]
    lines: dict[int, list[tuple[int, float]]] = {}
    for run_id, step, value in rows:
        lines.setdefault(run_id, []).append((step, value))
    return {run_id: [value for _, value in sorted(line)] for run_id, line in lines.items()}


def metric_best(run: Run) -> dict[tuple[str, str], float | None]:
    """The best value the run reached for each (split, name), in one aggregate query.

    Best is the minimum of a loss-like metric and the maximum of a success-like one
    (metric_direction); None for a metric without a better direction (the learning rate).
    """
    rows = MetricPoint.objects.filter(run=run).values("split", "name").annotate(high=Max("value"), low=Min("value"))
    best: dict[tuple[str, str], float | None] = {}
    for row in rows:
        direction = metric_direction(row["name"])
        best[(row["split"], row["name"])] = {"max": row["high"], "min": row["low"]}.get(direction or "")
    return best


def run_latest_jobs(runs: Iterable[Run]) -> dict[int, Job]:
    """Each run's latest job (its progress is the run's), for a page of runs in one query."""
    latest: dict[int, Job] = {}
    for job in Job.objects.filter(run_id__in=[run.pk for run in runs]).order_by("run_id", "-created_at", "-id"):
        latest.setdefault(job.run_id, job)
    return latest


def recent_tokens_per_second(project: Project, limit: int = 200) -> list[float]:
    """The last `limit` train tokens_per_second values the project's runs recorded, newest first (the run form's
    estimate of time and cost)."""
    return list(MetricPoint.objects.filter(run__project=project, split="train", name="tokens_per_second")
                .order_by("-id").values_list("value", flat=True)[:limit])


def runs_per_verifier_version(project: Project) -> dict[int, int]:
    """How many of the project's runs used each verifier version (version id -> runs)."""
    return _runs_per_version(Run.objects.filter(project=project, verifier_version__isnull=False))


def runs_per_version_id(version_ids: list[int]) -> dict[int, int]:
    """runs_per_verifier_version for the given versions only (the API's version lists)."""
    return _runs_per_version(Run.objects.filter(verifier_version_id__in=version_ids))


def _runs_per_version(runs: QuerySet[Run]) -> dict[int, int]:
    rows = (runs.order_by()
            .values("verifier_version_id").annotate(n=Count("id")))
    return {r["verifier_version_id"]: r["n"] for r in rows}


def runs_of_verifier_version(version_id: int, limit: int = 200) -> list[Run]:
    """The runs that used one verifier version, newest first (the version page's list)."""
    return list(Run.objects.filter(verifier_version_id=version_id).select_related("created_by").order_by("-id")[:limit])


# ---------------------------------------------------------------------------------------
# Lookups for the pages' and endpoints' access checks and run pickers
# ---------------------------------------------------------------------------------------


def runs_with_links() -> QuerySet[Run]:
    """Every run with its dataset, model, verifier version and creator (the API's run answer names them), for
    webapp.projects.selectors.access.get_object_or_404_for_user to narrow to the caller's projects."""
    return Run.objects.select_related("dataset", "model", "verifier_version__verifier", "created_by")


def run_with_links(run_id: int) -> Run:
    """The run with this id, with what runs_with_links loads beside it (Run.DoesNotExist when there is none)."""
    return runs_with_links().get(pk=run_id)


def all_runs() -> QuerySet[Run]:
    """Every run, for webapp.projects.selectors.access.get_object_or_404_for_user to narrow to the caller's projects."""
    return Run.objects.all()


def runs_for_run_page() -> QuerySet[Run]:
    """Every run with what the run page shows beside it (project, dataset, model, verifier, creator, experiment,
    the checkpoint it started from), for get_object_or_404_for_user to narrow to the caller's projects."""
    return Run.objects.select_related("project", "dataset", "model", "verifier_version__verifier", "created_by",
                                      "experiment", "parent_checkpoint__run")


def run_exists(project: Project, run_id) -> bool:
    """Whether the project still has a run with this id (an import's report links to it; it may be deleted since)."""
    return project.runs.filter(pk=run_id).exists()


def runs_by_id_in(project: Project, ids: list[int]) -> dict[int, Run]:
    """The project's runs among these ids, by id (another project's are left out: the caller compares counts)."""
    return {run.pk: run for run in Run.objects.filter(project=project, pk__in=ids)}


def recent_runs(project: Project, limit: int = 200) -> QuerySet[Run]:
    """The project's latest `limit` runs, newest first (a form's run menu)."""
    return Run.objects.filter(project=project).order_by("-created_at", "-id")[:limit]


def run_choice_rows(project: Project, limit: int = 200) -> list[tuple[int, str, str]]:
    """(id, name, kind) of the project's latest `limit` runs, newest first: a run menu without whole rows."""
    return list(Run.objects.filter(project=project).order_by("-created_at", "-id")
                .values_list("pk", "name", "kind")[:limit])


def run_choices(project: Project, limit: int = 200) -> list[Run]:
    """The project's last `limit` runs by id, highest first, with only id, name, kind and status loaded (a run
    filter's menu)."""
    return list(Run.objects.filter(project=project).order_by("-id").only("id", "name", "kind", "status")[:limit])


def run_choice(project: Project, run_id: int) -> Run | None:
    """One of the project's runs with only id, name and kind loaded: the menu's chosen run when it is older than the
    runs run_choices lists."""
    return Run.objects.filter(project=project, pk=run_id).only("id", "name", "kind").first()


def running_run_count(project: Project) -> int:
    """How many of the project's runs are running now (the overview's number)."""
    return project.runs.filter(status=RunStatus.RUNNING).count()
