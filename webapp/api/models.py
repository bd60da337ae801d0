"""Bad-API-token counts per client address, for webapp.api.throttle."""

from __future__ import annotations

from django.db import models


class TokenFailure(models.Model):
    """Bad bearer tokens seen from one client address in the current window.

    In the database, not a per-process cache, so every gunicorn process and host counts
    together. Rows whose window and lock are over are deleted as new failures come in.
    """

    client = models.CharField(max_length=64, unique=True, help_text="Client IP address (see client_ip).")
    failures = models.PositiveIntegerField(default=0)
    window_start = models.DateTimeField(db_index=True)
    locked_until = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.client}: {self.failures} bad tokens since {self.window_start:%Y-%m-%d %H:%M:%S}"
