"""A server that cannot start and, on its way out, prints its whole config file (CONFIG_FILE) to stderr."""

import os
import sys

with open(os.environ["CONFIG_FILE"]) as config:
    print(f"fatal: upstream refused us; config was:\n{config.read()}", file=sys.stderr)
sys.exit(3)
