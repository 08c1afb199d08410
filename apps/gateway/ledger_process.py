"""The gateway's ledger writer process: `python -m apps.gateway.ledger_process`, started by
`ledger.LedgerWriter` (never by hand).

It commits the batches of call records its gateway sends, so the ORM and SQL work of a batch
(the calls' rows, run events, audit rows) never holds the gateway's GIL. Protocol, over its
stdin and the stdout it had when it started (its own prints go to stderr):

    gateway -> writer   frame: HEADER (batch number, resend flag, length) + pickled list[CallRecord]
    writer -> gateway   ACK (batch number) once the batch is committed (or given up)

It runs at a lower CPU priority than the gateway (the hot path is the gateway's), ignores SIGINT
and SIGTERM (a Ctrl-C to the process group or a stop signal must not cut a batch short: the
gateway stops it by closing its stdin once everything is acknowledged), and exits at end of
input: when its gateway stops, or dies.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import struct
import sys

HEADER = struct.Struct("!QBI")  # batch number, resend (0/1), length of the pickle
ACK = struct.Struct("!Q")
NICE = 5


def _read_exactly(stream, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # stray prints must not corrupt the acknowledgements
    with contextlib.suppress(OSError):
        os.nice(NICE)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.db import close_old_connections

    from apps.gateway import ledger  # models: only after django.setup() in this fresh process

    source = sys.stdin.buffer
    while True:
        header = _read_exactly(source, HEADER.size)
        if header is None:
            break
        number, resend, size = HEADER.unpack(header)
        body = _read_exactly(source, size)
        if body is None:
            break
        ledger.write_batch(pickle.loads(body), resend=bool(resend))  # noqa: S301 (our own gateway, a pipe)
        out.write(ACK.pack(number))
        close_old_connections()  # outside a request cycle: CONN_MAX_AGE and health checks apply only here
    ledger.close_connections()


if __name__ == "__main__":
    main()
