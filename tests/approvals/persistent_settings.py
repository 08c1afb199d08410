"""The test settings with production's persistent database connections (CONN_MAX_AGE 60 s, health
checks), for a worker that must keep its connection between tasks (config/celery.py)."""

from config.settings_test import *  # noqa: F403

DATABASES["default"]["CONN_MAX_AGE"] = 60  # noqa: F405
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True  # noqa: F405
