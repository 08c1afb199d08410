"""apps.core.rows' prebuilt writes: an `Inserts` row must be the row `save()` writes, and an instance it
inserted must behave as a saved one; an `Update` sent with `send_expected` must fail its batch when its
keys match no row."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.forms.models import model_to_dict

from apps.core.db import NothingUpdated, pipeline, send_expected
from apps.core.rows import Inserts, Update
from apps.costs.models import UsageRecord
from tests.factories import make_org

pytestmark = pytest.mark.django_db


def usage(org, **fields) -> UsageRecord:
    return UsageRecord(**{"org": org, "provider": "openai", "model": "gpt-4o", "input_tokens": 1200,
                          "cached_tokens": 200, "output_tokens": 80, "cost_usd": Decimal("0.00123456"),
                          "price_source": "override:x", "latency_ms": 640, **fields})


def columns(record: UsageRecord) -> dict:
    return {k: v for k, v in model_to_dict(UsageRecord.objects.get(id=record.id)).items() if k != "id"}


def test_an_inserted_row_is_the_row_save_writes():
    org = make_org()
    saved, inserted = usage(org), usage(org)
    saved.save()
    Inserts(UsageRecord).send([inserted])
    assert columns(inserted) == columns(saved)
    stored = UsageRecord.objects.get(id=inserted.id)
    assert stored.created_at is not None and stored.created_at == inserted.created_at  # auto_now_add filled
    assert stored.cost_usd == Decimal("0.00123456")


def test_an_inserted_instance_saves_again_as_an_update():
    org = make_org()
    record = usage(org)
    Inserts(UsageRecord).send([record])
    assert not record._state.adding
    record.latency_ms = 700
    record.save()  # an UPDATE: a second INSERT of the same id would fail
    assert UsageRecord.objects.get(id=record.id).latency_ms == 700
    assert UsageRecord.objects.count() == 1


def test_several_rows_inserted_at_once_are_each_the_row_save_writes():
    org = make_org()
    saved = usage(org, model="saved")
    saved.save()
    records = [usage(org, model="saved", latency_ms=n) for n in range(3)]
    Inserts(UsageRecord).send(records)
    for n, record in enumerate(records):
        assert not record._state.adding
        assert columns(record) == {**columns(saved), "latency_ms": n}
        assert UsageRecord.objects.get(id=record.id).created_at == record.created_at
    assert UsageRecord.objects.count() == 4


def test_rows_inserted_at_once_in_a_batch_fail_with_it_whole():
    org = make_org()
    taken = usage(org)
    taken.save()
    records = [usage(org, model="first"), usage(org, id=taken.id), usage(org, model="last")]
    with pytest.raises(IntegrityError), transaction.atomic(), pipeline():
        Inserts(UsageRecord).send(records)
    assert UsageRecord.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_an_expected_update_that_matches_no_row_fails_its_batch():
    org = make_org()
    record = usage(org)
    record.save()
    update = Update(UsageRecord, ["latency_ms"], ["id", "model"])
    with pytest.raises(NothingUpdated), transaction.atomic(), pipeline():
        send_expected(update.sql, update.params({"latency_ms": 1}, {"id": record.id, "model": "gpt-4o"}))
        send_expected(update.sql, update.params({"latency_ms": 2}, {"id": record.id, "model": "another"}))
    assert UsageRecord.objects.get(id=record.id).latency_ms == 640  # the first update rolled back with it
    with transaction.atomic(), pipeline():
        send_expected(update.sql, update.params({"latency_ms": 3}, {"id": record.id, "model": "gpt-4o"}))
    assert UsageRecord.objects.get(id=record.id).latency_ms == 3
