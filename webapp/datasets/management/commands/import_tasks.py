"""Import a Crucible JSONL or NeMo Gym JSONL file of tasks as a dataset version.

The same service as the import page and the API (webapp.datasets.services.imports): the file is checked
first and the report printed (rows accepted, rejected with line and reason, duplicates, splits);
with --dry-run nothing more happens, otherwise the new version is written in one transaction.

    python manage.py import_tasks tasks.jsonl --project acme --name workplace-nemo
    python manage.py import_tasks more.jsonl --project acme --dataset 12 --format nemo_gym --dry-run
"""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from webapp.datasets.services.imports import (
    ImportFileError,
    ImportReport,
    import_check,
    import_create,
    import_target,
)
from webapp.projects.models import Project

LISTED = 20  # rejected rows and duplicates printed


def print_report(report: ImportReport, write) -> None:
    write(f"{report.filename}: {report.format or 'unknown'} format, {report.lines:,} rows read in "
          f"{report.seconds:.1f} s")
    write(f"  accepted   {report.accepted:,}  ({', '.join(f'{k} {v:,}' for k, v in report.splits.items()) or 'none'})")
    write(f"  rejected   {report.rejected_count:,}")
    for row in report.rejected[:LISTED]:
        write(f"    line {row['line']}: {row['reason']}")
    write(f"  duplicates {report.duplicate_count:,}")
    for row in report.duplicates[:LISTED]:
        write(f"    line {row['line']}: {row['reason']}")


class Command(BaseCommand):
    help = __doc__.splitlines()[0]

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", help="a JSONL file")
        parser.add_argument("--project", required=True, help="project slug")
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--name", help="a new dataset of this name")
        target.add_argument("--dataset", type=int, help="id of a dataset version: the new version is it plus the file")
        parser.add_argument("--format", default="auto", choices=["auto", "crucible", "nemo_gym"])
        parser.add_argument("--split", default="train", help="split of rows that name none (NeMo Gym rows never do)")
        parser.add_argument("--description", default="")
        parser.add_argument("--user", help="who the version is recorded as created by (default: the project owner)")
        parser.add_argument("--dry-run", action="store_true", help="print the report, write nothing")

    def handle(self, *args, **options) -> None:
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"no project with slug {options['project']!r}")
        path = Path(options["file"])
        if not path.is_file():
            raise CommandError(f"{path} is not a file")
        actor = self._actor(project, options.get("user"))
        try:
            target = import_target(project=project, name=options.get("name") or "",
                                   parent_id=options.get("dataset"), format=options["format"],
                                   default_split=options["split"], description=options["description"])
            report = import_check(path, target=target, filename=path.name)
            print_report(report, self.stdout.write)
            if options["dry_run"]:
                self.stdout.write("dry run: nothing was written")
                return
            dataset, report = import_create(path, project=project, target=target, actor=actor, filename=path.name)
        except ImportFileError as exc:
            raise CommandError(f"{exc.field}: {exc}") from None
        self.stdout.write(self.style.SUCCESS(
            f"wrote {dataset.name} v{dataset.version} (id {dataset.pk}): {report.accepted:,} new tasks, "
            f"{dataset.stats.get('tasks', 0):,} in all"))

    def _actor(self, project: Project, username: str | None):
        if username:
            user = get_user_model().objects.filter(username=username).first()
            if user is None:
                raise CommandError(f"no user {username!r}")
            return user
        membership = project.memberships.filter(role="owner").select_related("user").order_by("id").first()
        return membership.user if membership else None
