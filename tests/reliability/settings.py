"""Settings for the processes the fault tests start: the test settings, plus the run engine's
lease and redelivery cap from the environment (short leases make recovery take seconds)."""

import os

from config.settings_test import *  # noqa: F403

AIRLOCK_RUN_LEASE_S = int(os.environ.get("AIRLOCK_RUN_LEASE_S", "120"))
AIRLOCK_RUN_MAX_DELIVERIES = int(os.environ.get("AIRLOCK_RUN_MAX_DELIVERIES", "3"))
