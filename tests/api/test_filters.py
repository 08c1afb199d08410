"""Every documented list filter exists and narrows the list: none is silently ignored."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from apps.approvals.models import ApprovalRequest
from apps.runs import services
from apps.runs.models import Run, ToolCall
from tests.approvals.test_decisions import held_run
from tests.factories import token_for

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTED = re.compile(r"`GET (/[\w/{}-]+)\?([^`]+)`")


def documented_filters() -> list[tuple[str, str]]:
    found = set()
    for page in (ROOT / "docs" / "api.md",):
        for path, query in DOCUMENTED.findall(page.read_text()):
            for name in re.findall(r"(\w+)=", query):
                found.add((path, name))
    for line in (ROOT / "docs" / "api.md").read_text().splitlines():
        for path, query in re.findall(r"\$AIRLOCK(/[\w/-]+)\?([^\"' ]+)", line):
            if "$" not in path:
                for name in re.findall(r"(\w+)=", query):
                    found.add((path, name))
    return sorted(found - {(p, n) for p, n in found if n in ("limit", "offset")})


@pytest.mark.django_db
def test_every_documented_filter_is_a_parameter_of_its_operation(client):
    schema = client.get("/api/v1/openapi.json").json()
    missing = []
    filters = documented_filters()
    assert ("/tool-calls", "run") in filters and ("/runs", "until") in filters
    paths = {re.sub(r"\{\w+\}", "{}", p): ops for p, ops in schema["paths"].items()}
    for path, name in filters:
        operation = paths.get(re.sub(r"\{\w+\}", "{}", f"/api/v1{path}"), {}).get("get")
        names = {p["name"] for p in (operation or {}).get("parameters", [])}
        if name not in names:
            missing.append(f"GET {path}?{name}=")
    assert missing == []


def listed(client, path: str) -> set[str]:
    answer = client.get(path)
    assert answer.status_code == 200, answer.content
    return {item["id"] for item in answer.json()["items"]}


@pytest.mark.django_db
def test_run_and_tool_call_filters_narrow_the_list(desk, org):
    api = Client(headers={"Authorization": f"Bearer {token_for(org, 'viewer')}"})
    one, two = desk.refund_desk(name="One"), desk.refund_desk(name="Two")
    first, _ = held_run(desk, one)
    second, request = held_run(desk, two)
    services.cancel_run(actor=desk.actor, run_id=first.id)
    assert listed(api, f"/api/v1/runs?crew={one.id}") == {str(first.id)}
    assert listed(api, "/api/v1/runs?status=waiting") == {str(second.id)}
    agent = two.tasks.get(name="refund").agent_id
    assert listed(api, f"/api/v1/runs?agent={agent}") == {str(second.id)}
    Run.objects.filter(id=first.id).update(created_at=timezone.now() - timedelta(days=3))
    since = (timezone.now() - timedelta(days=1)).isoformat().replace("+00:00", "Z")
    assert listed(api, f"/api/v1/runs?since={since}") == {str(second.id)}
    assert listed(api, f"/api/v1/runs?until={since}") == {str(first.id)}

    calls = {str(c.id) for c in ToolCall.objects.filter(run_id=second.id)}
    assert calls and listed(api, f"/api/v1/tool-calls?run={second.id}") == calls
    held = {str(c.id) for c in ToolCall.objects.filter(run_id=second.id, state="held")}
    assert listed(api, f"/api/v1/tool-calls?run={second.id}&state=held") == held

    assert listed(api, f"/api/v1/approvals?crew={two.id}") == {str(request.id)}
    assert listed(api, f"/api/v1/approvals?agent={agent}") == {str(request.id)}
    assert listed(api, "/api/v1/approvals?status=pending&kind=tool_call&risk=write") == {
        str(r.id) for r in ApprovalRequest.objects.filter(status="pending", risk="write")}
    assert listed(api, "/api/v1/approvals?kind=definition_change") == set()
