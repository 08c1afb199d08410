"""Apply every organisation's run retention now (beat does it hourly); --dry-run only counts."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from apps.runs.retention import BATCH, apply_retention


class Command(BaseCommand):
    help = "Remove the detail (events, conversations, tool-call payloads) of finished runs past each org's retention."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="count what would be removed; change nothing")

    def handle(self, *args, dry_run: bool, **options) -> None:
        passes = apply_retention(dry_run=dry_run)
        if not passes:
            self.stdout.write("No organisation has a retention setting: everything is kept.")
        verb = "would remove" if dry_run else "removed"
        for done in passes:
            self.stdout.write(f"org {done.org_id} (keep {done.days} days, before {done.cutoff:%Y-%m-%d %H:%M}): "
                              f"{done.runs} run(s); {verb} {done.events} event(s), {done.conversations} "
                              f"conversation(s), {done.tool_calls} tool-call payload(s)")
            if done.runs == BATCH:
                self.stdout.write(f"  at most {BATCH} runs per pass: run again (or let beat) for the rest")
