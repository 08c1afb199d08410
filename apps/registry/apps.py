from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "apps.registry"
    label = "registry"

    def ready(self) -> None:
        from apps.registry import checks  # noqa: F401  (registers the egress allow-list check)
