"""`send_record`: an audit row written by a batch of statements (the engine's tool steps) chains exactly as
one `record` writes."""

from __future__ import annotations

import itertools
import time

import pytest
from django.db import transaction

from apps.audit import services as audit
from apps.audit.models import AuditEvent
from apps.audit.selectors import verify_chain
from apps.core.db import pipeline


@pytest.mark.django_db
def test_an_audit_row_sent_in_a_batch_chains_exactly_as_one_recorded_alone(org):
    """send_record's hash is computed by Postgres from the head it locks: it must be event_hash's."""
    with transaction.atomic():
        audit.record(org_id=org.id, actor=None, action="first", data={"n": 1})
        with pipeline():
            audit.send_record(org_id=org.id, actor=None, action="batched", data={"text": "déjà vu ✓", "n": [1, 2.5]})
            audit.send_record(org_id=org.id, actor=None, action="batched", data={"password": "hunter2"})
        audit.record(org_id=org.id, actor=None, action="last")
    events = list(AuditEvent.objects.filter(org_id=org.id).order_by("seq"))[-4:]
    assert [e.action for e in events] == ["first", "batched", "batched", "last"]
    assert [e.seq - events[0].seq for e in events] == [0, 1, 2, 3]
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(events))
    assert events[2].data == {"password": "[redacted]"}
    assert verify_chain(org_id=org.id).intact and verify_chain(org_id=org.id).checked == events[-1].seq


@pytest.mark.django_db(transaction=True)
def test_two_writers_appending_at_once_keep_one_unbroken_chain(org):
    """The second writer waits for the first's lock on the chain head, then chains after its event."""
    import threading

    from django.db import connection

    first_sent, second_started = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with transaction.atomic():
                audit.send_record(org_id=org.id, actor=None, action="first")
                first_sent.set()
                second_started.wait(10)
                time.sleep(0.5)  # the second writer is now waiting on the head's lock
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    def second() -> None:
        try:
            first_sent.wait(10)
            second_started.set()
            with transaction.atomic():
                audit.send_record(org_id=org.id, actor=None, action="second")
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    events = list(AuditEvent.objects.filter(org_id=org.id).order_by("seq"))[-2:]
    assert [e.action for e in events] == ["first", "second"] and events[1].prev_hash == events[0].hash
    assert verify_chain(org_id=org.id).intact
