"""Calls per minute per gateway key, shared by every gateway process.

With Redis configured (`REDIS_URL`) the limit is a sliding-window counter in Redis: one
counter per key and minute (`INCR` + `EXPIRE` in one pipeline, with a `GET` of the previous
minute's counter), and a call is allowed while `previous * (1 - elapsed/60) + current` stays
within the rate. Every process counts into the same keys, so N gateway processes behind a load
balancer allow the key's rate in total, not N times it. A refused call does not count.

A process claims calls in small blocks (`rate // CLAIM_SHARE`, at least 1: one call at a time up
to 199 calls a minute) and spends a block without asking Redis again, so a busy key costs a
round trip every few hundred calls rather than one per call. The price: calls a process claimed
and has not spent yet count against the key, so a key may be refused up to one block early per
process (a 1 % of its rate) near its limit.

Embedded mode (no Redis) has one gateway process: the in-memory token bucket is enough. The
Redis limiter also falls back to it while Redis cannot be reached (calls are not refused
because the counter is down).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time

from django.conf import settings

logger = logging.getLogger(__name__)

WINDOW_S = 60
COUNTER_TTL_S = 2 * WINDOW_S + 5  # the previous window is still read during the current one
CLAIM_SHARE = 100  # a process claims up to 1/CLAIM_SHARE of a key's rate at a time


class LocalRateLimiter:
    """A token bucket per key in this process: `rate` calls per minute, bursts up to `rate`."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}

    async def take(self, key_id: str, rate: int) -> float:
        return self.take_now(key_id, rate)

    def take_now(self, key_id: str, rate: int) -> float:
        """0 when the call may go ahead, else seconds until one may."""
        now = time.monotonic()
        tokens, at = self._buckets.get(key_id, (float(rate), now))
        tokens = min(float(rate), tokens + (now - at) * rate / 60.0)
        if tokens >= 1:
            self._buckets[key_id] = (tokens - 1, now)
            return 0.0
        self._buckets[key_id] = (tokens, now)
        return (1 - tokens) * 60.0 / rate

    async def close(self) -> None:
        return None


def redis_prefix() -> str:
    """The key prefix: the channel layer's (per test session in tests), else `airlock`."""
    explicit = getattr(settings, "AIRLOCK_REDIS_PREFIX", "")
    if explicit:
        return explicit
    config = (getattr(settings, "CHANNEL_LAYERS", {}).get("default") or {}).get("CONFIG") or {}
    return str(config.get("prefix") or "airlock")


class RedisRateLimiter:
    """The sliding-window counter in Redis, with the local bucket while Redis is unreachable."""

    def __init__(self, url: str, prefix: str | None = None) -> None:
        import redis.asyncio as redis

        # One connection per event loop is plenty: each take is one pipelined round trip.
        self._redis = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2,
                                           health_check_interval=30)
        self._prefix = f"{prefix or redis_prefix()}:gateway:rate"
        self._fallback = LocalRateLimiter()
        self._down_until = 0.0
        self._claims: dict[str, list[int]] = {}  # key id -> [window, calls claimed and not spent]

    async def take(self, key_id: str, rate: int, *, now: float | None = None) -> float:
        """0 when the call may go ahead, else seconds until one may (a refused call is not counted)."""
        import redis

        if time.monotonic() < self._down_until:
            return self._fallback.take_now(key_id, rate)
        now = time.time() if now is None else now
        window = int(now // WINDOW_S)
        elapsed = now - window * WINDOW_S
        claim = self._claims.get(key_id)
        if claim is not None and claim[0] == window and claim[1] > 0:
            claim[1] -= 1  # a window's allowance only grows as the previous minute fades
            return 0.0
        block = max(1, rate // CLAIM_SHARE)
        current, previous_key = f"{self._prefix}:{key_id}:{window}", f"{self._prefix}:{key_id}:{window - 1}"
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.incrby(current, block)
                pipe.expire(current, COUNTER_TTL_S)
                pipe.get(previous_key)
                count, _, previous = await pipe.execute()
        except (redis.RedisError, OSError):
            logger.warning("gateway rate limit: Redis unreachable, counting in this process for 10 s", exc_info=True)
            self._down_until = time.monotonic() + 10
            return self._fallback.take_now(key_id, rate)
        previous = int(previous or 0)
        room = math.floor(rate - previous * (1 - elapsed / WINDOW_S))  # calls this window allows now, in all
        unfit = min(block, max(0, count - room))
        if unfit:  # calls that did not fit are not counted
            with contextlib.suppress(redis.RedisError, OSError):
                await self._redis.decrby(current, unfit)
        if unfit == block:
            return _wait(rate=rate, count=count - block, previous=previous, elapsed=elapsed)
        if len(self._claims) > 10_000:
            self._claims = {k: c for k, c in self._claims.items() if c[0] == window}
        self._claims[key_id] = [window, block - unfit - 1]
        return 0.0

    async def close(self) -> None:
        try:
            await self._redis.aclose()
        except Exception:  # closing on shutdown: nothing to do about it
            logger.debug("closing the rate limiter's Redis connection failed", exc_info=True)


def _wait(*, rate: int, count: int, previous: int, elapsed: float) -> float:
    """Seconds until `previous * (1 - t/60) + count + 1 <= rate` holds again (at least 1)."""
    if count + 1 <= rate:
        fraction = 1.0 if previous <= 0 else 1 - (rate - count - 1) / previous
        wait = fraction * WINDOW_S - elapsed
    else:  # this minute alone is full: wait for the next one, where it counts as the previous minute
        fraction = 0.0 if count <= 0 else max(0.0, 1 - (rate - 1) / count)
        wait = (WINDOW_S - elapsed) + fraction * WINDOW_S
    return float(max(1, math.ceil(wait)))


def rate_limiter() -> LocalRateLimiter | RedisRateLimiter:
    """The shared limiter when Redis is configured, else this process's."""
    url = getattr(settings, "REDIS_URL", "")
    return RedisRateLimiter(url) if url else LocalRateLimiter()
