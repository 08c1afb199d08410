"""kombu's Redis transport, keeping one redis-py client per channel instead of building one per operation.

kombu's Redis channel builds a new client for each operation it makes outside its consuming connection: each message
a worker takes is noted in the `unacked` hash and struck off when acknowledged (a pipeline each), and each Celery
publish pushes its message. A client is a thin handle on the channel's connection pool, but redis-py's constructor
copies its ~170 response callbacks: 0.19 ms of CPU each on these machines, ~0.45 ms of every task a worker takes
(docs/performance-history.md, twenty-third round). This channel keeps one for as long as kombu keeps the pool it was
built on; when kombu replaces the pool (after a fork, a reconnect) the next operation builds a new one on it.

config/settings.py names it as the broker's transport for a `redis://` broker (a TLS one keeps kombu's own).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kombu.transport import redis


class Channel(redis.Channel):
    @contextmanager
    def conn_or_acquire(self, client=None) -> Iterator:
        if client:
            yield client
            return
        kept = self.__dict__.get("_kept_client")
        if kept is None or kept.connection_pool is not self.pool:
            kept = self.__dict__["_kept_client"] = self._create_client()
        yield kept


class Transport(redis.Transport):
    Channel = Channel
