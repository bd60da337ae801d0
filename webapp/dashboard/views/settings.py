"""Project settings: members and their roles, the project's models, the price of a device-hour, and your
own API tokens.

Every member may open the page. Owners manage members and the price; everyone else sees the
member list and the price read-only, and gets 403 from the owner forms. Editors and owners
register and remove the project's models (what runs and experiments train and evaluate);
viewers and reviewers see the list read-only. API tokens belong to
users, not projects: any member manages their own tokens here (a token acts as its user in every
project they belong to, with their role there), narrowed by the token's scope: read-only or
read-write, every project or only this one, an optional expiry. A new token's secret is shown once:
the create form redirects (so a reload issues nothing), the server-side session holds the secret
until the next load of this page, which removes it, and that response is not cached.

Writes go through webapp.projects.services.projects (audited, never leaving a project without an owner)
and webapp.runs.services.models (audited, never removing a model that runs use); text is checked with webapp.common.bounds.unstorable_text_reason as the API checks it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal, InvalidOperation

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from webapp.common.bounds import text_field_problem
from webapp.dashboard.views.common import breadcrumbs_for
from webapp.projects.models import ROLE_RANK, ApiToken, Membership, Project, Role, TokenAccess
from webapp.projects.selectors.access import get_project_or_404, has_role, role_in
from webapp.projects.selectors.projects import (
    live_user_token,
    project_members,
    project_membership,
    user_by_name,
    user_token,
    user_tokens,
)
from webapp.projects.services.projects import (
    PRICE_DECIMAL_PLACES,
    PRICE_MAX,
    IssuedToken,
    MembershipExists,
    TokenOptionsError,
    api_token_issue,
    api_token_revoke,
    membership_add,
    membership_change_role,
    membership_remove,
    project_price_set,
)
from webapp.projects.services.secrets import NAME_MAX as SECRET_NAME_MAX
from webapp.projects.services.secrets import VALUE_MAX as SECRET_VALUE_MAX
from webapp.projects.services.secrets import (
    SecretError,
    project_secret_delete,
    project_secret_rows,
    project_secret_set,
)
from webapp.runs.models import ModelSpec
from webapp.runs.selectors.models import model_use_counts, project_model, project_models
from webapp.runs.services.models import (
    GGUF_FILE_MAX,
    MODEL_NAME_MAX,
    MODEL_SOURCE_MAX,
    TOOL_FORMATS,
    ModelSpecError,
    ModelSpecInUse,
    model_spec_create,
    model_spec_remove,
)

TOKEN_NAME_MAX = ApiToken._meta.get_field("name").max_length
USERNAME_MAX = 150
PRICE_TEXT_MAX = 32
TOKEN_EXPIRY_DAYS_MAX = 3650
TOKEN_EXPIRY_CHOICES = (("never", "Never"), ("7", "In 7 days"), ("30", "In 30 days"), ("90", "In 90 days"),
                        ("365", "In a year"))
ISSUED_TOKEN_SESSION_KEY = "crucible.issued_token"
TOKENS_SHOWN = 100  # active tokens first, then the latest revoked ones
MODELS_SHOWN = 200
PRICE_PATTERN = re.compile(r"([0-9]+(\.[0-9]*)?|\.[0-9]+)")  # ASCII digits only


# ---------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemberRow:
    """A member in the list, with the role picked in its form and that form's error."""

    membership: Membership
    selected_role: str
    error: str | None
    last_owner: bool


@dataclass(frozen=True)
class ModelRow:
    """A model in the list, with how many runs and experiments use it and its remove form's error."""

    model: ModelSpec
    runs: int
    experiments: int
    error: str | None

    @property
    def in_use(self) -> bool:
        return bool(self.runs or self.experiments)


def _model_rows(project: Project, errors: dict) -> tuple[list[ModelRow], bool]:
    models = project_models(project, limit=MODELS_SHOWN + 1)
    ids = [m.pk for m in models[:MODELS_SHOWN]]
    runs, experiments = model_use_counts(ids)
    rows = [ModelRow(m, runs.get(m.pk, 0), experiments.get(m.pk, 0), errors.get(m.pk)) for m in models[:MODELS_SHOWN]]
    return rows, len(models) > MODELS_SHOWN


def _is_owner(user, project: Project) -> bool:
    return ROLE_RANK.get(role_in(user, project), 0) >= ROLE_RANK[Role.OWNER]


def price_text(price: Decimal | None) -> str:
    """The stored price as a person would type it: 2.5 for 2.5000, 100 for 100.0000, "" when not set."""
    if price is None:
        return ""
    return format(price.normalize(), "f")


def _user_tokens(user) -> tuple[list[ApiToken], bool]:
    tokens = user_tokens(user, limit=TOKENS_SHOWN + 1)
    return tokens[:TOKENS_SHOWN], len(tokens) > TOKENS_SHOWN


def _render(request: HttpRequest, project: Project, *, status: int = 200, errors: dict | None = None,
            forms: dict | None = None, issued: IssuedToken | None = None) -> HttpResponse:
    """The whole page; `errors` and `forms` hold one form's errors and what was typed into it."""
    members = list(project_members(project))
    owners = sum(1 for m in members if m.role == Role.OWNER)
    tokens, more_tokens = _user_tokens(request.user)
    row_role, row_errors = (forms or {}).get("row_role", {}), (errors or {}).get("rows", {})
    forms = {"add_username": "", "add_role": Role.VIEWER, "price": price_text(project.price_per_device_hour),
             "token_name": "", "token_access": TokenAccess.READ_WRITE, "token_limit": "all", "token_expires": "never",
             "model_name": "", "model_source": "", "model_gguf_file": "",
             "model_tool_format": "auto", "secret_name": "", **(forms or {})}
    models, more_models = _model_rows(project, (errors or {}).get("model_rows", {}))
    context = {
        "project": project,
        "role": role_in(request.user, project),
        "is_owner": _is_owner(request.user, project),
        "members": [MemberRow(m, row_role.get(m.pk, m.role), row_errors.get(m.pk),
                              m.role == Role.OWNER and owners == 1) for m in members],
        "owner_count": owners,
        "can_edit_models": has_role(request.user, project, Role.EDITOR),
        "models": models,
        "more_models": more_models,
        "models_shown": MODELS_SHOWN,
        "tool_formats": TOOL_FORMATS,
        "model_name_max": MODEL_NAME_MAX,
        "model_source_max": MODEL_SOURCE_MAX,
        "gguf_file_max": GGUF_FILE_MAX,
        "roles": Role.choices,
        "tokens": tokens,
        "more_tokens": more_tokens,
        "tokens_shown": TOKENS_SHOWN,
        "issued": issued,
        "errors": errors or {},
        "forms": forms,
        "price_max": PRICE_MAX,
        "price_decimals": PRICE_DECIMAL_PLACES,
        "token_name_max": TOKEN_NAME_MAX,
        "token_access_choices": TokenAccess.choices,
        "token_expiry_choices": TOKEN_EXPIRY_CHOICES,
        "token_expiry_days_max": TOKEN_EXPIRY_DAYS_MAX,
        "username_max": USERNAME_MAX,
        "price_text_max": PRICE_TEXT_MAX,
        "secrets": project_secret_rows(project),
        "secret_name_max": SECRET_NAME_MAX,
        "secret_value_max": SECRET_VALUE_MAX,
        "breadcrumbs": breadcrumbs_for(project, ("Settings", None)),
    }
    response = render(request, "dashboard/settings/settings.html", context, status=status)
    if issued is not None:
        response["Cache-Control"] = "no-store"
    return response


def _settings_url(slug: str, anchor: str = "") -> str:
    return reverse("dashboard:project_settings", args=[slug]) + (f"#{anchor}" if anchor else "")


@login_required
@require_GET
def project_settings_page(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug)
    return _render(request, project, issued=_pop_issued_token(request))


# ---------------------------------------------------------------------------------------
# Members (owner)
# ---------------------------------------------------------------------------------------


_text_problem = text_field_problem


def _role_problem(role: str) -> str | None:
    if role not in Role.values:
        return f"Choose one of the roles: {', '.join(Role.values)}."
    return None


@login_required
@require_POST
def member_add(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.OWNER)
    username = request.POST.get("username", "").strip()
    role = request.POST.get("role", "")
    forms = {"add_username": username, "add_role": role}
    errors: dict[str, str] = {}
    problem = _text_problem("user name", username, USERNAME_MAX)
    if problem:
        errors["username"] = problem
    elif not username:
        errors["username"] = "Type the user name of the person to add."
    if role_problem := _role_problem(role):
        errors["add_role"] = role_problem
    user = None
    if "username" not in errors:
        user = user_by_name(username)
        if user is None:
            errors["username"] = (f"There is no user named “{username}”. They need an account first "
                                  "(an administrator creates it).")
        elif not user.is_active:
            errors["username"] = f"The account “{user.get_username()}” is inactive: it could not sign in."
    if not errors:
        try:
            membership_add(project=project, user=user, role=role, actor=request.user)
        except MembershipExists as exc:
            errors["username"] = str(exc)
        except ValueError as exc:
            errors["add_role"] = str(exc)
    if errors:
        return _render(request, project, status=400, errors=errors, forms=forms)
    messages.success(request, f"{user.get_username()} joined {project.name} as {role}.")
    return redirect(_settings_url(slug, "members"))


def _membership(project: Project, membership_id: int) -> Membership:
    membership = project_membership(project, membership_id)
    if membership is None:
        raise Http404("No such member in this project.")
    return membership


@login_required
@require_POST
def member_role(request: HttpRequest, slug: str, membership_id: int) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.OWNER)
    membership = _membership(project, membership_id)
    role = request.POST.get("role", "")
    name = membership.user.get_username()
    error = _role_problem(role)
    if error is None and role == membership.role:
        messages.info(request, f"{name} is already {role}; nothing changed.")
        return redirect(_settings_url(slug, "members"))
    if error is None:
        try:
            membership_change_role(membership=membership, role=role, actor=request.user)
        except ValueError as exc:
            error = (f"{name} is the only owner: make someone else owner first."
                     if "at least one owner" in str(exc) else str(exc))
    if error:
        return _render(request, project, status=400, errors={"rows": {membership.pk: error}},
                       forms={"row_role": {membership.pk: role}})
    messages.success(request, f"{name} is now {role} (was {membership.role}).")
    if membership.user == request.user and not _is_owner(request.user, project):
        messages.info(request, "You are no longer an owner: the page is read-only for you now.")
    return redirect(_settings_url(slug, "members"))


@login_required
@require_POST
def member_remove(request: HttpRequest, slug: str, membership_id: int) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.OWNER)
    membership = _membership(project, membership_id)
    name = membership.user.get_username()
    try:
        membership_remove(membership=membership, actor=request.user)
    except ValueError:
        return _render(request, project, status=400, errors={"rows": {
            membership.pk: f"{name} is the only owner and cannot be removed: make someone else owner first."}})
    if membership.user == request.user and role_in(request.user, project) is None:
        messages.success(request, f"You left {project.name}.")
        return redirect("dashboard:home")
    messages.success(request, f"{name} was removed from {project.name}.")
    return redirect(_settings_url(slug, "members"))


# ---------------------------------------------------------------------------------------
# Models (editor)
# ---------------------------------------------------------------------------------------


@login_required
@require_POST
def model_add(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    post = request.POST
    typed = {field: post.get(field, "") for field in ("name", "source", "gguf_file")}
    tool_format = post.get("tool_format", "auto")
    forms = {"model_name": typed["name"], "model_source": typed["source"], "model_gguf_file": typed["gguf_file"],
             "model_tool_format": tool_format}
    try:
        model = model_spec_create(project=project, name=typed["name"], source=typed["source"],
                                  gguf_file=typed["gguf_file"], tool_format=tool_format, actor=request.user)
    except ModelSpecError as exc:
        errors = {f"model_{field}": message for field, message in exc.errors.items()}
        return _render(request, project, status=400, errors=errors, forms=forms)
    where = f"the folder {model.local_path}" if model.local_path else model.hf_id
    messages.success(request, f"Model “{model.name}” ({where}) is registered: the run and experiment forms offer it.")
    return redirect(_settings_url(slug, "models"))


@login_required
@require_POST
def model_remove(request: HttpRequest, slug: str, model_id: int) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.EDITOR)
    model = project_model(project, model_id)
    if model is None:
        raise Http404("No such model in this project.")
    try:
        model_spec_remove(model=model, actor=request.user)
    except ModelSpecInUse as exc:
        return _render(request, project, status=400, errors={"model_rows": {model.pk: str(exc)}})
    messages.success(request, f"Model “{model.name}” was removed from {project.name}.")
    return redirect(_settings_url(slug, "models"))


# ---------------------------------------------------------------------------------------
# Price per device-hour (owner)
# ---------------------------------------------------------------------------------------


def parse_price(text: str) -> tuple[Decimal | None, str | None]:
    """(price, None) for a decimal ≥ 0 or empty text (None: not set); else (None, what to fix)."""
    text = text.strip()
    problem = _text_problem("price", text, PRICE_TEXT_MAX)
    if problem:
        return None, problem
    if not text:
        return None, None
    if text.startswith("-"):
        return None, "The price cannot be negative: enter 0 or more, or leave it empty."
    if "," in text and PRICE_PATTERN.fullmatch(text.replace(",", ".", 1)):
        return None, (f"Use a point for decimals ({text.replace(',', '.', 1)}) and no thousands separators "
                      f"({text.replace(',', '', 1)}).")
    if not PRICE_PATTERN.fullmatch(text):
        return None, "Enter a plain number such as 2.5, without a currency sign, spaces or thousands separators."
    try:
        price = Decimal(text)
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
        return None, "Enter a plain number such as 2.5."
    if price > PRICE_MAX:
        return None, f"The price can be at most {price_text(PRICE_MAX)}."
    if price != round(price, PRICE_DECIMAL_PLACES):
        return None, f"The price can have at most {PRICE_DECIMAL_PLACES} decimal places."
    return price, None


@login_required
@require_POST
def price_set(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.OWNER)
    typed = request.POST.get("price", "")
    price, error = parse_price(typed)
    if error is None:
        try:
            project_price_set(project=project, price=price, actor=request.user)
        except ValueError as exc:
            error = str(exc)
    if error:
        return _render(request, project, status=400, errors={"price": error}, forms={"price": typed})
    if price is None:
        messages.success(request, "The price per device-hour is cleared: cost estimates are not shown.")
    else:
        messages.success(request, f"The price per device-hour is now {price_text(price)}.")
    return redirect(_settings_url(slug, "price"))


# ---------------------------------------------------------------------------------------
# Judge secrets (owners set, replace, delete; every member sees the names, nobody the values)
# ---------------------------------------------------------------------------------------


@login_required
@require_POST
@never_cache
def secret_set(request: HttpRequest, slug: str) -> HttpResponse:
    """Store or replace a judge secret. The value is never put back into the page, even beside an error."""
    project = get_project_or_404(request.user, slug, Role.OWNER)
    name = request.POST.get("name", "").strip()
    try:
        _, created = project_secret_set(project=project, name=name, value=request.POST.get("value", ""),
                                        actor=request.user)
    except SecretError as exc:
        return _render(request, project, status=400, errors={f"secret_{exc.field}": str(exc)},
                       forms={"secret_name": name[:SECRET_NAME_MAX]})
    messages.success(request, f"Judge secret {name} {'saved' if created else 'replaced'}: a judge verifier sends it "
                              f"when its config names api_key_secret \"{name}\".")
    return redirect(_settings_url(slug, "judge-secrets"))


@login_required
@require_POST
def secret_delete(request: HttpRequest, slug: str, secret_id: int) -> HttpResponse:
    project = get_project_or_404(request.user, slug, Role.OWNER)
    try:
        name = project_secret_delete(project=project, secret_id=secret_id, actor=request.user)
    except SecretError:
        raise Http404("No such secret in this project.") from None
    messages.success(request, f"Judge secret {name} deleted: judges that name it now fail, sending nothing, until an "
                              "owner sets it again.")
    return redirect(_settings_url(slug, "judge-secrets"))


# ---------------------------------------------------------------------------------------
# API tokens (every member, their own tokens)
# ---------------------------------------------------------------------------------------


def _token_options(post, project: Project) -> tuple[dict, dict[str, str]]:
    """The create form's access, project limit and expiry as api_token_issue takes them; else errors by field."""
    errors: dict[str, str] = {}
    access = post.get("access", TokenAccess.READ_WRITE)
    if access not in TokenAccess.values:
        errors["token_access"] = "Choose read-only or read-write."
    limit = post.get("limit", "all")
    if limit not in ("all", "project"):
        errors["token_limit"] = f"Choose every project you belong to, or only {project.name}."
    expires_at = None
    days = post.get("expires_days", "").strip()
    if days and days != "never":
        if not days.isdigit() or not 1 <= int(days) <= TOKEN_EXPIRY_DAYS_MAX:
            errors["token_expires"] = (f"Give the number of days the token lasts, from 1 to "
                                       f"{TOKEN_EXPIRY_DAYS_MAX}, or “never”.")
        else:
            expires_at = timezone.now() + timedelta(days=int(days))
    options = {"access": access, "project": project if limit == "project" else None, "expires_at": expires_at}
    return options, errors


@login_required
@require_POST
@never_cache
def token_create(request: HttpRequest, slug: str) -> HttpResponse:
    """Issue a token, then redirect: the secret waits in the session for the next page load, which removes it.

    Redirecting (rather than rendering the secret into the POST's response) means reloading the
    page cannot issue a second token; the server-side session holds the secret only until that
    one GET (webapp.projects.services.projects stores nothing but its hash).
    """
    project = get_project_or_404(request.user, slug)
    post = request.POST
    typed = post.get("name", "")
    name = typed.strip()
    forms = {"token_name": typed, "token_access": post.get("access", ""), "token_limit": post.get("limit", ""),
             "token_expires": post.get("expires_days", "")}
    errors: dict[str, str] = {}
    error = _text_problem("name", name, TOKEN_NAME_MAX)
    if error is None and not name:
        error = "Give the token a name: the script or machine that will use it, e.g. “ci runner”."
    if error:
        errors["token_name"] = error
    options, option_errors = _token_options(post, project)
    errors.update(option_errors)
    if not errors:
        try:
            issued = api_token_issue(user=request.user, name=name, **options)
        except TokenOptionsError as exc:
            errors["token_expires"] = str(exc)
    if errors:
        return _render(request, project, status=400, errors=errors, forms=forms)
    request.session[ISSUED_TOKEN_SESSION_KEY] = {"id": issued.token.pk, "raw": issued.raw}
    return redirect(_settings_url(slug, "new-token"))


def _pop_issued_token(request: HttpRequest) -> IssuedToken | None:
    """The token issued by the previous request, once: it leaves the session as it is read."""
    held = request.session.pop(ISSUED_TOKEN_SESSION_KEY, None)
    if not isinstance(held, dict):
        return None
    token = live_user_token(request.user, held.get("id"))
    if token is None:
        return None
    return IssuedToken(token=token, raw=str(held.get("raw", "")))


@login_required
@require_POST
def token_revoke(request: HttpRequest, slug: str, token_id: int) -> HttpResponse:
    get_project_or_404(request.user, slug)
    token = user_token(request.user, token_id)
    if token is None:
        raise Http404("You have no such API token.")
    if token.revoked_at is not None:
        messages.info(request, f"Token “{token.name}” ({token.prefix}…) was already revoked.")
    else:
        api_token_revoke(token=token)
        messages.success(request, f"Token “{token.name}” ({token.prefix}…) is revoked: it no longer authenticates.")
    return redirect(_settings_url(slug, "tokens"))
