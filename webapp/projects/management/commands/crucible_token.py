"""Issue, list and revoke API tokens from the command line.

    python manage.py crucible_token create --user alice --name "ci runner"
    python manage.py crucible_token create --user alice --name dashboards --read-only --project demo --expires-in 30
    python manage.py crucible_token list --user alice
    python manage.py crucible_token revoke --prefix cru_AbCdEfGh

`create` prints the secret once, alone on stdout (the explanation goes to stderr), so that
`TOKEN=$(python manage.py crucible_token create --user alice --name ci)` captures just the token.
Only the token's SHA-256 is stored: a lost secret cannot be shown again; revoke it and issue another.
A token acts as its user, with that user's role in each project, narrowed by its scope:
`--read-only` (GET only), `--project SLUG` (that project only) and `--expires-in DAYS` or
`--expires YYYY-MM-DD` (it stops working then; an expired token is answered 401 saying so).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from webapp.projects.models import ApiToken, Project, TokenAccess
from webapp.projects.services.projects import TokenOptionsError, api_token_issue, api_token_revoke

NAME_MAX = ApiToken._meta.get_field("name").max_length
EXPIRY_DAYS_MAX = 3650


class Command(BaseCommand):
    help = "Issue (secret printed once), list and revoke API tokens."

    def add_arguments(self, parser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{create,list,revoke}")

        create = actions.add_parser("create", help="Issue a token and print its secret once.")
        create.add_argument("--user", required=True, help="Username of the token's owner; the token acts as this user.")
        create.add_argument("--name", required=True, help="What the token is for, e.g. the script or machine using it.")
        create.add_argument("--read-only", action="store_true",
                            help="The token may only read (GET); anything else is answered 403.")
        create.add_argument("--project", metavar="SLUG",
                            help="Limit the token to this project (its user must be a member); default: all of them.")
        expiry = create.add_mutually_exclusive_group()
        expiry.add_argument("--expires-in", metavar="DAYS", type=int,
                            help=f"The token stops working after this many days (1 to {EXPIRY_DAYS_MAX}).")
        expiry.add_argument("--expires", metavar="YYYY-MM-DD",
                            help="The token stops working at the start of this day (UTC).")

        listing = actions.add_parser("list", help="List a user's tokens (never their secrets).")
        listing.add_argument("--user", required=True, help="Username.")
        listing.add_argument("--active", action="store_true", help="Only tokens that are not revoked.")

        revoke = actions.add_parser("revoke", help="Revoke one token: it stops working at once.")
        which = revoke.add_mutually_exclusive_group(required=True)
        which.add_argument("--id", type=int, help="The token's id (see `list`).")
        which.add_argument("--prefix", help="The token's first characters, as shown by `list` (e.g. cru_AbCdEfGh).")
        revoke.add_argument("--user", help="Only consider this user's tokens.")

    def handle(self, *args, action: str, **options) -> None:
        if action == "create":
            self._create(options["user"], options["name"], read_only=options["read_only"],
                         project_slug=options["project"], expires_at=_expiry(options["expires_in"], options["expires"]))
        elif action == "list":
            self._list(options["user"], active_only=options["active"])
        else:
            self._revoke(token_id=options["id"], prefix=options["prefix"], username=options["user"])

    def _user(self, username: str):
        User = get_user_model()
        try:
            return User.objects.get(**{User.USERNAME_FIELD: username})
        except User.DoesNotExist:
            raise CommandError(f"No user named {username!r}. Create one with `python manage.py createsuperuser` "
                               f"or in the admin.") from None

    def _create(self, username: str, name: str, *, read_only: bool, project_slug: str | None, expires_at) -> None:
        name = (name or "").strip()
        if not name:
            raise CommandError("--name must not be empty: say what the token is for, e.g. --name 'ci runner'.")
        if len(name) > NAME_MAX:
            raise CommandError(f"--name is {len(name)} characters long; at most {NAME_MAX} are allowed.")
        user = self._user(username)
        if not user.is_active:
            raise CommandError(f"User {username!r} is inactive: a token of theirs would never authenticate.")
        project = None
        if project_slug is not None:
            project = Project.objects.filter(slug=project_slug).first()
            if project is None:
                raise CommandError(f"No project with the slug {project_slug!r}; the slug is in the project's URL /p/<slug>/.")
        access = TokenAccess.READ if read_only else TokenAccess.READ_WRITE
        try:
            issued = api_token_issue(user=user, name=name, access=access, project=project, expires_at=expires_at)
        except TokenOptionsError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(
            f"Issued API token {issued.token.name!r} for {user.get_username()} "
            f"(id {issued.token.pk}, prefix {issued.token.prefix}; {_scope(issued.token)}). Copy the secret below "
            f"now: it is not stored and will not be shown again. Send it as `Authorization: Bearer <token>`."
        )
        self.stdout.write(issued.raw)

    def _list(self, username: str, *, active_only: bool) -> None:
        user = self._user(username)
        tokens = ApiToken.objects.filter(user=user).select_related("project").order_by("created_at", "pk")
        if active_only:
            tokens = tokens.filter(revoked_at__isnull=True)
        rows = list(tokens)
        if not rows:
            self.stdout.write(f"{user.get_username()} has no {'active ' if active_only else ''}API tokens.")
            return
        self.stdout.write(f"{'id':>6}  {'prefix':<12}  {'access':<10}  {'project':<20}  {'created':<16}  "
                          f"{'last used':<16}  {'expires':<16}  {'status':<24}  name")
        for token in rows:
            self.stdout.write(
                f"{token.pk:>6}  {token.prefix:<12}  {token.access:<10}  {_project_text(token):<20}  "
                f"{_when(token.created_at):<16}  {_when(token.last_used_at) or 'never':<16}  "
                f"{_when(token.expires_at) or 'never':<16}  {_status(token):<24}  {token.name}"
            )

    def _revoke(self, *, token_id: int | None, prefix: str | None, username: str | None) -> None:
        tokens = ApiToken.objects.select_related("user")
        if username is not None:
            tokens = tokens.filter(user=self._user(username))
        if token_id is not None:
            matches = list(tokens.filter(pk=token_id))
            described = f"id {token_id}"
        else:
            prefix = (prefix or "").strip()
            if not prefix:
                raise CommandError("--prefix must not be empty.")
            # The prefix shown in lists is the first 12 characters; a full secret pasted here works too.
            matches = list(tokens.filter(prefix=prefix[:12]))
            described = f"prefix {prefix[:12]}"
        if not matches:
            raise CommandError(f"No API token with {described}"
                               f"{f' belonging to {username}' if username else ''}.")
        if len(matches) > 1:
            ids = ", ".join(str(t.pk) for t in matches)
            raise CommandError(f"{len(matches)} tokens have {described} (ids {ids}): revoke one with --id.")
        token = matches[0]
        if token.revoked_at is not None:
            self.stdout.write(f"Token {token.pk} ({token.name}) was already revoked on {_when(token.revoked_at)}.")
            return
        api_token_revoke(token=token)
        self.stdout.write(self.style.SUCCESS(
            f"Revoked token {token.pk} ({token.name}, {token.prefix}) of {token.user.get_username()}."
        ))


def _when(moment) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M") if moment else ""


def _expiry(days: int | None, day: str | None) -> datetime | None:
    """When a token made with --expires-in or --expires stops working (None: never)."""
    if days is not None:
        if not 1 <= days <= EXPIRY_DAYS_MAX:
            raise CommandError(f"--expires-in is {days} days; give 1 to {EXPIRY_DAYS_MAX}.")
        return timezone.now() + timedelta(days=days)
    if day is not None:
        try:
            parsed = date.fromisoformat(day)
        except ValueError:
            raise CommandError(f"--expires {day!r} is not a date: write it as YYYY-MM-DD, e.g. 2027-01-31.") from None
        return datetime.combine(parsed, time.min, tzinfo=UTC)
    return None


def _project_text(token: ApiToken) -> str:
    return token.project.slug if token.project else "all"


def _scope(token: ApiToken) -> str:
    where = f"only project {token.project.slug}" if token.project else "every project of its user"
    until = f"expires {_when(token.expires_at)} UTC" if token.expires_at else "no expiry"
    return f"{token.get_access_display().lower()}, {where}, {until}"


def _status(token: ApiToken) -> str:
    if token.revoked_at:
        return f"revoked {_when(token.revoked_at)}"
    return "expired" if token.is_expired() else "active"
