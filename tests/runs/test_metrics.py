"""/metrics as an operator's Prometheus sees it: text that prometheus-client's own parser reads, figures
that match what the runs did, access only with the token or from the scrape network, and every
process's counters added up (the multiprocess directory the compose stack shares)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from apps.accounts.actors import member_actor
from apps.runs import decisions, services, worker
from apps.runs.models import ToolCall

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
A1001 = {"order_id": "A-1001", "amount_cents": 500}


@pytest.fixture(autouse=True)
def scraper_on_loopback(settings):
    """The test client comes from 127.0.0.1: let that address scrape, as an operator's setting would."""
    settings.AIRLOCK_METRICS_ALLOW = ["127.0.0.1/32"]


def scrape(client, **headers) -> dict[str, list]:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return {family.name: family.samples for family in text_string_to_metric_families(response.content.decode())}


def value(samples, name: str, **labels) -> float:
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert found, f"no sample {name}{labels}"
    return sum(found)


def test_a_held_and_approved_run_shows_in_the_runs_approvals_steps_and_tool_calls(client, desk, approver, org):
    before = scrape(client)
    steps_before = sum(s.value for s in before["airlock_step_seconds"] if s.name == "airlock_step_seconds_count")
    run = services.start_run(actor=desk.actor, crew_id=desk.refund_desk().id, inputs=A1001, enqueue=False)
    run = worker.drive_run(run_id=run.id)
    assert run.status == "waiting"

    held = scrape(client)
    assert value(held["airlock_runs"], "airlock_runs", status="waiting") == 1
    assert value(held["airlock_runs"], "airlock_runs", status="succeeded") == 0
    assert value(held["airlock_approvals_pending"], "airlock_approvals_pending", org=org.slug) == 1
    assert value(held["airlock_approval_oldest_age_seconds"], "airlock_approval_oldest_age_seconds", org=org.slug) >= 0
    assert value(held["airlock_step_seconds"], "airlock_step_seconds_count") > steps_before

    request = ToolCall.objects.get(run=run, state="held").approval
    decisions.decide_approval(actor=member_actor(approver), approval_id=request.id, decision="approve")
    worker.drive_run(run_id=run.id)

    done = scrape(client)
    assert value(done["airlock_runs"], "airlock_runs", status="succeeded") == 1
    assert value(done["airlock_runs"], "airlock_runs", status="waiting") == 0
    assert not [s for s in done["airlock_approvals_pending"] if s.labels.get("org") == org.slug]
    decided = done["airlock_approval_decision_seconds"]
    assert value(decided, "airlock_approval_decision_seconds_count", decision="approved") >= 1
    calls = done["airlock_tool_call_seconds"]
    assert value(calls, "airlock_tool_call_seconds_count", state="succeeded", source="run") >= 3  # 2 lookups, 1 refund
    assert "airlock_queue_depth" in done and "airlock_worker_heartbeat_age_seconds" in done
    assert {s.labels["queue"] for s in done["airlock_queue_depth"]} == {"resume", "runs", "default"}


def test_budget_use_is_a_ratio_per_org(client, actor, org):
    from apps.costs import services as costs

    costs.set_budget(actor=actor, scope="org", amount_usd="10")
    samples = scrape(client)["airlock_budget_used_ratio"]
    assert value(samples, "airlock_budget_used_ratio", org=org.slug, budget="org:org") == 0.0


@override_settings(AIRLOCK_METRICS_TOKEN="scrape-" + "t" * 24, AIRLOCK_METRICS_ALLOW=["10.9.0.0/16"])
def test_only_the_token_or_the_scrape_network_may_read_metrics(client):
    refused = client.get("/metrics", REMOTE_ADDR="203.0.113.7")
    assert refused.status_code == 403
    assert b"AIRLOCK_METRICS_TOKEN" in refused.content and b"airlock_runs" not in refused.content
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.7", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert scrape(client, REMOTE_ADDR="203.0.113.7", HTTP_AUTHORIZATION="Bearer scrape-" + "t" * 24)
    assert scrape(client, REMOTE_ADDR="10.9.4.2")


def test_outside_debug_no_address_may_scrape_without_the_token_or_a_setting(client, settings):
    import config.settings as shipped

    assert shipped.DEBUG is False and shipped.AIRLOCK_METRICS_ALLOW == []
    settings.AIRLOCK_METRICS_ALLOW = shipped.AIRLOCK_METRICS_ALLOW
    assert client.get("/metrics").status_code == 403  # loopback too: a proxy on the same host is loopback


@override_settings(ALLOWED_HOSTS=["airlock.example.com"])
def test_probes_answer_by_address_although_allowed_hosts_does_not_list_it(client):
    assert client.get("/healthz", HTTP_HOST="127.0.0.1:8000").json() == {"status": "ok"}
    ready = client.get("/readyz", HTTP_HOST="127.0.0.1:8000")
    assert ready.status_code == 200, ready.content
    assert ready.json()["status"] == "ready"
    assert set(ready.json()["checks"]) == {"database", "migrations", "redis", "broker"}
    assert client.get("/metrics", HTTP_HOST="127.0.0.1:8000").status_code == 200
    assert client.get("/runs/", HTTP_HOST="127.0.0.1:8000").status_code == 400  # everything else: still checked


def test_counters_of_every_process_are_added_up(client, tmp_path, monkeypatch):
    """Two other processes (a worker, a gateway) count gateway calls; web's scrape shows their sum."""
    directory = tmp_path / "metrics"
    directory.mkdir()
    code = ("from apps.core.metrics import GATEWAY_CALLS; GATEWAY_CALLS.labels(outcome='held').inc({n})")
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory), "DJANGO_SETTINGS_MODULE": "config.settings_test"}
    for n in (2, 3):
        subprocess.run([sys.executable, "-c", code.format(n=n)], cwd=ROOT, env=env, check=True, timeout=60)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    samples = scrape(client)["airlock_gateway_calls"]
    assert value(samples, "airlock_gateway_calls_total", outcome="held") == 5
    subprocess.run([sys.executable, "manage.py", "reset_metrics"], cwd=ROOT, env=env, check=True, timeout=60)
    assert not list(directory.glob("*.db"))
