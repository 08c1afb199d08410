"""The embedded mode's task broker: kombu's filesystem transport with messages that appear whole.

kombu's filesystem transport creates a message's file under its final name and then writes it, and a
consumer polling the folder takes any file with that name; when the consumer looks in between, it reads an
empty file and the worker stops on a JSONDecodeError ("Unrecoverable error"). With beat sending the run
sweep every second, `scripts/run` lost its worker within a minute. Here a message is written under a name
the consumer does not take (a leading dot and no `.msg` ending) and renamed into place, which is atomic on
one filesystem: the consumer sees the whole message or none of it.

The same holds for an exchange's table of bound queues (a JSON file each process reads before it sends):
kombu creates it truncated and locks it only after, so a process starting beside another (`scripts/run`
starts web, worker and beat at once on a new folder) could read it empty. Here binders take turns on a lock
file of their own and the table is replaced whole. Within one process, kombu marks a binding as declared
(in state shared by every channel of the class) before it writes the table, so a second thread could find
the binding "done", send, and route to a table still empty: the message was dropped without a word. Here a
binding is declared and written under one process lock.
"""

from __future__ import annotations

import os
import threading
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.transport.filesystem import LOCK_EX, exchange_queue_t, lock, unlock
from kombu.transport.virtual.base import Empty
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

from apps.core.queue_order import ResumeFirstCycle

_declaring = threading.Lock()


class Channel(filesystem.Channel):
    def _reset_cycle(self):
        self._cycle = ResumeFirstCycle(self._get_and_deliver, self._active_queues, Empty)  # a decision first

    def queue_bind(self, *args, **kwargs):
        with _declaring:  # "already bound" must mean "the table on disk names the queue"
            return super().queue_bind(*args, **kwargs)

    def _put(self, queue, payload, **kwargs):
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = os.path.join(self.data_folder_out, f".{name}.partial")
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        table = self._exchange_file(exchange)
        self.control_folder.mkdir(exist_ok=True)
        entry = exchange_queue_t(routing_key or "", pattern or "", queue or "")
        try:
            with open(self.control_folder / f".{exchange}.lock", "a") as guard:  # one binder at a time
                lock(guard, LOCK_EX)
                try:
                    queues = self.get_table(exchange)
                    if entry not in queues:
                        partial = table.with_name(f".{table.name}.{uuid.uuid4()}.partial")
                        partial.write_bytes(str_to_bytes(dumps([entry, *queues])))
                        os.replace(partial, table)
                finally:
                    unlock(guard)
        except OSError as exc:
            raise ChannelError(f"Cannot bind {queue!r} in {table}") from exc


class Transport(filesystem.Transport):
    Channel = Channel
