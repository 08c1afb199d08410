"""The sweeper and the claim, in-process: a lost worker's run is taken back once per lease, claimed by the next
worker with a `run.recovered` event, and the lost worker's store can no longer touch it."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import redis
from django.utils import timezone

from apps.runs import queue, services
from apps.runs import worker as run_worker
from apps.runs.engine import process
from apps.runs.engine.errors import LeaseLost
from apps.runs.models import Run, RunStep
from apps.runs.store.run_store import RunStore
from tests.runs.conftest import LOOK_UP

pytestmark = pytest.mark.django_db

LOST = "lost-host:4242:deadbeef"


def lookups(desk):
    reader = desk.agent("Reader", [{"call": [LOOK_UP]}, {"say": "Looked.\nSTATUS: done\nREASON: ok"}],
                        [{"tool": "orders.get_order_status", "policy": "auto"}])
    return desk.sequential("Lookups", [("look", reader, "Look up order {order_id}.", [])])


def lost_run(desk, crew=None) -> Run:
    """A run its worker was driving when it died: running, the lease expired a moment ago."""
    crew = crew or lookups(desk)
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs={"order_id": "A-1001", "amount_cents": 1},
                             enqueue=False)
    Run.objects.filter(id=run.id).update(status="running", lease_owner=LOST,
                                         lease_expires_at=timezone.now() - timedelta(seconds=1))
    return Run.objects.get(id=run.id)


def test_a_lost_run_is_swept_once_per_lease_and_the_next_worker_takes_it_over(desk):
    run = lost_run(desk)
    assert run_worker.sweep_stuck_runs() == 1
    assert run_worker.sweep_stuck_runs() == 0  # not enqueued again at every sweep while the queue is busy
    swept = Run.objects.get(id=run.id)
    assert swept.lease_owner == "swept" and swept.lease_expires_at > timezone.now()

    run = run_worker.drive_run(run_id=run.id)
    assert run.status == "succeeded", run.error
    assert run.deliveries == 1
    recovered = run.events.get(type="run.recovered")
    assert recovered.data["worker"] != LOST and recovered.seq < run.events.get(type="run.finished").seq


def test_the_lost_worker_can_no_longer_write_once_its_run_was_swept(desk):
    run = lost_run(desk)
    stale = RunStore(str(run.id), LOST)  # the worker comes back to life (a paused process, a partition)
    run_worker.sweep_stuck_runs()
    with pytest.raises(LeaseLost):
        stale.renew_lease()
    with pytest.raises(LeaseLost):
        stale.save_state(state={**run.state, "hijacked": True})
    assert "hijacked" not in Run.objects.get(id=run.id).state


@pytest.fixture
def swept_unheard(monkeypatch) -> list:
    """The runs the sweeper enqueues, kept from the broker: in a test whose rows are committed, the session's
    Celery worker (tests/conftest.py `worker`, started by an earlier test) would take the swept run and drive it
    while the test plays the lost worker and the next one (the full suite saw it finish the run first)."""
    enqueued: list = []
    monkeypatch.setattr(run_worker, "enqueue", enqueued.append)
    return enqueued


@pytest.mark.django_db(transaction=True)  # the refused batch rolls back its whole transaction, as in a worker
def test_the_lost_worker_cannot_start_an_agent_s_turn_once_its_run_was_swept(desk, swept_unheard):
    run = lost_run(desk)
    stale = RunStore(str(run.id), LOST)
    run_worker.sweep_stuck_runs()
    assert swept_unheard == [run.id]
    with pytest.raises(LeaseLost):
        process.start_next(stale)  # the task's first turn: its step, the cursor and its event in one batch
    run = Run.objects.get(id=run.id)
    assert not RunStep.objects.filter(run=run).exists() and "turn_id" not in run.state and run.hops == 0
    assert not run.events.filter(type="agent.started").exists()
    assert run_worker.drive_run(run_id=run.id).status == "succeeded"  # the worker holding it now carries on


@pytest.mark.django_db(transaction=True)
def test_the_lost_worker_cannot_end_an_agent_s_turn_once_its_run_was_swept(desk, swept_unheard):
    run = lost_run(desk)
    stale = RunStore(str(run.id), LOST)
    process.start_next(stale)  # the turn it had started before it stalled
    turn = RunStep.objects.get(run=run)
    run_worker.sweep_stuck_runs()
    assert swept_unheard == [run.id]
    with pytest.raises(LeaseLost):
        stale.finish_turn(turn, status="done", reason="hijacked", output="hijacked",
                          state={**stale.run.state, "hijacked": True})
    turn.refresh_from_db()
    run = Run.objects.get(id=run.id)
    assert (turn.status, turn.output) == ("running", "") and "hijacked" not in run.state
    assert not run.events.filter(type="agent.finished").exists()


def test_a_queued_run_whose_message_was_lost_is_enqueued_again_once_per_period(desk, settings, own_broker):
    settings.AIRLOCK_RUN_REQUEUE_AFTER_S = 60
    run = lost_run(desk)
    Run.objects.filter(id=run.id).update(status="queued", lease_owner="", lease_expires_at=None,
                                         updated_at=timezone.now() - timedelta(seconds=61))
    assert run_worker.sweep_stuck_runs() == 1
    assert run_worker.sweep_stuck_runs() == 0  # not a message per sweep while it waits in a long queue
    run = run_worker.drive_run(run_id=run.id)
    assert run.status == "succeeded", run.error


@pytest.fixture
def own_broker(settings):
    """A broker of this test's own (a key prefix in the session's Redis) that no worker consumes, read by the
    sweeper; yields a kombu connection to send to it. The session's workers drain the shared queues."""
    from kombu import Connection

    prefix = f"test-{uuid.uuid4().hex}:"
    options = {**settings.CELERY_BROKER_TRANSPORT_OPTIONS, "global_keyprefix": prefix}
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = options
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        with Connection(settings.CELERY_BROKER_URL, transport_options=options) as connection:
            yield connection, client, prefix
    finally:
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()


def test_a_queued_run_whose_message_waits_behind_a_backlog_is_not_enqueued_again(desk, settings, own_broker):
    """A backlog longer than the requeue period (10,000 runs started at once) is not a lost message: the run's
    message is still in line, so the sweeper leaves it there, and takes it again only when it is gone."""
    from apps.runs import tasks

    connection, client, prefix = own_broker
    settings.AIRLOCK_RUN_REQUEUE_AFTER_S = 60
    crew = lookups(desk)
    run, other = lost_run(desk, crew), lost_run(desk, crew)
    Run.objects.filter(id__in=[run.id, other.id]).update(status="queued", lease_owner="", lease_expires_at=None)
    for queued in (other, run):  # the run waits behind another's message
        tasks.execute_run.apply_async((str(queued.id),), connection=connection)
    assert client.llen(f"{prefix}runs") == 2

    aged = timezone.now() - timedelta(seconds=61)
    Run.objects.filter(id__in=[run.id, other.id]).update(updated_at=aged)
    assert run_worker.sweep_stuck_runs() == 0
    assert run_worker.sweep_stuck_runs() == 0  # and it does not read the broker again at every sweep
    assert Run.objects.get(id=run.id).updated_at > aged

    mine = [raw for raw in client.lrange(f"{prefix}runs", 0, -1) if str(run.id) in raw.decode()]
    assert len(mine) == 1
    client.lrem(f"{prefix}runs", 0, mine[0])  # lost: Redis restarted without it
    Run.objects.filter(id__in=[run.id, other.id]).update(updated_at=aged)
    assert run_worker.sweep_stuck_runs() == 1  # this run; the other's message is still in line
    assert Run.objects.get(id=other.id).updated_at > aged  # looked at again in a period, not at every sweep
    assert run_worker.sweep_stuck_runs() == 0
    run = run_worker.drive_run(run_id=run.id)
    assert run.status == "succeeded", run.error


def test_a_message_a_worker_has_taken_and_not_acknowledged_is_in_line(desk, settings, own_broker):
    """Late acknowledgement: a worker holds the message it is working on in Redis's `unacked` until done."""
    from apps.runs import tasks

    connection, client, prefix = own_broker
    run = lost_run(desk)
    tasks.resume_run.apply_async((str(run.id),), connection=connection, queue="resume")
    with connection.channel() as channel:
        taken = channel.basic_get("resume", no_ack=False)
        assert taken is not None and client.llen(f"{prefix}resume") == 0
        assert str(run.id) in queue.runs_in_line()


def test_the_embedded_broker_s_waiting_runs_are_found_in_its_folder(desk, settings, tmp_path):
    """Embedded mode's broker is a folder of messages (apps/core/fs_broker.py): a run with a message there is in
    line, one without is not."""
    from kombu import Connection

    from apps.runs import tasks

    folder = tmp_path / "queue"
    folder.mkdir()
    options = {"data_folder_in": str(folder), "data_folder_out": str(folder), "control_folder": str(tmp_path)}
    crew = lookups(desk)
    waiting, resumed, _without_message = (lost_run(desk, crew) for _ in range(3))
    with Connection("filesystem://", transport="apps.core.fs_broker:Transport", transport_options=options) as conn:
        tasks.execute_run.apply_async((str(waiting.id),), connection=conn, queue="runs")
        tasks.resume_run.apply_async((str(resumed.id),), connection=conn, queue="resume")
    settings.REDIS_URL, settings.BROKER_DIR = "", tmp_path
    assert queue.runs_in_line() == {str(waiting.id), str(resumed.id)}


def test_a_lost_message_hidden_behind_another_run_s_duplicate_is_found_once_that_drains(desk, settings, own_broker):
    """The broker is read only when it holds fewer run messages than there are queued runs. A duplicate of another
    run's message can hide a lost one for a while; the lost run is enqueued again once the duplicate is gone."""
    from apps.runs import tasks

    connection, client, prefix = own_broker
    settings.AIRLOCK_RUN_REQUEUE_AFTER_S = 60
    crew = lookups(desk)
    lost, other = lost_run(desk, crew), lost_run(desk, crew)
    Run.objects.filter(id__in=[lost.id, other.id]).update(status="queued", lease_owner="", lease_expires_at=None)
    for _ in range(2):  # the other run's message, twice; none for the lost one
        tasks.execute_run.apply_async((str(other.id),), connection=connection)
    aged = timezone.now() - timedelta(seconds=61)
    Run.objects.filter(id__in=[lost.id, other.id]).update(updated_at=aged)
    assert run_worker.sweep_stuck_runs() == 0  # two messages, two queued runs: nothing is surely lost yet

    client.rpop(f"{prefix}runs")  # a worker takes one of the duplicates
    Run.objects.filter(id__in=[lost.id, other.id]).update(updated_at=aged)
    assert run_worker.sweep_stuck_runs() == 1
    assert Run.objects.get(id=lost.id).updated_at > aged and Run.objects.get(id=other.id).updated_at > aged


def test_messages_that_are_no_queued_run_s_do_not_hide_a_lost_one(desk, settings, own_broker):
    """What a worker holds for a running run, the sweep's own message (it runs on `default`, acknowledged late)
    and another queue's are not in line for a queued run: one lost run behind them is enqueued again at once,
    not once the workers fall idle. A run's message a worker took ahead (prefetched) still counts as its own."""
    from apps.core import tasks as core_tasks
    from apps.runs import tasks

    connection, client, prefix = own_broker
    settings.AIRLOCK_RUN_REQUEUE_AFTER_S = 60
    crew = lookups(desk)
    running, lost, prefetched = lost_run(desk, crew), lost_run(desk, crew), lost_run(desk, crew)
    Run.objects.filter(id=running.id).update(lease_expires_at=timezone.now() + timedelta(minutes=5))
    Run.objects.filter(id__in=[lost.id, prefetched.id]).update(status="queued", lease_owner="", lease_expires_at=None)
    tasks.execute_run.apply_async((str(running.id),), connection=connection)
    tasks.execute_run.apply_async((str(prefetched.id),), connection=connection)
    tasks.sweep_stuck_runs.apply_async(connection=connection, queue="default")
    core_tasks.record_worker_heartbeat.apply_async(connection=connection, queue="default")
    with connection.channel() as channel:
        for name in ("runs", "runs", "default", "default"):  # each taken by a worker and not yet acknowledged
            assert channel.basic_get(name, no_ack=False) is not None
        assert client.hlen(f"{prefix}unacked") == 4
        aged = timezone.now() - timedelta(seconds=61)
        Run.objects.filter(id__in=[lost.id, prefetched.id]).update(updated_at=aged)
        assert run_worker.sweep_stuck_runs() == 1
        assert Run.objects.get(id=lost.id).updated_at > aged  # the lost one, enqueued again
        assert Run.objects.get(id=prefetched.id).updated_at > aged  # in line, taken ahead: left to its worker
        assert queue.runs_taken() == {str(running.id), str(prefetched.id)}
