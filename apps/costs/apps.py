from django.apps import AppConfig


class CostsConfig(AppConfig):
    name = "apps.costs"
    label = "costs"
    verbose_name = "Costs"
