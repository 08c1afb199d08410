"""The order a worker takes its queues in: `resume` first whenever it holds a message, the others in turn.

A resume is the one step a person just let go (apps.runs.tasks.resume_run: the approved or rejected call), and
that person is waiting to see it happen. kombu's default takes a worker's queues in turn, so under a burst of
runs every other free child took a run's next steps instead, and in a storm of 500 decisions the last approved
calls went out 8-11 s after their decision (bench/load.py). Taken first, a resume waits for the next free child
only. It cannot starve the other queues for long: each resume is one step, and there is one per decision.

Both brokers: `ResumeFirst` is the Redis transport's `queue_order_strategy` (config/settings.py), and
`ResumeFirstCycle` the embedded mode's folder transport's cycle (apps/core/fs_broker.py).
"""

from __future__ import annotations

from kombu.utils.scheduling import FairCycle, round_robin_cycle

RESUME_QUEUE = "resume"


def _resume_first(queue: str) -> bool:
    return queue != RESUME_QUEUE  # sorts False (resume) first; sorting is stable: the others keep their turn


class ResumeFirst(round_robin_cycle):
    """kombu's round robin (the queue just used goes last) with `resume` always asked first: the Redis transport
    sends one BRPOP over the queues in this order, which pops from the first that holds a message."""

    def update(self, it) -> None:
        super().update(it)
        self.items.sort(key=_resume_first)

    def rotate(self, last_used):
        super().rotate(last_used)
        self.items.sort(key=_resume_first)
        return last_used


class ResumeFirstCycle(FairCycle):
    """The virtual transports' turn-taking (kombu's FairCycle) after a look at `resume`."""

    def get(self, callback, **kwargs):
        if RESUME_QUEUE in self.resources:
            try:
                return self.fun(RESUME_QUEUE, callback, **kwargs)
            except self.predicate:
                pass
        return super().get(callback, **kwargs)
