"""The run pages' websocket clients of bench/load.py, in a process of their own, as browsers would be.

They ran on a thread of the load generator, beside its 16 HTTP threads: a frame that had arrived waited there for
the generator's GIL before it was timed, and that wait was counted as the server's (bench/load.py's event -> frame
row). Here each frame is timed as this process reads it, and reported to the parent afterwards.

    python -m bench.watchers        (bench/load.py starts it; not by hand)

stdin: one JSON line {"bases": [...], "cookie": "...", "run_ids": [...]}, then nothing until the parent closes it,
which stops the clients. stdout: one JSON line per happening, in order:

    {"opened": run_id, "at": t}                                   a socket connected
    {"connected": true}                                           every socket has (or one failed)
    {"frame": run_id, "at": t, "kind": k, "seqs": [...], "events": [[seq, type, event_at], ...]}
    {"error": "..."}                                              a socket failed
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import datetime

from bench.live import EVENT, EVENT_SEQ, NEW_EVENTS


def say(**line) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


async def watch(run_id: str, base: str, cookie: str, opened: list, total: int, stop: asyncio.Event) -> None:
    import websockets

    headers = {"Origin": base, "Cookie": f"sessionid={cookie}"}
    url = base.replace("http://", "ws://") + f"/ws/run/{run_id}/"
    try:
        async with websockets.connect(url, additional_headers=headers, max_size=None, open_timeout=60) as ws:
            say(opened=run_id, at=time.time())
            opened.append(run_id)
            if len(opened) == total:
                say(connected=True)
            first = True
            while not stop.is_set():
                try:
                    frame = await asyncio.wait_for(ws.recv(), 0.5)
                except TimeoutError:
                    continue
                now = time.time()
                if not isinstance(frame, str):
                    continue
                kind = "first" if first else "new" if frame.startswith(NEW_EVENTS) else "panels"
                # The first frame is the page as it stands (its newest events); then events added on top.
                events = []
                if first or frame.startswith(NEW_EVENTS):
                    first = False
                    events = [[int(seq), type_, datetime.fromisoformat(at).timestamp() if at else now]
                              for seq, at, type_ in EVENT.findall(frame)[::-1]]
                say(frame=run_id, at=now, kind=kind, seqs=[int(n) for n in EVENT_SEQ.findall(frame)], events=events)
    except Exception as exc:  # reported to the parent, which counts it
        say(error=f"{run_id}: {type(exc).__name__}: {exc}")
        say(connected=True)


async def main() -> None:
    setup = json.loads(sys.stdin.readline())
    bases, cookie, run_ids = setup["bases"], setup["cookie"], setup["run_ids"]
    stop, opened = asyncio.Event(), []
    loop = asyncio.get_running_loop()
    clients = [asyncio.create_task(watch(r, bases[n % len(bases)], cookie, opened, len(run_ids), stop))
               for n, r in enumerate(run_ids)]
    await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin
    stop.set()
    await asyncio.gather(*clients)


if __name__ == "__main__":
    asyncio.run(main())
