"""Sending a run's task: Celery's `apply_async`, or on the Redis broker the same message in one LPUSH.

Celery's publish cost ~1.2 ms of CPU a message on these machines, against 0.13 ms for the LPUSH that carries it
(`bench` figures in docs/performance-history.md, twenty-third round): kombu's Redis transport builds a new
redis-py client for every message (whose constructor copies ~170 response callbacks), and Celery looks its
configuration up through Django's settings, copies kombu's queue and exchange, and formats the arguments for
the log. A run start, a decision's resume and a resumed run's next steps each send one, on a web request's or
a worker's way, so that was a good share of a decision's CPU.

`send` is the one door. On the Redis broker it writes Celery's protocol-2 message exactly as Celery and kombu's
Redis transport would (tests/core/test_publish.py holds the two to the same message, and the worker tests run
what it sends); anywhere else (the embedded folder broker, eager mode, a TLS broker, whose options are kombu's), or
when Redis does not answer, it calls `apply_async`, the plain twin, whose publish retries through a short Redis
restart. A message the LPUSH may have delivered before its connection failed can so be sent twice: a run's tasks are
safe to run twice (a second delivery finds the run claimed or moved on, apps/runs/worker.py).
"""

from __future__ import annotations

import base64
import os
import socket
import uuid

import redis
from celery import Task
from celery.signals import after_task_publish, before_task_publish
from kombu.utils.json import dumps

_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}  # no links: Celery's own defaults
_clients: dict[str, redis.Redis] = {}
_queues: dict[str, str] = {}


def send(task: Task, *args: str) -> None:
    """Sends `task` with `args` (ids) to the queue Celery's routes give it."""
    if not all(isinstance(arg, str) for arg in args):  # as config.celery.IdOnlyTask: nothing but ids on the broker
        raise TypeError(f"{task.name}: task arguments must be ids as strings")
    conf = task.app.conf
    url = conf.broker_url or ""
    if conf.task_always_eager or not url.startswith("redis://"):
        task.apply_async(args)
        return
    prefix = (conf.broker_transport_options or {}).get("global_keyprefix", "")
    queue = _queue(task)
    headers, properties, body = message(task, args)
    # Celery's publish signals, as Celery sends them: what hooks a publish (tracing that adds a header, a test that
    # records every message) hears this one too, and a header a receiver adds goes out with it.
    before_task_publish.send(sender=task.name, body=body, exchange="", routing_key=queue, declare=[], headers=headers,
                             properties=properties, retry_policy=None)
    try:
        _client(url).lpush(f"{prefix}{queue}", dumps(envelope(headers, properties, body, queue)))
    except redis.RedisError:  # Celery's publish retries; its receivers hear of the message it sends (a new id)
        task.apply_async(args)
        return
    after_task_publish.send(sender=task.name, body=body, headers=headers, exchange="", routing_key=queue)


def message(task: Task, args: tuple[str, ...]) -> tuple[dict, dict, tuple]:
    """(headers, properties, body) of Celery's protocol-2 message for `task.apply_async(args)`."""
    task_id, app = str(uuid.uuid4()), task.app
    parent = app.current_worker_task  # a task sending this one: Celery records the tree it belongs to
    root_id = (parent.request.root_id or parent.request.id) if parent else task_id
    headers = {
        "lang": "py", "task": task.name, "id": task_id, "shadow": None, "eta": None, "expires": None,
        "group": None, "group_index": None, "retries": 0, "timelimit": [None, None], "root_id": root_id,
        "parent_id": parent.request.id if parent else None, "argsrepr": repr(tuple(args)), "kwargsrepr": "{}",
        "origin": f"gen{os.getpid()}@{socket.gethostname()}", "ignore_result": task.ignore_result,
        "replaced_task_nesting": 0, "stamped_headers": None, "stamps": {},
    }
    return headers, {"correlation_id": task_id, "reply_to": app.thread_oid}, (args, {}, dict(_EMBED))


def envelope(headers: dict, properties: dict, body: tuple, queue: str) -> dict:
    """The envelope kombu's Redis transport stores for the message, sent to `queue`."""
    return {
        "body": base64.b64encode(dumps(body).encode()).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": {
            **properties, "delivery_mode": 2, "delivery_info": {"exchange": "", "routing_key": queue}, "priority": 0,
            "body_encoding": "base64", "delivery_tag": str(uuid.uuid4()),
        },
    }


def _queue(task: Task) -> str:
    """The queue config/celery.py's routes give the task (Celery's router, asked once per task)."""
    if task.name not in _queues:
        _queues[task.name] = task.app.amqp.router.route({}, task.name, (), {}, task)["queue"].name
    return _queues[task.name]


def _client(url: str) -> redis.Redis:
    """One client per broker URL for the process: its pool keeps the connections (and is safe across a fork)."""
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
    return _clients[url]
