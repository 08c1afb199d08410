"""`/metrics`: Prometheus text, for operators. Not for organisations: it spans every tenant.

Access: a bearer token (`AIRLOCK_METRICS_TOKEN`) or a scraper address inside
`AIRLOCK_METRICS_ALLOW` (CIDRs; loopback by default). Anyone else gets 403: the figures name
organisations and workers. Two kinds of series:
- what processes recorded as they worked (apps/core/metrics.py), added up across processes;
- what the ledger says now, read at scrape time (a handful of indexed, grouped queries).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import time

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from apps.approvals import selectors as approvals
from apps.core import selectors as core
from apps.costs import selectors as costs
from apps.runs import selectors as runs


class LedgerCollector:
    """Series read from the database at scrape time: they are true whichever process wrote the rows."""

    def collect(self):
        by_status = GaugeMetricFamily("airlock_runs", "Runs by status.", labels=["status"])
        for status, count in runs.count_by_status().items():
            by_status.add_metric([status], count)
        yield by_status

        pending = approvals.pending_summary()
        waiting = GaugeMetricFamily("airlock_approvals_pending", "Held calls and definition changes waiting.",
                                    labels=["org"])
        oldest = GaugeMetricFamily("airlock_approval_oldest_age_seconds", "Age of the oldest pending approval.",
                                   labels=["org"])
        for org, (count, age) in pending.items():
            waiting.add_metric([org], count)
            oldest.add_metric([org], age)
        yield waiting
        yield oldest

        depth = GaugeMetricFamily("airlock_queue_depth", "Tasks waiting in the broker, by queue.", labels=["queue"])
        for queue, count in core.queue_depths().items():
            depth.add_metric([queue], count)
        yield depth

        beats = GaugeMetricFamily("airlock_worker_heartbeat_age_seconds",
                                  "Seconds since each worker last answered beat's heartbeat.", labels=["worker"])
        now = time.time()
        for beat in core.worker_heartbeats():
            beats.add_metric([beat.hostname], max(0.0, now - beat.seen_at.timestamp()))
        yield beats

        budget = GaugeMetricFamily("airlock_budget_used_ratio", "This month's spend over each monthly budget.",
                                   labels=["org", "budget"])
        for org, label, ratio in costs.all_budget_use():
            budget.add_metric([org, label], ratio)
        yield budget


class ThisProcess:
    """This process's own instruments, when no multiprocess directory is shared (tests, one process)."""

    def collect(self):
        yield from REGISTRY.collect()


def registry() -> CollectorRegistry:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        combined = CollectorRegistry()
        multiprocess.MultiProcessCollector(combined)
    else:
        combined = CollectorRegistry()
        combined.register(ThisProcess())
    combined.register(LedgerCollector())
    return combined


def allowed(request: HttpRequest) -> bool:
    token = settings.AIRLOCK_METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    if token and given.startswith("Bearer ") and hmac.compare_digest(given[7:].strip(), token):
        return True
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(net, strict=False) for net in settings.AIRLOCK_METRICS_ALLOW)


def metrics(request: HttpRequest) -> HttpResponse:
    if not allowed(request):
        return HttpResponse("Metrics need the bearer token AIRLOCK_METRICS_TOKEN or an address in "
                            "AIRLOCK_METRICS_ALLOW.\n", status=403, content_type="text/plain")
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
