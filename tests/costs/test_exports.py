"""The cost rows CSV streams: 100,000 model calls export in bounded memory (tracemalloc), unknown
prices say `unknown`, and only the organisation's own rows in the range appear."""

from __future__ import annotations

import csv
import io
import tracemalloc
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.costs.models import UsageRecord
from tests.factories import make_org

pytestmark = pytest.mark.django_db

ROWS = 100_000


def bulk_usage(org, count: int, *, at) -> None:
    """Fixture rows straight into the table, in batches (the engine writes them one call at a time)."""
    batch = []
    for n in range(count):
        batch.append(UsageRecord(org=org, provider="openai", model="gpt-4o-mini", input_tokens=1000 + n % 7,
                                 output_tokens=100, cost_usd=None if n % 10 == 0 else Decimal("0.00021"),
                                 price_source="unknown" if n % 10 == 0 else "genai-prices", latency_ms=n % 900))
        if len(batch) == 5000:
            UsageRecord.objects.bulk_create(batch)
            batch = []
    UsageRecord.objects.bulk_create(batch)
    UsageRecord.objects.filter(org=org).update(created_at=at)


def test_a_100k_row_cost_export_streams_in_bounded_memory(client, org, owner):
    yesterday = timezone.now() - timedelta(days=1)
    bulk_usage(org, ROWS, at=yesterday)
    bulk_usage(make_org("Globex"), 10, at=yesterday)  # another org's rows never appear
    client.force_login(owner.user)
    response = client.get(f"/costs/export.csv?since={(yesterday - timedelta(days=1)).date().isoformat()}")
    assert response.streaming and response["Content-Type"].startswith("text/csv")

    tracemalloc.start()
    lines, size, unknown, first = 0, 0, 0, b""
    for chunk in response.streaming_content:
        size += len(chunk)
        lines += 1
        unknown += chunk.endswith(b",unknown,unknown,0\r\n") or b",unknown,unknown," in chunk
        first = first or chunk
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    assert lines == ROWS + 1  # the header and one line per call
    assert first.startswith(b"created_at,run_id,crew_id,agent_id,provider,model")
    assert unknown == ROWS // 10  # unknown prices are written as "unknown", never 0
    assert size > 9_000_000  # about 9 MB of CSV ...
    assert peak < 3_000_000, f"peak {peak / 1e6:.1f} MB"  # ... through a bounded buffer (chunks of 2,000 rows)


def test_the_cost_export_is_the_range_asked_for(client, org, owner):
    bulk_usage(org, 3, at=timezone.now() - timedelta(days=40))
    client.force_login(owner.user)
    body = b"".join(client.get("/costs/export.csv").streaming_content).decode()  # default: last 30 days
    assert list(csv.reader(io.StringIO(body)))[1:] == []
