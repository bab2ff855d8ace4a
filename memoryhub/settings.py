"""memoryhub settings: everything comes from the environment; with nothing set it
boots on the embedded defaults (see memoryhub/runtime/embedded.py and the README's
configuration table)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from memoryhub.runtime import embedded


def envbool(name: str, default: str = "False") -> bool:
    return os.environ.get(name, default).strip().lower() in ("1", "true", "yes", "on")


def envint(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


def envfloat(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


def envlist(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


# django-ratelimit's rate: a count, "/", and a period in seconds, minutes, hours or days,
# optionally with a multiple ("30/h", "50/15m").
RATE_FORMAT = re.compile(r"[1-9][0-9]{0,8}/([1-9][0-9]{0,5})?[smhd]")


def envrate(name: str, default: str) -> str:
    value = (os.environ.get(name) or default).strip()
    if not RATE_FORMAT.fullmatch(value):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"{name}={value!r} is not a rate: write a count and a period, such as 30/h or 50/15m."
        )
    return value


BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = embedded.data_dir()

DEBUG = envbool("DEBUG")
# A development key is fine only with DEBUG on; production must set SECRET_KEY.
SECRET_KEY = os.environ.get("SECRET_KEY") or ("insecure-development-key" if DEBUG else "")
if not SECRET_KEY:
    _key_file = DATA_DIR / "secret_key"
    if not _key_file.exists():
        import secrets

        DATA_DIR.mkdir(parents=True, exist_ok=True)
        _key_file.write_text(secrets.token_urlsafe(50))
        _key_file.chmod(0o600)
    SECRET_KEY = _key_file.read_text().strip()

# The public origin clients use, e.g. https://memory.example.com. Resource URLs
# (/mcp, /mcp/readonly) and OAuth metadata are built from it.
BASE_URL = os.environ.get("MEMORYHUB_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", f"127.0.0.1,localhost,{urlsplit(BASE_URL).hostname}")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", BASE_URL)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "oauth2_provider",
    "memoryhub",
    "reviews",
]

MIDDLEWARE = [
    "memoryhub.observability.RequestLogMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "memoryhub.middleware.SecurityHeadersMiddleware",
    # Before sessions, CSRF, static files and every view: NUL and lone surrogates get a 400 here.
    "memoryhub.middleware.HostileInputMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "memoryhub.pages.errors.DomainErrorMiddleware",
]

# People sign in with their workspace (login names are unique per workspace);
# accounts of no workspace (superusers) through Django's own backend.
AUTHENTICATION_BACKENDS = [
    "memoryhub.oauth.signin.WorkspaceBackend",
    "django.contrib.auth.backends.ModelBackend",
]

ROOT_URLCONF = "memoryhub.urls"
AUTH_USER_MODEL = "memoryhub.User"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

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
            ],
        },
    },
]

ASGI_APPLICATION = "memoryhub.asgi.application"


def _database_from_url(url: str, setting: str = "DATABASE_URL") -> dict:
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql", "pgsql"):
        raise ValueError(f"{setting} must hold postgres:// URLs: memoryhub runs on PostgreSQL with pgvector only")
    options = dict(parse_qsl(parts.query))
    return {
        "ENGINE": "memoryhub.database",
        "NAME": unquote(parts.path.lstrip("/")) or "memoryhub",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": unquote(parts.hostname or ""),
        "PORT": str(parts.port or ""),
        "OPTIONS": options,
    }


DATABASE_URL = os.environ.get("DATABASE_URL", "")
EMBEDDED_POSTGRES = not DATABASE_URL
if DATABASE_URL:
    _default_db = _database_from_url(DATABASE_URL)
else:
    _default_db = {
        "ENGINE": "memoryhub.database",
        "NAME": embedded.DATABASE_NAME,
        "USER": embedded.DATABASE_USER,
        "HOST": str(embedded.postgres_socket_dir(DATA_DIR)),
        "OPTIONS": {},
    }
# A pool of connections per process (psycopg's), as Django advises under ASGI instead
# of persistent connections: a request, a tool call or a token check borrows one and
# gives it back, instead of opening its own (bench/bench_mcp.py measured that cost).
# DATABASE_POOL=0 opens a connection per request again; only then does
# DATABASE_CONN_MAX_AGE apply.
DATABASE_POOL = envbool("DATABASE_POOL", "True")
if DATABASE_POOL:
    _default_db["OPTIONS"] = {
        **_default_db["OPTIONS"],
        "pool": {
            "min_size": 1,
            # One per asgiref worker thread (min(32, CPUs + 4): token checks and tool calls
            # run there), Django's sync thread, and a few to spare.
            "max_size": envint("DATABASE_POOL_MAX_SIZE", min(32, (os.cpu_count() or 1) + 4) + 4),
            "timeout": envfloat("DATABASE_POOL_TIMEOUT_SECONDS", 10.0),
        },
    }
    _default_db["CONN_MAX_AGE"] = 0
else:
    _default_db["CONN_MAX_AGE"] = envint("DATABASE_CONN_MAX_AGE", 0)
# The few statements every call runs again with other values (a token's check,
# finding the caller, a search's prologue and row check) are prepared on their
# connection (memoryhub.database). Off behind a pooler that cannot carry prepared
# statements between transactions (PgBouncer in transaction mode before 1.22,
# or without max_prepared_statements).
_default_db["OPTIONS"] = {**_default_db["OPTIONS"],
                          "prepared_statements": envbool("DATABASE_PREPARED_STATEMENTS", "True")}
_default_db["TEST"] = {"NAME": os.environ.get("DATABASE_TEST_NAME") or None}
DATABASES = {"default": _default_db}


def read_replica_database(url: str) -> dict:
    """A read replica's connection (DATABASE_READ_URLS): the primary's options,
    a short wait for a connection (a replica that does not answer costs a
    read that long before it runs on the primary), the tests' database on the
    primary's test database (a replica replays it)."""
    replica = _database_from_url(url, "DATABASE_READ_URLS")
    timeout = envfloat("DATABASE_READ_CONNECT_TIMEOUT_SECONDS", 2.0)
    options = {key: value for key, value in _default_db["OPTIONS"].items() if key != "pool"}
    # A replica that stops answering mid-statement (a network partition) fails the read within
    # seconds, not TCP's minutes; libpq applies these to TCP connections only.
    replica["OPTIONS"] = {**options, "connect_timeout": max(1, round(timeout)), "keepalives": 1,
                          "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
                          "tcp_user_timeout": 15000, **replica["OPTIONS"]}
    if DATABASE_POOL:
        replica["OPTIONS"]["pool"] = {**_default_db["OPTIONS"]["pool"], "min_size": 0, "timeout": timeout}
    replica["CONN_MAX_AGE"] = _default_db["CONN_MAX_AGE"]
    replica["TEST"] = {"MIRROR": "default"}
    return replica


# Streaming replicas searches, receipt replays and people's read pages read
# from (memoryhub.database.replicas); writes, receipts, proposals and token
# checks stay on the primary. None: every read on the primary.
for _number, _url in enumerate(envlist("DATABASE_READ_URLS"), start=1):
    DATABASES[f"replica{_number}"] = read_replica_database(_url)
MEMORYHUB_READ_REPLICAS = tuple(alias for alias in DATABASES if alias != "default")
DATABASE_ROUTERS = ["memoryhub.database.replicas.ReadRouter"]
# A replica that has not replayed what the primary had written longer ago than
# this serves nothing, and the pool reads `degraded` (a read needing a write
# the replica has not replayed goes to the primary whatever the bound).
MEMORYHUB_READ_REPLICA_MAX_LAG_SECONDS = envfloat("MEMORYHUB_READ_REPLICA_MAX_LAG_SECONDS", 10.0)
# How often a process reads a replica's state when nothing asks sooner, and
# asks again a replica that did not answer.
MEMORYHUB_READ_REPLICA_CHECK_SECONDS = envfloat("MEMORYHUB_READ_REPLICA_CHECK_SECONDS", 1.0)
MEMORYHUB_READ_REPLICA_RETRY_SECONDS = envfloat("MEMORYHUB_READ_REPLICA_RETRY_SECONDS", 5.0)
MEMORYHUB_READ_REPLICA_REDIS_TIMEOUT_SECONDS = envfloat("MEMORYHUB_READ_REPLICA_REDIS_TIMEOUT_SECONDS", 0.5)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Login names are unique per workspace, not globally (memoryhub.models.User); the
# workspace-aware backend (memoryhub.oauth.signin) handles that, as W004 asks.
SILENCED_SYSTEM_CHECKS = ["auth.W004"]

# With no REDIS_URL, the data folder's private Redis (started by `./dev serve`,
# by commands and by the test session, shared between them: memoryhub.runtime).
REDIS_URL = os.environ.get("REDIS_URL") or embedded.redis_url(DATA_DIR)
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": os.environ.get("MEMORYHUB_CACHE_PREFIX", "memoryhub"),
    }
}
RATELIMIT_USE_CACHE = "default"

# Celery: broker and results on Redis; a task is acknowledged only after it
# ran, so a killed worker's task is delivered again.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or REDIS_URL.replace("unix://", "redis+socket://", 1)
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or CELERY_BROKER_URL
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("MEMORYHUB_TASK_QUEUE", "memoryhub")
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": envint("CELERY_VISIBILITY_TIMEOUT", 600)}
CELERY_RESULT_EXPIRES = 3600
# The sweep: fragments whose enrichment (embedding, document link) is pending
# for longer than this are enqueued again; `./dev serve` runs the beat inside
# its worker, a deployment runs `celery -A memoryhub beat` once.
MEMORYHUB_SWEEP_SECONDS = envint("MEMORYHUB_SWEEP_SECONDS", 60)
# Receipt chain checkpoints: how often the head of each workspace's chain is
# signed (when it moved), and where the Ed25519 key lives (made on first use).
MEMORYHUB_RECEIPT_CHECKPOINT_SECONDS = envint("MEMORYHUB_RECEIPT_CHECKPOINT_SECONDS", 86400)
MEMORYHUB_RECEIPT_KEY_FILE = os.environ.get("MEMORYHUB_RECEIPT_KEY_FILE", "")
CELERY_BEAT_SCHEDULE = {
    "sweep-pending-enrichment": {"task": "memoryhub.tasks.sweep_pending", "schedule": float(MEMORYHUB_SWEEP_SECONDS)},
    "clean-erased-storage": {"task": "memoryhub.tasks.clean_erased_storage",
                             "schedule": float(MEMORYHUB_SWEEP_SECONDS)},
    "fold-fragment-tallies": {"task": "memoryhub.tasks.fold_tallies", "schedule": float(MEMORYHUB_SWEEP_SECONDS)},
    "checkpoint-receipt-chains": {
        "task": "memoryhub.tasks.checkpoint_receipts", "schedule": float(MEMORYHUB_RECEIPT_CHECKPOINT_SECONDS),
    },
}

PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
# WhiteNoise serves static files from the app folders directly, so the server
# needs no collectstatic step and no separate web server for them.
WHITENOISE_USE_FINDERS = True
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns on every request when it is missing
WHITENOISE_AUTOREFRESH = DEBUG

# Security headers. Cookies and HSTS tighten whenever DEBUG is off.
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
CSRF_FAILURE_VIEW = "memoryhub.pages.errors.csrf_failure"
_https = BASE_URL.startswith("https://")
SESSION_COOKIE_SECURE = _https and not DEBUG
CSRF_COOKIE_SECURE = _https and not DEBUG
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31536000) if (_https and not DEBUG) else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if envbool("BEHIND_TLS_PROXY") else None
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
)

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "EXCEPTION_HANDLER": "memoryhub.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {"TITLE": "memoryhub API", "VERSION": "1", "SERVE_INCLUDE_SCHEMA": False}

OAUTH2_PROVIDER_APPLICATION_MODEL = "oauth2_provider.Application"
# The authorisation server. The policy (audience, scopes per client, lifetimes,
# redirect rules) lives in memoryhub/oauth/policy.py; this wires it in and turns on the
# RFC 9700 behaviour. Durations are in seconds.
OAUTH2_PROVIDER = {
    "OAUTH2_VALIDATOR_CLASS": "memoryhub.oauth.policy.OAuth2Validator",
    "OAUTH2_SERVER_CLASS": "memoryhub.oauth.policy.Server",
    "SCOPES_BACKEND_CLASS": "memoryhub.oauth.policy.ScopePolicy",
    "SCOPES": {
        "memory.read": "Search the memory you can see",
        "memory.write": "Save facts as your private memory",
        "memory.audit": "Reopen your own search receipts",
        "workspace.admin": "Administer your workspace through the REST admin API",
        "ingest": "Internal: a connected source feeds shared memory",
        "introspection": "Internal: inspect tokens",
        "registration": "Internal: manage a dynamically registered client",
    },
    "DEFAULT_SCOPES": ["memory.read"],
    # People; memoryhub.oauth.policy.Server gives client-credentials tokens (agents) 3600.
    "ACCESS_TOKEN_EXPIRE_SECONDS": 15 * 60,
    "AUTHORIZATION_CODE_EXPIRE_SECONDS": 60,
    # Idle limit: a refresh chain unused for 30 days ends.
    "REFRESH_TOKEN_EXPIRE_SECONDS": 30 * 24 * 3600,
    "ROTATE_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "REFRESH_TOKEN_GRACE_PERIOD_SECONDS": 0,
    "PKCE_REQUIRED": True,
    "REQUEST_APPROVAL_PROMPT": "force",
    # http stays for loopback redirect URIs (RFC 8252); memoryhub.oauth.policy refuses other http hosts.
    "ALLOWED_REDIRECT_URI_SCHEMES": ["https", "http"],
    "ALLOW_URI_WILDCARDS": False,
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    "COMPLIANT_BCP_RFC9700_PKCE_REQUIRED": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
    "COMPLIANT_BCP_RFC9700_REFRESH_TOKEN": True,
    "COMPLIANT_BCP_RFC9700_REDIRECT_URI_MATCHING": True,
    # The issuer is the public origin, whatever Host a request arrived with.
    "OIDC_ISS_ENDPOINT": BASE_URL,
    "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token", "client_credentials"],
    "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none", "client_secret_basic", "client_secret_post"],
    "OAUTH2_PROTECTED_RESOURCE_NAME": "memoryhub",
    # Open registration for public MCP clients (memoryhub.oauth.views.RegisterClientView
    # enforces the policy); the registration token manages that one client only.
    "DCR_ENABLED": True,
    "DCR_REGISTRATION_PERMISSION_CLASSES": ("oauth2_provider.dcr.AllowAllDCRPermission",),
    "DCR_REGISTRATION_SCOPE": "registration",
    "DCR_REGISTRATION_TOKEN_EXPIRE_SECONDS": 90 * 24 * 3600,
    # Client ID metadata documents: a client names itself by a URL this server
    # fetches. Off (MEMORYHUB_CLIENT_METADATA_DOCUMENTS=off) for a server with no
    # outbound internet: it stops advertising them, and clients register instead.
    "CIMD_ENABLED": envbool("MEMORYHUB_CLIENT_METADATA_DOCUMENTS", "on"),
    "CIMD_METADATA_FETCHER": "memoryhub.oauth.policy.ClientMetadataFetcher",
}

# The memory domain's knobs.
MEMORYHUB_EMBEDDER = os.environ.get("MEMORYHUB_EMBEDDER", "memoryhub.embeddings.default_embedder")
MEMORYHUB_SEARCH_DEADLINE_SECONDS = envfloat("MEMORYHUB_SEARCH_DEADLINE_SECONDS", 20.0)
# HNSW candidate list per read; chosen with bench/search_bench.py (docs/benchmarks.md).
MEMORYHUB_HNSW_EF_SEARCH = envint("MEMORYHUB_HNSW_EF_SEARCH", 200)
MEMORYHUB_TOOL_DEADLINE_SECONDS = envfloat("MEMORYHUB_TOOL_DEADLINE_SECONDS", 25.0)
MEMORYHUB_RATE_PER_MINUTE = envint("MEMORYHUB_RATE_PER_MINUTE", 60)
MEMORYHUB_RATE_BURST = envint("MEMORYHUB_RATE_BURST", 10)
MEMORYHUB_ALLOWED_ORIGINS = envlist("MEMORYHUB_ALLOWED_ORIGINS", BASE_URL)
# Per client address (the connecting one, or what MEMORYHUB_TRUSTED_PROXIES forward):
# open client registrations, and failed sign-ins. Raise them when many people share
# one address (a company's NAT) or a proxy is not configured as trusted.
MEMORYHUB_REGISTRATIONS_PER_ADDRESS = envrate("MEMORYHUB_REGISTRATIONS_PER_ADDRESS", "30/h")
MEMORYHUB_SIGNIN_FAILURES_PER_ADDRESS = envrate("MEMORYHUB_SIGNIN_FAILURES_PER_ADDRESS", "50/15m")

# Edge deployment (memoryhub/oauth/exchange.py, memoryhub/mcp_adapter/internal_api.py): edge
# processes exchange each caller's token for a short-lived memory-service
# credential and call /internal/memory/*. Both stay off in a single process.
MEMORYHUB_INTERNAL_API = envbool("MEMORYHUB_INTERNAL_API")
# The credential's audience; empty means BASE_URL + "/internal/memory".
MEMORYHUB_SERVICE_AUDIENCE = os.environ.get("MEMORYHUB_SERVICE_AUDIENCE", "")
# Capped at the tool deadline (25 s): a credential lives as long as one call may.
MEMORYHUB_EXCHANGED_TOKEN_SECONDS = envfloat("MEMORYHUB_EXCHANGED_TOKEN_SECONDS", 25.0)

# Scraping /metrics from elsewhere than loopback (memoryhub.observability).
MEMORYHUB_METRICS_TOKEN = os.environ.get("MEMORYHUB_METRICS_TOKEN", "")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "memoryhub.observability.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler",
                             "formatter": "plain" if os.environ.get("MEMORYHUB_LOG_FORMAT") == "plain" else "json"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "memoryhub.enforcement": {"level": "WARNING"},
        "django.db.backends": {"level": "INFO"},
    },
}
