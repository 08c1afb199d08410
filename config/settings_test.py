"""Test settings: the real settings with fast password hashing and plain-HTTP cookies.

Tests use the services named by DATABASE_URL / REDIS_URL (CI sets both); without them they
exercise the embedded mode.
"""

import os

os.environ.setdefault("SECRET_KEY", "airlock-test-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz")
os.environ.setdefault("AIRLOCK_ENCRYPTION_KEY", "aP4XjMozeMei1iJ0WDWY_CRpsi7-AQeKtHVTcQ7iOeQ=")
os.environ.setdefault("AIRLOCK_VAR_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), "var", "test"))
os.environ.setdefault("AIRLOCK_EGRESS_ALLOW_PRIVATE", "1")
os.environ.setdefault("AIRLOCK_CHANNEL_PREFIX", f"airlock-test-{os.getpid()}")

from config.settings import *  # noqa: F403

ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    # A file, not pytest-django's in-memory default, so live servers and workers share it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}  # noqa: F405
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
