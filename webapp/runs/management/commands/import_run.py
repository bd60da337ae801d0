"""Import a run trained elsewhere: `manage.py import_run RUN_DIR --project SLUG [--name NAME] [--user USERNAME]`.

RUN_DIR is a folder written by `python -m training run --out RUN_DIR` (or a .zip of one).
The report says what was read, stored, already present and skipped; importing the same
folder again changes nothing. Errors exit with status 1 and say what to do.
"""

from __future__ import annotations

import time
import zipfile
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from webapp.projects.models import Project
from webapp.runs.services.run_import import RunImportError, run_import, run_import_zip

PROGRESS_SECONDS = 2.0


class Command(BaseCommand):
    help = "Import a `python -m training run` folder (or a .zip of one) into a project, idempotently."

    def add_arguments(self, parser) -> None:
        parser.add_argument("run_dir", help="the RUN_DIR of `python -m training run --out RUN_DIR`, or a .zip of it")
        parser.add_argument("--project", required=True, help="the project's slug")
        parser.add_argument("--name", default=None, help="the run's name (default: the folder's name)")
        parser.add_argument("--user", default=None, help="recorded as the run's creator")

    def handle(self, *args, **opts) -> None:
        project = Project.objects.filter(slug=opts["project"]).first()
        if project is None:
            raise CommandError(f"No project with the slug {opts['project']!r}; see the slugs on the home page.")
        actor = None
        if opts["user"]:
            actor = get_user_model().objects.filter(username=opts["user"]).first()
            if actor is None:
                raise CommandError(f"No user named {opts['user']!r}.")
        path = Path(opts["run_dir"])
        last = [time.monotonic()]

        def progress(done: int, total: int) -> None:
            if time.monotonic() - last[0] >= PROGRESS_SECONDS and total:
                last[0] = time.monotonic()
                self.stderr.write(f"  read {done * 100 // total}% of events.jsonl ({done:,} of {total:,} bytes)")

        try:
            if path.is_file() and zipfile.is_zipfile(path):
                report = run_import_zip(project=project, archive=path, actor=actor, name=opts["name"],
                                        archive_name=str(path), trusted=True, progress=progress)
            else:
                report = run_import(project=project, run_dir=path, actor=actor, name=opts["name"], progress=progress)
        except RunImportError as exc:
            raise CommandError(str(exc)) from exc
        for line in report.lines_text():
            self.stdout.write(line)
        self.stdout.write(f"Open it at /p/{project.slug}/runs/{report.run_id}/")
