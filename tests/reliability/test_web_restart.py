"""A web process restarted while a browser is on a run page: htmx's ws extension reconnects the page's
socket, and the consumer re-sends every panel from the database on connect, so the page's live event
log has no gap, includes the events of the time the web process was down, and ends on the run's final
state."""

from __future__ import annotations

import re
import signal

import pytest
from playwright.sync_api import Page, expect

from apps.runs.models import Run
from tests.browser.test_foundation import sign_in
from tests.processes import free_port, stop_group
from tests.reliability.conftest import settle, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def page_seqs(page: Page) -> list[int]:
    return sorted(int(s) for s in page.locator("#run-events li[data-seq]").evaluate_all(
        "items => items.map(i => i.getAttribute('data-seq'))"))


@pytest.mark.parametrize("slow_seconds", [0.7])
def test_a_run_page_reconnects_after_the_web_process_restarts_and_misses_no_event(cluster, slow_desk, owner,
                                                                                   page: Page):
    port = free_port()
    web = cluster.web(port)
    url = f"http://127.0.0.1:{port}"
    cluster.worker(concurrency=1)
    cluster.beat()
    crew = slow_desk.crew("Watched", slow_calls=8, lookups=False)
    sign_in(page, url, owner.user.email)
    run = slow_desk.start(crew, "web")
    wait_until(lambda: Run.objects.get(id=run.id).last_seq >= 4, 60, "the run to get going")
    page.goto(f"{url}/runs/{run.id}/")
    live = page.get_by_test_id("run-live")
    expect(live).to_have_attribute("data-live-state", "open", timeout=20_000)
    first_seq = max(page_seqs(page))

    stop_group(web, signal.SIGKILL)  # the web process dies with the socket open
    expect(live).to_have_attribute("data-live-state", "closed", timeout=10_000)
    seen = max(page_seqs(page))
    wait_until(lambda: Run.objects.get(id=run.id).last_seq >= seen + 5, 60, "events while the web is down")
    cluster.web(port)

    run = settle(run.id, slow_desk, "web")
    assert run.status == "succeeded", run.error
    expect(page.locator(f'#run-events li[data-seq="{run.last_seq}"]')).to_have_count(1, timeout=30_000)
    expect(live).to_have_attribute("data-live-state", "open")
    seqs = page_seqs(page)  # the newest events, as the page shows them at the end
    assert seqs == list(range(seqs[0], run.last_seq + 1)), f"a gap in the page's events: {seqs}"
    assert seqs[0] <= first_seq + 1 and seen + 5 <= run.last_seq  # including those of the outage
    expect(live).to_contain_text(re.compile("status\\s*succeeded", re.I))  # the header re-rendered live
