"""Airlock's ASGI app on Django's own Redis cache backend, as before apps/core/cache.py (one connection pool per
process, a cache client per request and a redis-py client per operation), for bench/web_cpu.py:
`--against bench.web_twin_cache:application`."""

import threading

import redis
from django.conf import settings

from config.asgi import application  # noqa: F401  (sets Django up; the cache is built at its first use, after)

_pools: dict[str, redis.ConnectionPool] = {}
_lock = threading.Lock()


class SharedConnectionPool(redis.ConnectionPool):
    @classmethod
    def from_url(cls, url, **options):
        with _lock:
            if url not in _pools:
                _pools[url] = super().from_url(url, **options)
            return _pools[url]


settings.CACHES["default"].update({"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "OPTIONS": {"pool_class": SharedConnectionPool}})
