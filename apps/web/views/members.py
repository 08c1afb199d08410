from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from apps.accounts import lockouts, selectors, services
from apps.accounts.roles import ROLE_HELP, Role
from apps.core.errors import Conflict, PermissionDenied, ValidationFailed
from apps.web.access import member_required, post_only
from apps.web.forms import AddMemberForm, apply_domain_errors


def _page(request: HttpRequest, form: AddMemberForm, new_password: str | None = None, status: int = 200):
    members = list(selectors.org_members(org_id=request.actor.org_id))
    context = {
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
