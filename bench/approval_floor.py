"""The floor of Airlock's approval path, measured bare: the round trips the design cannot do without.

A decision is one commit; the resume is one message through the broker (Redis) to a worker that is idle, warm
and already blocked on the queue; the worker commits its claim of the run and then the call's `dispatched`,
and the call may leave. Here each of those is one statement on a connection already open, with no Airlock
code, no ORM and no Celery around them (psycopg and redis-py only), on the same Postgres and Redis as the
benchmark of the real path (bench/approval.py).

    python -m bench.approval_floor DATABASE_URL REDIS_URL KEY     # the worker: prints "ready", serves KEY

`Floor` (used by bench/approval.py) creates the table, starts that worker as a process of its own and times
one decision at a time: from just before the decision's commit to the worker's clock just after its
`dispatched` commit returned.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = """CREATE TABLE IF NOT EXISTS bench_floor_run (id integer PRIMARY KEY, status text NOT NULL,
           lease_owner text NOT NULL DEFAULT '', dispatched_at timestamptz)"""


def serve(db_url: str, redis_url: str, key: str) -> None:
    import psycopg
    import redis

    owner = f"floor-{time.time_ns()}"
    broker = redis.Redis.from_url(redis_url, socket_timeout=None)  # it waits on the queue as long as it takes
    with psycopg.connect(db_url, autocommit=True) as conn:
        print("ready", flush=True)
        while True:
            _, raw = broker.brpop([key])
            if raw == b"stop":
                return
            run_id = int(raw)
            conn.execute("UPDATE bench_floor_run SET status = 'running', lease_owner = %s "
                         "WHERE id = %s AND status = 'queued'", (owner, run_id))      # the claim
            conn.execute("UPDATE bench_floor_run SET dispatched_at = now() WHERE id = %s AND lease_owner = %s",
                         (run_id, owner))                                                # `dispatched`
            stamp = time.time()
            broker.lpush(f"{key}:done", f"{run_id} {stamp!r}")


class Floor:
    """The bare path, worker process and all, between `with` and its end."""

    def __init__(self, db_url: str, redis_url: str, key: str = "bench-floor") -> None:
        self.db_url, self.redis_url, self.key = db_url, redis_url, key
        self.next_id = 0

    def __enter__(self) -> Floor:
        import psycopg
        import redis

        self.conn = psycopg.connect(self.db_url, autocommit=True)
        self.conn.execute(TABLE)
        self.broker = redis.Redis.from_url(self.redis_url, socket_timeout=None)
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.approval_floor", self.db_url, self.redis_url,
                                      self.key], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the floor's worker did not start")
        return self

    def sample(self) -> float:
        """One decision to `dispatched`, in ms."""
        self.next_id += 1
        run_id = self.next_id
        self.conn.execute("INSERT INTO bench_floor_run (id, status) VALUES (%s, 'waiting')", (run_id,))
        time.sleep(0.05)  # the worker is idle, blocked on the queue
        started = time.time()
        self.conn.execute("UPDATE bench_floor_run SET status = 'queued' WHERE id = %s AND status = 'waiting'",
                          (run_id,))                                                     # the decision
        self.broker.lpush(self.key, run_id)                                              # the resume
        reply = self.broker.brpop([f"{self.key}:done"], timeout=30)
        if reply is None:
            raise RuntimeError("the floor's worker did not answer")
        done_id, stamp = reply[1].decode().split()
        assert int(done_id) == run_id, (done_id, run_id)
        return (float(stamp) - started) * 1000

    def __exit__(self, *exc) -> None:
        self.broker.lpush(self.key, "stop")
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.conn.close()


if __name__ == "__main__":
    serve(*sys.argv[1:4])
