"""Load on an LLM server through OpenAI's streamed completions, measured as `vllm bench serve` measures it.

    trace = make_trace(800, prompt_bytes=60, output_tokens=32)           # ailab.traces: one trace for every target
    result = serve_bench(url, model, trace, max_concurrency=16)           # flat out: 16 requests in flight
    result = serve_bench(url, model, trace, request_rate=20.0)            # Poisson arrivals at 20/s
    result.summary(slo={"ttft": 200, "tpot": 20})                         # vLLM's names and definitions

Each request streams (`stream_options.include_usage`): the time to its first chunk with text is its TTFT, the
gap between two such chunks one ITL, its end-to-end latency the time to its last chunk, its TPOT
(e2e - TTFT) / (output tokens - 1), the output tokens the server's own usage count. Goodput counts the
requests that met every SLO given. Any server that speaks the API works: ailab's, vLLM's.

The client is raw asyncio (as bench/http.py, whose Target it reuses), so that on a 2-core machine it takes as
little of the CPU the server needs as it can, and it runs on the load generator's one driver (loops.run_arrivals):
each request leaves at its arrival, and is timed from when it was sent, as vLLM's client times it.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ailab.aio import run_sync
from ailab.bench.http import Connection, Target, preflight
from ailab.bench.loops import run_arrivals
from ailab.traces import TraceRequest, with_arrivals


@dataclass
class GenRecord:
    """One request: when it was sent (s after the run started), its status, and its timings (s)."""

    sent_s: float
    status: int | str = "closed"
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.ttft_s is not None

    @property
    def tpot_s(self) -> float:
        """vLLM's: 0 for a one-token answer (it then meets any TPOT SLO)."""
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1) if self.output_tokens > 1 else 0.0


class _SSE:
    """Events from a chunked HTTP body as it arrives (the server frames each event with a blank line)."""

    def __init__(self):
        self.buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        *events, self.buf = self.buf.split(b"\n\n")
        return [e[6:] for e in events if e.startswith(b"data: ")]


class StreamConnection(Connection):
    """A keep-alive connection that streams one completion at a time and times its chunks."""

    def __init__(self, target: Target, timeout_s: float, connect_timeout_s: float, t0: float = 0.0):
        super().__init__(target, timeout_s, connect_timeout_s)
        self.t0, self.records = t0, []  # the run's clock origin; what this connection streamed, in order

    async def send(self, i: int):
        """The load generator's sender protocol: stream completion i, keep its GenRecord, return its status."""
        record = GenRecord(time.perf_counter() - self.t0)
        await self.stream(i, record, self.t0)
        self.records.append((i, record))
        return record.status

    async def stream(self, i: int, record: GenRecord, t0: float) -> None:
        if self.writer is None:
            try:
                await self._open()
            except (OSError, asyncio.TimeoutError):
                record.status = "connect_error"
                return
        try:
            await asyncio.wait_for(self._exchange_stream(i, record, t0), self.timeout_s)
        except asyncio.TimeoutError:
            self.close()
            record.status = "timeout"
        except (asyncio.IncompleteReadError, ConnectionError):
            self.close()
            record.status = "closed"
        except (OSError, ValueError, asyncio.LimitOverrunError) as e:
            self.close()
            record.status = type(e).__name__

    async def _exchange_stream(self, i: int, record: GenRecord, t0: float) -> None:
        self.writer.write(self.target.heads[i] + self.target.bodies[i])
        header = await self.reader.readuntil(b"\r\n\r\n")
        status = int(header[9:12])
        lower = header.lower()
        if b"transfer-encoding: chunked" not in lower:  # an error answer: one body, no stream
            length = next((int(line[15:]) for line in lower.split(b"\r\n") if line.startswith(b"content-length:")), 0)
            await self.reader.readexactly(length)
            record.status = status
            if b"connection: close" in lower:
                self.close()
            return
        sse, last = _SSE(), None
        while size := int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16):
            data = await self.reader.readexactly(size + 2)
            for event in sse.feed(data[:-2]):
                if event == b"[DONE]":
                    continue
                body = json.loads(event)
                if body.get("choices"):
                    now = time.perf_counter() - t0
                    if record.ttft_s is None:
                        record.ttft_s = now - record.sent_s
                    else:
                        record.itl_s.append(now - last)
                    last = now
                elif body.get("usage"):
                    record.output_tokens = body["usage"]["completion_tokens"]
                    record.prompt_tokens = body["usage"]["prompt_tokens"]
                elif "error" in body:
                    status = "stream_error"
        await self.reader.readuntil(b"\r\n")
        record.status = status
        if last is not None:
            record.e2e_s = last - record.sent_s


@dataclass
class ServeResult:
    """Every request of one run (failures included) and the span it took."""

    records: list[GenRecord]
    duration_s: float
    max_concurrency: int | None
    request_rate: float | None

    def summary(self, slo: dict | None = None) -> dict:
        """The figures `vllm bench serve` prints, by its names: throughput, and mean / median / p99 of TTFT, TPOT,
        ITL and end-to-end latency in ms; goodput with `slo` ({"ttft": ms, "tpot": ms, "e2el": ms})."""
        ok = [r for r in self.records if r.ok]
        out = {
            "completed": len(ok),
            "failed": len(self.records) - len(ok),
            "duration_s": round(self.duration_s, 3),
            "max_concurrency": self.max_concurrency,
            "request_rate": self.request_rate,
            "request_throughput": len(ok) / self.duration_s,
            "output_throughput": sum(r.output_tokens for r in ok) / self.duration_s,
            "total_token_throughput": sum(r.output_tokens + r.prompt_tokens for r in ok) / self.duration_s,
        }
        series = {
            "ttft": [r.ttft_s for r in ok],
            "tpot": [r.tpot_s for r in ok if r.output_tokens > 1],
            "itl": [x for r in ok for x in r.itl_s],
            "e2el": [r.e2e_s for r in ok],
        }
        for name, xs in series.items():
            ms = np.asarray(xs, float) * 1e3
            for stat, f in (("mean", np.mean), ("median", np.median), ("p99", lambda a: np.percentile(a, 99))):
                out[f"{stat}_{name}_ms"] = float(f(ms)) if ms.size else math.nan
        if slo:
            unknown = set(slo) - {"ttft", "tpot", "e2el"}
            if unknown:
                raise ValueError(f"slo keys are ttft, tpot and e2el (ms); got {sorted(unknown)}")
            good = [
                r
                for r in ok
                if all(
                    getattr(r, {"ttft": "ttft_s", "tpot": "tpot_s", "e2el": "e2e_s"}[k]) * 1e3 <= v
                    for k, v in slo.items()
                )
            ]
            out["slo_ms"] = dict(slo)
            out["request_goodput"] = len(good) / self.duration_s
        out["errors"] = sorted({str(r.status) for r in self.records if not r.ok})
        return out


def completion_bodies(
    model: str, trace: Sequence[TraceRequest], temperature: float = 0.0, extra: dict | None = None
) -> list[dict]:
    """One streamed /v1/completions body per request of the trace."""
    return [
        {
            "model": model,
            "prompt": t.text,
            "max_tokens": t.max_tokens,
            "temperature": temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
            **(extra or {}),
        }
        for t in trace
    ]


def serve_bench(
    base_url: str,
    model: str,
    trace: Sequence[TraceRequest],
    max_concurrency: int | None = 16,
    request_rate: float | None = None,
    seed: int = 0,
    timeout_s: float = 120.0,
    api_key: str | None = None,
    warmup_requests: int = 0,
) -> ServeResult:
    """Send every request of `trace` (ailab.traces) once to `base_url`/v1/completions, streamed and greedy, each
    at its arrival time with at most `max_concurrency` in flight (a trace made with every arrival at 0 is flat
    out: `vllm bench serve --request-rate inf`). `request_rate`: the same requests at Poisson arrivals at that
    rate instead (inf: all at once). The first `warmup_requests` go first, one at a time, and are not counted."""
    if not trace:
        raise ValueError("the trace is empty: give it requests (ailab.traces.make_trace)")
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"max_concurrency must be at least 1 (got {max_concurrency})")
    if request_rate is not None and not request_rate > 0:
        raise ValueError(f"request_rate must be > 0 requests/s, or inf (got {request_rate})")
    if request_rate is not None:
        trace = with_arrivals(trace, request_rate, seed)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    target = Target.make(base_url.rstrip("/") + "/v1/completions", completion_bodies(model, trace), headers)

    async def main():
        await preflight(target, 5.0, timeout_s)
        warm = StreamConnection(target, timeout_s, 5.0)
        for i in range(warmup_requests):
            await warm.stream(i % len(trace), GenRecord(0.0), time.perf_counter())
        warm.close()
        t0 = time.perf_counter()
        connections: list[StreamConnection] = []

        def connect() -> StreamConnection:
            connections.append(StreamConnection(target, timeout_s, 5.0, t0))
            return connections[-1]

        await run_arrivals(connect, [t.arrival_s for t in trace], max_concurrency, lambda *_: None, t0)
        done = sorted((pair for c in connections for pair in c.records), key=lambda pair: pair[0])
        return [record for _, record in done], time.perf_counter() - t0

    records, duration = run_sync(main)
    rate = None if request_rate is None or math.isinf(request_rate) else request_rate
    return ServeResult(records, duration, max_concurrency, rate)
