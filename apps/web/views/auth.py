"""Sign in, sign out, sign up, password change and the last step of a reset (the rest of a reset uses
Django's views as they are)."""

from __future__ import annotations

from urllib.parse import urlsplit

from allauth.account.internal.flows.login import record_authentication
from allauth.account.utils import perform_login
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy

from apps.accounts import selectors, services
from apps.core.errors import ValidationFailed
from apps.web.access import post_only
from apps.web.forms import EmailAuthenticationForm, SignUpForm, apply_domain_errors


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _ip(request: HttpRequest) -> str | None:
    return request.META.get("REMOTE_ADDR")


class SignInView(auth_views.LoginView):
    template_name = "web/auth/login.html"
    form_class = EmailAuthenticationForm
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        idps = list(selectors.enabled_identity_providers())
        context["identity_providers"] = [
            (idp.name, reverse("openid_connect_login", kwargs={"provider_id": idp.org.slug})) for idp in idps]
        self.request.csp_form_targets = sorted({_origin(idp.issuer_url) for idp in idps})
        return context

    def form_valid(self, form):
        # allauth's login flow, so a person with two-factor authentication is asked for their code before
        # the session is theirs (allauth.mfa's login stage); the sign-in is audited when it completes
        # (apps.accounts.sso.AccountAdapter.login). The password was typed just now, so it counts as the
        # fresh authentication allauth asks for before a change of two-factor settings, for its usual
        # 5 minutes (ACCOUNT_REAUTHENTICATION_TIMEOUT): set-up right after sign-in asks nothing again.
        user = form.get_user()
        record_authentication(self.request, user, "password", email=user.email, reauthenticated=True)
        return perform_login(self.request, user, email_verification="none", redirect_url=self.get_success_url())

    def form_invalid(self, form):
        services.record_failed_sign_in(email=form.data.get("username", ""), ip=_ip(self.request))
        return super().form_invalid(form)


class PasswordChangeView(auth_views.PasswordChangeView):
    template_name = "web/auth/password_change.html"
    success_url = reverse_lazy("web:password_change_done")

    def form_valid(self, form):
        response = super().form_valid(form)
        services.record_password_changed(user=self.request.user, ip=_ip(self.request))
        return response


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    """Setting a new password from the emailed link: audited like a change, and the sessions signed
    in with the old password lose their open sockets."""

    template_name = "web/auth/password_reset_confirm.html"
    success_url = reverse_lazy("web:password_reset_complete")

    def form_valid(self, form):
        response = super().form_valid(form)
        services.record_password_changed(user=form.user, ip=_ip(self.request))
        return response


@post_only
def sign_out(request: HttpRequest) -> HttpResponse:
    from django.contrib.auth import logout

    user_id = request.user.pk
    logout(request)
    if user_id is not None:
        services.notify_access_changed(user_id=user_id)  # this session's open sockets close
    return redirect("web:login")


def sign_up(request: HttpRequest) -> HttpResponse:
    if not settings.AIRLOCK_ALLOW_SIGNUP:
        raise Http404("Sign-up is turned off on this Airlock.")
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            user, org = services.sign_up(ip=_ip(request), **form.cleaned_data)
        except ValidationFailed as exc:
            apply_domain_errors(form, exc)
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            request.session[selectors.SESSION_ORG_KEY] = str(org.id)
            messages.success(request, f"Welcome to Airlock. {org.name} is ready.")
            return redirect("web:dashboard")
    return render(request, "web/auth/signup.html", {"form": form})


def no_org(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect("web:login")
    if request.membership:
        return redirect("web:dashboard")
    return render(request, "web/auth/no_org.html")


@post_only
def switch_org(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect("web:login")
    membership = selectors.membership_for(user_id=request.user.pk, org_id=request.POST.get("org_id", ""))
    if membership is None:
        raise Http404("No such organisation.")
    request.session[selectors.SESSION_ORG_KEY] = str(membership.org_id)
    messages.info(request, f"Switched to {membership.org.name}.")
    return redirect("web:dashboard")
