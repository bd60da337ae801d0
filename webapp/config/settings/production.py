"""Team / production deployment: every security setting on, secrets required."""

from django.core.exceptions import ImproperlyConfigured

from webapp.config.env import env_bool, env_int
from webapp.config.settings.base import *  # noqa: F403
from webapp.config.settings.base import ALLOWED_HOSTS, SECRET_KEY

if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5:
    raise ImproperlyConfigured(
        "Environment variable SECRET_KEY must be set to a random string of at least 50 characters "
        "in production, e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'."
    )
if not ALLOWED_HOSTS or "*" in ALLOWED_HOSTS:
    raise ImproperlyConfigured(
        "Environment variable ALLOWED_HOSTS must list the host names this site is served on "
        "(comma-separated), not '*'."
    )

DEBUG = env_bool("DEBUG", False)
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", True)
CSRF_COOKIE_SECURE = env_bool("SECURE_COOKIES", True)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
