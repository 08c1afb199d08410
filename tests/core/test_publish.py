"""A run's task sent through `apps.core.publish.send` on the Redis broker is the message Celery itself sends:
the same envelope, headers, properties and body, on the queue Celery's routes name, with the task tree Celery
records when a task sends another. The worker tests (tests/runs/test_worker.py, tests/reliability/) run what it
sends; here it is held to Celery's own message, field by field."""

from __future__ import annotations

import json

import pytest
import redis
from celery.signals import after_task_publish, before_task_publish
from django.conf import settings
from kombu.exceptions import OperationalError

from apps.core import publish
from apps.core.selectors import task_arguments
from apps.runs import tasks
from config.celery import app

pytestmark = pytest.mark.stack
RUN_ID = "6f9619ff-8b86-d011-b42d-00cf4fc964ff"


@pytest.fixture
def broker():
    """This process's Celery on a key prefix of its own, so nothing a worker of the session reads is touched."""
    before = app.conf.broker_transport_options
    prefix = f"{settings.RUN_ID}:publish-test:"
    fresh_pools()  # kombu's connections keep the options they were made with
    app.conf.broker_transport_options = {**before, "global_keyprefix": prefix}
    client = redis.Redis.from_url(app.conf.broker_url)
    yield client, prefix
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)
    app.conf.broker_transport_options = before
    fresh_pools()


def fresh_pools() -> None:
    app._pool, app.amqp._producer_pool = None, None


@pytest.fixture
def heard():
    """What Celery's publish signals told their receivers, in order: (signal, what it was told, ids taken out)."""
    told = []

    def before(sender=None, body=None, exchange=None, routing_key=None, headers=None, properties=None, **_):
        told.append(("before", sender, json.dumps(body), exchange, routing_key, without_ids({"headers": headers,
                     "properties": properties})))

    def after(sender=None, body=None, exchange=None, routing_key=None, headers=None, **_):
        told.append(("after", sender, json.dumps(body), exchange, routing_key, sorted(headers)))

    before_task_publish.connect(before, weak=False)
    after_task_publish.connect(after, weak=False)
    yield told
    before_task_publish.disconnect(before)
    after_task_publish.disconnect(after)


def sent(client, prefix: str, queue: str) -> list[dict]:
    """The messages waiting on `queue`, oldest first."""
    return [json.loads(raw) for raw in reversed(client.lrange(f"{prefix}{queue}", 0, -1))]


def without_ids(message: dict) -> dict:
    """The message with what differs from one send to the next (its ids) taken out; the keys keep their order."""
    headers = {k: v for k, v in message["headers"].items() if k not in ("id", "root_id")}
    properties = {k: v for k, v in message["properties"].items() if k not in ("correlation_id", "delivery_tag")}
    return {**message, "headers": headers, "properties": properties}


@pytest.mark.parametrize(("task", "queue"), [(tasks.execute_run, "runs"), (tasks.resume_run, "resume")])
def test_the_message_sent_is_the_one_celery_sends_on_the_queue_its_routes_name(broker, heard, task, queue):
    client, prefix = broker
    task.apply_async((RUN_ID,))
    publish.send(task, RUN_ID)
    assert [kind for kind, *_ in heard] == ["before", "after", "before", "after"]
    assert heard[2:] == heard[:2]  # Celery's publish signals, told the same

    celerys, ours = sent(client, prefix, queue)
    assert without_ids(ours) == without_ids(celerys)
    assert list(ours["headers"]) == list(celerys["headers"]) and list(ours) == list(celerys)
    assert ours["headers"]["id"] == ours["headers"]["root_id"] == ours["properties"]["correlation_id"]
    assert ours["headers"]["id"] != celerys["headers"]["id"]
    assert ours["properties"]["delivery_tag"] != celerys["properties"]["delivery_tag"]
    assert task_arguments(ours) == (task.name, [RUN_ID])  # what the sweeper reads (apps.runs.queue.runs_in_line)


@app.task(name="tests.core.test_publish.sends_a_run")
def sends_a_run(run_id: str) -> None:
    tasks.execute_run.apply_async((run_id,))
    publish.send(tasks.execute_run, run_id)


def test_a_task_sending_a_run_is_recorded_as_its_parent_as_celery_records_it(broker):
    client, prefix = broker
    parent = sends_a_run.apply((RUN_ID,))  # runs here, as a worker runs it

    celerys, ours = sent(client, prefix, "runs")
    assert without_ids(ours) == without_ids(celerys)
    assert ours["headers"]["parent_id"] == celerys["headers"]["parent_id"] == parent.id
    assert ours["headers"]["root_id"] == celerys["headers"]["root_id"] == parent.id


def test_a_broker_that_does_not_answer_fails_the_send_as_celery_does(broker):
    before = app.conf.broker_url
    fresh_pools()
    app.conf.broker_url = "redis://127.0.0.1:1/0"
    try:
        with pytest.raises(OperationalError):
            publish.send(tasks.execute_run, RUN_ID)
    finally:
        app.conf.broker_url = before
        fresh_pools()


@pytest.mark.parametrize("argument", [{"secret": "x"}, b"bytes", 7])
def test_nothing_but_ids_goes_to_the_broker(broker, argument):
    client, prefix = broker
    with pytest.raises(TypeError):
        publish.send(tasks.execute_run, argument)
    assert sent(client, prefix, "runs") == []
