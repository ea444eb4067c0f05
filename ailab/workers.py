"""Queue-decoupled inference: clients push jobs to a Redis list, a worker pops them in batches.

    client --LPUSH ailab:jobs--> [Redis list] --BRPOP/RPOP--> BatchWorker --model(batch)--> results
    client <--BLPOP ailab:result:<id>--------------------------------------- RPUSH + EXPIRE

Why decouple: the front end answers "accepted" at once and never holds the model; a burst waits in
Redis instead of in server memory; workers can be added, removed or restarted (on other machines)
without losing queued jobs; and a worker sees many requests at once, so it can batch them.

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

QUEUE = "ailab:jobs"
RESULT_PREFIX = "ailab:result:"
CACHE_PREFIX = "ailab:cache:"


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
    """Pops jobs from the Redis list in batches (up to `max_batch`, waiting at most `max_wait_ms` after the
    first) and runs `predict(texts) -> list[dict]` once per batch.

    A batch whose `predict` raises is retried one job at a time, so one bad input fails alone.
    """

    redis_client: object
    predict: Callable[[list[str]], list[dict]]
    max_batch: int = 32
    max_wait_ms: float = 10.0
    cache: ResultCache | None = None
    queue: str = QUEUE
    result_ttl_s: int = 60
    batch_sizes: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.max_batch < 1 or self.max_wait_ms < 0:
            raise ValueError(f"max_batch must be >= 1 and max_wait_ms >= 0 (got {self.max_batch}, {self.max_wait_ms})")

    def collect(self, block_s: float = 0.5) -> list[dict]:
        """One batch of jobs: block for the first, then take what arrives within max_wait_ms."""
        first = self.r.brpop(self.queue, timeout=block_s)
        if first is None:
            return []
        jobs = [json.loads(first[1])]
        deadline = time.perf_counter() + self.max_wait_ms / 1e3
        while len(jobs) < self.max_batch:
            more = self.r.rpop(self.queue, self.max_batch - len(jobs))  # RPOP with a count: one round trip
            if more:
                jobs += [json.loads(m) for m in more]
            elif time.perf_counter() >= deadline:
                break
            else:
                time.sleep(0.0005)
        return jobs

    @property
    def r(self):
        return self.redis_client

    def run_batch(self, jobs: list[dict]) -> None:
        texts = [j["text"] for j in jobs]
        try:
            results = list(self.predict(texts))
            if len(results) != len(texts):
                raise RuntimeError(f"predict returned {len(results)} results for {len(texts)} texts")
        except Exception:  # noqa: BLE001 - isolate: find the bad input(s) one at a time
            results = []
            for t in texts:
                try:
                    results.append(self.predict([t])[0])
                except Exception as e:  # noqa: BLE001
                    results.append({"error": f"{type(e).__name__}: {e}"})
        pipe = self.r.pipeline()
        for job, res in zip(jobs, results):
            key = RESULT_PREFIX + job["id"]
            pipe.rpush(key, json.dumps({**res, "batch_size": len(jobs)}))
            pipe.expire(key, self.result_ttl_s)  # an abandoned result does not stay forever
        if self.cache is not None:
            self.cache.put_many(texts, results, pipe)
        pipe.execute()
        self.batch_sizes.append(len(jobs))

    def run_forever(self) -> None:
        while not self._stop.is_set():
            jobs = self.collect()
            if jobs:
                self.run_batch(jobs)

    def start(self) -> "BatchWorker":
        """Run in a background thread (in production: its own process, or its own machine)."""
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError("this worker is already running")
        self._stop.clear()
        self._thread = threading.Thread(target=self.run_forever, name="ailab-batch-worker", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)


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
        got = self.redis_client.blpop(RESULT_PREFIX + job_id, timeout=timeout_s)
        if got is None:
            depth = self.redis_client.llen(self.queue)
            raise TimeoutError(f"no result for job {job_id} within {timeout_s:g} s ({depth} job(s) waiting in "
                               f"{self.queue!r}): is a worker running?")
        return json.loads(got[1])

    def predict(self, text: str, timeout_s: float = 10.0) -> dict:
        """Cached answer if there is one (marked cached=True), else queue the job and wait for it."""
        _check_text(text)
        if self.cache is not None and (hit := self.cache.get(text)) is not None:
            return {**hit, "cached": True}
        return {**self.result(self.submit(text), timeout_s), "cached": False}

    def depth(self) -> int:
        return int(self.redis_client.llen(self.queue))


def classifier_predict(model, encoder, max_length: int = 64) -> Callable[[list[str]], list[dict]]:
    """predict(texts) for a (input_ids, attention_mask) -> (B, 2) logits classifier, one forward per batch."""
    import torch

    @torch.inference_mode()
    def predict(texts: list[str]) -> list[dict]:
        enc = encoder.tokenize(texts, max_length)
        probs = torch.softmax(model(**enc), dim=-1)  # (B, 2)
        return [{"label": int(p.argmax()), "p_positive": round(float(p[1]), 4)} for p in probs]

    return predict
