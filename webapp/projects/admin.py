"""The Django admin: for superusers only, and read-only wherever writes belong to the services.

Project isolation is enforced in `webapp/projects/selectors/access.py` for every page and API endpoint. The
admin does not go through it, so it is closed to everyone but active superusers (who see every
project anyway); a staff user who is not a superuser gets the admin login page for every admin URL.

Rows written by the services (runs, jobs, checkpoints, aliases and their moves, metrics,
trajectories, reviews, audit events, datasets, verifiers) are view-only here: editing them in the
admin would skip the job queue, the audit log, the alias history and the content hashes. Runs,
jobs and promotions are launched from the product (pages and API). Memberships edited here go
through `membership_set_role` (audited, never leaving a project without an owner), and API tokens
are issued through `api_token_issue`, with the secret shown once.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.forms.models import BaseInlineFormSet
from django.template.response import TemplateResponse

from webapp.projects.models import ApiToken, AuditEvent, Membership, Project, Role, TokenAccess
from webapp.projects.services.projects import (
    TokenOptionsError,
    api_token_issue,
    api_token_options_check,
    api_token_revoke,
    audit_log,
    membership_set_role,
)

# Also shown on every admin page by templates/admin/base_site.html.
PRODUCT_NOTE = "Runs, jobs and promotions are launched from the product (pages and API), not here."


# --- the site: superusers only ------------------------------------------------------------------


def superuser_only(request) -> bool:
    """Replaces AdminSite.has_permission: the admin does not apply per-project roles."""
    user = request.user
    return bool(user.is_active and user.is_staff and user.is_superuser)


admin.site.has_permission = superuser_only
admin.site.site_header = "Crucible administration"
admin.site.site_title = "Crucible admin"
admin.site.index_title = "Site administration (superusers only)"


# --- view-only admins for rows the services write -----------------------------------------------


class ViewOnlyMixin:
    """No add, change or delete: the row is written by a service (or a worker), never by hand.

    Works for ModelAdmin and for inlines (whose permission methods also take `obj`).
    """

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ViewOnlyAdmin(ViewOnlyMixin, admin.ModelAdmin):
    pass


class ViewOnlyTabularInline(ViewOnlyMixin, admin.TabularInline):
    extra = 0

    def get_readonly_fields(self, request, obj=None):
        # Every shown field is read-only (non-editable ones such as auto_now_add could not be in a form).
        return self.fields or [field.name for field in self.model._meta.fields]


# --- projects and memberships -------------------------------------------------------------------


class MembershipForm(forms.ModelForm):
    class Meta:
        model = Membership
        fields = ["user", "role"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            # Changing who a membership belongs to is a removal plus an addition: do it as such.
            self.fields["user"].disabled = True


class MembershipFormSet(BaseInlineFormSet):
    def clean(self) -> None:
        super().clean()
        if any(self.errors):
            return
        owners = 0
        users = set()
        for form in self.forms:
            data = getattr(form, "cleaned_data", None)
            if not data or (self.can_delete and self._should_delete_form(form)):
                continue
            if data.get("user") in users:
                raise ValidationError("A user can hold only one membership per project.")
            users.add(data.get("user"))
            if data.get("role") == Role.OWNER:
                owners += 1
        if owners == 0:
            raise ValidationError("A project needs at least one owner.")


class MembershipInline(admin.TabularInline):
    model = Membership
    form = MembershipForm
    formset = MembershipFormSet
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    readonly_fields = ["created_at", "created_by"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]

    def save_model(self, request, obj, form, change) -> None:
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)
        if not change:
            audit_log(project=obj, actor=request.user, action="project.create", target=obj)

    def save_formset(self, request, form, formset, change) -> None:
        if formset.model is not Membership:
            return super().save_formset(request, form, formset, change)
        project = form.instance
        instances = formset.save(commit=False)
        # Owners first, so that demoting the previous owner never leaves the project without one.
        for membership in sorted(instances, key=lambda m: m.role != Role.OWNER):
            membership_set_role(project=project, user=membership.user, role=membership.role, actor=request.user)
        for membership in formset.deleted_objects:
            audit_log(
                project=project, actor=request.user, action="membership.remove", target=membership,
                data={"user": membership.user.get_username(), "from": membership.role},
            )
            membership.delete()
        formset.save_m2m()


# --- API tokens: issued by the service, the secret shown once -----------------------------------


TOKEN_ADD_FIELDS = ["user", "name", "access", "project", "expires_at"]


class ApiTokenAddForm(forms.ModelForm):
    class Meta:
        model = ApiToken
        fields = TOKEN_ADD_FIELDS

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["access"].required = False  # left out: read-write, as before tokens had a scope

    def clean_access(self) -> str:
        return self.cleaned_data.get("access") or TokenAccess.READ_WRITE

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not name:
            raise ValidationError("Give the token a name, e.g. the script or machine that uses it.")
        return name

    def clean_user(self):
        user = self.cleaned_data["user"]
        if not user.is_active:
            raise ValidationError("This user is inactive: a token of theirs would never authenticate.")
        return user

    def clean(self):
        data = super().clean()
        user = data.get("user")
        if user is not None and not self.errors:
            try:
                api_token_options_check(user=user, access=data.get("access"), project=data.get("project"),
                                     expires_at=data.get("expires_at"))
            except TokenOptionsError as exc:
                raise ValidationError(str(exc)) from None
        return data


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Add issues a token and shows its secret once; existing tokens can be revoked, not edited."""

    list_display = ["name", "user", "prefix", "access", "project", "created_at", "last_used_at", "expires_at",
                    "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), "access"]
    search_fields = ["name", "prefix", "user__username"]
    fields = ["user", "name", "prefix", "access", "project", "created_at", "last_used_at", "expires_at", "revoked_at"]
    readonly_fields = ["prefix", "access", "project", "created_at", "last_used_at", "expires_at", "revoked_at"]
    actions = ["revoke_tokens"]
    add_form_template = "admin/projects/apitoken/add_form.html"

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiTokenAddForm
            kwargs["fields"] = TOKEN_ADD_FIELDS
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request, obj=None):
        return TOKEN_ADD_FIELDS if obj is None else self.fields

    def get_readonly_fields(self, request, obj=None):
        return [] if obj is None else self.readonly_fields

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # a token's owner and name are fixed; revoke it and issue another

    def save_model(self, request, obj, form, change) -> None:
        data = form.cleaned_data
        issued = api_token_issue(user=data["user"], name=data["name"], access=data["access"], project=data["project"],
                                 expires_at=data["expires_at"])
        # Let the admin's log entry and response refer to the row the service created.
        obj.pk = issued.token.pk
        obj.prefix = issued.token.prefix
        obj.token_hash = issued.token.token_hash
        obj.created_at = issued.token.created_at
        obj._issued_secret = issued.raw

    def response_add(self, request, obj, post_url_continue=None):
        # Render the secret into this one response (no redirect, no message stored in a cookie or
        # the session): it exists nowhere else and cannot be shown again.
        context = {
            **self.admin_site.each_context(request),
            "title": "API token issued",
            "opts": self.opts,
            "token": obj,
            "secret": obj._issued_secret,
        }
        response = TemplateResponse(request, "admin/projects/apitoken/issued.html", context)
        response.headers["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke the selected API tokens")
    def revoke_tokens(self, request, queryset) -> None:
        active = list(queryset.filter(revoked_at__isnull=True))
        for token in active:
            api_token_revoke(token=token)
        self.message_user(request, f"Revoked {len(active)} token(s).", messages.SUCCESS)


# --- the audit log: append-only -----------------------------------------------------------------


@admin.register(AuditEvent)
class AuditEventAdmin(ViewOnlyAdmin):
    list_display = ["created_at", "project", "actor", "action", "target_type", "target_id"]
    list_filter = ["action"]
    list_select_related = ["project", "actor"]

