"""Health check of a Celery beat container: exit 0 when its beat ticked recently (apps/core/beat_lock.py)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from apps.core import beat_lock


class Command(BaseCommand):
    help = "Exit non-zero when this machine's Celery beat has stopped renewing (or waiting for) the beat lock."

    def handle(self, *args, **options) -> None:
        problem = beat_lock.healthy()
        if problem:
            raise CommandError(f"beat unhealthy: {problem}")
        self.stdout.write("beat ok")
