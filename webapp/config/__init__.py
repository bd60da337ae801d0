"""Project configuration: settings, URLs, WSGI and the Celery app.

Importing the package exposes the Celery app so that `celery -A webapp.config` works.
"""

from webapp.common.celery import app as celery_app

__all__ = ["celery_app"]
