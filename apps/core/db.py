"""Session settings for the processes that run the engine.

Web and API processes have Postgres plan every execution of a prepared statement for its own
parameters (config/settings.py: `plan_cache_mode=force_custom_plan`), because a plan made once for
any parameters can miss a partial index (the run list's filters) and be slower by 10-20x. A worker's
statements are the run engine's: reads and writes of one run's rows by id, the same ten or so every
step. Planning them again each time was ~10 % of a step (bench/run.py), so workers let Postgres keep
one plan per statement (`auto`, its default).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import connections
from django.db.backends.signals import connection_created

logger = logging.getLogger(__name__)
RECEIVER_UID = "airlock-generic-plans"  # connection_created.disconnect(dispatch_uid=RECEIVER_UID) undoes it


def allow_generic_plans() -> None:
    """From now on, this process's Postgres connections may reuse generic plans (the open ones too)."""
    connection_created.connect(_set_auto, dispatch_uid=RECEIVER_UID)
    logger.debug("Postgres may reuse generic plans on this process's connections.")
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None:
            _set_auto(sender=type(connection), connection=connection)


def _set_auto(sender: Any, connection: Any, **_: Any) -> None:
    if connection.vendor != "postgresql" or connection.settings_dict["OPTIONS"].get("prepare_threshold") is None:
        return
    with connection.cursor() as cursor:
        cursor.execute("SET plan_cache_mode = auto")
