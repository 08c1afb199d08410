from django.apps import AppConfig
from django.db.models.signals import post_save


class ApprovalsConfig(AppConfig):
    name = "apps.approvals"
    label = "approvals"
    verbose_name = "Approvals"

    def ready(self) -> None:
        from apps.approvals.signals import resource_saved, tool_saved  # imports services: once apps are loaded

        post_save.connect(tool_saved, sender="registry.Tool", dispatch_uid="approvals.tool_saved")
        post_save.connect(resource_saved, sender="registry.Resource", dispatch_uid="approvals.resource_saved")
