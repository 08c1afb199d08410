"""Single sign-on through each organisation's OpenID Connect provider, on django-allauth's client.

allauth runs the protocol (discovery, the authorization-code redirect with PKCE S256, the token
request, the account link). What is Airlock's is here:

- the providers come from `IdentityProvider` rows (one per organisation), not from settings;
- the ID token is always checked: signature against the provider's JWKS, issuer, audience, expiry
  and the nonce this sign-in sent (allauth skips the signature when it fetched the token itself
  and sends no nonce);
- every discovery, token, userinfo and JWKS fetch goes through the egress guard;
- only verified emails in the organisation's allowed domains get in; a person new to the
  organisation joins it at its default role (`services.join_through_sso`);
- a refusal is a page that says why, never allauth's generic "something went wrong".
"""

from __future__ import annotations

import secrets

import jwt
import requests
from allauth.account.adapter import DefaultAccountAdapter
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.internal import jwtkit
from allauth.socialaccount.models import SocialApp
from allauth.socialaccount.providers.oauth2.client import OAuth2Error
from allauth.socialaccount.providers.openid_connect.provider import OpenIDConnectProvider
from allauth.socialaccount.providers.openid_connect.views import OpenIDConnectOAuth2Adapter
from django.conf import settings
from django.http import HttpRequest
from django.shortcuts import render
from django.urls import reverse

from apps.accounts import selectors, services
from apps.accounts.models import IdentityProvider
from apps.core import egress

PROVIDER = "openid_connect"
CLOCK_SKEW_S = 30


class SignInRefused(OAuth2Error):
    """Single sign-on was refused for a reason the person should read (shown as it is)."""


def refused_page(request: HttpRequest, message: str, *, idp_name: str = "") -> ImmediateHttpResponse:
    response = render(request, "web/auth/sso_refused.html", {"message": message, "idp_name": idp_name},
                      status=403)
    return ImmediateHttpResponse(response)


def social_app(idp: IdentityProvider) -> SocialApp:
    """The allauth app for an organisation's provider (in memory: the row is the source of truth)."""
    return SocialApp(provider=PROVIDER, provider_id=idp.org.slug, name=idp.name, client_id=idp.client_id,
                     secret=(idp.client_secret or {}).get("value", ""),
                     settings={"server_url": idp.issuer_url.rstrip("/"), "oauth_pkce_enabled": True,
                               "token_auth_method": "client_secret_basic", "fetch_userinfo": False})


class GuardedSession(requests.Session):
    """A requests session whose every request is checked by the egress guard first and follows no
    redirect (a redirect could lead anywhere the guard would refuse)."""

    def request(self, method, url, *args, **kwargs):
        try:
            egress.check_url(url)
        except egress.EgressRefused as exc:
            raise SignInRefused(f"Airlock may not reach the identity provider at {url}: {exc}") from None
        kwargs.setdefault("timeout", settings.SOCIALACCOUNT_REQUESTS_TIMEOUT)
        kwargs["allow_redirects"] = False
        return super().request(method, url, *args, **kwargs)


class OrgOIDCAdapter(OpenIDConnectOAuth2Adapter):
    @property
    def openid_config(self):
        try:
            return super().openid_config
        except requests.RequestException as exc:
            raise SignInRefused(f"Discovery failed at {self.get_provider().server_url}: {exc}") from None

    def _decode_id_token(self, app: SocialApp, id_token: str) -> dict:
        """The ID token's claims, every check done; SignInRefused saying which one failed."""
        config = self.openid_config
        try:
            alg, key = jwtkit.fetch_key(id_token, config["jwks_uri"], jwtkit.lookup_kid_jwk)
            return jwt.decode(id_token, key=key, algorithms=[alg], audience=app.client_id, issuer=config["issuer"],
                              leeway=CLOCK_SKEW_S, options={"require": ["iss", "aud", "exp", "iat", "sub"]})
        except jwt.ExpiredSignatureError:
            raise SignInRefused("The identity provider's ID token has expired. Sign in again; if it keeps "
                                "happening, check the clocks of the provider and of Airlock.") from None
        except jwt.InvalidAudienceError:
            raise SignInRefused("The identity provider's ID token was issued for another application (its "
                                "audience is not this organisation's client id).") from None
        except jwt.InvalidIssuerError:
            raise SignInRefused("The ID token was issued by someone other than the configured identity "
                                "provider.") from None
        except jwt.InvalidSignatureError:
            raise SignInRefused("The ID token's signature does not match the identity provider's keys.") from None
        except (jwt.PyJWTError, KeyError) as exc:
            raise SignInRefused(f"The identity provider's ID token is not valid: {exc}.") from None
        except requests.RequestException as exc:
            raise SignInRefused(f"The identity provider's keys could not be fetched: {exc}") from None

    def complete_login(self, request: HttpRequest, app, token, **kwargs):
        if not kwargs["response"].get("id_token"):
            raise SignInRefused("The identity provider sent no ID token (is the openid scope allowed?).")
        return super().complete_login(request, app, token, **kwargs)


class OrgOIDCProvider(OpenIDConnectProvider):
    oauth2_adapter_class = OrgOIDCAdapter

    def redirect(self, request: HttpRequest, process, next_url=None, data=None, **kwargs):
        # The nonce goes to the provider and into allauth's stashed state; the ID token must carry it back.
        nonce = secrets.token_urlsafe(24)
        auth_params = kwargs.pop("auth_params", None) or self.get_auth_params()
        auth_params["nonce"] = nonce
        return super().redirect(request, process, next_url, data, auth_params=auth_params, nonce=nonce, **kwargs)


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def list_apps(self, request, provider=None, client_id=None) -> list[SocialApp]:
        if provider not in (None, PROVIDER):
            idps = selectors.enabled_identity_providers().filter(org__slug=provider)
        else:
            idps = selectors.enabled_identity_providers()
        apps = [social_app(idp) for idp in idps]
        return [app for app in apps if client_id is None or app.client_id == client_id]

    def get_provider(self, request, provider, client_id=None):
        app = self.get_app(request, provider=provider, client_id=client_id)
        return OrgOIDCProvider(request, app=app)

    def get_requests_session(self):
        return GuardedSession()

    def is_open_for_signup(self, request, sociallogin) -> bool:
        return True  # pre_social_login has checked the email against the organisation's domains

    def populate_user(self, request, sociallogin, data):
        user = super().populate_user(request, sociallogin, data)
        user.email = selectors.normalize_email(user.email or "")
        user.username = user.email  # Airlock's accounts are named by their email
        return user

    def pre_social_login(self, request, sociallogin) -> None:
        idp = selectors.identity_provider_for_slug(sociallogin.account.provider)
        if idp is None:
            raise refused_page(request, "This organisation no longer signs in with single sign-on.")
        claims = sociallogin.account.extra_data.get("id_token") or {}
        if not secrets.compare_digest(str(claims.get("nonce", "")), str(sociallogin.state.get("nonce", ""))):
            raise refused_page(request, "The ID token does not answer this sign-in (its nonce differs): it may "
                               "be a replayed token. Sign in again.", idp_name=idp.name)
        email = selectors.normalize_email(claims.get("email") or "")
        if not email or not claims.get("email_verified"):
            raise refused_page(request, f"{idp.name} did not vouch for a verified email address.", idp_name=idp.name)
        if not selectors.email_domain_allowed(idp, email):
            raise refused_page(request, f"{email} is not in a domain {idp.org.name} signs in with "
                               f"({', '.join(idp.allowed_domains) or 'none set'}).", idp_name=idp.name)
        if sociallogin.is_existing and sociallogin.account.pk is None:
            # Matched by email, not by an earlier sign-in through this provider. Any organisation's admin
            # can point their provider at any domain, so it may only vouch for accounts that are theirs.
            others = selectors.other_organizations_of(user_id=sociallogin.user.pk, org_id=idp.org_id)
            if others:
                raise refused_page(request, f"{email} also belongs to {', '.join(others)}: {idp.name} cannot "
                                   "sign in an account other organisations share. Sign in with your password, "
                                   "or ask an operator to link the account.", idp_name=idp.name)
        request._airlock_idp = idp
        if sociallogin.is_existing:
            services.join_through_sso(idp=idp, user=sociallogin.user, ip=request.META.get("REMOTE_ADDR"))

    def save_user(self, request, sociallogin, form=None):
        user = super().save_user(request, sociallogin, form)
        services.join_through_sso(idp=request._airlock_idp, user=user, ip=request.META.get("REMOTE_ADDR"))
        return user

    def on_authentication_error(self, request, provider, error=None, exception=None, extra_context=None):
        name = getattr(getattr(provider, "app", None), "name", "") if provider else ""
        if isinstance(exception, SignInRefused):
            raise refused_page(request, str(exception), idp_name=name)
        if error == "cancelled":
            return
        raise refused_page(request, f"Single sign-on with {name or 'the identity provider'} did not complete"
                           f"{': ' + str(exception) if exception else ''}. Try again, or ask an admin to check "
                           "the provider's settings.", idp_name=name)


class AccountAdapter(DefaultAccountAdapter):
    """allauth's account side: its own sign-up is closed (Airlock's sign-up page and invites make
    accounts), and a person single sign-on signs in lands in the organisation that vouched for them."""

    def is_open_for_signup(self, request) -> bool:
        return False

    def login(self, request, user) -> None:
        super().login(request, user)
        idp = getattr(request, "_airlock_idp", None)
        if idp is not None:
            request.session[selectors.SESSION_ORG_KEY] = str(idp.org_id)
        services.record_sign_in(user=user, ip=request.META.get("REMOTE_ADDR"))

    def get_login_redirect_url(self, request) -> str:
        return reverse(settings.LOGIN_REDIRECT_URL)

