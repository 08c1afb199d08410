"""The optional injection classifier on real runs (the order desk over stdio, the scripted model): a result
it flags taints the run, so the refund that follows (policy `auto`) waits for a person with the
classifier's reason; one it clears lets the refund run; a classifier that is down or too slow fails
closed. Reads never wait for it: only a write does, before the policy decides it."""

from __future__ import annotations

import pytest
from django.test import override_settings

from apps.registry import classifier
from apps.runs import services, worker
from apps.runs.models import RunEvent, ToolCall
from tests.runs import classifiers

pytestmark = pytest.mark.django_db
A1001 = {"order_id": "A-1001", "amount_cents": 500}


@pytest.fixture(autouse=True)
def fresh_classifier():
    classifier._classifier.cache_clear()
    classifiers.SEEN.clear()
    yield
    classifier._classifier.cache_clear()


def run_desk(desk):
    crew = desk.refund_desk(refund_policy="auto")
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001, enqueue=False)
    return worker.drive_run(run_id=run.id)


def refund(run) -> ToolCall:
    return ToolCall.objects.get(run=run, qualified_name="orders.refund_order")


def test_without_a_classifier_the_auto_refund_runs(desk):
    run = run_desk(desk)
    assert run.status == "succeeded" and list(desk.refunds()) == ["refund-A-1001"]
    assert not run.tainted


@override_settings(AIRLOCK_INJECTION_CLASSIFIER="tests.runs.classifiers:flags_order_status")
def test_a_flagged_result_holds_the_next_write_with_the_classifiers_reason(desk):
    run = run_desk(desk)
    assert run.status == "waiting" and desk.refunds() == {}  # nothing was refunded
    held = refund(run)
    assert held.state == "held"
    assert "flagged by the injection classifier (score 0.93)" in held.reason
    assert "orders.get_order_status" in held.reason
    tainted = RunEvent.objects.get(run=run, type="run.tainted")
    assert "injection classifier" in tainted.data["reason"]
    assert any("A-1001" in text for text in classifiers.SEEN)  # it judged the real result


@override_settings(AIRLOCK_INJECTION_CLASSIFIER="tests.runs.classifiers:clears_everything")
def test_a_cleared_result_lets_the_write_run(desk):
    run = run_desk(desk)
    assert run.status == "succeeded" and list(desk.refunds()) == ["refund-A-1001"]
    assert classifiers.SEEN  # it was asked


@override_settings(AIRLOCK_INJECTION_CLASSIFIER="tests.runs.classifiers:never_answers",
                   AIRLOCK_INJECTION_CLASSIFIER_TIMEOUT_S=0.5)
def test_a_classifier_that_does_not_answer_in_time_fails_closed(desk):
    run = run_desk(desk)
    assert run.status == "waiting" and desk.refunds() == {}
    assert "not cleared by the injection classifier in time" in refund(run).reason


@override_settings(AIRLOCK_INJECTION_CLASSIFIER="tests.runs.classifiers:breaks")
def test_a_classifier_that_fails_fails_closed(desk):
    run = run_desk(desk)
    assert run.status == "waiting" and desk.refunds() == {}
    assert "could not be checked: the classifier failed (ConnectionError)" in refund(run).reason
