"""The channel layer on Redis: channels_redis's, with connections that survive a Redis restart.

A restart kills every pooled connection, and redis-py retries nothing by default, so the first
command on each one (a websocket's group_add, a publish, a consumer's blocking read) failed with
"Connection closed by server": the first websocket after a restart was dropped. Here a connection
error reconnects and tries again, with a short backoff while Redis is still coming back.
"""

from __future__ import annotations

from channels_redis.core import RedisChannelLayer
from channels_redis.utils import create_pool
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

RECONNECT_ATTEMPTS = 3


class ReconnectingRedisChannelLayer(RedisChannelLayer):
    def create_pool(self, index):
        host = {"retry": Retry(ExponentialBackoff(cap=1.0, base=0.05), RECONNECT_ATTEMPTS),
                "retry_on_error": [RedisConnectionError], **self.hosts[index]}
        return create_pool(host)
