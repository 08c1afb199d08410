"""The channel layer on Redis: channels_redis's pub/sub layer, with connections that survive a Redis restart.

Why pub/sub. channels_redis's other layer (`RedisChannelLayer`) keeps each web process's messages in one Redis
sorted set and takes them off one at a time, four round trips each (a clean-up script, BZPOPMIN, a backup copy
and its removal), one after the other. A web process with fifty busy run pages fell seconds behind: under
bench/load.py a run event took 0.1-0.2 s from its commit to Redis and 0.7-2.9 s more to reach its page's consumer.
Pub/sub delivers every message of a process over the one connection it subscribed on, with no round trip per
message, and a group send is one PUBLISH. It keeps nothing for a process that is not listening, which is what
the pages already assume of every layer: a run page that hears nothing reads the table itself
(apps/web/consumers.py, CATCH_UP_S), so a lost message delays an update and never loses it.

Why reconnecting. A restart kills every pooled connection, and redis-py retries nothing unless told: the first
command on each one (a websocket's subscribe, a publish) failed with "Connection closed by server". Here a
connection error reconnects and tries again with a short backoff, and the subscribing connection subscribes
again to what it had (redis-py's PubSub does that on connect), so open pages keep hearing after a restart.
When no page was subscribed, nothing read from that connection while Redis was away, and under uvloop (which
uvicorn runs) the next subscribe's write to its closed socket raises RuntimeError ("the handler is closed")
instead of a connection error: that is retried the same way, or the first page after a restart was refused.
"""

from __future__ import annotations

from channels_redis.pubsub import RedisPubSubChannelLayer
from channels_redis.utils import decode_hosts
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

RECONNECT_ATTEMPTS = 3


class ReconnectingPubSubChannelLayer(RedisPubSubChannelLayer):
    def __init__(self, hosts=None, **kwargs) -> None:
        hosts = [{"retry": Retry(ExponentialBackoff(cap=1.0, base=0.05), RECONNECT_ATTEMPTS),
                  "retry_on_error": [RedisConnectionError, RuntimeError], **host} for host in decode_hosts(hosts)]
        super().__init__(hosts=hosts, **kwargs)

    async def group_watched(self, group: str) -> bool:
        """Whether any process listens to `group` now (one PUBSUB NUMSUB): the sender holds back nudges to a run
        nobody watches (apps/core/realtime.py)."""
        layer = self._get_layer()  # this event loop's
        channel = layer._get_group_channel_name(group)
        shard = layer._get_shard(channel)
        shard._ensure_redis()
        [(_, listeners)] = await shard._redis.pubsub_numsub(channel)
        return listeners > 0
