"""Queue-decoupled inference: clients push jobs to a Redis list, workers take them in batches, and no job
is lost when a worker dies.

    client --LPUSH ailab:jobs--> [queue] --BLMOVE--> [ailab:jobs:processing:<worker>] --> BatchWorker
    client <--BLPOP ailab:result:<id>-- deliver (SET NX ailab:done:<id>, RPUSH) + ack (LREM) in one script

Why decouple: the front end answers "accepted" at once and never holds the model; a burst waits in
Redis instead of in server memory; workers can be added, removed or restarted (on other machines)
without losing queued jobs; and a worker sees many requests at once, so it can batch them.

Why no job is lost: a worker never *removes* a job it takes, it *moves* it (BLMOVE/LMOVE, atomic) into its
own processing list, and removes it from there (LREM, the acknowledgement) only in the same server-side
script that stores the answer. Each worker refreshes a heartbeat key with a TTL from its own thread; when
a worker dies (crash, SIGKILL, lost machine) its heartbeat expires and any live worker's `reclaim()` moves
its processing list back onto the queue. We use lists rather than Redis Streams (consumer groups, XACK,
XAUTOCLAIM) because the queue stays the plain list the client LPUSHes to and LLEN measures, and the whole
pattern is three small commands you can watch in redis-cli; Streams would also give per-message delivery
counts and history, at the price of a consumer-group lifecycle to manage.

Why answers are delivered at most once: a reclaimed job may be processed twice (its worker was only slow,
not dead, and still finishes). Delivery is `SET ailab:done:<id> NX` first: only the first worker to finish
a job pushes its answer; a later one only acknowledges. So a client never gets a second, different answer.

`ResultCache` keeps answers for repeated inputs in Redis (keyed by a hash of model id + text, never
the raw text), so a repeat skips the queue and the model entirely.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ailab.batching import run_isolated

QUEUE = "ailab:jobs"
RESULT_PREFIX = "ailab:result:"
DONE_PREFIX = "ailab:done:"  # SET NX marker: this job's answer has been delivered
CACHE_PREFIX = "ailab:cache:"

# Take up to ARGV[1] more jobs, oldest first, into the worker's processing list: one round trip, atomic.
_TAKE = """
local out = {}
for i = 1, tonumber(ARGV[1]) do
  local job = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  if not job then break end
  out[#out + 1] = job
end
return out
"""

# Deliver and acknowledge a batch atomically. KEYS = processing list, then (done marker, result list) per job;
# ARGV = result ttl, done ttl, then (raw job, answer) per job. Returns how many answers were delivered.
_DELIVER = """
local delivered = 0
for i = 1, (#KEYS - 1) / 2 do
  local done, res = KEYS[2 * i], KEYS[2 * i + 1]
  if redis.call('SET', done, '1', 'NX', 'EX', ARGV[2]) then  -- first to finish this job: deliver
    redis.call('RPUSH', res, ARGV[2 * i + 2])
    redis.call('EXPIRE', res, ARGV[1])
    delivered = delivered + 1
  end
  redis.call('LREM', KEYS[1], 1, ARGV[2 * i + 1])             -- ack: the job leaves the processing list
end
return delivered
"""

# Put back what a dead worker held (KEYS: heartbeat, processing list, queue, worker set; ARGV: worker id).
# Its oldest job goes to the queue's consuming end, so reclaimed jobs are taken next, in their old order.
_RECLAIM = """
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
local n = 0
while redis.call('LMOVE', KEYS[2], KEYS[3], 'LEFT', 'RIGHT') do n = n + 1 end
redis.call('SREM', KEYS[4], ARGV[1])
return n
"""


def processing_key(worker_id: str, queue: str = QUEUE) -> str:
    return f"{queue}:processing:{worker_id}"


def heartbeat_key(worker_id: str, queue: str = QUEUE) -> str:
    return f"{queue}:heartbeat:{worker_id}"


def workers_key(queue: str = QUEUE) -> str:
    return f"{queue}:workers"


def reclaim(redis_client, queue: str = QUEUE) -> dict[str, int]:
    """Move every dead worker's processing list back onto the queue; {worker id: jobs put back}.

    A worker is dead when its heartbeat key has expired. Safe to run from many workers at once: each
    move is atomic, so a job goes back once; a worker that was only slow finds its jobs gone and, thanks
    to the SET NX on delivery, cannot deliver a second answer.
    """
    script, back = redis_client.register_script(_RECLAIM), {}
    for wid in redis_client.smembers(workers_key(queue)):
        wid = wid.decode() if isinstance(wid, bytes) else wid
        n = script(keys=[heartbeat_key(wid, queue), processing_key(wid, queue), queue, workers_key(queue)], args=[wid])
        if n >= 0:
            back[wid] = int(n)
    return back


def _check_text(text) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("text is empty; send at least one non-space character")
    return text


class ResultCache:
    """Answers for repeated inputs, in Redis with a time-to-live. Keys hash the text (no raw input)."""

    def __init__(self, redis_client, model_id: str, ttl_s: int = 300):
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0 seconds (got {ttl_s})")
        self.r, self.model_id, self.ttl_s = redis_client, model_id, int(ttl_s)

    def key(self, text: str) -> str:
        # The model id is part of the key: a new model must not serve the old model's answers.
        return CACHE_PREFIX + hashlib.sha256(f"{self.model_id}\x00{text}".encode()).hexdigest()

    def get(self, text: str) -> dict | None:
        raw = self.r.get(self.key(text))
        return json.loads(raw) if raw is not None else None

    def put_many(self, texts: Sequence[str], results: Sequence[dict], pipe=None) -> None:
        p = pipe if pipe is not None else self.r.pipeline()
        for text, res in zip(texts, results):
            if "error" not in res:  # never cache a failure
                p.set(self.key(text), json.dumps(res), ex=self.ttl_s)
        if pipe is None:
            p.execute()


@dataclass
class BatchWorker:
    """Takes jobs from the Redis list in batches (up to `max_batch`, waiting at most `max_wait_ms` after the
    first) and runs `predict(texts)` once per batch: one JSON-able answer per text (the course's predictor,
    ailab.server.sentiment_predictor, answers a TextLabel each) or an exception for that text alone.

    A batch whose `predict` raises is retried one job at a time, so one bad input fails alone. Jobs wait
    in this worker's processing list until their answers are stored; if the worker dies first, its
    heartbeat (refreshed every `heartbeat_ttl_s / 3` by `start()`'s thread, and by each `collect()`)
    expires and another worker's `reclaim()` puts them back on the queue.
    """

    redis_client: object
    predict: Callable[[list[str]], list[dict]]
    max_batch: int = 32
    max_wait_ms: float = 10.0
    cache: ResultCache | None = None
    queue: str = QUEUE
    result_ttl_s: int = 60
    worker_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    heartbeat_ttl_s: float = 10.0  # a worker silent this long is dead; longer than any pause of a live one
    done_ttl_s: int = 3600  # how long a second delivery of the same job is refused
    batch_sizes: list[int] = field(default_factory=list)
    duplicates_dropped: int = 0  # answers not delivered because another worker delivered that job first
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _beat_thread: threading.Thread | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.max_batch < 1 or self.max_wait_ms < 0:
            raise ValueError(f"max_batch must be >= 1 and max_wait_ms >= 0 (got {self.max_batch}, {self.max_wait_ms})")
        if self.heartbeat_ttl_s <= 0:
            raise ValueError(f"heartbeat_ttl_s must be > 0 seconds (got {self.heartbeat_ttl_s})")
        self.processing = processing_key(self.worker_id, self.queue)
        self._take = self.r.register_script(_TAKE)
        self._deliver = self.r.register_script(_DELIVER)

    @property
    def r(self):
        return self.redis_client

    def beat(self) -> None:
        """I am alive: refresh the heartbeat key and make sure reclaimers know this worker."""
        p = self.r.pipeline()
        p.set(heartbeat_key(self.worker_id, self.queue), "1", px=int(self.heartbeat_ttl_s * 1e3))
        p.sadd(workers_key(self.queue), self.worker_id)
        p.execute()

    def collect(self, block_s: float = 0.5) -> list[dict]:
        """One batch of jobs: block for the first, then take what arrives within max_wait_ms.

        Jobs are moved (not popped) into this worker's processing list, so a crash cannot lose them.
        """
        self.beat()  # registered before it holds anything
        first = self.r.blmove(self.queue, self.processing, block_s, src="RIGHT", dest="LEFT")
        if first is None:
            return []
        raws = [first]
        deadline = time.perf_counter() + self.max_wait_ms / 1e3
        while len(raws) < self.max_batch:
            more = self._take(keys=[self.queue, self.processing], args=[self.max_batch - len(raws)])
            if more:
                raws += more
            elif time.perf_counter() >= deadline:
                break
            else:
                time.sleep(0.0005)
        return [{**json.loads(raw), "_raw": raw} for raw in raws]  # _raw: the exact bytes to acknowledge

    def run_batch(self, jobs: list[dict]) -> int:
        """Run one batch, store its answers and acknowledge it; returns how many answers were delivered."""
        texts = [j["text"] for j in jobs]
        # One bad text must not fail the jobs that shared its batch: the batcher's bisection finds it.
        outcomes, _ = run_isolated(self.predict, texts)
        results = [r if ok else {"error": f"{type(r).__name__}: {r}"} for ok, r in outcomes]
        keys, args = [self.processing], [int(self.result_ttl_s), int(self.done_ttl_s)]
        for job, res in zip(jobs, results):
            keys += [DONE_PREFIX + job["id"], RESULT_PREFIX + job["id"]]
            raw = job.get("_raw") or json.dumps({k: v for k, v in job.items() if k != "_raw"})
            args += [raw, json.dumps({**res, "batch_size": len(jobs)})]
        pipe = self.r.pipeline()
        if self.cache is not None:
            self.cache.put_many(texts, results, pipe)
        self._deliver(keys=keys, args=args, client=pipe)
        delivered = int(pipe.execute()[-1])
        self.duplicates_dropped += len(jobs) - delivered
        self.batch_sizes.append(len(jobs))
        return delivered

    def held(self) -> int:
        """Jobs this worker has taken and not yet acknowledged."""
        return int(self.r.llen(self.processing))

    def run_forever(self) -> None:
        next_reclaim = 0.0
        while not self._stop.is_set():
            if time.monotonic() >= next_reclaim:  # any live worker puts back what dead ones held
                reclaim(self.r, self.queue)
                next_reclaim = time.monotonic() + self.heartbeat_ttl_s / 2
            jobs = self.collect()
            if jobs:
                self.run_batch(jobs)

    def _beat_forever(self) -> None:
        # Its own thread, so a long predict() does not look like death. Errors are retried: a missed beat
        # at worst lets another worker reprocess our jobs, and the SET NX keeps that from double-answering.
        while not self._stop.wait(self.heartbeat_ttl_s / 3):
            try:
                self.beat()
            except Exception:  # noqa: BLE001
                pass

    def start(self) -> "BatchWorker":
        """Run in a background thread (in production: its own process, or its own machine)."""
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError("this worker is already running")
        self._stop.clear()
        self.beat()
        self._beat_thread = threading.Thread(target=self._beat_forever, name="ailab-heartbeat", daemon=True)
        self._thread = threading.Thread(target=self.run_forever, name="ailab-batch-worker", daemon=True)
        self._beat_thread.start()
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Finish the batch in hand, then leave: anything still held goes back on the queue at once."""
        self._stop.set()
        for t in (self._thread, self._beat_thread):
            if t is not None:
                t.join(timeout_s)
        self.r.delete(heartbeat_key(self.worker_id, self.queue))
        reclaim(self.r, self.queue)  # our heartbeat is gone, so this also deregisters us


@dataclass
class QueueClient:
    """The front end's side: submit jobs, wait for results, consult the cache first."""

    redis_client: object
    cache: ResultCache | None = None
    queue: str = QUEUE

    def submit(self, text: str) -> str:
        """Queue one job and return its id at once (the caller is not blocked by the model)."""
        job_id = uuid.uuid4().hex
        self.redis_client.lpush(self.queue, json.dumps({"id": job_id, "text": _check_text(text)}))
        return job_id

    def result(self, job_id: str, timeout_s: float = 10.0) -> dict:
        deadline = time.monotonic() + timeout_s
        # Wait in slices shorter than the client's socket timeout (redis-py's default is 5 s): one long BLPOP
        # would fail on the socket instead of answering. Never 0 s: to Redis that means "forever".
        pool = getattr(self.redis_client, "connection_pool", None)
        sock_s = (pool.connection_kwargs.get("socket_timeout") if pool is not None else None) or 2.0
        while (left := deadline - time.monotonic()) > 0:
            got = self.redis_client.blpop(RESULT_PREFIX + job_id, timeout=max(0.01, min(left, 1.0, sock_s / 2)))
            if got is not None:
                return json.loads(got[1])
        depth = self.redis_client.llen(self.queue)
        raise TimeoutError(
            f"no result for job {job_id} within {timeout_s:g} s ({depth} job(s) waiting in "
            f"{self.queue!r}): is a worker running?"
        )

    def predict(self, text: str, timeout_s: float = 10.0) -> dict:
        """Cached answer if there is one (marked cached=True), else queue the job and wait for it."""
        _check_text(text)
        if self.cache is not None and (hit := self.cache.get(text)) is not None:
            return {**hit, "cached": True}
        return {**self.result(self.submit(text), timeout_s), "cached": False}

    def depth(self) -> int:
        return int(self.redis_client.llen(self.queue))
