"""The run page's socket follows its viewer's access too: removed from the organisation, it closes."""

from __future__ import annotations

import pytest

from apps.accounts import services as accounts
from apps.accounts.actors import member_actor
from apps.runs import services, worker
from tests.approvals.test_decisions import A1001
from tests.factories import add_member
from tests.processes import run_async
from tests.web.test_realtime_access import Socket, closed, in_thread, session_of

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_removed_members_run_page_socket_closes(desk, owner, live_url):
    crew = desk.refund_desk()
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                       enqueue=False).id)
    member = add_member(owner.org, "approver")
    _, cookie = session_of(member)

    async def scenario():
        page = Socket(live_url, f"/ws/run/{run.id}/?last_seq=0", cookie)
        await page.open()
        assert await page.wait_for(lambda s: len(s.frames) >= 1)  # the run's events so far
        await in_thread(accounts.remove_member, actor=member_actor(owner), member_id=member.id)
        assert await page.wait_for(closed), "the run page's socket stayed open"
        return page.close_code

    assert run_async(scenario()) == 4403
