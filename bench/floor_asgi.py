"""The floor of the live-event metric: a bare Channels consumer that joins one group and forwards each
`group_send` as a websocket frame, served by uvicorn like the real web process and on the same channel
layer. bench/run.py times group_send -> frame here and worker commit -> frame through `config.asgi`.

    uvicorn bench.floor_asgi:application
"""

from __future__ import annotations

import json
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()

from channels.generic.websocket import AsyncWebsocketConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

GROUP = "bench.floor"


class FloorConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        await self.accept()
        await self.channel_layer.group_add(GROUP, self.channel_name)

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(GROUP, self.channel_name)

    async def realtime_event(self, message: dict) -> None:
        await self.send(text_data=json.dumps(message["data"]))


application = ProtocolTypeRouter({"websocket": URLRouter([path("ws/floor/", FloorConsumer.as_asgi())])})
