from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from apps.accounts import lockouts, selectors, services
from apps.accounts.roles import ROLE_HELP, Role
from apps.core.errors import Conflict, PermissionDenied, ValidationFailed
from apps.web.access import member_required, post_only
from apps.web.forms import AcceptInviteForm, AddMemberForm, InviteForm, apply_domain_errors


def _page(request: HttpRequest, form: AddMemberForm, new_password: str | None = None, status: int = 200,
          invite_form: InviteForm | None = None):
    members = list(selectors.org_members(org_id=request.actor.org_id))
    can_manage = request.actor.can("members.manage")
    context = {
        "invites": list(selectors.pending_invites(org_id=request.actor.org_id)) if can_manage else [],
        "invite_form": invite_form or InviteForm(),
        "members": members,
        "locked_out": lockouts.locked_out_emails(emails=[m.user.email for m in members]),
        "form": form,
        "roles": Role.choices,
        "role_help": {str(k): v for k, v in ROLE_HELP.items()},
        "can_manage": request.actor.can("members.manage"),
        "new_password": new_password,
    }
    template = "web/settings/members.html#members-panel" if request.htmx else "web/settings/members.html"
    return render(request, template, context, status=status)


@member_required()
def members(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _page(request, AddMemberForm())
    request.actor.require("members.manage")
    if request.POST.get("action") == "invite":
        return _invite(request)
    form = AddMemberForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=422)
    try:
        membership, password = services.add_member(actor=request.actor, **form.cleaned_data)
    except (ValidationFailed, Conflict) as exc:
        apply_domain_errors(form, exc if isinstance(exc, ValidationFailed) else ValidationFailed(exc.message))
        return _page(request, form, status=422)
    messages.success(request, f"{membership.user.email} added as {membership.get_role_display()}.")
    return _page(request, AddMemberForm(), new_password=password and (membership.user.email, password))


@post_only
@member_required("members.manage")
def change_role(request: HttpRequest, member_id) -> HttpResponse:
    try:
        membership = services.change_role(actor=request.actor, member_id=member_id, role=request.POST.get("role", ""))
        messages.success(request, f"{membership.user.email} is now {membership.get_role_display()}.")
    except (PermissionDenied, Conflict, ValidationFailed) as exc:
        messages.error(request, exc.message)
    if request.htmx:
        return _page(request, AddMemberForm())
    return redirect("web:members")


@post_only
@member_required("members.manage")
def remove_member(request: HttpRequest, member_id) -> HttpResponse:
    membership = selectors.get_member(org_id=request.actor.org_id, member_id=member_id)
    try:
        services.remove_member(actor=request.actor, member_id=membership.id)
        messages.success(request, f"{membership.user.email} was removed.")
    except (PermissionDenied, Conflict) as exc:
        messages.error(request, exc.message)
    if request.htmx:
        return _page(request, AddMemberForm())
    return redirect("web:members")


@post_only
@member_required("members.manage")
def unlock_member(request: HttpRequest, member_id) -> HttpResponse:
    """Lifts a sign-in lockout (too many wrong passwords) before its cool-off ends."""
    try:
        membership = lockouts.unlock_member(actor=request.actor, member_id=member_id)
        messages.success(request, f"{membership.user.email} can sign in again.")
    except PermissionDenied as exc:
        messages.error(request, exc.message)
    if request.htmx:
        return _page(request, AddMemberForm())
    return redirect("web:members")


def _invite(request: HttpRequest) -> HttpResponse:
    form = InviteForm(request.POST)
    if not form.is_valid():
        return _page(request, AddMemberForm(), invite_form=form, status=422)
    accept_url = request.build_absolute_uri("/invite/TOKEN/").replace("TOKEN", "{token}")
    try:
        invite, _ = services.invite_member(actor=request.actor, accept_url=accept_url, **form.cleaned_data)
    except (ValidationFailed, Conflict, PermissionDenied) as exc:
        apply_domain_errors(form, exc if isinstance(exc, ValidationFailed) else ValidationFailed(exc.message))
        return _page(request, AddMemberForm(), invite_form=form, status=422)
    messages.success(request, f"Invite sent to {invite.email}; the link works once, for 7 days.")
    return _page(request, AddMemberForm())


@post_only
@member_required("members.manage")
def revoke_invite(request: HttpRequest, invite_id) -> HttpResponse:
    invite = services.revoke_invite(actor=request.actor, invite_id=invite_id)
    messages.success(request, f"The invite for {invite.email} was revoked.")
    if request.htmx:
        return _page(request, AddMemberForm())
    return redirect("web:members")


def accept_invite(request: HttpRequest, token: str) -> HttpResponse:
    """The emailed link: shows the invite, then joins the signed-in person or creates the account."""
    invite = selectors.invite_for_token(token)
    problem = services.invite_problem(invite)
    user = request.user if request.user.is_authenticated else None
    needs_account = user is None and invite is not None and selectors.user_by_email(invite.email) is None
    form = AcceptInviteForm(request.POST or None) if needs_account else None
    status = 410 if problem else 200
    if request.method == "POST" and not problem and (form is None or form.is_valid()):
        try:
            user, membership = services.accept_invite(
                raw_token=token, user=user, password=form.cleaned_data["password"] if form else None,
                ip=request.META.get("REMOTE_ADDR"))
        except (ValidationFailed, Conflict) as exc:
            if form is not None and isinstance(exc, ValidationFailed) and exc.errors:
                apply_domain_errors(form, exc)
            else:
                problem = exc.message
            status = 422
        else:
            if not request.user.is_authenticated:
                login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            request.session[selectors.SESSION_ORG_KEY] = str(membership.org_id)
            messages.success(request, f"Welcome to {membership.org.name}.")
            return redirect("web:dashboard")
    return render(request, "web/auth/invite.html", {
        "invite": invite, "problem": problem, "form": form, "signed_in_as": user,
        "sign_in_first": user is None and not needs_account and not problem}, status=status)


@post_only
@member_required("members.manage")
def reset_password(request: HttpRequest, member_id) -> HttpResponse:
    """A new one-time password for a member who lost theirs, shown once like a new member's."""
    try:
        membership, password = services.reset_member_password(actor=request.actor, member_id=member_id)
    except (PermissionDenied, Conflict) as exc:
        messages.error(request, exc.message)
        return _page(request, AddMemberForm()) if request.htmx else redirect("web:members")
    messages.success(request, f"{membership.user.email} has a new password; their other sessions are signed out.")
    return _page(request, AddMemberForm(), new_password=(membership.user.email, password))
