"""The embedded mode's task broker: kombu's filesystem transport with messages that appear whole.

kombu's filesystem transport creates a message's file under its final name and then writes it, and a
consumer polling the folder takes any file with that name; when the consumer looks in between, it reads an
empty file and the worker stops on a JSONDecodeError ("Unrecoverable error"). With beat sending the run
sweep every second, `scripts/run` lost its worker within a minute. Here a message is written under a name
the consumer does not take (a leading dot and no `.msg` ending) and renamed into place, which is atomic on
one filesystem: the consumer sees the whole message or none of it.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
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


class Transport(filesystem.Transport):
    Channel = Channel
