"""Independent wrong answers for ex_reliable_queue, written from labs/4_application/ex_reliable_queue.ipynb's contract alone."""

import time


def claim(r, queue, processing):
    return r.lmove(queue, processing, "RIGHT", "LEFT")


def ack(r, processing, job):
    r.lrem(processing, 1, job)


def reclaim(r, processing, queue):
    moved = 0
    while r.lmove(processing, queue, "LEFT", "RIGHT") is not None:
        moved += 1
    return moved


def claim_newest(r, queue, processing):
    """Takes from the left end, where LPUSH put the jobs."""
    # differs on queue LPUSHed a then b (list [b, a]): claims b instead of a
    return r.lmove(queue, processing, "LEFT", "LEFT")


def claim_appends_to_processing(r, queue, processing):
    """Appends the claimed job to the right end of the processing list."""
    # differs on claiming a then b: processing is [a, b] instead of [b, a]
    return r.lmove(queue, processing, "RIGHT", "RIGHT")


def claim_spins_for_a_second(r, queue, processing):
    """Retries the move for up to a second, so a job that arrives right after is still taken."""
    # differs on an empty queue: about a second of back-to-back LMOVE calls (thousands of round trips, a busy core)
    # instead of one call
    deadline = time.monotonic() + 1.0
    while True:
        job = r.lmove(queue, processing, "RIGHT", "LEFT")
        if job is not None or time.monotonic() >= deadline:
            return job


def ack_from_the_tail(r, processing, job):
    """Removes one copy of the job, searching from the tail."""
    # differs on processing [j, x, j], ack j: leaves [j, x] instead of [x, j]
    r.lrem(processing, -1, job)


def ack_as_text(r, processing, job):
    """Turns the job into text before removing it, since list keys and values are strings."""
    # differs on processing [b"job-1"], ack b"job-1": removes nothing (it looks for "b'job-1'")
    r.lrem(processing, 1, str(job))


def reclaim_oldest_first_moved(r, processing, queue):
    """Moves the oldest claimed job first (from the right end of processing)."""
    # differs on processing [c, b, a] (a claimed first), queue empty: the next claim gives c instead of a
    moved = 0
    while r.lmove(processing, queue, "RIGHT", "RIGHT") is not None:
        moved += 1
    return moved


def reclaim_to_the_back(r, processing, queue):
    """Puts reclaimed jobs back where new jobs go: the left end of the queue."""
    # differs on processing [a] and queue [y, x] (x oldest): the next claim gives x instead of a
    moved = 0
    while r.lmove(processing, queue, "RIGHT", "LEFT") is not None:
        moved += 1
    return moved


def reclaim_returns_depth(r, processing, queue):
    """Returns the queue's length once the jobs are back: how many are now waiting."""
    # differs on processing [a], queue [y, x]: returns 3 instead of 1
    while r.lmove(processing, queue, "LEFT", "RIGHT") is not None:
        pass
    return r.llen(queue)


RIGHT = {"claim": claim, "ack": ack, "reclaim": reclaim}
WRONG = [
    ("claim", claim_newest, "order"),
    ("claim", claim_appends_to_processing, "misread prose"),
    ("claim", claim_spins_for_a_second, "resources: busy polling"),
    ("ack", ack_from_the_tail, "order/boundaries"),
    ("ack", ack_as_text, "parsing"),
    ("reclaim", reclaim_oldest_first_moved, "order"),
    ("reclaim", reclaim_to_the_back, "misread prose"),
    ("reclaim", reclaim_returns_depth, "units: wrong count"),
]
