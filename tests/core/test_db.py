"""apps.core.db's batches: the run store's last batch of a transaction carries its COMMIT
(`pipeline(commit=True)`), and, when nothing went out before it, its BEGIN too (`end_transaction`: a tool
step's transaction in one round trip). What must hold: the transaction is committed whole or not at all,
on_commit callbacks run only once it is, a block inside a caller's transaction commits nothing of the
caller's, an update the batch expects to change a row fails it when it changes none, and the connection
is Django's as before afterwards."""

from __future__ import annotations

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction

from apps.accounts.models import Organization
from apps.core.db import NothingUpdated, end_transaction, pipeline, send_expected_update

pytestmark = pytest.mark.django_db(transaction=True)  # real commits, seen from a second connection


def committed(*slugs: str) -> int:
    """How many of these organizations another connection sees: only committed rows."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None), params.pop("prepare_threshold", None), params.pop("context", None)
    with psycopg.connect(**params) as other:
        return other.execute("SELECT count(*) FROM accounts_organization WHERE slug = ANY(%s)",
                             [list(slugs)]).fetchone()[0]


def test_the_last_batch_commits_the_transaction_and_on_commit_runs_after():
    seen_by_callbacks = []
    with transaction.atomic():
        Organization.objects.create(name="First", slug="batch-first")
        transaction.on_commit(lambda: seen_by_callbacks.append(committed("batch-first", "batch-second")))
        with pipeline(commit=True):
            Organization(name="Second", slug="batch-second").save(force_insert=True)
        assert committed("batch-first", "batch-second") == 2  # the COMMIT went with the batch
        assert seen_by_callbacks == []  # callbacks wait for the atomic's exit, as always
    assert seen_by_callbacks == [2]
    assert Organization.objects.filter(slug__startswith="batch-").count() == 2  # the connection carries on


def test_an_error_in_the_batch_rolls_back_the_whole_transaction():
    ran = []
    with pytest.raises(IntegrityError), transaction.atomic():
        Organization.objects.create(name="First", slug="batch-taken")
        transaction.on_commit(lambda: ran.append("published"))
        with pipeline(commit=True):
            Organization(name="Second", slug="batch-other").save(force_insert=True)
            Organization(name="Third", slug="batch-taken").save(force_insert=True)  # the slug of the first
    assert committed("batch-taken", "batch-other") == 0
    assert ran == []
    assert not Organization.objects.filter(slug__startswith="batch-").exists()


def test_inside_a_callers_transaction_the_batch_commits_nothing():
    with pytest.raises(RuntimeError, match="the caller fails"), transaction.atomic():
        Organization.objects.create(name="Caller's", slug="batch-callers")
        with transaction.atomic(savepoint=False), pipeline(commit=True):
            Organization(name="Inner", slug="batch-inner").save(force_insert=True)
        assert committed("batch-callers", "batch-inner") == 0
        raise RuntimeError("the caller fails after the inner block")
    assert not Organization.objects.filter(slug__startswith="batch-").exists()


def test_a_whole_transaction_in_one_batch_commits_with_on_commit_after():
    seen_by_callbacks = []
    with transaction.atomic():
        transaction.on_commit(lambda: seen_by_callbacks.append(committed("batch-one", "batch-two")))
        with end_transaction():
            Organization(name="One", slug="batch-one").save(force_insert=True)
            Organization(name="Two", slug="batch-two").save(force_insert=True)
        assert committed("batch-one", "batch-two") == 2
        assert seen_by_callbacks == []
    assert seen_by_callbacks == [2]
    assert connection.connection.autocommit  # as Django leaves it after an atomic
    with transaction.atomic():  # and the next transaction is an ordinary one
        Organization.objects.filter(slug="batch-one").update(name="Renamed")
    assert Organization.objects.get(slug="batch-one").name == "Renamed"


def test_an_expected_update_that_changes_no_row_fails_the_whole_batch():
    existing = Organization.objects.create(name="Before", slug="batch-existing")
    with pytest.raises(NothingUpdated), transaction.atomic(), end_transaction():
        Organization(name="New", slug="batch-new").save(force_insert=True)
        send_expected_update(Organization.objects.filter(id=existing.id, name="Before"), name="After")
        send_expected_update(Organization.objects.filter(id=existing.id, name="Someone else's"), name="Never")
    assert committed("batch-new") == 0
    assert Organization.objects.get(id=existing.id).name == "Before"  # the first update rolled back too
    Organization.objects.create(name="Later", slug="batch-later")  # the connection works on
    assert committed("batch-later") == 1


def test_a_failed_statement_in_the_whole_transaction_batch_rolls_it_back():
    Organization.objects.create(name="Taken", slug="batch-taken")
    with pytest.raises(IntegrityError), transaction.atomic(), end_transaction():
        Organization(name="Fine", slug="batch-fine").save(force_insert=True)
        Organization(name="Clash", slug="batch-taken").save(force_insert=True)
    assert committed("batch-fine") == 0
    assert not Organization.objects.filter(slug="batch-fine").exists()


def test_after_a_statement_went_out_the_batch_still_commits_the_transaction_whole():
    with pytest.raises(IntegrityError), transaction.atomic():
        Organization.objects.create(name="Sent before", slug="batch-before")  # BEGIN went out with it
        with end_transaction():
            Organization(name="Clash", slug="batch-before").save(force_insert=True)
    assert committed("batch-before") == 0
    with transaction.atomic():
        Organization.objects.create(name="Sent before", slug="batch-before")
        with end_transaction():
            Organization(name="In the batch", slug="batch-in").save(force_insert=True)
        assert committed("batch-before", "batch-in") == 2
