"""Settings for the processes the fault tests start: the test settings (whose lease, heartbeat and sweep
timings are production's unless a test sets them in the environment), plus the redelivery cap."""

import os

from config.settings_test import *  # noqa: F403

AIRLOCK_RUN_MAX_DELIVERIES = int(os.environ.get("AIRLOCK_RUN_MAX_DELIVERIES", "3"))
