from django.apps import AppConfig


class CrewsConfig(AppConfig):
    name = "apps.crews"
    label = "crews"
    verbose_name = "Crews"
