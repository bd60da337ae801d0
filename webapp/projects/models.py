"""Projects are the unit of access: every other object belongs to exactly one."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    REVIEWER = "reviewer", "Reviewer"
    EDITOR = "editor", "Editor"
    OWNER = "owner", "Owner"


# Higher rank includes every permission of a lower one.
ROLE_RANK: dict[str, int] = {Role.VIEWER: 1, Role.REVIEWER: 2, Role.EDITOR: 3, Role.OWNER: 4}


class Project(models.Model):
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=80, unique=True)
    description = models.TextField(blank=True)
    price_per_device_hour = models.DecimalField(
        max_digits=10, decimal_places=4, null=True, blank=True,
        help_text="Optional price of one accelerator (or CPU) hour, for cost estimates.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "project"], name="uniq_membership")]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} as {self.role}"


class TokenAccess(models.TextChoices):
    """What a token may do: read (GET only) or everything its user's role allows."""

    READ = "read", "Read-only"
    READ_WRITE = "read-write", "Read-write"


class ApiToken(models.Model):
    """A bearer token for scripts. Only its SHA-256 is stored; the token is shown once.

    A token acts as its user, narrowed by its scope: `access` read-only allows only reads, `project`
    (when set) limits it to that one project, and `expires_at` (when set) ends it without a revoke.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, help_text="First characters, to recognise a token in lists.")
    token_hash = models.CharField(max_length=64, unique=True)
    access = models.CharField(max_length=16, choices=TokenAccess.choices, default=TokenAccess.READ_WRITE,
                              help_text="Read-only tokens may only read (GET); read-write ones may do what the user may.")
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="api_tokens",
        help_text="When set, the token works only in this project; empty: every project of its user.",
    )
    expires_at = models.DateTimeField(null=True, blank=True, help_text="When set, the token stops working then.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def read_only(self) -> bool:
        return self.access == TokenAccess.READ

    def is_expired(self, now=None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())


class AuditEvent(models.Model):
    """Who did what, when: promotions, alias moves, verifier changes, role changes."""

    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="audit_events")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    action = models.CharField(max_length=64)
    target_type = models.CharField(max_length=64)
    target_id = models.CharField(max_length=64)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.action} {self.target_type}:{self.target_id}"


class Theme(models.TextChoices):
    AUTO = "auto", "Follow the system"
    LIGHT = "light", "Light"
    DARK = "dark", "Dark"


class UserPreference(models.Model):
    """Per-user settings of the pages (the theme), kept server-side so every browser agrees."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="preference")
    theme = models.CharField(max_length=8, choices=Theme.choices, default=Theme.AUTO)

    def __str__(self) -> str:
        return f"{self.user} ({self.theme})"


class ProjectSecret(models.Model):
    """A credential an owner stored for this project's judges (llm_judge `api_key_secret`).

    Only the ciphertext is stored (Fernet, keyed from SECRET_KEY: webapp/projects/services/secrets.py), so a
    database dump alone does not reveal it; no page, API answer, audit entry or export ever holds
    the value. Members reference it by name; only owners set, replace or delete it.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=64)
    ciphertext = models.TextField()
    set_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(default=timezone.now, help_text="When the value was last set.")
    last_used_at = models.DateTimeField(null=True, blank=True, help_text="When a judge last sent it.")

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="uniq_project_secret_name")]

    def __str__(self) -> str:
        return f"secret {self.name} of {self.project_id}"

    def __repr__(self) -> str:  # never the ciphertext either
        return f"<ProjectSecret {self.pk} {self.name!r}>"


class WebhookFormat(models.TextChoices):
    SLACK = "slack", "Slack-compatible ({\"text\": ...})"
    JSON = "json", "Plain JSON"


class Webhook(models.Model):
    """Where the project's notifications go: an HTTP endpoint, its body format and the events it wants.

    The URL is checked against the same SSRF rule as judge endpoints (the operator's host allowlist,
    no loopback unless allowed, never metadata or link-local addresses) when it is saved and again,
    after DNS, at every delivery.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="webhooks")
    name = models.CharField(max_length=100)
    url = models.CharField(max_length=2000)
    format = models.CharField(max_length=10, choices=WebhookFormat.choices, default=WebhookFormat.SLACK)
    events = models.JSONField(default=list, help_text="Event names this endpoint receives.")
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="uniq_project_webhook_name")]

    def __str__(self) -> str:
        return f"webhook {self.name} of {self.project_id}"


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class WebhookDelivery(models.Model):
    """One notification to one webhook, and how sending it went (the workers retry it with backoff)."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=40)
    subject = models.CharField(max_length=500)
    payload = models.JSONField()
    state = models.CharField(max_length=10, choices=DeliveryState.choices, default=DeliveryState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_status = models.PositiveIntegerField(null=True, blank=True, help_text="The endpoint's last HTTP status.")
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["webhook", "-created_at"], name="webhook_delivery_recent")]

    def __str__(self) -> str:
        return f"delivery {self.pk} of {self.event} ({self.state})"
