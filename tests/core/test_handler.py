"""The web's HTTP handler (apps/core/handler.py): requests borrow kept threads, and each still has one to itself.

Run against the handler itself with a URLconf of its own, whose views wait for each other: if two requests in
flight at once shared a thread, the first would wait for the second forever (and their database connection and
transaction would be one)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.core.signals import request_finished, request_started
from django.http import HttpResponse
from django.urls import path

from apps.core.handler import OneTripASGIHandler
from tests.processes import run_async  # a fresh loop: once browser tests ran, one runs in this thread

meeting = threading.Barrier(2, timeout=10)


def this_thread() -> str:
    return f"{threading.current_thread().name}:{threading.get_ident()}"


def meet(request):
    """Answers once another request is in its view at the same time."""
    meeting.wait()
    return HttpResponse(this_thread())


def alone(request):
    return HttpResponse(this_thread())


urlpatterns = [path("meet", meet), path("alone", alone)]


async def call(app, route: str, name: str) -> str:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": f"/{route}", "raw_path": f"/{route}".encode(), "query_string": f"name={name}".encode(),
             "root_path": "", "headers": [(b"host", b"testserver")], "server": ("testserver", 80),
             "client": ("127.0.0.1", 5000)}
    requested, answer, done = False, [], asyncio.Event()

    async def receive():
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await done.wait()  # the client stays until the answer is in
        return {"type": "http.disconnect"}

    async def send(message):
        answer.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            done.set()

    await app(scope, receive, send)
    assert answer[0]["status"] == 200, answer
    return b"".join(m.get("body", b"") for m in answer[1:]).decode()


@pytest.fixture
def app(settings):
    settings.ROOT_URLCONF = __name__
    settings.MIDDLEWARE = []
    settings.ALLOWED_HOSTS = ["testserver"]
    return OneTripASGIHandler()


@pytest.fixture
def signalled_threads():
    """The threads `request_started` and `request_finished` ran on (where Django opens and returns a connection)."""
    threads: dict[str, list[str]] = {"started": [], "finished": []}

    def started(**_):
        threads["started"].append(this_thread())

    def finished(**_):
        threads["finished"].append(this_thread())

    request_started.connect(started, weak=False)
    request_finished.connect(finished, weak=False)
    yield threads
    request_started.disconnect(started)
    request_finished.disconnect(finished)


def test_requests_in_flight_at_once_each_have_a_thread_of_their_own(app):
    async def both():
        return await asyncio.gather(call(app, "meet", "a"), call(app, "meet", "b"))

    first, second = run_async(both())
    assert first != second and first.startswith("request") and second.startswith("request")


def test_a_request_s_signals_and_view_run_on_one_thread_and_the_next_request_reuses_it(app, signalled_threads):
    async def one_after_another():
        return [await call(app, "alone", f"r{n}") for n in range(3)]

    threads = run_async(one_after_another())
    assert len(set(threads)) == 1  # kept, not a thread started for each request
    assert signalled_threads["started"] == signalled_threads["finished"] == threads


def test_a_request_s_thread_is_not_lent_while_it_still_runs_the_request(app):
    """The second request starts while the first is in its view: it must not be given the first one's thread."""
    async def overlapping():
        first = asyncio.create_task(call(app, "meet", "a"))
        await asyncio.sleep(0.2)
        solo = await asyncio.wait_for(call(app, "alone", "solo"), 5)
        second = await call(app, "meet", "b")
        return await first, solo, second

    first, solo, second = run_async(overlapping())
    assert solo != first and second != first
