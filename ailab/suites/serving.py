"""`ailab bench serving`: does dynamic batching pay on this machine, and how close does the server get
to the model's own throughput?

Everything is measured in one run, on the same texts, the same engine and the same model object:
  model alone   per-item time at batch 1 and at max_batch_size (-> batching_ceiling, model_items_per_s)
  batched       the ailab server, DynamicBatcher(max_batch_size, max_wait_ms), 32 closed-loop HTTP clients
  unbatched     the same server with max_batch_size=1
  naive         a plain FastAPI `def` endpoint that runs the model per request (threadpool, no batcher;
                ailab.suites.naive_server)
  batcher_noop  the batcher alone, in-process, with a no-op model (its own overhead ceiling)

The HTTP clients are the course's one load generator (ailab.bench) in a child process, so their socket
work does not share the server's GIL; they still share the 2 CPU cores, as a sidecar would, and the
report says how much CPU the generator itself took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import numpy as np

from ailab.data import bench_texts
from ailab.monitoring import histogram_from_metrics, read_metrics  # noqa: F401 - the notebooks read them here
from ailab.suites.naive_server import naive_app
from ailab.suites.serving_view import bucketing_view, grid_figure, padding_by_bucket  # noqa: F401 - notebooks' widgets


# ----------------------------------------------------------------------------- what is measured


def model_alone(predictor, texts: list[str], batch_size: int, seconds: float = 4.0) -> dict:
    """Per-item time of the predictor (tokenize + forward + softmax) at batch 1 and at batch_size."""
    from ailab.timing import measure_latency

    it = iter(range(10**9))

    def run(b):
        i = next(it) * b
        chunk = [texts[(i + j) % len(texts)] for j in range(b)]
        return lambda: predictor(chunk)

    def timed(b):
        chunks = [run(b) for _ in range(64)]
        k = iter(range(10**9))
        return measure_latency(lambda: chunks[next(k) % len(chunks)](), iters=400, warmup=3, max_seconds=seconds / 2)

    one, full = timed(1), timed(batch_size)
    per_item_1, per_item_b = one.p50_ms, full.p50_ms / batch_size
    return {
        "per_item_ms_b1": per_item_1,
        "per_item_ms_bmax": per_item_b,
        "batch_ms": full.p50_ms,
        "batching_ceiling": per_item_1 / per_item_b,
        "model_items_per_s": 1e3 / per_item_b,
    }


def batch_sweep(
    predictor, texts: list[str], sizes=(1, 2, 4, 8, 16, 32), seconds: float = 1.5, rounds: int = 3
) -> list[dict]:
    """The model alone at each batch size: time per batch, per item, and items per second.

    The sizes are visited `rounds` times, interleaved, and each size keeps its best round's median:
    a burst of load from elsewhere on a shared machine then spoils one round, not one batch size.
    """
    from ailab.timing import measure_latency

    best = {b: float("inf") for b in sizes}
    for _ in range(rounds):
        for b in sizes:
            chunks = [[texts[(i * b + j) % len(texts)] for j in range(b)] for i in range(16)]
            k = iter(range(10**9))
            st = measure_latency(
                lambda: predictor(chunks[next(k) % len(chunks)]), iters=200, warmup=1, max_seconds=seconds / rounds
            )
            best[b] = min(best[b], st.p50_ms)
    return [
        {"batch_size": b, "batch_p50_ms": best[b], "per_item_ms": best[b] / b, "items_per_s": 1e3 * b / best[b]}
        for b in sizes
    ]


def batcher_run(
    predictor,
    texts: list[str],
    max_batch_size: int,
    max_wait_ms: float,
    concurrency: int = 32,
    seconds: float = 2.0,
    warmup_s: float = 0.5,
    bucket_fn=None,
    threads: int | None = None,
) -> dict:
    """Real concurrent requests (in-process clients) through a DynamicBatcher over `predictor`."""
    from ailab.batching import DynamicBatcher, run_sync
    from ailab.bench import drive_batcher

    def init():
        if threads:
            import torch

            torch.set_num_threads(threads)

    async def main():
        b = DynamicBatcher(
            predictor,
            max_batch_size=max_batch_size,
            max_wait_ms=max_wait_ms,
            max_queue=max(1024, 4 * concurrency),
            bucket_fn=bucket_fn,
            worker_init=init,
        )
        r = await drive_batcher(b, texts, concurrency, seconds, warmup_s)
        await b.close()
        return r, b.stats.as_dict()

    r, st = run_sync(main)
    lat = r.stats
    return {
        "max_batch_size": max_batch_size,
        "max_wait_ms": max_wait_ms,
        "concurrency": concurrency,
        "rps": r.rps,
        "p50_ms": lat.p50_ms,
        "p99_ms": lat.p99_ms,
        "mean_batch_size": st["mean_batch_size"],
        "compute_p50_ms": st["compute_p50_ms"],
        "errors": r.errors_by_status,
    }


def batcher_grid(
    predictor, texts, waits_ms=(0, 5, 20), batch_sizes=(1, 8, 32), concurrency: int = 32, seconds: float = 1.5
) -> list[dict]:
    return [
        batcher_run(predictor, texts, b, w, concurrency, seconds, warmup_s=0.3) for w in waits_ms for b in batch_sizes
    ]


class PaddingCounter:
    """Wraps a text predictor and counts, per batch, the token slots computed and the ones that were real."""

    def __init__(self, predictor):
        self.predictor, self.slots, self.real = predictor, 0, 0
        self.name, self.sha256 = predictor.name, predictor.sha256

    def __call__(self, texts):
        batch, _ = self.predictor.tokenize(list(texts))
        mask = batch["attention_mask"]  # (B, T)
        self.slots += int(mask.size)
        self.real += int(mask.sum())
        return self.predictor(texts)

    @property
    def waste(self) -> float:
        """Share of computed token slots that were padding."""
        return 1 - self.real / self.slots if self.slots else 0.0


def bucketing_run(
    predictor, texts: list[str], bucket_tokens: int | None, max_batch_size: int = 16, max_wait_ms: float = 20.0
) -> dict:
    """Submit all texts at once through a DynamicBatcher, with or without length buckets
    (`bucket_tokens` wide, in word pieces after truncation to the model's max_length)."""
    from ailab.batching import DynamicBatcher, length_bucket, run_sync

    counter = PaddingCounter(predictor)
    bucket_fn = None
    if bucket_tokens:
        lengths = {
            t: min(len(ids), predictor.max_length)  # tokenized once, before the clock starts
            for t, ids in zip(texts, predictor.tokenizer(list(texts))["input_ids"])
        }
        bucket_fn = length_bucket(bucket_tokens, lengths.__getitem__)

    async def main():
        b = DynamicBatcher(
            counter,
            max_batch_size=max_batch_size,
            max_wait_ms=max_wait_ms,
            max_queue=len(texts) + 1,
            bucket_fn=bucket_fn,
        )
        t0 = time.perf_counter()
        await asyncio.gather(*(b.submit(t) for t in texts))
        seconds = time.perf_counter() - t0
        await b.close()
        return seconds, b.stats.as_dict()

    seconds, st = run_sync(main)
    return {
        "bucket_tokens": bucket_tokens,
        "seconds": seconds,
        "texts_per_s": len(texts) / seconds,
        "padding_waste": counter.waste,
        "token_slots": counter.slots,
        "real_tokens": counter.real,
        "batches": st["batches"],
        "mean_batch_size": st["mean_batch_size"],
    }


def batcher_noop_rps(seconds: float = 2.0, max_batch_size: int = 32, concurrency: int = 256) -> float:
    from ailab.batching import DynamicBatcher, run_sync
    from ailab.bench import drive_batcher

    async def main():
        b = DynamicBatcher(lambda xs: xs, max_batch_size=max_batch_size, max_wait_ms=2, max_queue=4 * concurrency)
        r = await drive_batcher(b, list(range(1000)), concurrency, seconds, warmup_s=0.3)
        await b.close()
        return r.rps

    return run_sync(main)


def _pool(windows: list, seconds: float) -> dict:
    """The rounds of one server as one result: every measured request, failures at the time they took."""
    lat = [r.latency_ms for w in windows for r in w.records] or [float("nan")]
    statuses: dict = {}
    for w in windows:
        for k, v in w.statuses.items():
            statuses[str(k)] = statuses.get(str(k), 0) + v
    cpu = sum(w.generator_cpu_s or 0.0 for w in windows)
    wall = sum(w.warmup_s + w.elapsed_s for w in windows)
    return {
        "rps": sum(w.n_ok for w in windows) / sum(w.elapsed_s for w in windows),
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
        "statuses": statuses,
        "generator_cpu_share": cpu / wall if wall else float("nan"),
    }


def run(quick: bool = False, argv: list[str] | None = None) -> dict:
    """Interleaved rounds: in each round the model alone, then batched, unbatched and naive servers each get
    the same window. Load from other processes on a shared machine then hits all of them alike."""
    import torch

    from ailab.bench import in_subprocess
    from ailab.device import describe_hardware
    from ailab.models import sentiment_classifier
    from ailab.server import create_app, sentiment_predictor, start_in_thread
    from ailab.server.predictors import engine_choices

    p = argparse.ArgumentParser(prog="ailab bench serving")
    p.add_argument("--engine", choices=engine_choices(), default="torch_eager")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--max-batch-size", type=int, default=32)
    p.add_argument("--max-wait-ms", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=None, help="measured seconds per server, over all rounds")
    p.add_argument("--rounds", type=int, default=None)
    args = p.parse_args(argv or [])
    rounds = args.rounds or (2 if quick else 4)
    total = args.seconds or (4.0 if quick else 20.0)
    window, warmup = total / rounds, (0.5 if quick else 1.0)
    t_start = time.perf_counter()
    threads = max(1, torch.get_num_threads())
    texts = bench_texts()
    payloads = [{"inputs": t} for t in texts]
    predictor = sentiment_predictor(args.engine, trained=sentiment_classifier(), threads=threads)
    torch.set_num_threads(threads)

    def server(max_batch_size):
        return create_app(
            {"sentiment": lambda: predictor},
            "sentiment",
            max_batch_size=max_batch_size,
            max_wait_ms=args.max_wait_ms,
            max_queue=1024,
            request_timeout_s=30.0,
            torch_threads=threads,
        )

    apps = {"batched": server(args.max_batch_size), "unbatched": server(1), "naive": naive_app(predictor)}
    handles = {k: start_in_thread(a) for k, a in apps.items()}
    windows: dict = {k: [] for k in apps}
    alone_rounds, busy, wall = [], 0.0, 0.0
    batcher = apps["batched"].state.ailab.registry.loaded["sentiment"].batcher
    try:
        for _ in range(rounds):
            alone_rounds.append(model_alone(predictor, texts, args.max_batch_size, seconds=1.5 if quick else 4.0))
            for k, h in handles.items():
                busy0, t0 = batcher.stats.busy_s, time.monotonic()
                windows[k].append(
                    in_subprocess(
                        "closed_loop",
                        h.url + "/v1/predict",
                        payloads,
                        clients=args.clients,
                        duration_s=window,
                        warmup_s=warmup,
                        timeout_s=30.0,
                    )
                )
                if k == "batched":  # share of the batched server's window its worker spent computing
                    busy, wall = busy + batcher.stats.busy_s - busy0, wall + time.monotonic() - t0
        bstats = batcher.stats.as_dict()
    finally:
        for h in handles.values():
            h.stop()
    noop = batcher_noop_rps(1.0 if quick else 3.0, args.max_batch_size)
    res = {k: _pool(w, total) for k, w in windows.items()}
    items_per_s = float(np.median([a["model_items_per_s"] for a in alone_rounds]))
    ceiling = float(np.median([a["batching_ceiling"] for a in alone_rounds]))
    batched, unbatched, naive = res["batched"], res["unbatched"], res["naive"]
    return {
        "batched_rps": batched["rps"],
        "batched_p50_ms": batched["p50_ms"],
        "batched_p99_ms": batched["p99_ms"],
        "unbatched_rps": unbatched["rps"],
        "unbatched_p50_ms": unbatched["p50_ms"],
        "unbatched_p99_ms": unbatched["p99_ms"],
        "naive_rps": naive["rps"],
        "naive_p50_ms": naive["p50_ms"],
        "naive_p99_ms": naive["p99_ms"],
        "batching_gain": batched["rps"] / unbatched["rps"] if unbatched["rps"] else float("nan"),
        "batching_ceiling": ceiling,
        "model_items_per_s": items_per_s,
        "model_items_per_s_rounds": [round(a["model_items_per_s"], 1) for a in alone_rounds],
        "model_batch_ms": float(np.median([a["batch_ms"] for a in alone_rounds])),
        "model_per_item_ms_b1": float(np.median([a["per_item_ms_b1"] for a in alone_rounds])),
        "server_efficiency": batched["rps"] / items_per_s,
        "server_batch_compute_p50_ms": bstats["compute_p50_ms"],
        "batched_p99_bound_ms": args.max_wait_ms + 2 * bstats["compute_p50_ms"],
        "mean_batch_size": bstats["mean_batch_size"],
        "worker_utilization": busy / wall if wall else float("nan"),
        "batcher_noop_rps": noop,
        "non_200": {k: sum(v for s, v in r["statuses"].items() if s != "200") for k, r in res.items()},
        "load_generator": "ailab.bench closed loop in a child process (raw asyncio HTTP/1.1, uvloop)",
        "generator_cpu_share": {k: round(r["generator_cpu_share"], 3) for k, r in res.items()},
        "clients": args.clients,
        "max_batch_size": args.max_batch_size,
        "max_wait_ms": args.max_wait_ms,
        "seconds_per_server": total,
        "rounds": rounds,
        "engine": args.engine,
        "torch_threads": threads,
        "device": describe_hardware().one_line(),
        "wall_s": time.perf_counter() - t_start,
    }


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv)))
