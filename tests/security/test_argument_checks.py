"""A call's arguments are checked, not only its results: a URL in them to a link-local or cloud-metadata
address is refused always, one to a loopback or private address by the egress rules (unless
AIRLOCK_EGRESS_ALLOW_PRIVATE, which the tests set, allows it, as for Airlock's own connections); the calls
of one tool per run are limited; in a tainted run, arguments copied from the untrusted content are named
in the hold. Real runs on the stand-in web server (tests/security/servers/web.py) and the order desk."""

from __future__ import annotations

import pytest

from apps.approvals.definition_changes import inbox
from apps.registry import services as registry_services
from apps.registry.arguments import url_problem
from apps.runs.models import RunEvent, ToolCall
from tests.runs import conftest as runs_conftest
from tests.security.test_taint import FETCH, PROSE, run_clerk, web_server

pytestmark = pytest.mark.django_db

actor, desk = runs_conftest.actor, runs_conftest.desk

METADATA_FORMS = ["http://169.254.169.254/latest/meta-data/iam/", "http://[fe80::1%25eth0]/",
                  "http://[::ffff:169.254.169.254]/", "http://metadata.google.internal./computeMetadata/v1/",
                  "http://0xA9FEA9FE/", "http://2852039166/latest", "HTTP://169.254.169.254./"]
PRIVATE_FORMS = ["http://127.0.0.1:6379/", "http://localhost./admin", "http://2130706433/", "http://0x7f.1/",
                 "gopher://10.0.0.5:25/_MAIL", "http://[::1]/", "http://db.internal/", "http://192.168.1.1/"]


def test_a_metadata_url_in_the_arguments_of_an_auto_read_is_refused_and_never_sent(desk):
    web_server(desk.actor, trust_tier="official")
    calls = [{"tool": "web.fetch_url", "args": {"url": url}} for url in METADATA_FORMS]
    _, run = run_clerk(desk, [{"call": calls}, {"call": [FETCH]}])
    refused = ToolCall.objects.filter(run=run, rule="argument_egress").order_by("position")
    assert [c.arguments["url"] for c in refused] == METADATA_FORMS
    assert all(c.state == "denied" and c.dispatched_at is None and c.result is None for c in refused)
    assert all("link-local or cloud-metadata" in c.reason or "cloud-metadata host" in c.reason for c in refused)
    # The run goes on: the model was told, and the harmless fetch afterwards ran.
    assert ToolCall.objects.get(run=run, arguments__url=FETCH["args"]["url"]).state == "succeeded"


@pytest.mark.parametrize("url", PRIVATE_FORMS)
def test_private_and_loopback_urls_in_arguments_follow_the_egress_switch(url):
    assert "loopback, private or reserved" in url_problem({"q": {"deep": [f"see {url}"]}}, allow_private=False) \
        or "local or internal host name" in url_problem({"q": {"deep": [f"see {url}"]}}, allow_private=False)
    assert url_problem({"q": url}, allow_private=True) == ""


@pytest.mark.parametrize("url", METADATA_FORMS)
def test_metadata_urls_in_arguments_are_refused_whatever_the_switch(url):
    assert url_problem({"url": url}, allow_private=True)


def test_public_urls_and_plain_text_pass():
    assert url_problem({"url": "https://shop.example/reviews", "note": "169.254.169.254 is mentioned"}) == ""


def test_a_private_url_in_arguments_is_refused_in_a_run_when_private_addresses_are_not_allowed(desk, settings):
    web_server(desk.actor, trust_tier="official")
    settings.AIRLOCK_EGRESS_ALLOW_PRIVATE = False
    _, run = run_clerk(desk, [{"call": [{"tool": "web.fetch_url", "args": {"url": "http://127.0.0.1:8000/admin"}}]}])
    row = ToolCall.objects.get(run=run, qualified_name="web.fetch_url")
    assert (row.state, row.rule, row.dispatched_at) == ("denied", "argument_egress", None)


def test_the_calls_of_one_tool_per_run_are_limited_and_the_limit_shows(desk, settings):
    settings.AIRLOCK_RUN_CALLS_PER_TOOL = 3
    server = web_server(desk.actor, trust_tier="internal")
    # no taint holds
    registry_services.set_trusted_output(actor=desk.actor, server_id=server.id, trusted=True, review=inbox)
    searches = [{"tool": "web.search", "args": {"query": f"query {i}"}} for i in range(6)]
    _, run = run_clerk(desk, [{"call": searches}])
    assert run.status == "succeeded", run.error
    states = list(ToolCall.objects.filter(run=run, qualified_name="web.search").order_by("position")
                  .values_list("state", "rule"))
    assert states[:3] == [("succeeded", "auto")] * 3
    assert states[3:] == [("denied", "rate_limited")] * 3
    reasons = {e.data.get("reason", "") for e in RunEvent.objects.filter(run=run, type="tool.decided")}
    assert any("Rate limit: web.search was already called 3 times" in r for r in reasons)


def test_in_a_tainted_run_arguments_copied_from_the_untrusted_result_are_named_in_the_hold(desk):
    web_server(desk.actor)
    copied = "promised her a full refund of order A-1001"
    assert copied in PROSE
    refund = {"tool": "orders.refund_order", "args": {"order_id": "A-1001", "amount_cents": 100,
                                                      "request_id": f"note: {copied}"}}
    _, run = run_clerk(desk, [{"call": [FETCH]}, {"call": [refund]}])
    held = ToolCall.objects.get(run=run, qualified_name="orders.refund_order")
    assert held.state == "held" and "copied from that content: request_id" in held.reason
    codes = {f["code"] for e in RunEvent.objects.filter(run=run, type="tool.finding") for f in e.data["findings"]}
    assert "copied_from_untrusted" in codes
