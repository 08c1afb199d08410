"""Airlock settings: one module, driven by environment variables.

With no DATABASE_URL / REDIS_URL Airlock runs embedded: SQLite in WAL mode, a filesystem
Celery broker and a database-backed channel layer, so a laptop needs nothing but Python.
With them set it is the production stack (Postgres, Redis). Same code paths either way.
"""

from __future__ import annotations

import importlib.util
import os
from datetime import timedelta
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("AIRLOCK_VAR_DIR", BASE_DIR / "var")).resolve()
# django-ninja's folder, found without importing it. Its Swagger UI page and files are served from there
# (templates and static files below, apps/api/api.py) rather than by listing "ninja" as an app: an app is imported
# by every process, and ninja's import brings its settings and django.test (~2 MB) into each worker and gateway
# process, which never serve the page.
NINJA_DIR = Path(importlib.util.find_spec("ninja").origin).parent


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = env_bool("DEBUG", default=False)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise RuntimeError("SECRET_KEY must be set when DEBUG is off (see docs/operations.md: Configuration).")
    SECRET_KEY = "airlock-insecure-development-key-do-not-use-in-production"

# Earlier SECRET_KEYs, newest first: sessions and signed links made under them stay valid while you
# rotate SECRET_KEY (docs/operations.md, "Rotate SECRET_KEY"). Secrets at rest use their own key.
SECRET_KEY_FALLBACKS = env_list("SECRET_KEY_FALLBACKS")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]" if DEBUG else "")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

# Fernet keys (comma-separated, newest first) for secrets at rest. In DEBUG a key derived
# from SECRET_KEY is used when none is given; a deploy check refuses that in production.
AIRLOCK_ENCRYPTION_KEYS = env_list("AIRLOCK_ENCRYPTION_KEY")
# Self-serve sign-up (anyone who can reach the page creates an organisation): on for development only.
AIRLOCK_ALLOW_SIGNUP = env_bool("AIRLOCK_ALLOW_SIGNUP", default=DEBUG)
AIRLOCK_EGRESS_ALLOW_PRIVATE = env_bool("AIRLOCK_EGRESS_ALLOW_PRIVATE", default=False)
# Internal hosts Airlock may still reach (a local model server, an internal MCP server): host names,
# addresses or CIDRs, comma-separated, e.g. "ollama.internal,10.0.5.0/24" (apps/core/egress.py).
AIRLOCK_EGRESS_ALLOW = env_list("AIRLOCK_EGRESS_ALLOW")
AIRLOCK_BASE_URL = os.environ.get("AIRLOCK_BASE_URL", "http://127.0.0.1:8000")
# Slack's Web API (tests point it at a fake on loopback); every call passes the egress guard.
AIRLOCK_SLACK_API_URL = os.environ.get("AIRLOCK_SLACK_API_URL", "https://slack.com/api/")
# The MCP gateway (`uvicorn config.gateway:app`): its public endpoint URL (shown on the keys page),
# extra allowed browser origins (hosts come from ALLOWED_HOSTS), request body limit, registry poll.
AIRLOCK_GATEWAY_URL = os.environ.get("AIRLOCK_GATEWAY_URL", "http://127.0.0.1:8001/mcp")
AIRLOCK_GATEWAY_ALLOWED_ORIGINS = env_list("AIRLOCK_GATEWAY_ALLOWED_ORIGINS")
AIRLOCK_GATEWAY_MAX_BODY_BYTES = int(os.environ.get("AIRLOCK_GATEWAY_MAX_BODY_BYTES", str(1024 * 1024)))
AIRLOCK_GATEWAY_POLL_S = float(os.environ.get("AIRLOCK_GATEWAY_POLL_S", "1.0"))
AIRLOCK_GATEWAY_VIEW_REFRESH_S = float(os.environ.get("AIRLOCK_GATEWAY_VIEW_REFRESH_S", "30"))  # safety net

# The gateway as an OAuth protected resource; the web app (django-oauth-toolkit) is its authorization
# server: metadata at /.well-known/oauth-authorization-server, dynamic client registration, the
# authorization code flow with PKCE (S256 only), and a consent page where the person picks the agent.
# The issuer is the web app's own URL as requests reach it; the gateway names AIRLOCK_BASE_URL as its
# authorization server, so the two must be the same public address.
AIRLOCK_OAUTH_ACCESS_TOKEN_S = int(os.environ.get("AIRLOCK_OAUTH_ACCESS_TOKEN_S", "3600"))
OAUTH2_PROVIDER = {
    "PKCE_REQUIRED": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,  # RFC 9207 `iss` on the redirect: mix-up defence
    # RFC 9700 (the OAuth security BCP) throughout: no implicit or password grant, tokens never in a URL's query,
    # only their hashes stored, a replayed refresh token revokes its family.
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "DCR_ENABLED": True,
    # Any host may register a client; registering grants nothing until a person consents.
    "DCR_REGISTRATION_PERMISSION_CLASSES": ("oauth2_provider.dcr.AllowAllDCRPermission",),
    "SCOPES": {"mcp:tools": "Use one Airlock agent's tools through the MCP gateway"},
    "DEFAULT_SCOPES": ["mcp:tools"],
    "ACCESS_TOKEN_EXPIRE_SECONDS": AIRLOCK_OAUTH_ACCESS_TOKEN_S,
    "REFRESH_TOKEN_EXPIRE_SECONDS": int(os.environ.get("AIRLOCK_OAUTH_REFRESH_TOKEN_S", str(30 * 24 * 3600))),
    "AUTHORIZATION_CODE_EXPIRE_SECONDS": 120,
    "ROTATE_REFRESH_TOKEN": True,
    "REQUEST_APPROVAL_PROMPT": "force",  # the consent page every time: the agent is picked there
    "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none", "client_secret_basic", "client_secret_post"],
    "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
    "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"],
}
# Plain-http redirect URIs stay allowed: MCP hosts on a person's machine (Claude Desktop, the SDK's client) take
# their OAuth callback on http://127.0.0.1 (RFC 8252 loopback redirects), which https-only would refuse.
SILENCED_SYSTEM_CHECKS = ["oauth2_provider.W008"]
OAUTH2_PROVIDER_APPLICATION_MODEL = "oauth2_provider.Application"
OAUTH2_PROVIDER_ACCESS_TOKEN_MODEL = "oauth2_provider.AccessToken"
OAUTH2_PROVIDER_REFRESH_TOKEN_MODEL = "oauth2_provider.RefreshToken"
OAUTH2_PROVIDER_ID_TOKEN_MODEL = "oauth2_provider.IDToken"
OAUTH2_PROVIDER_GRANT_MODEL = "oauth2_provider.Grant"
# Argument names masked in traces, exports, run events and the audit log, on top of the built-in
# secret patterns (token, password, api_key, authorization, ...). Whole names, case-insensitive.
AIRLOCK_SENSITIVE_ARGUMENTS = env_list("AIRLOCK_SENSITIVE_ARGUMENTS") or ["ssn", "card_number", "cvv", "iban",
                                                                          "otp", "pin_code", "date_of_birth"]
# A run's lease (apps/runs/lease.py; docs/operations.md, "When a worker dies"): a heartbeat renews it every
# HEARTBEAT_S while a worker drives the run; beat's sweeper, every SWEEP_S, hands a run whose lease went
# LEASE_S unrenewed to another worker; a driver with no progress for STUCK_S is given up on.
AIRLOCK_RUN_LEASE_S = float(os.environ.get("AIRLOCK_RUN_LEASE_S", "6"))
AIRLOCK_RUN_HEARTBEAT_S = float(os.environ.get("AIRLOCK_RUN_HEARTBEAT_S", "2"))
AIRLOCK_RUN_SWEEP_S = float(os.environ.get("AIRLOCK_RUN_SWEEP_S", "1"))
AIRLOCK_RUN_STUCK_S = float(os.environ.get("AIRLOCK_RUN_STUCK_S", "900"))
AIRLOCK_RUN_REQUEUE_AFTER_S = float(os.environ.get("AIRLOCK_RUN_REQUEUE_AFTER_S", "60"))

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "django_htmx",
    "template_partials",
    "axes",  # sign-in throttling (see Auth below)
    # Single sign-on through each organisation's OpenID Connect provider (see Auth below).
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    "allauth.mfa",  # TOTP and recovery codes
    "oauth2_provider",  # the authorization server MCP hosts sign in through to reach the gateway
    # Domain apps, in dependency order (ARCHITECTURE.md section 2).
    "apps.core",
    "apps.audit",
    "apps.accounts",
    "apps.notifications",
    "apps.costs",
    "apps.registry",
    "apps.agents",
    "apps.crews",
    "apps.approvals",
    "apps.runs",
    "apps.gateway",
    "apps.api",
    "apps.web",
    "apps.demo",
]

MIDDLEWARE = [
    "apps.web.middleware.ProbeMiddleware",  # /healthz, /readyz, /metrics: answered before host checks
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "apps.web.middleware.RequestContextMiddleware",  # request id, org, user on every log line
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "apps.web.csp.ContentSecurityPolicyMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "apps.web.middleware.CurrentOrganizationMiddleware",
    "apps.web.errors.DomainErrorMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns a locked-out sign-in into the 429 page
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates", NINJA_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "apps.web.context_processors.airlock",
            ],
        },
    }
]

# --- Database -------------------------------------------------------------------------------
DATABASE_URL = os.environ.get("DATABASE_URL", "")
VAR_DIR.mkdir(parents=True, exist_ok=True)
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)}
    if DATABASES["default"]["ENGINE"].endswith("postgresql") and env_bool("AIRLOCK_DB_PREPARED", default=True):
        # Parameters bound by the server, and a statement run 5 times on a connection prepared there
        # (psycopg's default; Django turns it off for the sake of transaction-mode poolers).
        # AIRLOCK_DB_PREPARED=0 behind a pooler that cannot keep prepared statements (PgBouncer
        # transaction mode before 1.21).
        # Each execution is still planned for its own parameters: a plan made once for any parameters
        # (Postgres' "generic" plan) cannot use a partial index whose predicate is a parameter here, and
        # the run list's "has findings" filter went from 12 to 213 ms at 100k runs (bench/history.py).
        # Workers, whose statements are the run engine's by-id reads and writes, allow generic plans
        # (apps.core.db.allow_generic_plans, from config/celery.py): 9.0 -> 8.1 ms per engine step.
        options = DATABASES["default"].setdefault("OPTIONS", {})
        options.update(server_side_binding=True, prepare_threshold=5)
        options["options"] = f"{options.get('options', '')} -c plan_cache_mode=force_custom_plan".strip()
    # Workers LISTEN for changes to the runs they drive (apps/runs/store/notices.py). LISTEN needs a session
    # of its own: behind a pooler in transaction mode (PgBouncer) say 0, and the engine reads every step.
    AIRLOCK_CHANGE_NOTICES = env_bool("AIRLOCK_CHANGE_NOTICES", default=True)
    if env_bool("AIRLOCK_DB_POOL") and DATABASES["default"]["ENGINE"].endswith("postgresql"):
        # ASGI processes (web, gateway; config/asgi.py and config/gateway.py set this) run a request's ORM
        # calls on a thread of that request: persistent per-thread connections pile up until Postgres
        # refuses everyone (bench/load.py: 91 idle connections from one web process serving 100 run
        # pages). They share a pool instead (Django's psycopg pool), as Django's docs advise for ASGI.
        # CONN_HEALTH_CHECKS makes Django's pool test a connection as it leaves the pool, so one Postgres
        # closed (a restart, a failover, pg_terminate_backend) is replaced instead of failing a request.
        DATABASES["default"].update(CONN_MAX_AGE=0, CONN_HEALTH_CHECKS=True)
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1, "max_size": int(os.environ.get("AIRLOCK_DB_POOL_SIZE", "20")), "timeout": 30}
else:
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": VAR_DIR / "airlock.sqlite3"}}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # A web process and a worker write at once: WAL + IMMEDIATE transactions + a busy
    # timeout gave zero "database is locked" errors in a 2-writer stress here.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000",
        "transaction_mode": "IMMEDIATE",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- web processes ---------------------------------------------------------------------------

def _switch_interval_ms() -> float:
    raw = os.environ.get("AIRLOCK_WEB_SWITCH_INTERVAL_MS", "1")
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 0 < value <= 100:
        raise RuntimeError(f"AIRLOCK_WEB_SWITCH_INTERVAL_MS must be a number of milliseconds above 0 and at most "
                           f"100, not {raw!r} (see docs/operations.md: Configuration).")
    return value


# How long a thread of a web process runs Python before another that waits is let in (Python's switch interval,
# 5 ms by default). The event loop that answers every socket and request waits for that turn behind the threads
# running views and page renders: at 1 ms, decisions under bench/load.py's storm answered sooner (p95 median
# 273 against 350 ms, seven and nine runs in turn) for the same CPU. config/asgi.py applies it when serving.
AIRLOCK_WEB_SWITCH_INTERVAL_MS = _switch_interval_ms()

# --- Redis: Celery broker and channel layer --------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
EMBEDDED = not REDIS_URL

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # channels_redis's pub/sub layer, reconnecting after a Redis restart (apps/core/redis_layer.py says why
            # pub/sub: a web process takes its messages off one connection, no round trip per message)
            "BACKEND": "apps.core.redis_layer.ReconnectingPubSubChannelLayer",
            "CONFIG": {
                # redis-py 8 defaults socket_timeout to 5 s, which kills idle consumers
                # ("Timeout reading from ..."); a blocking read must wait forever.
                "hosts": [{"address": REDIS_URL, "socket_timeout": None}],
                "prefix": os.environ.get("AIRLOCK_CHANNEL_PREFIX", "airlock"),
            },
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "apps.core.channel_layer.DatabaseChannelLayer",
            "CONFIG": {"poll_interval": 0.1},
        }
    }

BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = REDIS_URL or "filesystem://localhost//"
if not REDIS_URL:  # kombu's folder transport with messages that appear whole (apps/core/fs_broker.py)
    CELERY_BROKER_TRANSPORT = "apps.core.fs_broker:Transport"
elif REDIS_URL.startswith("redis://"):  # kombu's, with one client per channel (apps/core/redis_broker.py)
    CELERY_BROKER_TRANSPORT = "apps.core.redis_broker:Transport"
CELERY_BROKER_TRANSPORT_OPTIONS = (
    # A worker takes `resume` (a person's decision) before its other queues (apps/core/queue_order.py).
    {"visibility_timeout": 3600, "queue_order_strategy": "apps.core.queue_order:ResumeFirst"}
    if REDIS_URL
    else {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
        "polling_interval": 0.1,
    }
)
if not REDIS_URL:
    for folder in ("queue", "processed", "control"):
        (BROKER_DIR / folder).mkdir(parents=True, exist_ok=True)
# The shared short-lived state of the API (Idempotency-Key answers, failed-token counters): Redis
# when configured, so every web process sees it; this process's memory when embedded (one process).
CACHES = {"default": (
    # Django's RedisCache with one client per process, not one connection per request (apps/core/cache.py)
    {"BACKEND": "apps.core.cache.RedisCache", "LOCATION": REDIS_URL,
     "KEY_PREFIX": f"{os.environ.get('AIRLOCK_CHANNEL_PREFIX', 'airlock')}:cache"}
    if REDIS_URL else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"})}
# API tokens that fail: this many within the window lock their address (and their prefix) out.
AIRLOCK_API_TOKEN_FAILURES = int(os.environ.get("AIRLOCK_API_TOKEN_FAILURES", "10"))
AIRLOCK_API_TOKEN_WINDOW_S = int(os.environ.get("AIRLOCK_API_TOKEN_WINDOW_S", "600"))
AIRLOCK_API_TOKEN_LOCKOUT_S = int(os.environ.get("AIRLOCK_API_TOKEN_LOCKOUT_S", "900"))
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", default=False)

# --- Auth -----------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Sign-in throttling (django-axes): after AIRLOCK_SIGNIN_FAILURE_LIMIT failed sign-ins in a row for
# one account (from anywhere), or from one address (for any accounts), that account or address gets
# 429 for AIRLOCK_SIGNIN_LOCKOUT_MINUTES, counted from its latest attempt, even with the right
# password. `manage.py unlock_sign_in` lifts a lockout early.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend",
                           # signs in the people single sign-on vouched for (allauth's flow)
                           "allauth.account.auth_backends.AuthenticationBackend"]
AXES_FAILURE_LIMIT = int(os.environ.get("AIRLOCK_SIGNIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("AIRLOCK_SIGNIN_LOCKOUT_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_USERNAME_CALLABLE = "apps.web.sign_in_throttle.attempted_email"
AXES_LOCKOUT_CALLABLE = "apps.web.sign_in_throttle.locked_out"
AXES_DISABLE_ACCESS_LOG = True  # successful sign-ins are in the audit log already
AXES_VERBOSE = False
LOGIN_URL = "web:login"
LOGIN_REDIRECT_URL = "web:dashboard"
LOGOUT_REDIRECT_URL = "web:login"

# Single sign-on (docs/operations.md, "Single sign-on"): django-allauth's OpenID Connect client, one
# provider per organisation configured in Settings → Single sign-on (apps/accounts/sso.py reads them
# from the database). Password sign-in, sign-up and reset stay Airlock's own pages; allauth's account
# pages redirect to them (apps/web/urls.py).
ACCOUNT_ADAPTER = "apps.accounts.sso.AccountAdapter"
SOCIALACCOUNT_ADAPTER = "apps.accounts.sso.SocialAccountAdapter"
ACCOUNT_LOGIN_METHODS = {"email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*"]
ACCOUNT_EMAIL_VERIFICATION = "none"
ACCOUNT_USER_MODEL_USERNAME_FIELD = "username"
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_LOGIN_ON_GET = False  # the sign-in page's button POSTs (with CSRF) to start single sign-on
SOCIALACCOUNT_STORE_TOKENS = False
# A person who has a password account and signs in through their organisation's provider with the same
# verified email is the same person (the provider is the organisation's own; domains are checked).
SOCIALACCOUNT_EMAIL_AUTHENTICATION = True
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = True
SOCIALACCOUNT_PROVIDERS = {"openid_connect": {"OAUTH_PKCE_ENABLED": True}}
SOCIALACCOUNT_REQUESTS_TIMEOUT = 10
# Two-factor authentication (allauth.mfa): TOTP apps and one-time recovery codes, asked for at every
# sign-in (password or single sign-on) of a person who set it up. An organisation can require it of its
# owners, admins and approvers (apps/web/access.py sends them to set it up).
MFA_SUPPORTED_TYPES = ["totp", "recovery_codes"]
MFA_TOTP_ISSUER = os.environ.get("AIRLOCK_MFA_ISSUER", "Airlock")
MFA_RECOVERY_CODE_COUNT = 10
MFA_TOTP_TOLERANCE = 1  # a phone's clock a step (30 s) off still works; a used code never does again
MFA_ALLOW_UNVERIFIED_EMAIL = True  # accounts are made by admins and invites; the email is the account's name


def email_settings(environ: os._Environ | dict[str, str]) -> dict[str, object]:
    """Django's EMAIL_* settings from `EMAIL_URL` (smtp://user:pass@host:port, smtps:// for implicit
    TLS, smtp+tls:// for STARTTLS; user and password percent-encoded) or the separate EMAIL_HOST,
    EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD, EMAIL_USE_TLS, EMAIL_USE_SSL. With neither,
    the console backend (mail printed to the log), so a laptop sends nothing by accident."""
    from urllib.parse import unquote, urlsplit

    def flag(name: str) -> bool:
        return (environ.get(name) or "").strip().lower() in {"1", "true", "yes", "on"}

    url = (environ.get("EMAIL_URL") or "").strip()
    values: dict[str, object] = {"EMAIL_TIMEOUT": int(environ.get("EMAIL_TIMEOUT") or 10)}
    if url:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in {"smtp", "smtps", "smtp+tls", "smtp+ssl"}:
            raise RuntimeError(f"EMAIL_URL must start with smtp://, smtps:// or smtp+tls://, not {scheme}://.")
        ssl = scheme in {"smtps", "smtp+ssl"}
        tls = scheme == "smtp+tls"
        values.update(EMAIL_HOST=parts.hostname or "localhost", EMAIL_PORT=parts.port or (465 if ssl else 587 if tls
                                                                                          else 25),
                      EMAIL_HOST_USER=unquote(parts.username or ""), EMAIL_HOST_PASSWORD=unquote(parts.password or ""),
                      EMAIL_USE_SSL=ssl, EMAIL_USE_TLS=tls)
    elif environ.get("EMAIL_HOST"):
        ssl, tls = flag("EMAIL_USE_SSL"), flag("EMAIL_USE_TLS")
        if ssl and tls:
            raise RuntimeError("Set EMAIL_USE_TLS (STARTTLS) or EMAIL_USE_SSL (implicit TLS), not both.")
        values.update(EMAIL_HOST=environ["EMAIL_HOST"], EMAIL_PORT=int(environ.get("EMAIL_PORT") or
                                                                       (465 if ssl else 587 if tls else 25)),
                      EMAIL_HOST_USER=environ.get("EMAIL_HOST_USER", ""),
                      EMAIL_HOST_PASSWORD=environ.get("EMAIL_HOST_PASSWORD", ""), EMAIL_USE_SSL=ssl, EMAIL_USE_TLS=tls)
    else:
        values["EMAIL_BACKEND"] = environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
        return values
    values["EMAIL_BACKEND"] = environ.get("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
    return values


globals().update(email_settings(os.environ))
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "airlock@localhost")

# --- i18n, static ---------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static", NINJA_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "apps.web.static_storage.ProductionStaticStorage"
    },
}
WHITENOISE_USE_FINDERS = DEBUG

# --- Security -------------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
# Largest request body read into memory (forms and API JSON); bigger ones get 413 from the API.
# Agent instructions and crew definitions are a few KiB; put a matching limit on the proxy too.
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("AIRLOCK_MAX_BODY_BYTES", str(1024 * 1024)))
DATA_UPLOAD_MAX_NUMBER_FIELDS = 1000
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", default=True)
    # Health checks come from inside the cluster over plain HTTP.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]

# One JSON object per line for a log pipeline (`json`, the default outside DEBUG), or text for a person
# (`plain`); both mask credential shapes (apps/audit/log_format.py).
AIRLOCK_LOG_FORMAT = os.environ.get("AIRLOCK_LOG_FORMAT", "plain" if DEBUG else "json")
if AIRLOCK_LOG_FORMAT not in {"json", "plain"}:
    raise RuntimeError(f"AIRLOCK_LOG_FORMAT must be json or plain, not {AIRLOCK_LOG_FORMAT!r}.")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"()": "apps.audit.log_format.RedactingFormatter",  # credential shapes masked
                             "format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
                   "json": {"()": "apps.audit.log_format.JsonFormatter"}},
    # The run sweep's three INFO lines a second are dropped (apps/core/log_filters.py); every other
    # task's lines, beat's start and any failure are kept.
    "filters": {"every_second_tasks": {"()": "apps.core.log_filters.DropEverySecondTasks"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": AIRLOCK_LOG_FORMAT,
                             "filters": [] if env_bool("AIRLOCK_LOG_SWEEPS") else ["every_second_tasks"]}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"},
                "axes": {"level": "WARNING"}},  # a line per sign-in otherwise; lockouts are warnings
}

# --- Observability (docs/operations.md: "Metrics", "Logs") ---------------------------------------------
# /metrics answers a bearer token or a scraper inside these networks (it spans every organisation).
AIRLOCK_METRICS_TOKEN = os.environ.get("AIRLOCK_METRICS_TOKEN", "")
# Loopback is allowed by default in DEBUG only: behind a proxy on the same host every request comes from
# loopback unless FORWARDED_ALLOW_IPS is set, and the figures span every organisation.
AIRLOCK_METRICS_ALLOW = env_list("AIRLOCK_METRICS_ALLOW", "127.0.0.1/32,::1/128" if DEBUG else "")

# Safety (docs/operations.md): per-run rate limit on the calls of one tool (later calls are refused with a
# visible reason; the run's tool-call cap and the loop limit on identical calls stay as they are).
AIRLOCK_RUN_CALLS_PER_TOOL = int(os.environ.get("AIRLOCK_RUN_CALLS_PER_TOOL", "20"))
# An agent's context resources (apps/runs/engine/context.py): bytes of each one's content a model is given; past
# it the content is cut and marked so (its whole size and hash are still in the run's trace).
AIRLOCK_RESOURCE_MAX_BYTES = int(os.environ.get("AIRLOCK_RESOURCE_MAX_BYTES", str(64 * 1024)))
# An optional injection classifier for tool results ("package.module:function", text -> score 0..1), asked off
# the step path; writes wait for its verdicts (apps/registry/classifier.py). Empty: the rules and provenance only.
AIRLOCK_INJECTION_CLASSIFIER = os.environ.get("AIRLOCK_INJECTION_CLASSIFIER", "")
AIRLOCK_INJECTION_CLASSIFIER_THRESHOLD = float(os.environ.get("AIRLOCK_INJECTION_CLASSIFIER_THRESHOLD", "0.5"))
AIRLOCK_INJECTION_CLASSIFIER_TIMEOUT_S = float(os.environ.get("AIRLOCK_INJECTION_CLASSIFIER_TIMEOUT_S", "10"))
