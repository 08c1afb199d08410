from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm

from apps.accounts.roles import ROLE_HELP, TOKEN_ROLES, Role
from apps.accounts.selectors import sso_required_for
from apps.approvals.models import ApprovalRequest
from apps.core.errors import ValidationFailed


class EmailAuthenticationForm(AuthenticationForm):
    username = forms.EmailField(label="Email", widget=forms.EmailInput(attrs={"autofocus": True,
                                                                            "autocomplete": "email"}))

    def clean_username(self):
        return self.cleaned_data["username"].strip().lower()

    def confirm_login_allowed(self, user):
        super().confirm_login_allowed(user)

        idp = sso_required_for(user)
        if idp is not None:
            raise forms.ValidationError(
                f"{idp.org.name} signs in with single sign-on, not a password: use “Sign in with {idp.name}”.",
                code="sso_required")


class SignUpForm(forms.Form):
    email = forms.EmailField(widget=forms.EmailInput(attrs={"autocomplete": "email"}))
    password = forms.CharField(widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
                               help_text="At least 10 characters, not a common password.")
    org_name = forms.CharField(label="Organisation name", max_length=120)


class AddMemberForm(forms.Form):
    email = forms.EmailField()
    role = forms.ChoiceField(choices=Role.choices, initial=Role.VIEWER,
                             help_text=" ".join(f"{r.label}: {ROLE_HELP[r]}" for r in Role))


class CreateTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What uses it, e.g. 'deploy pipeline'.")
    role = forms.ChoiceField(choices=[(r.value, r.label) for r in TOKEN_ROLES], initial=Role.VIEWER)


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False)
    action = forms.CharField(required=False)
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))


class RunFilterForm(forms.Form):
    """The run history's filters; choices for crew, agent and who started it are filled by the view."""

    q = forms.CharField(required=False, label="Search inputs and outputs")
    crew = forms.UUIDField(required=False)
    agent = forms.UUIDField(required=False)
    status = forms.CharField(required=False)
    started_by = forms.IntegerField(required=False)
    since = forms.DateField(required=False)
    until = forms.DateField(required=False)
    held = forms.BooleanField(required=False)
    findings = forms.BooleanField(required=False)
    attention = forms.BooleanField(required=False)
    sort = forms.ChoiceField(required=False, choices=[("newest", "Newest"), ("oldest", "Oldest"),
                                                      ("cost", "Final cost"), ("tokens", "Final tokens"),
                                                      ("status", "Status")])  # cost and tokens: ended runs first
    page = forms.IntegerField(required=False, min_value=1)


class CostRangeForm(forms.Form):
    since = forms.DateField(required=False)
    until = forms.DateField(required=False)
    group_by = forms.ChoiceField(required=False, choices=[("day", "Day"), ("week", "Week"), ("month", "Month")])


class PriceForm(forms.Form):
    model = forms.CharField(max_length=200)
    provider = forms.CharField(max_length=40, required=False, help_text="Empty: the model under any provider.")
    input_per_mtok = forms.DecimalField(label="Input $/M tokens", min_value=0, max_digits=12, decimal_places=6)
    output_per_mtok = forms.DecimalField(label="Output $/M tokens", min_value=0, max_digits=12, decimal_places=6)
    cached_per_mtok = forms.DecimalField(label="Cached input $/M tokens", min_value=0, max_digits=12,
                                         decimal_places=6, required=False, help_text="Empty: the input price.")
    effective_from = forms.DateField(help_text="Calls from this day on (UTC) use this price.")
    note = forms.CharField(max_length=200, required=False)


class BudgetForm(forms.Form):
    scope = forms.ChoiceField(choices=[("org", "Organisation (per month)"), ("crew", "Crew (per month)"),
                                       ("agent", "Agent (per month)"), ("run", "Each run")])
    target = forms.CharField(required=False, help_text="The crew or agent (for those scopes).")
    amount_usd = forms.CharField(label="Amount (USD)")
    thresholds = forms.CharField(
        initial="50, 80, 100", required=False,
        help_text="Warn at these percents; at 100 % new runs are refused and running ones stop.")


def apply_domain_errors(form: forms.Form, exc: ValidationFailed) -> None:
    """Shows a service's field errors next to the fields, the rest at the top of the form."""
    if not exc.errors:
        form.add_error(None, exc.message)
    for field, message in exc.errors.items():
        form.add_error(field if field in form.fields else None, message)


class InviteForm(forms.Form):
    """Beside "Add a member" on one page: its own prefix and labels keep ids and names apart."""

    prefix = "invite"
    email = forms.EmailField(label="Address to invite")  # not "Email": the add-member field is
    role = forms.ChoiceField(label="Invite as", choices=Role.choices, initial=Role.VIEWER)


class AcceptInviteForm(forms.Form):
    password = forms.CharField(widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
                               help_text="At least 10 characters, not a common password.")


class IdentityProviderForm(forms.Form):
    name = forms.CharField(max_length=80, help_text="Shown on the sign-in page: “Sign in with <name>”.")
    issuer_url = forms.CharField(label="Issuer URL", max_length=500,
                                 help_text="Discovery is read from <issuer>/.well-known/openid-configuration.")
    client_id = forms.CharField(label="Client ID", max_length=200)
    client_secret = forms.CharField(label="Client secret", required=False, max_length=500,
                                    widget=forms.PasswordInput(attrs={"autocomplete": "off"}, render_value=False),
                                    help_text="Write-only: leave blank to keep the stored one.")
    allowed_domains = forms.CharField(label="Allowed email domains", max_length=1000,
                                      help_text="Comma-separated, like example.com, example.org.")
    default_role = forms.ChoiceField(choices=[c for c in Role.choices if c[0] != Role.OWNER],
                                     help_text="The role of a person who signs in for the first time.")
    sso_required = forms.BooleanField(label="Require single sign-on", required=False,
                                      help_text="Members cannot sign in with a password.")
    enabled = forms.BooleanField(required=False, initial=True)


class DecisionForm(forms.Form):
    """The inbox's decision POST (web/inbox/_decide_form.html): the decision, a comment, the standing choice,
    the hash of the arguments the person saw, and the edited arguments as `arg.<name>` fields, typed by the
    tool's input schema. Every field is optional: what is wrong with a decision is the service's to say
    (`apps.runs.decisions.decide`), next to the field it concerns."""

    decision = forms.CharField(required=False)
    comment = forms.CharField(required=False)
    standing = forms.CharField(required=False, strip=False)
    standing_condition = forms.CharField(required=False, strip=False)
    standing_hours = forms.CharField(required=False, strip=False)
    args_hash = forms.CharField(required=False, strip=False)

    def __init__(self, data: Any, *, item: ApprovalRequest) -> None:
        super().__init__(data)
        self.item = item
        self.values = {key[4:]: value for key, value in data.items() if key.startswith("arg.")}

    def clean_standing(self) -> str:
        return self.data.get("standing", "call")  # no choice sent: this call only

    def decision_arguments(self) -> dict[str, Any]:
        """The keyword arguments of `decide`. Raises ValidationFailed when a field is malformed."""
        if not self.is_valid():
            raise ValidationFailed("The decision could not be read.",
                                   {name: " ".join(errors) for name, errors in self.errors.items()})
        data = self.cleaned_data
        decision = data["decision"]
        arguments = parse_arguments(self.item, self.values) if self.values and decision == "approve" else None
        return {"decision": decision, "arguments": arguments, "comment": data["comment"],
                "standing": {"scope": data["standing"], "condition": data["standing_condition"],
                             "hours": data["standing_hours"] or None},
                "expected_args_hash": data["args_hash"]}


def parse_arguments(request: ApprovalRequest, values: dict[str, str]) -> dict[str, Any]:
    """The edited arguments from the form, typed by the input schema; a value that does not convert
    stays text so the schema check reports it next to its field."""
    schema = (request.tool.input_schema if request.tool_id and request.tool else None) or {}
    props = schema.get("properties") or {}
    out = dict(request.arguments)
    for name, raw in values.items():
        kind = (props.get(name) or {}).get("type")
        raw = raw.strip() if kind != "string" else raw
        if raw == "" and name not in request.arguments:
            continue
        out[name] = _typed(raw, kind)
    return out


def _typed(raw: str, kind: Any) -> Any:
    try:
        if kind == "integer":
            return int(raw)
        if kind == "number":
            return float(raw) if any(c in raw for c in ".eE") else int(raw)
        if kind == "boolean":
            return {"true": True, "false": False}.get(raw.lower(), raw)
        if kind == "string":
            return raw
        return json.loads(raw)
    except (ValueError, TypeError):
        return raw
