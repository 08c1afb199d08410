"""A real OAuth 2.1 authorization server for tests: django-oauth-toolkit with dynamic client registration
(RFC 7591), RFC 8414 metadata at the root and the RFC 8707 resource, in its own process with its own SQLite
database, on loopback.

    python -m tests.registry.oauth_as.server PORT DB_PATH

One person (ada / AS_PASSWORD), one confidential `resource-server` client the MCP server introspects tokens
with, and a pre-registered confidential client for Airlock (PREREGISTERED) whose redirect URIs are
$AS_REDIRECT_URIS. Access tokens live $AS_TOKEN_SECONDS (default 3600). POST /test/revoke-all/ deletes every
token (how a test makes a refresh fail, as when an admin revokes Airlock at the provider).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import django
from django.conf import settings

HERE = Path(__file__).resolve().parent
AS_PASSWORD = "as-password-for-tests"
RS_CLIENT, RS_SECRET = "resource-server", "resource-server-secret"
PREREGISTERED, PREREGISTERED_SECRET = "airlock-preregistered", "airlock-preregistered-secret"


def configure(port: int, db_path: str) -> None:
    settings.configure(
        DEBUG=False, SECRET_KEY="test-as", ALLOWED_HOSTS=["127.0.0.1", "localhost"], ROOT_URLCONF=__name__,
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions",
                        "django.contrib.messages", "oauth2_provider"],
        MIDDLEWARE=["django.contrib.sessions.middleware.SessionMiddleware",
                    "django.middleware.csrf.CsrfViewMiddleware",
                    "django.contrib.auth.middleware.AuthenticationMiddleware",
                    "django.contrib.messages.middleware.MessageMiddleware"],
        TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [HERE / "templates"],
                    "APP_DIRS": True, "OPTIONS": {"context_processors": [
                        "django.template.context_processors.request",
                        "django.contrib.auth.context_processors.auth"]}}],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": db_path}},
        SESSION_COOKIE_NAME="as_session", CSRF_COOKIE_NAME="as_csrf", LOGIN_URL="/login/",
        USE_TZ=True, DEFAULT_AUTO_FIELD="django.db.models.AutoField",
        OAUTH2_PROVIDER={
            "PKCE_REQUIRED": True, "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True, "DCR_ENABLED": True,
            "DCR_REGISTRATION_PERMISSION_CLASSES": ("oauth2_provider.dcr.AllowAllDCRPermission",),
            "SCOPES": {"mcp:tools": "Use the MCP server's tools", "introspection": "Introspect tokens"},
            "DEFAULT_SCOPES": ["mcp:tools"],
            "ACCESS_TOKEN_EXPIRE_SECONDS": int(os.environ.get("AS_TOKEN_SECONDS", "3600")),
            "ROTATE_REFRESH_TOKEN": True,
            "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none", "client_secret_basic", "client_secret_post"],
            "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
            "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
        },
    )
    django.setup()


def _urls():
    from django.contrib.auth import views as auth_views
    from django.http import HttpResponse
    from django.urls import include, path
    from django.views.decorators.csrf import csrf_exempt
    from oauth2_provider import urls as dot_urls

    @csrf_exempt
    def revoke_all(request):
        from oauth2_provider.models import AccessToken, RefreshToken

        RefreshToken.objects.all().delete()
        AccessToken.objects.all().delete()
        return HttpResponse("revoked")

    return [path("", include((dot_urls.metadata_urlpatterns, "oauth2_provider_meta"))),
            path("o/", include(dot_urls)),
            path("login/", auth_views.LoginView.as_view(template_name="login.html")),
            path("test/revoke-all/", revoke_all)]


def seed() -> None:
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0)
    User.objects.create_user(username="ada", email="ada@acme.test", password=AS_PASSWORD)
    Application.objects.create(name=PREREGISTERED, client_id=PREREGISTERED, client_secret=PREREGISTERED_SECRET,
                               client_type="confidential", authorization_grant_type="authorization-code",
                               redirect_uris=os.environ.get("AS_REDIRECT_URIS", ""), hash_client_secret=True,
                               algorithm="")
    Application.objects.create(name=RS_CLIENT, client_id=RS_CLIENT, client_secret=RS_SECRET,
                               client_type="confidential", authorization_grant_type="client-credentials",
                               hash_client_secret=True)


if __name__ == "__main__":
    port, db_path = int(sys.argv[1]), sys.argv[2]
    configure(port, db_path)
    urlpatterns = _urls()
    seed()
    from django.core.servers.basehttp import WSGIServer, run
    from django.core.wsgi import get_wsgi_application

    print(f"test AS listening on 127.0.0.1:{port}", flush=True)
    run("127.0.0.1", port, get_wsgi_application(), threading=True, server_cls=WSGIServer)
