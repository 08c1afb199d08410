"""Deploy checks: `manage.py check --deploy` refuses settings that would be unsafe in production."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Tags, Warning, register


@register(Tags.security, deploy=True)
def airlock_deploy_checks(app_configs, **kwargs):
    problems = []
    if not settings.AIRLOCK_ENCRYPTION_KEYS:
        problems.append(
            Warning(
                "AIRLOCK_ENCRYPTION_KEY is not set: secrets at rest would use a key derived from SECRET_KEY.",
                hint="Generate one with: python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())'",
                id="airlock.W001",
            )
        )
    if "*" in settings.ALLOWED_HOSTS:
        problems.append(
            Warning(
                "ALLOWED_HOSTS contains '*': that also disables the websocket origin check.",
                hint="List the host names Airlock is served on.",
                id="airlock.W002",
            )
        )
    if settings.AIRLOCK_EGRESS_ALLOW_PRIVATE:
        problems.append(
            Warning(
                "AIRLOCK_EGRESS_ALLOW_PRIVATE is on: registered servers may reach loopback and private addresses.",
                hint="Leave it off outside development and tests.",
                id="airlock.W003",
            )
        )
    return problems
