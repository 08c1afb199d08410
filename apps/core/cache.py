"""Django's Redis cache with one client per process (`CACHES[...]["BACKEND"]`).

Django keeps a cache object per context (`caches` is context-local), and under ASGI every request is a context of
its own: each request built a new RedisCache and, at its first use, a new cache client with a new connection pool,
so a new TCP connection to Redis, left to the garbage collector after the response. Every API request reads the
token lockout (apps/api/lockout.py), so every API request connected to Redis: with hundreds of requests a second
(bench/load.py's decision storm) a connect, an address lookup and a close each. And Django's client builds a
redis-py client for every operation (0.09 ms; its constructor copies redis-py's response callbacks).

Here the cache objects of a process share one client for the same servers and options, and the client keeps one
redis-py client per connection pool. redis-py's clients and pools are thread-safe, and a pool resets itself in a
forked child. Django's own backend is the plain twin: same settings, same behaviour, more work per request.
"""

from __future__ import annotations

import threading
from functools import cached_property

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient

_clients: dict[tuple, RedisCacheClient] = {}
_lock = threading.Lock()


class KeptRedisCacheClient(RedisCacheClient):
    """Django's client, keeping the redis-py client it builds for each connection pool."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._kept: dict[object, object] = {}  # connection pool -> its redis-py client

    def get_client(self, key=None, *, write=False):
        pool = self._get_connection_pool(write)  # Django's: built once per server
        client = self._kept.get(pool)
        if client is None:
            client = self._kept[pool] = self._client(connection_pool=pool)
        return client


class RedisCache(DjangoRedisCache):
    """Django's Redis cache whose instances in a process share the client for their servers and options."""

    @cached_property
    def _cache(self) -> RedisCacheClient:
        key = (tuple(self._servers), tuple(sorted((name, repr(value)) for name, value in self._options.items())))
        with _lock:
            if key not in _clients:
                _clients[key] = KeptRedisCacheClient(self._servers, **self._options)
            return _clients[key]
