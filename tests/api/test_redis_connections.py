"""A web process keeps its Redis connections: API requests (each reads the token lockout from the cache) reuse the
process's client instead of connecting to Redis again for every request (apps/core/cache.py)."""

from __future__ import annotations

import http.client
from urllib.parse import urlparse

import pytest
import redis
from django.conf import settings

from tests.factories import token_for

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(not settings.REDIS_URL, reason="the embedded mode's cache is the process's memory")]


def connections_made() -> int:
    return int(redis.Redis.from_url(settings.REDIS_URL).info("stats")["total_connections_received"])


def test_a_hundred_api_requests_open_a_handful_of_redis_connections_not_a_hundred(org, live_url):
    token = token_for(org, "viewer")
    server = http.client.HTTPConnection(urlparse(live_url).netloc, timeout=10)  # one kept-alive connection

    def me() -> int:
        server.request("GET", "/api/v1/me", headers={"Authorization": f"Bearer {token}"})
        answer = server.getresponse()
        answer.read()
        return answer.status

    assert me() == 200  # the process's first: its pool connects here
    before = connections_made()
    answers = [me() for _ in range(100)]
    made = connections_made() - before - 1  # (this count's own connection)
    server.close()
    assert answers == [200] * 100
    assert made <= 5, f"{made} new Redis connections for 100 requests"
