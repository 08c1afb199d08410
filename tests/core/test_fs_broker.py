"""The embedded mode's broker (a folder of message files): a consumer polling while a producer sends never
reads a message half-written. kombu's own filesystem transport let it read an empty file, which stopped the
worker of `scripts/run` within a minute of beat's one-second sweep."""

from __future__ import annotations

import threading
import uuid

from django.conf import settings
from kombu import Connection


def _send_and_drain(tmp_path, transport: str, messages: int = 3000) -> tuple[list[int], list[BaseException]]:
    options = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path), "store_processed": False,
               "processed_folder": str(tmp_path / "processed"), "control_folder": str(tmp_path / "control"),
               "polling_interval": 0}
    for folder in ("processed", "control"):
        (tmp_path / folder).mkdir()
    name = f"runs{uuid.uuid4().hex}"  # kombu keeps bindings per transport class, across connections
    received: list[int] = []
    failures: list[BaseException] = []
    sent = threading.Event()

    def produce():
        try:
            with Connection("filesystem://", transport=transport, transport_options=options) as conn:
                queue = conn.SimpleQueue(name)
                for n in range(messages):
                    queue.put({"n": n, "pad": "x" * 2000})
                queue.close()
        finally:
            sent.set()  # also when sending failed: the consumer must not wait for more forever

    def consume():
        with Connection("filesystem://", transport=transport, transport_options=options) as conn:
            queue = conn.SimpleQueue(name)
            while len(received) < messages:
                try:
                    message = queue.get(timeout=0.5)
                except queue.Empty:
                    if sent.is_set() and not any(tmp_path.glob("*.msg")):
                        break
                    continue
                except Exception as exc:  # what stopped the worker: a message read before it was written
                    failures.append(exc)
                    if len(failures) > 3:
                        break
                    continue
                received.append(message.payload["n"])
                message.ack()
            queue.close()

    def guarded(work):
        def run():
            try:
                work()
            except BaseException as exc:
                failures.append(exc)
        return run

    # Daemon threads: a test that failed must not keep pytest from exiting.
    threads = [threading.Thread(target=guarded(work), daemon=True) for work in (produce, consume)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return received, failures


def test_a_consumer_never_reads_a_message_before_it_is_whole(tmp_path):
    received, failures = _send_and_drain(tmp_path, "apps.core.fs_broker:Transport")
    assert failures == []
    assert sorted(received) == list(range(3000))


def _bind_together(tmp_path, transport: str, rounds: int = 150) -> tuple[list[BaseException], list[str]]:
    """Processes starting at once (web, worker, beat), or threads of one, each declare the same new queue and
    send one message on it. Returns the failures and the queues that did not get all four messages."""
    options = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path), "store_processed": False,
               "processed_folder": str(tmp_path / "processed"), "control_folder": str(tmp_path / "control"),
               "polling_interval": 0}
    failures: list[BaseException] = []

    def declare_and_send(name: str, start: threading.Barrier):
        try:
            with Connection("filesystem://", transport=transport, transport_options=options) as conn:
                start.wait()
                queue = conn.SimpleQueue(name)
                queue.put({"n": 1})
                queue.close()
        except BaseException as exc:
            failures.append(exc)

    names = []
    for _ in range(rounds):
        name, start = f"q{uuid.uuid4().hex}", threading.Barrier(4)
        names.append(name)
        threads = [threading.Thread(target=declare_and_send, args=(name, start), daemon=True) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    short = [name for name in names if len(list(tmp_path.glob(f"*.{name}.msg"))) != 4]
    return failures, short


def test_senders_binding_a_new_queue_at_once_never_read_a_half_written_table_nor_lose_a_message(tmp_path):
    failures, short = _bind_together(tmp_path, "apps.core.fs_broker:Transport")
    assert failures == []
    assert short == []  # a sender that found the queue "bound" before its table was written dropped its message


def test_the_embedded_settings_use_it():
    if settings.REDIS_URL:
        assert settings.CELERY_BROKER_URL == settings.REDIS_URL
    else:
        assert settings.CELERY_BROKER_TRANSPORT == "apps.core.fs_broker:Transport"
