"""Settings shared by every deployment.

Nothing here needs a server: with no environment variables set, Crucible runs on a
SQLite file and Celery's filesystem transport under CRUCIBLE_DATA_DIR (the
embedded default). DATABASE_URL and CELERY_BROKER_URL switch to PostgreSQL and
Redis for teams; the code path is the same.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from webapp.config.env import env_bool, env_dir, env_int, env_list, env_str, env_url

BASE_DIR = Path(__file__).resolve().parents[3]

DATA_DIR = env_dir("CRUCIBLE_DATA_DIR", BASE_DIR / ".crucible")

SECRET_KEY = env_str("SECRET_KEY") or ""
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    # Serves Swagger UI's JS/CSS for /api/docs from our static files (no CDN, no inline script).
    "ninja",
    "axes",
    "webapp.projects",
    "webapp.datasets",
    "webapp.verifiers",
    "webapp.runs",
    "webapp.trajectories",
    "webapp.dashboard",
    "webapp.api",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # A NUL or a lone surrogate in the URL is refused here with a 400, before any view
    # can put it into a query (PostgreSQL would answer it with an error, i.e. a 500).
    "webapp.dashboard.middleware.UnstorableUrlMiddleware",
    # Serves collected static files (plotly.js, htmx, CSS) in production without a proxy.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "webapp.api.throttle.BadTokenThrottleMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "webapp.dashboard.middleware.ContentSecurityPolicyMiddleware",
    # Last, as django-axes asks: turns a lockout into the "try again in …" response.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "webapp.config.urls"
WSGI_APPLICATION = "webapp.config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "webapp.dashboard.context_processors.shell",
            ],
        },
    },
]


# WAL + IMMEDIATE transactions + a busy timeout let the web process and the
# worker process share one SQLite file without "database is locked".
SQLITE_OPTIONS = {
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,
}


def _database_from_env() -> dict:
    """PostgreSQL (or any dj-database-url URL) from DATABASE_URL, else SQLite in DATA_DIR."""
    url = env_url("DATABASE_URL", None, schemes=("postgres", "postgresql", "sqlite"))
    if url is None:
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": DATA_DIR / "crucible.sqlite3", "OPTIONS": SQLITE_OPTIONS}
    try:
        config = dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True)
    except ValueError as exc:
        raise ImproperlyConfigured(f"Environment variable DATABASE_URL is not a valid URL: {exc}") from None
    if config["ENGINE"] == "django.db.backends.sqlite3":
        config["OPTIONS"] = SQLITE_OPTIONS
        config["CONN_MAX_AGE"] = 0
    else:
        config["OPTIONS"] = {**POSTGRES_OPTIONS, **config.get("OPTIONS", {})}
    return config


POSTGRES_OPTIONS = {"options": "-c jit=off"}
"""PostgreSQL's JIT off for the app's connections: it compiles a query whose estimated cost is high
(the runs table sorted by a metric: a subquery a run), which took 100 of its 167 ms, while the pages
and endpoints answer in milliseconds to tens of them. A DATABASE_URL with ?options=... replaces this."""


DATABASES = {"default": _database_from_env()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Throttling. The client address is REMOTE_ADDR; behind N reverse proxies that append to
# X-Forwarded-For (nginx: proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for),
# set CRUCIBLE_TRUSTED_PROXY_COUNT=N. Default 0: the header is ignored (it can be forged).
CRUCIBLE_TRUSTED_PROXY_COUNT = env_int("CRUCIBLE_TRUSTED_PROXY_COUNT", 0, minimum=0)

# Failed logins (django-axes, counted in the database so all processes share them): after
# CRUCIBLE_LOGIN_FAILURE_LIMIT failures for one user name from one address, that pair is
# refused (429, with when to retry) for CRUCIBLE_LOGIN_COOLOFF_MINUTES, right password included.
AUTHENTICATION_BACKENDS = [
    "webapp.projects.services.throttle.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("CRUCIBLE_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("CRUCIBLE_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# The lock runs from the failure that reached the limit; tries during it do not extend it.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_CLIENT_IP_CALLABLE = "webapp.projects.services.throttle.client_ip"
AXES_LOCKOUT_CALLABLE = "webapp.projects.services.throttle.login_lockout_response"
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_VERBOSE = False  # no banner on every start; lockouts are still logged

# Bad API tokens: CRUCIBLE_TOKEN_FAILURE_LIMIT within CRUCIBLE_TOKEN_COOLOFF_SECONDS from one
# address, then every bearer request from it gets 429 + Retry-After for that long.
CRUCIBLE_TOKEN_FAILURE_LIMIT = env_int("CRUCIBLE_TOKEN_FAILURE_LIMIT", 10, minimum=1)
CRUCIBLE_TOKEN_COOLOFF_SECONDS = env_int("CRUCIBLE_TOKEN_COOLOFF_SECONDS", 600, minimum=1)

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # plotly.js from the installed plotly package, as static/vendor/plotly.min.js.
    "webapp.dashboard.staticfiles.PlotlyFinder",
]
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = env_bool("SECURE_COOKIES", False)
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

# Celery: the database is the source of truth for jobs; a message only wakes a worker.
_default_broker = "filesystem://"
CELERY_BROKER_URL = env_url(
    "CELERY_BROKER_URL", _default_broker, schemes=("redis", "rediss", "filesystem", "memory", "amqp")
)
CELERY_BROKER_DIR = DATA_DIR / "broker"
if CELERY_BROKER_URL.startswith("filesystem"):
    for _sub in ("in", "processed", "control"):
        (CELERY_BROKER_DIR / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(CELERY_BROKER_DIR / "in"),
        "data_folder_out": str(CELERY_BROKER_DIR / "in"),
        "processed_folder": str(CELERY_BROKER_DIR / "processed"),
        "control_folder": str(CELERY_BROKER_DIR / "control"),
        "store_processed": False,
    }
else:
    # Longer than the longest job, so Redis never redelivers a message that a
    # healthy worker is still working on (the lease and reaper handle dead workers).
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 7 * 24 * 3600, minimum=60)
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# The queue the periodic tasks go to (every worker started with -B must consume it).
_BEAT_QUEUE = env_str("CRUCIBLE_BEAT_QUEUE", "default")
CELERY_BEAT_SCHEDULE = {
    "reap-expired-jobs": {
        "task": "workers.tasks.reap_expired_jobs",
        "schedule": float(env_int("CRUCIBLE_REAPER_INTERVAL_SECONDS", 30, minimum=1)),
        "options": {"queue": _BEAT_QUEUE},
    },
    "advance-experiments": {
        "task": "workers.tasks.advance_experiments",
        "schedule": float(env_int("CRUCIBLE_REAPER_INTERVAL_SECONDS", 30, minimum=1)),
        "options": {"queue": _BEAT_QUEUE},
    },
}
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")

CRUCIBLE_JOB_MAX_ATTEMPTS = env_int("CRUCIBLE_JOB_MAX_ATTEMPTS", 3, minimum=1)
CRUCIBLE_JOB_LEASE_SECONDS = env_int("CRUCIBLE_JOB_LEASE_SECONDS", 120, minimum=5)
CRUCIBLE_JOB_TIMEOUT_SECONDS = env_int("CRUCIBLE_JOB_TIMEOUT_SECONDS", 24 * 3600, minimum=10)
CRUCIBLE_RUNS_DIR = DATA_DIR / "runs"
# Folders under which a project's model may be a folder on this machine (settings page, API):
# a path anywhere else is refused, so a registered model cannot make a job read the server's
# files. Comma-separated absolute paths; default DATA_DIR/models (training's GGUF conversions
# land there too). A Hugging Face id needs no root.
CRUCIBLE_MODEL_ROOTS = [Path(p).expanduser() for p in env_list("CRUCIBLE_MODEL_ROOTS", [str(DATA_DIR / "models")])]

# The llm_judge verifier (docs/deploy.md, "LLM judges"): an editor chooses its base_url, so the
# operator decides what it may reach. Empty CRUCIBLE_JUDGE_ALLOWED_HOSTS: any host with a public
# address; otherwise host names (*.example.com), IPs and networks (10.0.0.0/8), with an optional
# :port. Loopback (a model server on this machine, but also the database and Redis) only with
# CRUCIBLE_JUDGE_ALLOW_LOOPBACK=true; link-local and cloud metadata never. Judge keys are the
# environment variables CRUCIBLE_JUDGE_KEY_<NAME> and nothing else (read where the judge runs).
CRUCIBLE_JUDGE_ALLOWED_HOSTS = env_list("CRUCIBLE_JUDGE_ALLOWED_HOSTS", [])
# Webhook deliveries go to this queue (light work: the default queue's worker takes it).
CRUCIBLE_WEBHOOK_QUEUE = env_str("CRUCIBLE_WEBHOOK_QUEUE", "default")
# Where people reach this server: the links in webhook notifications start with it.
CRUCIBLE_PUBLIC_URL = (env_str("CRUCIBLE_PUBLIC_URL", "http://127.0.0.1:8000") or "").rstrip("/")
CRUCIBLE_JUDGE_ALLOW_LOOPBACK = env_bool("CRUCIBLE_JUDGE_ALLOW_LOOPBACK", False)
CRUCIBLE_JUDGE_MAX_SECONDS = env_int("CRUCIBLE_JUDGE_MAX_SECONDS", 120, minimum=1)
CRUCIBLE_JUDGE_MAX_RESPONSE_BYTES = env_int("CRUCIBLE_JUDGE_MAX_RESPONSE_BYTES", 2_000_000, minimum=1024)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # django-axes logs every successful login at INFO; lockouts are warnings and stay visible.
    # runserver logs every request at INFO: quiet by default (4xx are warnings, 5xx errors, both
    # still shown); CRUCIBLE_REQUEST_LOG_LEVEL=INFO shows every request.
    "loggers": {"axes": {"level": "WARNING"},
                "django.server": {"level": env_str("CRUCIBLE_REQUEST_LOG_LEVEL", "WARNING")}},
}
