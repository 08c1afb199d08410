"""One Redis connection pool per process for Django's cache.

Django keeps a cache object per context (`caches` is context-local), and under ASGI every request is a context of
its own: each request made a new RedisCache, whose first use opened a new pool and a new TCP connection to Redis,
left to the garbage collector after the response. Every API request reads the token lockout (apps/api/lockout.py),
so every API request connected to Redis; with hundreds of requests a second (bench/load.py's decision storm) that
was a connect, an address lookup and a close each. The pool is the process's, shared by every cache object; redis-py
resets a pool it finds in a forked child.
"""

from __future__ import annotations

import threading
from typing import Any

import redis

_pools: dict[tuple, redis.ConnectionPool] = {}
_lock = threading.Lock()


class SharedConnectionPool(redis.ConnectionPool):
    """`CACHES[...]["OPTIONS"]["pool_class"]`: `from_url` gives this process's pool for the URL and options."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> redis.ConnectionPool:
        key = (url, tuple(sorted((name, repr(value)) for name, value in options.items())))
        with _lock:
            if key not in _pools:
                _pools[key] = super().from_url(url, **options)
            return _pools[key]
