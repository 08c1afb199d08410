from __future__ import annotations

from django import forms
from django.contrib.auth.forms import AuthenticationForm

from apps.accounts.roles import ROLE_HELP, TOKEN_ROLES, Role
from apps.core.errors import ValidationFailed


class EmailAuthenticationForm(AuthenticationForm):
    username = forms.EmailField(label="Email", widget=forms.EmailInput(attrs={"autofocus": True,
                                                                            "autocomplete": "email"}))

    def clean_username(self):
        return self.cleaned_data["username"].strip().lower()


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


def apply_domain_errors(form: forms.Form, exc: ValidationFailed) -> None:
    """Shows a service's field errors next to the fields, the rest at the top of the form."""
    if not exc.errors:
        form.add_error(None, exc.message)
    for field, message in exc.errors.items():
        form.add_error(field if field in form.fields else None, message)
