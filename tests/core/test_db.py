"""apps.core.db.pipeline(commit=True): the run store's last batch of a transaction carries its COMMIT (one
round trip for both). What must hold: the transaction is committed whole or not at all, on_commit callbacks
run only once it is, and a block inside a caller's transaction commits nothing of the caller's."""

from __future__ import annotations

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction

from apps.accounts.models import Organization
from apps.core.db import pipeline

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
