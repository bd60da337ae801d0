"""Synthetic tasks as a new dataset version: the workplace generator with a choice of templates.

The drafting, the ground-truth check in a fresh sandbox and the task assembly are the
generator's own (environments.workplace.generator); this service runs its loop with the templates
a person chose, counts what the generator rejected and why (the validation report), keeps the
held-out templates disjoint from the training ones (every task of a held-out template is
`held_out`, the others split by the generator's stable hash), and for `json_tool_call` converts
each single-write task with environments.json_tool_call_tasks. With every template on and the
generator's own held-out set, it yields exactly `generate_tasks(n, seed)`.

The same spec always gives the same tasks, so the page previews a spec and "create" generates it
again instead of keeping the preview somewhere.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

from django.db import IntegrityError, transaction

from environments.json_tool_call_tasks import convert_task
from environments.types import Task as EnvTask
from environments.workplace import generator
from webapp.datasets.models import Lineage, Source, Task, TaskDataset
from webapp.datasets.services.datasets import (
    DatasetConflict,
    dataset_create,
    dataset_new_version,
    task_content_hash,
    task_row,
)
from webapp.projects.models import Project

ENVIRONMENTS = (
    ("workplace", "workplace: multi-step requests over the company sandbox"),
    ("json_tool_call", "json_tool_call: the single-write requests as one-call tasks"),
)
MAX_TASKS = 5_000  # generated in the request (about a millisecond a task)
MAX_SEED = 2**31 - 1
PREVIEW_SIZE = 10
EXAMPLES = 5  # rejected drafts shown with their problems
_PREFIXES = {"email": "email", "calendar": "calendar", "analytics": "analytics", "pm": "project_management",
             "crm": "customer_relationship_manager"}


class GenerationError(ValueError):
    """A spec that cannot be generated; `errors` maps each form field to what is wrong."""

    def __init__(self, errors: dict[str, str], *, conflict: bool = False):
        self.errors = errors
        self.conflict = conflict  # another request made the same name or version first (the API answers 409)
        super().__init__("; ".join(f"{name}: {message}" for name, message in errors.items()))


@dataclass(frozen=True)
class TemplateInfo:
    name: str
    category: str
    held_out_by_default: bool
    kind: str  # "trained", "reworded" or "novel pair"


def templates() -> list[TemplateInfo]:
    """Every generator template in the generator's order, with its default role."""
    rows = []
    for template in generator.TEMPLATES:
        name = template.__name__
        kind = ("novel pair" if name in generator.NOVEL_PAIR_TEMPLATES else
                "reworded" if name in generator.REWORDED_TEMPLATES else "trained")
        rows.append(TemplateInfo(name=name, category=_PREFIXES.get(name.split("_")[0], ""),
                                 held_out_by_default=name in generator.HELD_OUT_TEMPLATES, kind=kind))
    return rows


def default_roles() -> dict[str, str]:
    """template -> "train" or "held_out", as the generator splits them."""
    return {t.name: "held_out" if t.held_out_by_default else "train" for t in templates()}


@dataclass(frozen=True)
class GenerationSpec:
    environment: str
    n: int
    seed: int
    train_templates: tuple[str, ...]
    held_out_templates: tuple[str, ...]

    def as_detail(self) -> dict:
        data = asdict(self)
        data["train_templates"], data["held_out_templates"] = list(self.train_templates), list(self.held_out_templates)
        return data


def generation_spec(*, environment: str, n, seed, train_templates, held_out_templates) -> GenerationSpec:
    """Check a spec from the form or the API; GenerationError names every field that is wrong."""
    errors: dict[str, str] = {}
    names = [t.name for t in templates()]
    if environment not in dict(ENVIRONMENTS):
        errors["environment"] = f"choose one of {', '.join(dict(ENVIRONMENTS))}"
    count = _whole(n, "n", 1, MAX_TASKS, errors)
    chosen_seed = _whole(seed, "seed", 0, MAX_SEED, errors)
    train = [t for t in train_templates if t]
    held = [t for t in held_out_templates if t]
    unknown = sorted({t for t in train + held if t not in names})
    if unknown:
        errors["templates"] = f"unknown template(s): {', '.join(u[:60] for u in unknown[:5])}"
    both = sorted(set(train) & set(held))
    if both:
        errors["templates"] = ("a template is either trained on or held out, never both: "
                               f"{', '.join(both[:5])}")
    if not train and not held and "templates" not in errors:
        errors["templates"] = "choose at least one template"
    if errors:
        raise GenerationError(errors)
    order = {name: i for i, name in enumerate(names)}
    return GenerationSpec(environment=environment, n=count, seed=chosen_seed,
                          train_templates=tuple(sorted(set(train), key=order.get)),
                          held_out_templates=tuple(sorted(set(held), key=order.get)))


def _whole(value, name: str, low: int, high: int, errors: dict[str, str]) -> int:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        errors[name] = "a whole number, please"
        return 0
    if not low <= number <= high:
        errors[name] = f"between {low:,} and {high:,}"
    return number


@dataclass
class GenerationReport:
    """The generator's own validation: what was drafted, what its ground-truth check refused."""

    environment: str = ""
    n: int = 0
    seed: int = 0
    attempts: int = 0
    accepted: int = 0
    no_draft: int = 0  # the template found nothing in the state to ask about
    ground_truth_failed: int = 0  # executed in a fresh sandbox, it did not do what the template says
    duplicates: int = 0  # same request text (lower-cased, no punctuation or politeness words)
    not_single_call: int = 0  # json_tool_call: tasks needing more than one write
    already_in_parent: int = 0
    examples: list[dict] = field(default_factory=list)  # {"template", "problems"}
    by_template: dict[str, int] = field(default_factory=dict)
    splits: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def _drafts(spec: GenerationSpec, report: GenerationReport) -> Iterator[EnvTask]:
    """The generator's loop over the chosen templates; each kept task is validated and new."""
    from environments.workplace.seed import seed_state

    state = seed_state()
    world = generator.World.of(state)
    rng = random.Random(spec.seed)
    chosen = set(spec.train_templates) | set(spec.held_out_templates)
    pool = [t for t in generator.TEMPLATES if t.__name__ in chosen]
    held = set(spec.held_out_templates)
    seen: set[str] = set()
    limit = 50 * spec.n + 100
    while report.accepted < spec.n:
        report.attempts += 1
        if report.attempts > limit:
            raise GenerationError({"n": f"only {report.accepted} unique tasks after {limit:,} attempts: ask for "
                                        "fewer or choose more templates"})
        template = pool[rng.randrange(len(pool))]
        draft = template(rng, world)
        if draft is None or not draft.writes:
            report.no_draft += 1
            continue
        key = generator.normalise_request(draft.request)
        if key in seen:
            report.duplicates += 1
            continue
        problems = generator.ground_truth_problems(draft, state)
        if problems:
            report.ground_truth_failed += 1
            if len(report.examples) < EXAMPLES:
                report.examples.append({"template": draft.template, "problems": problems[:3]})
            continue
        seen.add(key)
        task = generator.draft_to_task(draft, state)
        task.split = "held_out" if draft.template in held else generator.split_for(task.id, "")
        if spec.environment == "json_tool_call":
            converted = convert_task(task)
            if converted is None:
                report.not_single_call += 1
                continue
            task = converted
        report.accepted += 1
        task.metadata = {**task.metadata, "provenance": {
            "kind": "generation", "generator": "workplace", "environment": spec.environment,
            "template": draft.template, "seed": spec.seed, "index": report.accepted - 1}}
        yield task


def generate(spec: GenerationSpec) -> tuple[list[EnvTask], GenerationReport]:
    """All `spec.n` tasks and the report (nothing is written)."""
    started = time.perf_counter()
    report = GenerationReport(environment=spec.environment, n=spec.n, seed=spec.seed)
    tasks = list(_drafts(spec, report))
    report.by_template = dict(Counter(t.metadata["provenance"]["template"] for t in tasks).most_common())
    report.splits = dict(Counter(t.split for t in tasks).most_common())
    report.seconds = round(time.perf_counter() - started, 3)
    return tasks, report


def generation_create(*, project: Project, spec: GenerationSpec, actor, name: str = "",
                      parent: TaskDataset | None = None, description: str = "") -> tuple[TaskDataset, GenerationReport]:
    """Generate `spec` and write it as a new dataset `name` or as the next version of `parent` (its tasks
    plus the generated ones that it does not hold yet). GenerationError when nothing new would be written."""
    tasks, report = generate(spec)
    detail = {"generator": "workplace", **spec.as_detail()}
    try:
        with transaction.atomic():
            if parent is None:
                dataset = dataset_create(project=project, name=name, tasks=tasks, actor=actor,
                                         environment=spec.environment, source=Source.SYNTHETIC,
                                         description=description, lineage=Lineage.GENERATION, lineage_detail=detail,
                                         new=True)
            else:
                hashes = {task_content_hash(t): t for t in tasks}
                held = set()
                keys = list(hashes)
                for start in range(0, len(keys), 1000):
                    held |= set(Task.objects.filter(dataset=parent, content_hash__in=keys[start:start + 1000])
                                .values_list("content_hash", flat=True))
                report.already_in_parent = len(held)
                fresh = [task_row(t, source=Source.SYNTHETIC, content_hash=h) for h, t in hashes.items()
                         if h not in held]
                if not fresh:
                    raise GenerationError({"dataset": f"{parent.name} v{parent.version} holds every generated task "
                                                      "already: change the seed or the templates"})
                dataset = dataset_new_version(dataset=parent, add=fresh, actor=actor, lineage=Lineage.GENERATION,
                                              lineage_detail=detail)
    except DatasetConflict as exc:
        raise GenerationError({"name": str(exc)}, conflict=True) from None
    except IntegrityError:
        raise GenerationError({"name": "another version of this dataset was created at the same time; "
                                       "try again"}, conflict=True) from None
    return dataset, report
