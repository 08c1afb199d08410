from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "apps.gateway"
    label = "gateway"
    default_auto_field = "django.db.models.BigAutoField"
