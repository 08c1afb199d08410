from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from apps.accounts import selectors, services
from apps.core.errors import PermissionDenied, ValidationFailed
from apps.web.access import member_required, post_only
from apps.web.forms import CreateTokenForm, apply_domain_errors


def _page(request: HttpRequest, form: CreateTokenForm, created=None, status: int = 200) -> HttpResponse:
    context = {"tokens": selectors.org_tokens(org_id=request.actor.org_id), "form": form, "created": created,
               "api_base": request.build_absolute_uri("/api/v1/")}
    template = "web/settings/tokens.html#tokens-panel" if request.htmx else "web/settings/tokens.html"
    return render(request, template, context, status=status)


@member_required("tokens.manage")
def tokens(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _page(request, CreateTokenForm())
    form = CreateTokenForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=422)
    try:
        token, raw = services.create_api_token(actor=request.actor, org_id=request.actor.org_id,
                                               **form.cleaned_data)
    except (ValidationFailed, PermissionDenied) as exc:
        apply_domain_errors(form, exc if isinstance(exc, ValidationFailed) else ValidationFailed(exc.message))
        return _page(request, form, status=422)
    return _page(request, CreateTokenForm(), created=(token, raw))


@post_only
@member_required("tokens.manage")
def revoke_token(request: HttpRequest, token_id) -> HttpResponse:
    token = services.revoke_api_token(actor=request.actor, token_id=token_id)
    messages.success(request, f"Token “{token.name}” revoked; it stops working at once.")
    if request.htmx:
        return _page(request, CreateTokenForm())
    return redirect("web:tokens")
