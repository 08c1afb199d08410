"""Exactly one Celery beat: a second one (a replica, an overlap during a deploy) waits instead of doubling
every periodic task (expiry sweeps, lease sweeps, retries).

With Redis: a lock key with a time-to-live that the holder renews; a beat that dies lets it lapse and a
waiting one takes over within `TTL_S`. Embedded (one machine): an exclusive lock on a file in the var
directory, released by the kernel when the process dies. Either way each beat also leaves a tick (when
it last renewed or checked), which `manage.py beat_health` reads for the container's health check.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import threading
import time
from pathlib import Path

from celery.beat import PersistentScheduler
from django.conf import settings

log = logging.getLogger(__name__)
TTL_S = 30.0
RENEW_S = 10.0
HEALTHY_S = 3 * RENEW_S  # a tick older than this: the beat's renew loop has stopped


def _prefix() -> str:
    return os.environ.get("AIRLOCK_CHANNEL_PREFIX", "airlock")


def me() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def tick_path() -> Path:
    return Path(settings.VAR_DIR) / f"beat-tick-{socket.gethostname()}"


def _tick() -> None:
    path = tick_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(str(time.time()))


class RedisBeatLock:
    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self.key, self.owner = f"{_prefix()}:beat-lock", me()

    def try_acquire(self) -> bool:
        return bool(self.client.set(self.key, self.owner, nx=True, px=int(TTL_S * 1000)))

    def renew(self) -> bool:
        """Extends the lock if it is still ours (compare and extend in one step, on the server)."""
        script = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
                  "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end")
        return bool(self.client.eval(script, 1, self.key, self.owner, int(TTL_S * 1000)))

    def holder(self) -> str:
        value = self.client.get(self.key)
        return value.decode() if value else ""

    def release(self) -> None:
        """A beat that stops cleanly hands over at once instead of after the time-to-live."""
        script = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
        self.client.eval(script, 1, self.key, self.owner)


class FileBeatLock:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = path.open("a+")

    def try_acquire(self) -> bool:
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def renew(self) -> bool:
        return True  # the kernel holds it for as long as this process lives

    def holder(self) -> str:
        return ""

    def release(self) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)


def make_lock():
    if settings.REDIS_URL:
        return RedisBeatLock(settings.REDIS_URL)
    return FileBeatLock(Path(settings.VAR_DIR) / "beat.lock")


def hold(lock=None, *, poll_s: float = RENEW_S) -> object:
    """Blocks until this beat holds the lock, then renews it in a thread; losing it ends the process
    (the orchestrator restarts it and it waits its turn) rather than two beats sending the schedule."""
    lock = lock or make_lock()
    while not lock.try_acquire():
        _tick()
        log.warning("Another Celery beat holds the beat lock (%s); this one waits to take over.",
                    lock.holder() or "a process on this machine")
        time.sleep(poll_s)
    _tick()
    log.info("This beat holds the beat lock; it sends the periodic tasks.")

    def renew_forever() -> None:
        while True:
            time.sleep(RENEW_S)
            try:
                still = lock.renew()
            except Exception:  # Redis away for a moment: the lock lasts TTL_S, try again
                log.exception("Could not renew the beat lock")
                continue
            if not still:
                log.error("The beat lock was taken over by %s: this beat stops.", lock.holder())
                os._exit(3)
            _tick()

    threading.Thread(target=renew_forever, name="beat-lock", daemon=True).start()
    return lock


def healthy() -> str:
    """'' when this machine's beat ticked recently (holding the lock, or waiting for it), else why not."""
    try:
        age = time.time() - float(tick_path().read_text())
    except (OSError, ValueError):
        return "no beat has started on this machine"
    return "" if age < HEALTHY_S else f"the beat's last tick was {age:.0f} s ago"


class LockedScheduler(PersistentScheduler):
    """Celery's file-backed scheduler, which opens its schedule file only once this beat holds the lock
    (two beats on one shared volume would otherwise also write one file)."""

    def __init__(self, *args, **kwargs) -> None:
        # `lazy`: the instance Celery builds only to print its start-up banner; it never sends anything.
        self.beat_lock = None if kwargs.get("lazy") else hold()
        super().__init__(*args, **kwargs)

    def close(self) -> None:
        super().close()
        if self.beat_lock is None:
            return
        try:
            self.beat_lock.release()
        except Exception:  # the lock lapses on its own within TTL_S
            log.exception("Could not release the beat lock")
