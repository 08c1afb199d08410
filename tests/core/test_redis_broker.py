"""The Redis broker's transport (apps/core/redis_broker.py) keeps one client per channel, on the pool kombu uses:
after kombu replaces that pool (a fork, a reconnect) the channel still sends, takes and acknowledges messages.
The worker, lease and Redis restart tests run every process of theirs on it."""

from __future__ import annotations

import pytest
from django.conf import settings
from kombu import Connection, Queue

from apps.core.redis_broker import Transport

pytestmark = pytest.mark.stack


@pytest.fixture
def channel():
    options = {"global_keyprefix": f"{settings.RUN_ID}:redis-broker-test:"}
    with Connection(settings.CELERY_BROKER_URL, transport=Transport, transport_options=options) as connection:
        channel = connection.channel()
        queue = Queue("kept-client", channel=channel)
        queue.declare()
        yield channel, queue
        queue.purge()
        queue.delete()


def test_a_channel_sends_takes_and_acknowledges_before_and_after_kombu_replaces_its_pool(channel):
    channel, queue = channel
    for replaced in (False, True):
        if replaced:
            channel._disconnect_pools()  # what kombu does in a forked child, and on a reconnect
        channel.basic_publish(channel.prepare_message(f"message {replaced}"), exchange="", routing_key=queue.name)
        message = queue.get(no_ack=False)
        assert message is not None and message.body == f"message {replaced}".encode()
        with channel.conn_or_acquire() as client:
            assert client.connection_pool is channel.pool
            assert client.hlen(channel.unacked_key) == 1  # noted as taken, not yet acknowledged
            message.ack()
            assert client.hlen(channel.unacked_key) == 0  # struck off
        assert queue.get() is None
