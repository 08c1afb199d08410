"""`python -m config.worker [options]`: Airlock's Celery worker, started without the rest of Celery's command line.

It takes the options of `celery -A config worker` (`--concurrency`, `-l`, `-n`, `-Q`, ...) and consumes
config.celery.WORKER_QUEUES when no `-Q` is given. `celery -A config worker` still works; this is the one the
compose file, `runall` and the docs start, for two reasons:

- Memory. Celery's umbrella command imports every subcommand before it starts the worker, among them the
  interactive `celery amqp` shell (click-repl, prompt_toolkit, pygments, wcwidth): ~7 MB that the worker never
  runs and that every prefork child inherits. Here only the `worker` command is imported.
- The queues. A worker started without `-Q` consumes only `default`; one that forgets `resume` leaves every
  decision waiting. Here the default is every queue a worker should consume.
"""

from __future__ import annotations

import sys


def worker_args(argv: list[str]) -> list[str]:
    """The `worker` command's arguments: `argv`, with Airlock's queues unless it names its own."""
    from config.celery import WORKER_QUEUES

    names_queues = any(arg in ("-Q", "--queues") or arg.startswith(("-Q", "--queues=")) for arg in argv)
    return argv if names_queues else ["-Q", WORKER_QUEUES, *argv]


def main(argv: list[str] | None = None) -> None:
    # Celery's command line colours the JSON of its `inspect` commands with pygments when it is installed: a test
    # tool here (pytest's), not in requirements.lock. The worker prints no such JSON, and without this the worker of
    # a development checkout would carry ~1.5 MB the production one does not. (None in sys.modules makes that
    # import fail, which Celery handles.)
    sys.modules.setdefault("pygments", None)
    # The `worker` command alone, given the context Celery's umbrella command would build for `-A config`
    # (this app has no user or preload options for that command to add).
    from celery.bin.base import CLIContext
    from celery.bin.worker import worker

    from config.celery import app

    args = worker_args(sys.argv[1:] if argv is None else argv)
    worker.main(args=args, prog_name="python -m config.worker",
                obj=CLIContext(app=app, no_color=None, workdir=None, quiet=False))


if __name__ == "__main__":
    main()
