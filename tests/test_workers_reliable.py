"""No job is lost when a worker dies, and no job is answered twice: real redis-server, a worker in its own
process killed (SIGKILL) or frozen (SIGSTOP) while it holds a batch, a second worker that reclaims it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ailab import services
from ailab.workers import (
    DONE_PREFIX,
    RESULT_PREFIX,
    BatchWorker,
    QueueClient,
    heartbeat_key,
    processing_key,
    workers_key,
)

ROOT = Path(__file__).resolve().parents[1]
TTL_S = 2.0  # heartbeat TTL: a worker silent this long is dead; short so the test is quick

# Worker "A" in its own process. Its model answers the first batch after `first_s`, every later one after
# `later_s`: the test kills or freezes it while it holds a batch. It reports its batches and dropped answers.
WORKER_A = textwrap.dedent("""
    import json, sys, time, redis
    from ailab.workers import BatchWorker
    port, first_s, later_s, ttl_s = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    r = redis.Redis(host="127.0.0.1", port=port)
    calls = []
    def model(texts):
        calls.append(len(texts))
        time.sleep(first_s if len(calls) == 1 else later_s)
        return [{"label": len(t) % 2, "by": "A"} for t in texts]
    w = BatchWorker(r, model, max_batch=8, max_wait_ms=20, worker_id="A", heartbeat_ttl_s=ttl_s).start()
    while True:
        time.sleep(0.05)
        r.set("test:A:report", json.dumps({"batches": len(w.batch_sizes), "dropped": w.duplicates_dropped}))
""")


@pytest.fixture(scope="module")
def redis_server():
    with services.start_redis() as server:
        yield server


@pytest.fixture
def r(redis_server):
    client = redis_server.client()
    client.flushall()
    return client


@pytest.fixture
def worker_a(redis_server):
    """start(first_s, later_s) -> the worker-A process; it is killed at the end whatever happened."""
    procs = []

    def start(first_s: float, later_s: float) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        p = subprocess.Popen(
            [sys.executable, "-c", WORKER_A, str(redis_server.port), str(first_s), str(later_s), str(TTL_S)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()
        p.wait(10)


def wait_for(cond, what: str, timeout_s: float = 30.0, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"worker A exited ({proc.returncode}) before {what}: {proc.stderr.read().decode()}")
        if got := cond():
            return got
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def model_b(texts):
    return [{"label": len(t) % 2, "by": "B"} for t in texts]


def answers_of(r, client, ids):
    """Each job's answer; then prove none has a second answer waiting behind it."""
    got = {i: client.result(i, timeout_s=30) for i in ids}
    assert all(r.llen(RESULT_PREFIX + i) == 0 for i in ids), "a job was answered twice"
    return got


def test_a_killed_worker_loses_no_job(r, worker_a):
    client = QueueClient(r)
    texts = [f"review {'x' * i}" for i in range(24)]
    ids = [client.submit(t) for t in texts]  # 24 jobs = 3 batches of 8
    a = worker_a(first_s=0.1, later_s=60)  # answers batch 1, then hangs inside batch 2 until killed
    done = lambda: r.exists(*[DONE_PREFIX + i for i in ids])  # noqa: E731
    wait_for(lambda: done() == 8 and r.llen(processing_key("A")) == 8, "A to answer batch 1 and hold batch 2", proc=a)
    a.kill()  # SIGKILL: no cleanup, no finally, no goodbye
    a.wait(10)
    held = r.llen(processing_key("A"))
    assert held == 8 and r.llen("ailab:jobs") == 8, "A died holding a whole batch; the third waits in the queue"
    assert r.exists(heartbeat_key("A")), "A's heartbeat outlives it by up to its TTL"

    t0 = time.perf_counter()
    b = BatchWorker(r, model_b, max_batch=8, max_wait_ms=20, worker_id="B", heartbeat_ttl_s=TTL_S).start()
    try:
        got = answers_of(r, client, ids)
    finally:
        b.stop()
    recovered_s = time.perf_counter() - t0

    assert [g["label"] for g in got.values()] == [len(t) % 2 for t in texts]
    by = [got[i]["by"] for i in ids]
    assert by == ["A"] * 8 + ["B"] * 16, f"batch 1 answered by A, the rest by B after the reclaim: {by}"
    assert sum(b.batch_sizes) == 16 and b.duplicates_dropped == 0, "B ran only the 16 jobs A had not answered"
    assert r.llen("ailab:jobs") == 0 and not r.exists(processing_key("A"), processing_key("B"))
    assert r.smembers(workers_key()) == set(), "A was deregistered by the reclaim, B by its stop()"
    assert recovered_s < 25, f"recovery took {recovered_s:.1f} s (heartbeat TTL {TTL_S} s)"
    print(f"24 jobs, {held} held by A at SIGKILL, 0 lost, 0 duplicated; B finished in {recovered_s:.1f} s")


def test_a_frozen_worker_that_wakes_up_cannot_answer_twice(r, worker_a):
    """Only slow, not dead: A is frozen past its heartbeat TTL, B reprocesses its batch, then A wakes and
    finishes the same batch. The SET NX on delivery drops A's late answers; the client sees B's only."""
    client = QueueClient(r)
    texts = [f"slow {'y' * i}" for i in range(8)]
    ids = [client.submit(t) for t in texts]
    a = worker_a(first_s=3.0, later_s=3.0)
    wait_for(lambda: r.llen(processing_key("A")) == 8, "A to take the batch", proc=a)
    a.send_signal(signal.SIGSTOP)
    wait_for(lambda: not r.exists(heartbeat_key("A")), "A's heartbeat to expire", timeout_s=TTL_S + 20)

    b = BatchWorker(r, model_b, max_batch=8, max_wait_ms=20, worker_id="B", heartbeat_ttl_s=TTL_S).start()
    try:
        wait_for(lambda: r.exists(*[DONE_PREFIX + i for i in ids]) == 8, "B to answer the reclaimed batch")
        a.send_signal(signal.SIGCONT)  # A wakes inside its batch and finishes it
        report = lambda: json.loads(r.get("test:A:report") or '{"batches": 0}')  # noqa: E731
        wait_for(lambda: report()["batches"] == 1, "A to finish its late batch", proc=a)
        got = answers_of(r, client, ids)
    finally:
        b.stop()
    assert report()["dropped"] == 8 and b.duplicates_dropped == 0, "A's 8 late answers were dropped, B's kept"
    assert [got[i]["by"] for i in ids] == ["B"] * 8, "the client got B's answers and never A's late ones"
    assert [got[i]["label"] for i in ids] == [len(t) % 2 for t in texts]
    assert not r.exists(processing_key("A")), "A's late acknowledgement found nothing left to remove"
