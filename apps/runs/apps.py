from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "apps.runs"
    label = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        from apps.approvals.selectors import INBOX_COUNTERS
        from apps.runs.selectors import unknown_call_count

        if unknown_call_count not in INBOX_COUNTERS:
            INBOX_COUNTERS.append(unknown_call_count)
