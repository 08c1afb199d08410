"""Reads stdin and never answers: a server that hangs."""

import sys
import time

for _line in sys.stdin:
    time.sleep(3600)
