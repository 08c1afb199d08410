"""Room a benchmark makes for itself on a shared Postgres and Redis, and gives back: never anything it did not make.

- `database(admin_url, stem)`: a database named `<stem>_<pid>_<time>`, created (CREATE fails rather than reuse
  a name someone else holds) and dropped when the block ends.
- `kept_database(admin_url, name)`: a database a benchmark keeps between runs on purpose (a large load takes
  minutes: bench/history.py and bench/pages.py with `--reuse`). It is created with a comment that marks it as the
  benchmark's, and reused only while that mark is there: a database of that name without it is someone else's,
  and the benchmark stops rather than touch it.
- `redis_db(url)`: a Redis database number, from 12 down to 1, that is empty when looked at (13 and 14 are left
  alone: older copies of these benchmarks flush them without looking); it is marked as
  this benchmark's with one key set only if absent, and kept only if that key is then the only one in it. At the
  end it is flushed only if the mark is still this benchmark's (so a database someone else was using is never
  taken, and one someone else took meanwhile is never flushed).
- `folder(prefix)`: a new folder under the checkout's var/bench/ (made first: a fresh checkout has none); the
  caller removes it.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse, urlunparse

MARK = "airlock-bench:owner"
WORK = Path(__file__).resolve().parent.parent / "var" / "bench"


def folder(prefix: str) -> Path:
    WORK.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=WORK))


def with_path(url: str, path: str) -> str:
    return urlunparse(urlparse(url)._replace(path=path))


@contextmanager
def database(admin_url: str, stem: str) -> Iterator[str]:
    """Yields the URL of a new database on `admin_url`'s server; drops it afterwards."""
    import psycopg

    name = f"{stem}_{os.getpid()}_{int(time.time())}"
    admin = with_path(admin_url, "/postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_path(admin_url, f"/{name}")
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


KEPT = "kept by Airlock's benchmarks (bench/scratch.py); they reuse and may replace it"


def kept_database(admin_url: str, name: str) -> str:
    """The URL of database `name` on `admin_url`'s server, made and marked here if absent, reused if marked.
    Raises SystemExit, naming it, when a database of that name exists without the mark."""
    import psycopg
    from psycopg import sql

    admin = with_path(admin_url, "/postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        found = conn.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
                             [name]).fetchone()
        if found is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(name), sql.Literal(KEPT)))
        elif found[0] != KEPT:
            raise SystemExit(f"A database named {name} exists and was not made by these benchmarks: it is left alone. "
                             f"Run without --reuse (a database of its own, dropped after), or drop it yourself.")
    return with_path(admin_url, f"/{name}")


@contextmanager
def redis_db(url: str) -> Iterator[str]:
    """Yields `url` pointed at an empty Redis database this benchmark marked as its own; flushes it afterwards."""
    import redis

    token = f"{os.getpid()}:{uuid.uuid4().hex}"
    for number in range(12, 0, -1):
        client = redis.Redis.from_url(with_path(url, f"/{number}"))
        if client.dbsize() == 0 and client.set(MARK, token, nx=True):
            if client.dbsize() == 1:
                break
            if client.get(MARK) == token.encode():  # someone else writes here too: leave it to them
                client.delete(MARK)
    else:
        raise RuntimeError(f"no empty Redis database (1-12) on {url}; the benchmark uses one of its own")
    try:
        yield with_path(url, f"/{number}")
    finally:
        if client.get(MARK) == token.encode():
            client.flushdb()
