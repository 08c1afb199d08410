from django.apps import AppConfig
from django.db.models.signals import post_save


class ApprovalsConfig(AppConfig):
    name = "apps.approvals"
    label = "approvals"
    verbose_name = "Approvals"

    def ready(self) -> None:
        from apps.approvals.signals import tool_saved  # imports services and models: only once apps are loaded

        post_save.connect(tool_saved, sender="registry.Tool", dispatch_uid="approvals.tool_saved")
