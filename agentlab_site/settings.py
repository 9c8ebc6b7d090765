"""Agent Lab settings, read from the environment (see the README's configuration table)."""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from chat import prices

# Generic Django classes (ModelAdmin[Model], ModelForm[Model]) subscriptable at run time.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
# A checkout keeps templates/ and static/ at its top; an installed wheel carries them in this
# package, and keeps its var/ in the working directory rather than in site-packages.
CHECKOUT = (BASE_DIR / "templates").is_dir()
FILES_DIR = BASE_DIR if CHECKOUT else Path(__file__).resolve().parent
VAR_DIR = Path(os.environ.get("AGENTLAB_VAR_DIR", (BASE_DIR if CHECKOUT else Path.cwd()) / "var"))


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {value!r}")


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def _secret_key() -> str:
    """SECRET_KEY from the environment, else a random key generated once and kept in var/.

    Several hosts serving one site must share a key: set SECRET_KEY there.
    """
    if key := os.environ.get("SECRET_KEY"):
        return key
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


DEBUG = env_bool("DEBUG")
SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "chat.apps.DaphneConfig",  # daphne's runserver, first: it replaces staticfiles' own
    "chat.admin_site.LabAdminConfig",  # django.contrib.admin, with the Usage page
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "axes",
    "chat",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "agentlab_site.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [FILES_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.csp",
                "chat.context_processors.theme",
                "chat.context_processors.sidebar",
            ],
        },
    },
]

ASGI_APPLICATION = "agentlab_site.asgi.application"

_SQLITE_OPTIONS = {
    # WAL lets readers run beside the one writer; IMMEDIATE takes the write lock up front so
    # concurrent runs wait on the busy timeout instead of failing with "database is locked".
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
}
# Persistent connections: every database_sync_to_async call otherwise opens a new one.
_PERSISTENT = {"conn_max_age": 600, "conn_health_checks": True}
if database_url := os.environ.get("DATABASE_URL"):
    DATABASES = {"default": dj_database_url.parse(database_url, **_PERSISTENT)}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        DATABASES["default"]["OPTIONS"] = _SQLITE_OPTIONS
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "agentlab.sqlite3",
            "OPTIONS": _SQLITE_OPTIONS,
            "CONN_MAX_AGE": _PERSISTENT["conn_max_age"],
            "CONN_HEALTH_CHECKS": _PERSISTENT["conn_health_checks"],
            # One file per test process, so parallel test runs do not share a database.
            "TEST": {"NAME": VAR_DIR / f"test-agentlab-{os.getpid()}.sqlite3"},
        }
    }


def redis_channel_layer(url: str) -> dict[str, Any]:
    """The channel layer of several processes: Redis pub/sub.

    A group send is one PUBLISH, and each process reads the frames of all its sockets from one
    subscription (the list-based layer popped one message per round trip). Nothing is stored:
    a frame reaches the processes subscribed when it is published, so there is no capacity to
    size, and a process that is reconnecting misses frames (a run's last frame carries its
    whole reply). The subscription's reads pass their own short timeout, so redis-py's defaults
    suit it: 5 s for a command, and a pool the layer takes two connections of (it publishes
    one message at a time). `chat.redis_layer` has the layer, with a reader that starts as
    soon as its process subscribes.
    """
    from redis.connection import parse_url  # only a Redis site pays for the import

    # Pub/sub ignores the database number: it goes into the channel names, so that sites
    # sharing a Redis server on different databases do not hear each other.
    database = parse_url(url).get("db", 0)
    return {
        "BACKEND": "chat.redis_layer.PubSubChannelLayer",
        "CONFIG": {"hosts": [url], "prefix": f"agentlab.{database}."},
    }


if redis_url := os.environ.get("REDIS_URL"):
    CHANNEL_LAYERS = {"default": redis_channel_layer(redis_url)}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "chat.layers.LocalChannelLayer"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [FILES_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns about a missing one
# Serve static files straight from the apps (no collectstatic); on by default only in DEBUG.
WHITENOISE_USE_FINDERS = env_bool("WHITENOISE_USE_FINDERS", DEBUG)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Attachments go through Django's storage API: files under var/media by default. Several
# processes must read the same files: a scaled-out site shares the folder
# (AGENTLAB_MEDIA_DIR) or sets STORAGES["default"] to shared storage in its own settings module
# (django-storages for S3-compatible services). Files are served by the app, never by URL.
MEDIA_ROOT = Path(os.environ.get("AGENTLAB_MEDIA_DIR") or VAR_DIR / "media")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
AGENTLAB_MAX_ATTACHMENT_BYTES = int(
    os.environ.get("AGENTLAB_MAX_ATTACHMENT_BYTES", str(20 * 1024 * 1024))
)
# Behind HTTPS (production): secure cookies, HSTS and redirects to https.
AGENTLAB_HTTPS = env_bool("AGENTLAB_HTTPS")
SECURE_SSL_REDIRECT = AGENTLAB_HTTPS
SESSION_COOKIE_SECURE = AGENTLAB_HTTPS
CSRF_COOKIE_SECURE = AGENTLAB_HTTPS
SECURE_HSTS_SECONDS = 31_536_000 if AGENTLAB_HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = AGENTLAB_HTTPS
SECURE_HSTS_PRELOAD = env_bool("AGENTLAB_HSTS_PRELOAD", AGENTLAB_HTTPS)
if env_bool("AGENTLAB_TRUST_X_FORWARDED_PROTO"):
    # Only behind a proxy that sets this header itself and drops the client's.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

# Scripts only from this origin (or with the per-request nonce); no inline handlers, no eval.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF],
    # blob: the composer's thumbnails of files not yet sent.
    "img-src": [CSP.SELF, "data:", "blob:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"

# Login throttling (django-axes), on the login page and the admin's: after this many failures
# for one username from one address, that pair is refused until the cool-off has passed. Keyed on
# the pair, so a stranger guessing cannot lock a user out from elsewhere. Behind a proxy, run
# daphne with --proxy-headers so the address is the client's, not the proxy's.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(os.environ.get("AGENTLAB_LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("AGENTLAB_LOGIN_COOLOFF_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# Each attempt during a lock-out starts the cool-off again: the page's "try again in" is exact.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = True
AXES_LOCKOUT_CALLABLE = "chat.lockout.locked_out"

# The model provider. No OPENAI_BASE_URL means the built-in scripted model.
OPENAI_BASE_URL = os.environ.get("OPENAI_BASE_URL", "")
OPENAI_API_KEY = os.environ.get("OPENAI_API_KEY", "")
# Variables a provider profile may name as its key besides OPENAI_API_KEY and AGENTLAB_KEY_*;
# never SECRET_KEY, DATABASE_URL or REDIS_URL (chat.runs.providers keeps the rule).
AGENTLAB_KEY_VARIABLES = env_list("AGENTLAB_KEY_VARIABLES", "")
# Variables an MCP server's headers or environment may name besides any AGENTLAB_MCP_KEY_*
# variable: a provider's key (OPENAI_API_KEY, AGENTLAB_KEY_*) only if listed here on purpose.
AGENTLAB_MCP_KEY_VARIABLES = env_list("AGENTLAB_MCP_KEY_VARIABLES", "")
AGENTLAB_MODEL = os.environ.get("AGENTLAB_MODEL", "")
# Prices per million tokens, by model: the admin's Usage page shows cost where one is set.
try:
    AGENTLAB_MODEL_PRICES = prices.parse(os.environ.get("AGENTLAB_MODEL_PRICES", ""))
except ValueError as exc:
    raise ImproperlyConfigured(f"AGENTLAB_MODEL_PRICES: {exc}") from None
# Content of a tool-call-only assistant message on the wire: "empty" (""), "null", or "omit".
AGENTLAB_TOOL_CALL_CONTENT = os.environ.get("AGENTLAB_TOOL_CALL_CONTENT", "empty")
if AGENTLAB_TOOL_CALL_CONTENT not in {"empty", "null", "omit"}:
    raise ImproperlyConfigured("AGENTLAB_TOOL_CALL_CONTENT must be empty, null or omit.")
# Who titles a conversation after its first reply: "model" (the conversation's own model; the
# scripted model's rule offline) or "off" (the first message's first 60 characters stay).
AGENTLAB_TITLES = os.environ.get("AGENTLAB_TITLES", "model")
if AGENTLAB_TITLES not in {"model", "off"}:
    raise ImproperlyConfigured("AGENTLAB_TITLES must be model or off.")
# Seconds between the scripted model's words: visible streaming offline, zero in tests.
AGENTLAB_SCRIPTED_DELAY = float(os.environ.get("AGENTLAB_SCRIPTED_DELAY", "0.03"))
# Keep every model call's raw stream (chunk by chunk, with arrival times) for the inspector.
AGENTLAB_STORE_RAW_STREAM = env_bool("AGENTLAB_STORE_RAW_STREAM", True)
# Days a raw stream is kept: `manage.py prune` drops older ones (requests and transcripts stay).
# Empty: kept forever.
_KEEP_RAW_DAYS = os.environ.get("AGENTLAB_KEEP_RAW_DAYS", "").strip()
if _KEEP_RAW_DAYS and not (_KEEP_RAW_DAYS.isascii() and _KEEP_RAW_DAYS.isdigit()):
    raise ImproperlyConfigured(
        "AGENTLAB_KEEP_RAW_DAYS must be a whole number of days (or empty: keep forever)."
    )
AGENTLAB_KEEP_RAW_DAYS = int(_KEEP_RAW_DAYS) if _KEEP_RAW_DAYS else None
# A streaming reply's text is saved at most this often: a killed process loses at most this much.
AGENTLAB_CHECKPOINT_SECONDS = float(os.environ.get("AGENTLAB_CHECKPOINT_SECONDS", "2"))
# On SIGTERM/SIGINT, seconds the runs of a stopping process get to wind up before it exits.
AGENTLAB_SHUTDOWN_SECONDS = float(os.environ.get("AGENTLAB_SHUTDOWN_SECONDS", "10"))
# A process holds each run it executes by a lease of this many seconds, renewed every
# AGENTLAB_HEARTBEAT_SECONDS; every AGENTLAB_CLAIM_SECONDS a server process claims and resumes
# runs whose lease has expired (a killed process's runs resume within lease + claim seconds).
AGENTLAB_LEASE_SECONDS = float(os.environ.get("AGENTLAB_LEASE_SECONDS", "10"))
AGENTLAB_HEARTBEAT_SECONDS = float(os.environ.get("AGENTLAB_HEARTBEAT_SECONDS", "3"))
AGENTLAB_CLAIM_SECONDS = float(os.environ.get("AGENTLAB_CLAIM_SECONDS", "2"))
if not 0 < AGENTLAB_HEARTBEAT_SECONDS < AGENTLAB_LEASE_SECONDS:
    raise ImproperlyConfigured(
        "AGENTLAB_HEARTBEAT_SECONDS must be above 0 and below AGENTLAB_LEASE_SECONDS."
    )
# A run resumed more often than this (its process died every time) fails, saying so.
AGENTLAB_MAX_RESUMES = int(os.environ.get("AGENTLAB_MAX_RESUMES", "3"))
# A run whose tool calls wait for a person's approval holds no process; undecided past this many
# seconds, its calls are denied ("no decision in time") and the run goes on.
AGENTLAB_APPROVAL_TIMEOUT = float(os.environ.get("AGENTLAB_APPROVAL_TIMEOUT", str(24 * 3600)))
# Modules imported at start-up that register their own tools with chat.agent.default_registry.
AGENTLAB_TOOL_MODULES = env_list("AGENTLAB_TOOL_MODULES", "")
AGENTLAB_MAX_MESSAGE_CHARS = int(os.environ.get("AGENTLAB_MAX_MESSAGE_CHARS", "32000"))
AGENTLAB_MAX_TOOL_RESULT_CHARS = int(os.environ.get("AGENTLAB_MAX_TOOL_RESULT_CHARS", "100000"))
# Per-connection frame budget: a burst, then this many frames a second; a flood closes it.
AGENTLAB_WS_BURST = int(os.environ.get("AGENTLAB_WS_BURST", "10"))
AGENTLAB_WS_FRAMES_PER_SECOND = float(os.environ.get("AGENTLAB_WS_FRAMES_PER_SECOND", "2"))
# Largest WebSocket frame the server reads (`python -m chat.serve`, runserver). Far above the
# longest accepted message (JSON escapes take up to 12 bytes a character), so an oversized
# message reaches the consumer and gets the "too long" notice; a bigger frame is refused from
# its header, before it is buffered, with close code 1009.
_WS_BYTES_PER_CHAR = 16
AGENTLAB_WS_MAX_FRAME_BYTES = int(
    os.environ.get("AGENTLAB_WS_MAX_FRAME_BYTES")
    or max(4 * 1024 * 1024, _WS_BYTES_PER_CHAR * AGENTLAB_MAX_MESSAGE_CHARS)
)
if AGENTLAB_WS_MAX_FRAME_BYTES < _WS_BYTES_PER_CHAR * AGENTLAB_MAX_MESSAGE_CHARS:
    raise ImproperlyConfigured(
        f"AGENTLAB_WS_MAX_FRAME_BYTES must be at least {_WS_BYTES_PER_CHAR} bytes a character of "
        f"AGENTLAB_MAX_MESSAGE_CHARS ({_WS_BYTES_PER_CHAR * AGENTLAB_MAX_MESSAGE_CHARS:,}), or "
        "the longest accepted message may not arrive."
    )
DAPHNE_WEBSOCKET_MAX_MESSAGE_SIZE = DAPHNE_WEBSOCKET_MAX_FRAME_SIZE = AGENTLAB_WS_MAX_FRAME_BYTES

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"chat": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")}},
}
