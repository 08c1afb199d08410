"""The consent page of Airlock's authorization server (django-oauth-toolkit's authorize endpoint with
an agent picker): an MCP host that signs in with OAuth gets the identity of one agent the signed-in
person picks, from the organisations where they may manage gateway keys."""

from __future__ import annotations

from django import forms
from django.conf import settings
from oauth2_provider.forms import AllowForm
from oauth2_provider.models import get_application_model
from oauth2_provider.views import AuthorizationView

from apps.accounts import selectors as accounts
from apps.accounts.actors import member_actor
from apps.accounts.roles import allows
from apps.agents import selectors as agents
from apps.core.errors import NotFound, PermissionDenied
from apps.gateway import services as gateway


def pickable_agents(user) -> list[tuple[object, object]]:
    """(membership, agent) for every agent of an organisation where the person may manage gateway keys."""
    found = []
    for membership in accounts.memberships_of(user_id=user.id):
        if allows(membership.role, "tokens.manage"):
            found += [(membership, a) for a in agents.org_agents(org_id=membership.org_id)]
    return found


class ConsentForm(AllowForm):
    agent = forms.ChoiceField(required=False, label="Act as agent",
                              help_text="The host sees and may call exactly this agent's tools, by its grants.")

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        found = pickable_agents(user) if user is not None else []
        self.pickable = {str(a.id): m for m, a in found}
        self.fields["agent"].choices = [("", "Pick an agent…")] + [
            (str(a.id), f"{m.org.name} · {a.name}") for m, a in found]

    def clean(self):
        data = super().clean()
        if data.get("allow") and not data.get("agent"):
            self.add_error("agent", "Pick the agent this host acts as.")
        return data


class ConsentView(AuthorizationView):
    template_name = "web/oauth/consent.html"
    form_class = ConsentForm

    def get_form_kwargs(self):
        return {**super().get_form_kwargs(), "user": self.request.user}

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), "gateway_url": settings.AIRLOCK_GATEWAY_URL}

    def form_invalid(self, form):
        # The hidden fields came back with the form: show it again with the error beside the picker.
        application = get_application_model().objects.filter(client_id=form.data.get("client_id")).first()
        return self.render_to_response(self.get_context_data(form=form, application=application), status=422)

    def form_valid(self, form):
        if form.cleaned_data.get("allow"):
            application = get_application_model().objects.filter(
                client_id=form.cleaned_data.get("client_id")).first()
            membership = form.pickable.get(form.cleaned_data["agent"])
            if application is None or membership is None:
                form.add_error("agent", "Pick one of the listed agents.")
                return self.form_invalid(form)
            try:
                gateway.grant_oauth(actor=member_actor(membership, ip=self.request.META.get("REMOTE_ADDR")),
                                    application=application, agent_id=form.cleaned_data["agent"])
            except (NotFound, PermissionDenied):
                form.add_error("agent", "Pick one of the listed agents.")
                return self.form_invalid(form)
        return super().form_valid(form)
