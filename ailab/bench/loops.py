"""The course's one load generator: a closed loop and an open loop over any async sender.

- closed loop: N clients, each sends its next request as soon as its last one is answered.
  Throughput is what the server gives back; it can never exceed what N clients ask for.
- open loop: Poisson arrivals at a target rate. Latency counts from the *intended* send time, so
  when the server stalls, the requests that queue behind it count their wait (a closed loop, or an
  open loop timed from the actual send, would quietly send less and hide it: "coordinated omission").
  How late each request actually left is kept too (send lag): a generator that fell behind is flagged.

Both run on one driver, `run_arrivals` (request i leaves at its arrival time, at most so many in flight), as
does the LLM client's trace (bench/llm.py). A sender is anything with `async send(i) -> status` and `close()`:
an HTTP connection (bench.http), a streamed completion (bench.llm), or a DynamicBatcher driven in-process
(`drive_batcher`). Warm-up requests are sent but not measured.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Sequence

import numpy as np

from ailab.aio import run_sync
from ailab.bench.http import Connection, Target, preflight
from ailab.bench.records import LoadResult, Record


class _Progress:
    """A tqdm bar over wall-clock seconds, only for long runs (or when asked)."""

    def __init__(self, total_s: float, desc: str, enabled: bool | None):
        self.bar, self.shown = None, 0
        if enabled or (enabled is None and total_s >= 20):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=round(total_s), desc=desc, unit="s")

    def update(self, t: float):
        if self.bar is not None and int(t) > self.shown:
            self.bar.update(min(int(t), self.bar.total) - self.shown)
            self.shown = min(int(t), self.bar.total)

    def close(self):
        if self.bar is not None:
            self.bar.close()


async def _ticker(progress: _Progress, t0: float, end: float, hooks=(), stop=None):
    while (now := time.perf_counter() - t0) < end and not (stop is not None and stop.is_set()):
        progress.update(now)
        for hook in hooks:
            hook(now)
        await asyncio.sleep(0.25)
    progress.update(end)


def _check_run(duration_s: float, warmup_s: float) -> None:
    if not (duration_s > 0) or not (warmup_s >= 0):
        raise ValueError(f"duration_s must be > 0 and warmup_s >= 0 (got {duration_s}, {warmup_s})")


def _check_closed(clients, duration_s: float, warmup_s: float) -> None:
    if not isinstance(clients, int) or clients < 1:
        raise ValueError(f"clients must be a whole number >= 1 (got {clients!r})")
    _check_run(duration_s, warmup_s)


def _check_open(rate_rps, duration_s: float, warmup_s: float) -> None:
    if not (isinstance(rate_rps, (int, float)) and rate_rps > 0):
        raise ValueError(f"rate_rps must be a positive number of requests per second (got {rate_rps!r})")
    _check_run(duration_s, warmup_s)


def check_payloads(payloads) -> list:
    if payloads is None:
        return [None]  # GET requests
    if isinstance(payloads, (dict, str, bytes)):
        raise TypeError(
            "payloads is a list of request bodies (one per request, reused in turn); wrap one body as [body]"
        )
    payloads = list(payloads)
    if not payloads:
        raise ValueError("payloads is empty: give at least one request body, or None to send GET requests")
    return payloads


# --------------------------------------------------------------------------- the two loops


async def run_closed(
    make_sender: Callable,
    n_bodies: int,
    clients: int,
    duration_s: float,
    warmup_s: float,
    progress: bool | None = None,
    hooks=(),
    stop=None,
) -> tuple[list[Record], float]:
    """`clients` senders in a closed loop; returns the measured records and the measured span (s).
    `stop` (a threading.Event) ends the run early: each client finishes the request in hand."""
    _check_closed(clients, duration_s, warmup_s)
    end = warmup_s + duration_s
    records: list[Record] = []
    t0 = time.perf_counter()

    async def one_client(k: int):
        sender, i = make_sender(), k
        try:
            while (sent := time.perf_counter() - t0) < end and not (stop is not None and stop.is_set()):
                status = await sender.send(i % n_bodies)
                if sent >= warmup_s:  # warm-up requests are sent, not counted
                    records.append(Record(sent, sent, (time.perf_counter() - t0 - sent) * 1e3, status))
                i += clients
        finally:
            sender.close()

    bar = _Progress(end, f"closed loop x{clients}", progress)
    await asyncio.gather(_ticker(bar, t0, end, hooks, stop), *(one_client(k) for k in range(clients)))
    bar.close()
    last = max((r.done_s for r in records), default=end)
    if stop is not None and stop.is_set():
        return records, max(last - warmup_s, 1e-9)  # the span it ran, not the one planned
    return records, max(last, end) - warmup_s


async def run_open(
    make_sender: Callable,
    n_bodies: int,
    rate_rps: float,
    duration_s: float,
    warmup_s: float,
    seed: int = 0,
    max_in_flight: int = 256,
    progress: bool | None = None,
    hooks=(),
) -> tuple[list[Record], float]:
    """Poisson arrivals at `rate_rps` over at most `max_in_flight` senders; latency from the intended time."""
    _check_open(rate_rps, duration_s, warmup_s)
    end = warmup_s + duration_s
    rng = np.random.default_rng(seed)
    # Exponential gaps between arrivals = a Poisson process (independent users, not a metronome).
    intended = np.cumsum(rng.exponential(1.0 / rate_rps, size=int(rate_rps * end * 1.5) + 16))
    intended = intended[intended < end]
    records: list[Record] = []

    def record(i: int, at: float, sent: float, done: float, status) -> None:
        if at >= warmup_s:
            # From the intended time (a late send counts its wait), never from before the request existed.
            records.append(Record(float(at), sent, (done - min(at, sent)) * 1e3, status))

    bar = _Progress(end, f"open loop {rate_rps:g}/s", progress)
    t0 = time.perf_counter()
    await asyncio.gather(
        _ticker(bar, t0, end, hooks), run_arrivals(make_sender, intended, max_in_flight, record, t0, n_bodies)
    )
    bar.close()
    last = max((r.done_s for r in records), default=end)
    return records, max(last, end) - warmup_s


async def run_arrivals(
    make_sender: Callable,
    arrivals: Sequence[float],
    max_in_flight: int | None,
    record: Callable,
    t0: float,
    n_bodies: int | None = None,
) -> None:
    """The one driver under every load: request i leaves at `arrivals[i]` (s after `t0`, a perf_counter reading)
    or, when `max_in_flight` are out, as soon as one comes back, through an idle sender (a new one only when
    every open one is busy); then `record(i, at, sent, done, status)` with its times in s after t0. Body i is
    `i % n_bodies` (each body in turn), or i itself."""
    slots = asyncio.Semaphore(max_in_flight or max(len(arrivals), 1))
    idle: list = []  # senders not in use; the last one back goes out first, so its connection is warm
    senders = []

    async def one_request(i: int, at: float):
        # An event loop's timers are coarser than perf_counter (uvloop's: 1 ms) and may wake a hair early.
        while (wait := at - (time.perf_counter() - t0)) > 0:
            await asyncio.sleep(wait)
        await slots.acquire()  # waiting for a free slot counts as latency when timed from `at`
        if idle:
            sender = idle.pop()
        else:  # a new connection only when every open one is busy
            sender = make_sender()
            senders.append(sender)
        sent = time.perf_counter() - t0
        try:
            status = await sender.send(i % n_bodies if n_bodies else i)
        finally:
            idle.append(sender)
            slots.release()
        record(i, float(at), sent, time.perf_counter() - t0, status)

    try:
        await asyncio.gather(*(one_request(i, at) for i, at in enumerate(arrivals)))
    finally:
        for s in senders:
            s.close()


# --------------------------------------------------------------------------- over HTTP


def closed_loop(
    url: str,
    payloads: Sequence | None,
    clients: int = 8,
    duration_s: float = 10.0,
    warmup_s: float = 2.0,
    timeout_s: float = 10.0,
    window_s: float = 1.0,
    connect_timeout_s: float = 2.0,
    progress: bool | None = None,
    headers: dict | None = None,
    stop=None,
    _hooks=(),
) -> LoadResult:
    """`clients` concurrent HTTP clients, each sending its next request as soon as the last one is answered.
    `stop`: a threading.Event that ends the run before duration_s (e.g. once an alert under test fired)."""
    payloads = check_payloads(payloads)
    target = Target.make(url, payloads, headers)
    _check_closed(clients, duration_s, warmup_s)

    async def main():
        await preflight(target, connect_timeout_s)
        return await run_closed(
            lambda: Connection(target, timeout_s, connect_timeout_s),
            len(payloads),
            clients,
            duration_s,
            warmup_s,
            progress,
            _hooks,
            stop,
        )

    records, elapsed = run_sync(main)
    return LoadResult("closed", url, clients, None, duration_s, warmup_s, records, elapsed, window_s)


def open_loop(
    url: str,
    payloads: Sequence | None,
    rate_rps: float = 50.0,
    duration_s: float = 10.0,
    warmup_s: float = 2.0,
    seed: int = 0,
    timeout_s: float = 10.0,
    max_in_flight: int = 256,
    window_s: float = 1.0,
    connect_timeout_s: float = 2.0,
    progress: bool | None = None,
    headers: dict | None = None,
    _hooks=(),
) -> LoadResult:
    """Poisson arrivals at `rate_rps` over at most `max_in_flight` connections; each latency counts from
    the request's intended send time, so client-side queueing shows up as latency, never as a lower rate."""
    payloads = check_payloads(payloads)
    target = Target.make(url, payloads, headers)
    _check_open(rate_rps, duration_s, warmup_s)

    async def main():
        await preflight(target, connect_timeout_s)
        return await run_open(
            lambda: Connection(target, timeout_s, connect_timeout_s),
            len(payloads),
            rate_rps,
            duration_s,
            warmup_s,
            seed,
            max_in_flight,
            progress,
            _hooks,
        )

    records, elapsed = run_sync(main)
    return LoadResult("open", url, None, float(rate_rps), duration_s, warmup_s, records, elapsed, window_s)


# --------------------------------------------------------------------------- a batcher, in-process


class _BatcherSender:
    def __init__(self, batcher, items: Sequence, timeout_s: float | None):
        self.batcher, self.items, self.timeout_s = batcher, items, timeout_s

    async def send(self, i: int):
        try:
            await self.batcher.submit(self.items[i], timeout=self.timeout_s)
            return 200
        except Exception as e:  # noqa: BLE001 - counted, not raised: a load test reports errors
            return type(e).__name__

    def close(self):
        pass


async def drive_batcher(
    batcher,
    items: Sequence,
    clients: int,
    duration_s: float,
    warmup_s: float = 0.0,
    timeout_s: float | None = None,
    window_s: float = 1.0,
) -> LoadResult:
    """The same closed loop, with `batcher.submit(item)` in place of an HTTP request (await it inside
    the batcher's event loop). A failed submit is recorded under its exception's name."""
    items = list(items)
    if not items:
        raise ValueError("drive_batcher needs at least one item")
    records, elapsed = await run_closed(
        lambda: _BatcherSender(batcher, items, timeout_s), len(items), clients, duration_s, warmup_s, progress=False
    )
    name = getattr(batcher, "name", "batcher")
    return LoadResult("closed", f"batcher:{name}", clients, None, duration_s, warmup_s, records, elapsed, window_s)
