"""Form targets: a GET of an address that only takes a POST (a reload after a failed save, a pasted
link, the back button) goes to its page instead of a blank 405; a failed save shows its error at the
form, in view."""

from __future__ import annotations

import uuid

import pytest
from django.urls import URLPattern, get_resolver

from tests.conftest import signed_in

pytestmark = pytest.mark.django_db


def _web_patterns():
    for entry in get_resolver().url_patterns:
        if getattr(entry, "namespace", None) == "web":
            yield from (p for p in entry.url_patterns if isinstance(p, URLPattern))


def _address(pattern: URLPattern) -> str:
    route = str(pattern.pattern)
    for converter, value in (("uuid", str(uuid.uuid4())), ("slug", "demo"), ("str", "x")):
        while f"<{converter}:" in route:
            start = route.index(f"<{converter}:")
            route = route[:start] + value + route[route.index(">", start) + 1:]
    return "/" + route


def test_no_page_of_the_app_answers_a_get_with_405(client, owner):
    signed_in(client, owner)
    refused = []
    checked = 0
    for pattern in _web_patterns():
        if "<" in str(pattern.pattern) and "uuid" not in str(pattern.pattern) and "slug" not in str(pattern.pattern):
            continue
        address = _address(pattern)
        checked += 1
        if client.get(address).status_code == 405:
            refused.append(address)
    assert checked > 60
    assert refused == []


@pytest.mark.parametrize(("address", "page"), [
    ("/costs/budgets/", "/costs/"),
    ("/costs/prices/", "/costs/"),
    ("/costs/budgets/{id}/delete/", "/costs/"),
    ("/servers/{id}/sync/", "/servers/{id}/"),
    ("/inbox/{id}/decide/", "/inbox/"),
    ("/settings/members/{id}/role/", "/settings/members/"),
    ("/audit/verify/", "/audit/"),
])
def test_a_get_of_a_form_target_goes_to_its_page(client, owner, address, page):
    signed_in(client, owner)
    some = uuid.uuid4()
    response = client.get(address.format(id=some))
    assert response.status_code == 302
    assert response["Location"] == page.format(id=some)


def test_other_methods_are_still_refused(client, owner):
    signed_in(client, owner)
    assert client.put("/costs/budgets/").status_code == 405


def test_a_failed_budget_save_shows_the_error_at_the_form(client, owner):
    signed_in(client, owner)
    response = client.post("/costs/budgets/", {"scope": "org", "amount_usd": "lots", "thresholds": "50"})
    body = response.content.decode()
    assert response.status_code == 422
    form = body.split('id="budget-form"')[1].split("</form>")[0]
    assert 'role="alert"' in form and "The budget was not saved" in form
    assert 'is-invalid' in form and "autofocus" in form


def test_a_failed_price_save_shows_the_error_at_the_form(client, owner):
    signed_in(client, owner)
    response = client.post("/costs/prices/", {"model": "", "input_per_mtok": "x", "output_per_mtok": "1",
                                              "effective_from": "2026-01-01"})
    body = response.content.decode()
    assert response.status_code == 422
    form = body.split('id="price-form"')[1].split("</form>")[0]
    assert 'role="alert"' in form and "The price was not saved" in form and "autofocus" in form
