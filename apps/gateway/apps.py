from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class GatewayConfig(AppConfig):
    name = "apps.gateway"
    label = "gateway"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registry and agent changes reach every gateway process: cache invalidation, so on the models, where
        # every writer's save is seen (apps.gateway.changes says why this is not an explicit call).
        from apps.gateway import changes  # imports models: only once apps are loaded

        receivers = [("agents.Agent", changes.agent_changed), ("agents.ToolGrant", changes.grant_changed),
                     ("registry.Tool", changes.registry_changed), ("registry.McpServer", changes.registry_changed),
                     ("registry.Resource", changes.registry_changed)]
        for sender, receiver in receivers:
            for signal in (post_save, post_delete):
                signal.connect(receiver, sender=sender, dispatch_uid=f"gateway.{sender}.{signal is post_save}")
        post_save.connect(changes.key_changed, sender="gateway.GatewayKey", dispatch_uid="gateway.key_saved")
        post_delete.connect(changes.key_changed, sender="gateway.GatewayKey", dispatch_uid="gateway.key_deleted")
