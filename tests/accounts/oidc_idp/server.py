"""A real OpenID Connect provider for tests: django-oauth-toolkit in OIDC mode, in its own process
with its own SQLite database, on loopback.

    python -m tests.accounts.oidc_idp.server PORT DB_PATH

It creates one person (ada@acme.test / IDP_PASSWORD, and bob@elsewhere.test) and these clients, all
confidential, authorization code + PKCE, RS256, with the redirect URIs in $IDP_REDIRECT_URIS:

- `airlock` / `airlock-secret`: honest ID tokens
- `wrong-audience`: ID tokens whose `aud` names another application
- `expired`: ID tokens that expired two minutes before they were issued
- `replayed-nonce`: ID tokens carrying a nonce Airlock never sent
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import django
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings

HERE = Path(__file__).resolve().parent
IDP_PASSWORD = "idp-password-for-tests"
CLIENTS = ["airlock", "wrong-audience", "expired", "replayed-nonce"]


def _private_key() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def configure(port: int, db_path: str) -> None:
    settings.configure(
        DEBUG=False, SECRET_KEY="test-idp", ALLOWED_HOSTS=["127.0.0.1", "localhost"], ROOT_URLCONF=__name__,
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
        # Cookies ignore the port: the IdP's must not collide with Airlock's on 127.0.0.1.
        SESSION_COOKIE_NAME="idp_session", CSRF_COOKIE_NAME="idp_csrf", LOGIN_URL="/login/",
        USE_TZ=True, DEFAULT_AUTO_FIELD="django.db.models.AutoField",
        OAUTH2_PROVIDER={
            "OIDC_ENABLED": True, "OIDC_RSA_PRIVATE_KEY": _private_key(), "PKCE_REQUIRED": True,
            "OIDC_ISS_ENDPOINT": f"http://127.0.0.1:{port}/o",
            "SCOPES": {"openid": "OpenID", "profile": "Profile", "email": "Email"},
            "OAUTH2_VALIDATOR_CLASS": f"{__name__}.TestValidator",
        },
    )
    django.setup()


def _validator_class():
    from oauth2_provider.oauth2_validators import OAuth2Validator

    class TestValidator(OAuth2Validator):
        def get_additional_claims(self, request):
            return {"email": request.user.email, "email_verified": True, "preferred_username": request.user.username}

        def get_id_token_dictionary(self, token, token_handler, request):
            claims, expiration = super().get_id_token_dictionary(token, token_handler, request)
            name = request.client.name
            if name == "wrong-audience":
                claims["aud"] = "some-other-application"
            elif name == "expired":
                claims["iat"] = int(time.time()) - 600
                claims["exp"] = int(time.time()) - 120
            elif name == "replayed-nonce":
                claims["nonce"] = "a-nonce-airlock-never-sent"
            return claims, expiration

    return TestValidator


def _urls():
    from django.contrib.auth import views as auth_views
    from django.urls import include, path

    return [path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
            path("login/", auth_views.LoginView.as_view(template_name="login.html"))]


def seed() -> None:
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0)
    for email in ("ada@acme.test", "bob@elsewhere.test"):
        User.objects.create_user(username=email.split("@")[0], email=email, password=IDP_PASSWORD)
    redirects = " ".join(os.environ.get("IDP_REDIRECT_URIS", "").split(","))
    for name in CLIENTS:
        Application.objects.create(
            name=name, client_id=name, client_secret=f"{name}-secret", client_type="confidential",
            authorization_grant_type="authorization-code", algorithm="RS256", redirect_uris=redirects,
            skip_authorization=True, hash_client_secret=True)


if __name__ == "__main__":
    port, db_path = int(sys.argv[1]), sys.argv[2]
    configure(port, db_path)
    TestValidator = _validator_class()
    urlpatterns = _urls()
    seed()
    from django.core.servers.basehttp import WSGIServer, run
    from django.core.wsgi import get_wsgi_application

    print(f"test IdP listening on 127.0.0.1:{port}", flush=True)
    run("127.0.0.1", port, get_wsgi_application(), threading=True, server_cls=WSGIServer)
