"""Test settings: the real settings with fast password hashing and plain-HTTP cookies.

Tests use the services named by DATABASE_URL / REDIS_URL (CI sets both); without them they
exercise the embedded mode. Every test session gets its own run id, inherited by the server
and worker processes it starts, so concurrent sessions never share a database, a broker
queue, a channel-layer prefix or a var/ folder.
"""

import os
from pathlib import Path


def _of_run(run_id: str) -> dict[str, str]:
    """What a test session keeps apart from every other one, named after its run id."""
    return {"AIRLOCK_VAR_DIR": str(Path(__file__).resolve().parent.parent / "var" / "test" / run_id),
            "AIRLOCK_CHANNEL_PREFIX": f"airlock-{run_id}"}


def _run_id() -> str:
    """This session's run id: inherited by the processes it starts, new in a session of its own. A pytest-xdist
    worker (scripts/test runs one per core) inherits its controller's environment, yet is a session of its own:
    it takes the controller's id with its own name after it, and drops what the controller's id named."""
    run_id = os.environ.get("AIRLOCK_TEST_RUN_ID") or f"t{os.getpid()}"
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and not run_id.endswith(f"_{worker}"):
        for name, value in _of_run(run_id).items():
            if os.environ.get(name) == value:
                del os.environ[name]
        run_id = f"{run_id}_{worker}"
    os.environ["AIRLOCK_TEST_RUN_ID"] = run_id
    for name, value in _of_run(run_id).items():
        os.environ.setdefault(name, value)
    return run_id


RUN_ID = _run_id()
os.environ.setdefault("SECRET_KEY", "airlock-test-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz")
os.environ.setdefault("AIRLOCK_ENCRYPTION_KEY", "aP4XjMozeMei1iJ0WDWY_CRpsi7-AQeKtHVTcQ7iOeQ=")
os.environ.setdefault("AIRLOCK_EGRESS_ALLOW_PRIVATE", "1")
# Tests send many wrong tokens from one address in one session; the lockout tests set their own limit.
os.environ.setdefault("AIRLOCK_API_TOKEN_FAILURES", "100000")
# Playwright's sync API runs an event loop in the test thread; fixtures still use the ORM there.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
# The processes tests start log for a person reading a failure (tests of the JSON format set their own).
os.environ.setdefault("AIRLOCK_LOG_FORMAT", "plain")

from config.settings import *  # noqa: E402, F403

ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    # A file, not pytest-django's in-memory default, so live servers and workers share it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}  # noqa: F405
else:
    DATABASES["default"]["TEST"] = {"NAME": f"test_airlock_{RUN_ID}"}  # noqa: F405
    # Threads of database_sync_to_async must not keep connections open past the session.
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
if REDIS_URL:  # noqa: F405
    # A test that starts its own web and worker pair may give them a broker of their own (the session's worker
    # would otherwise take their tasks): AIRLOCK_TEST_BROKER_PREFIX.
    CELERY_BROKER_TRANSPORT_OPTIONS = {**CELERY_BROKER_TRANSPORT_OPTIONS,  # noqa: F405
                                       "global_keyprefix": f"{os.environ.get('AIRLOCK_TEST_BROKER_PREFIX', RUN_ID)}:"}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
SECURE_SSL_REDIRECT = False
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
SECURE_HSTS_SECONDS = 0
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
