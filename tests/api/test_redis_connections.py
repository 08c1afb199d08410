"""A web process keeps its Redis connections: API requests (each reads the token lockout from the cache) reuse the
process's client instead of connecting to Redis again for every request (apps/core/cache.py).

Counted on a Redis of the test's own, which only the web process it starts uses: the session's Redis counts the
connections of every session on the machine (CI, 7 December: 11 for 100 requests, with another test session's
processes beside this one)."""

from __future__ import annotations

import http.client
from urllib.parse import urlparse

import pytest
import redis

from tests.factories import token_for
from tests.processes import RedisServer, web_server

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def own_redis(tmp_path):
    server = RedisServer(tmp_path)
    server.start()
    yield server.url
    server.stop()


def connections_made(url: str) -> int:
    with redis.Redis.from_url(url) as client:
        return int(client.info("stats")["total_connections_received"])


def test_a_hundred_api_requests_open_a_handful_of_redis_connections_not_a_hundred(org, own_redis, process_logs):
    token = token_for(org, "viewer")
    with web_server(process_logs, REDIS_URL=own_redis) as url:
        answers, made = hundred_requests(url, token, own_redis)
    assert answers == [200] * 100
    assert made <= 5, f"{made} new Redis connections for 100 requests"


def hundred_requests(url: str, token: str, redis_url: str) -> tuple[list[int], int]:
    """The answers to 100 `GET /api/v1/me` on one kept-alive connection, and the Redis connections made meanwhile."""
    server = http.client.HTTPConnection(urlparse(url).netloc, timeout=10)

    def me() -> int:
        server.request("GET", "/api/v1/me", headers={"Authorization": f"Bearer {token}"})
        answer = server.getresponse()
        answer.read()
        return answer.status

    assert me() == 200  # the process's first: its pool connects here
    before = connections_made(redis_url)
    answers = [me() for _ in range(100)]
    made = connections_made(redis_url) - before - 1  # (this count's own connection)
    server.close()
    return answers, made
