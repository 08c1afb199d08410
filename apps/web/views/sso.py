"""Single sign-on: the start and the callback of an organisation's OpenID Connect sign-in (allauth's
views driven by Airlock's adapter, apps/accounts/sso.py), and Settings → Single sign-on."""

from __future__ import annotations

from allauth.account.internal.decorators import login_not_required
from allauth.socialaccount.models import SocialApp
from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView, OAuth2LoginView
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from apps.accounts import selectors, services
from apps.accounts.roles import Role
from apps.accounts.sso import OrgOIDCAdapter, SignInRefused, refused_page
from apps.core.errors import ValidationFailed
from apps.web.access import member_required, post_only
from apps.web.forms import IdentityProviderForm, apply_domain_errors


@post_only
@login_not_required
def sso_login(request: HttpRequest, provider_id: str) -> HttpResponse:
    """POSTed by the sign-in page's "Sign in with ..." button (CSRF-checked): off to the provider."""
    try:
        return OAuth2LoginView.adapter_view(OrgOIDCAdapter(request, provider_id))(request)
    except SocialApp.DoesNotExist:
        raise Http404("This organisation does not sign in with single sign-on.") from None
    except SignInRefused as exc:  # discovery refused or failed before allauth's own error handling
        return refused_page(request, str(exc)).response


@login_not_required
def sso_callback(request: HttpRequest, provider_id: str) -> HttpResponse:
    try:
        return OAuth2CallbackView.adapter_view(OrgOIDCAdapter(request, provider_id))(request)
    except SocialApp.DoesNotExist:
        raise Http404("This organisation does not sign in with single sign-on.") from None


def _initial(idp) -> dict:
    if idp is None:
        return {"default_role": Role.VIEWER, "enabled": True}
    return {"name": idp.name, "issuer_url": idp.issuer_url, "client_id": idp.client_id,
            "allowed_domains": ", ".join(idp.allowed_domains), "default_role": idp.default_role,
            "sso_required": idp.sso_required, "enabled": idp.enabled}


@member_required("members.manage")
def sso_settings(request: HttpRequest) -> HttpResponse:
    idp = selectors.identity_provider_of(org_id=request.actor.org_id)
    form = IdentityProviderForm(request.POST or None, initial=_initial(idp))
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                idp = services.configure_identity_provider(actor=request.actor, **form.cleaned_data)
            except ValidationFailed as exc:
                apply_domain_errors(form, exc)
                status = 422
            else:
                messages.success(request, f"Single sign-on with {idp.name} is saved.")
                return redirect("web:sso_settings")
        else:
            status = 422
    return render(request, "web/settings/sso.html", {
        "form": form, "idp": idp, "mfa_required": request.membership.org.mfa_required,
        "has_secret": bool(idp and (idp.client_secret or {}).get("value")),
        "callback_url": request.build_absolute_uri(
            reverse("openid_connect_callback", kwargs={"provider_id": request.membership.org.slug})),
    }, status=status)


@post_only
@member_required("members.manage")
def mfa_requirement(request: HttpRequest) -> HttpResponse:
    org = services.set_mfa_requirement(actor=request.actor, required=request.POST.get("mfa_required") == "on")
    messages.success(request, "Owners, admins and approvers must now use two-factor authentication."
                     if org.mfa_required else "Two-factor authentication is now optional.")
    return redirect("web:sso_settings")
