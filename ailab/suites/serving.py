"""`ailab bench serving`: does dynamic batching pay on this machine, and how close does the server get
to the model's own throughput?

Everything is measured in one run, on the same texts, the same engine and the same model object:
  model alone   per-item time at batch 1 and at max_batch_size (-> batching_ceiling, model_items_per_s)
  batched       the ailab server, DynamicBatcher(max_batch_size, max_wait_ms), 32 closed-loop HTTP clients
  unbatched     the same server with max_batch_size=1
  naive         a plain FastAPI `def` endpoint that runs the model per request (threadpool, no batcher)
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
import threading
import time

import numpy as np
from pydantic import BaseModel

from ailab.data import bench_texts
from ailab.monitoring import histogram_from_metrics, read_metrics  # noqa: F401 - the notebooks read them here


class NaiveBody(BaseModel):
    inputs: str | list[str]


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


def grid_figure(rows: list[dict], max_wait_ms: float, max_batch_size: int):
    """Widget callback: p50/p99 and throughput against max_batch_size at the chosen max wait,
    with the chosen (max_wait_ms, max_batch_size) cell named in the title. Replays measured rows."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    from ailab import viz

    waits = sorted({r["max_wait_ms"] for r in rows})
    if max_wait_ms not in waits:
        raise ValueError(f"max_wait_ms={max_wait_ms} was not measured; choose one of {waits}")
    line = sorted((r for r in rows if r["max_wait_ms"] == max_wait_ms), key=lambda r: r["max_batch_size"])
    chosen = [r for r in line if r["max_batch_size"] == max_batch_size]
    if not chosen:
        raise ValueError(
            f"max_batch_size={max_batch_size} was not measured; choose one of {[r['max_batch_size'] for r in line]}"
        )
    c = chosen[0]
    x = [r["max_batch_size"] for r in line]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=x, y=[r["p50_ms"] for r in line], name="p50 ms", mode="lines+markers"))
    fig.add_trace(go.Scatter(x=x, y=[r["p99_ms"] for r in line], name="p99 ms", mode="lines+markers"))
    fig.add_trace(go.Bar(x=x, y=[r["rps"] for r in line], name="requests/s", opacity=0.3), secondary_y=True)
    fig.add_vline(x=max_batch_size, line_dash="dot")
    fig.update_xaxes(**viz.log_axis(x), title="max_batch_size")
    fig.update_yaxes(title_text="latency (ms)", secondary_y=False)
    fig.update_yaxes(title_text="throughput (requests/s)", secondary_y=True, **viz.RIGHT_AXIS)
    fig.update_layout(
        template="plotly_white",
        height=420,
        title={
            "text": (
                f"max_wait={max_wait_ms:g} ms, max_batch={max_batch_size}: {c['rps']:.0f} req/s, p50 {c['p50_ms']:.0f} ms, "
                f"p99 {c['p99_ms']:.0f} ms, mean batch {c['mean_batch_size']:.1f}"
            )
        },
    )
    return fig


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


def naive_app(predictor):
    """The plain way: a FastAPI `def` endpoint runs the model per request in FastAPI's threadpool."""
    from fastapi import FastAPI

    app = FastAPI()
    tokenizer_lock = threading.Lock()  # a fast tokenizer used from several threads at once raises "Already borrowed"
    tokenize = predictor.tokenize

    def locked_tokenize(texts):
        with tokenizer_lock:
            return tokenize(texts)

    predictor_copy = type(predictor).__new__(type(predictor))
    predictor_copy.__dict__.update(predictor.__dict__)
    predictor_copy.tokenize = locked_tokenize

    @app.post("/v1/predict")
    def predict(body: NaiveBody):
        texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
        return {"outputs": predictor_copy(texts)}

    @app.get("/readyz")
    def ready():
        return {"ready": True}

    return app


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


def padding_by_bucket(lengths, bucket_tokens: int | None, max_batch_size: int = 16) -> dict:
    """Padding the batcher would compute for `lengths` (token counts, in submission order) submitted all at
    once, as `bucketing_run` does: each batch takes up to `max_batch_size` of the waiting requests in the
    oldest one's `bucket_tokens`-wide band (None or 0: no buckets), and is padded to its longest. Arithmetic
    on the lengths, cheap enough for a slider; `bucketing_run` measures the same thing through the batcher.
    """
    lengths = [int(n) for n in lengths]
    if not lengths or min(lengths) <= 0:
        raise ValueError("lengths must be a non-empty list of positive token counts")
    if bucket_tokens is not None and (not isinstance(bucket_tokens, int) or bucket_tokens < 0):
        raise ValueError(
            f"bucket_tokens must be None, 0 (no buckets) or a positive width in tokens, got {bucket_tokens!r}"
        )
    if not isinstance(max_batch_size, int) or max_batch_size < 1:
        raise ValueError(f"max_batch_size must be a positive whole number, got {max_batch_size!r}")
    band = (lambda n: (n - 1) // bucket_tokens) if bucket_tokens else (lambda n: 0)
    waiting = list(lengths)
    slots = batches = 0
    while waiting:
        head = band(waiting[0])
        take = [i for i, n in enumerate(waiting) if band(n) == head][:max_batch_size]
        batch = [waiting[i] for i in take]
        slots += max(batch) * len(batch)
        batches += 1
        taken = set(take)
        waiting = [n for i, n in enumerate(waiting) if i not in taken]
    real = sum(lengths)
    return {
        "bucket_tokens": bucket_tokens or None,
        "token_slots": slots,
        "real_tokens": real,
        "padding_waste": 1 - real / slots,
        "batches": batches,
        "mean_batch_size": len(lengths) / batches,
    }


def bucketing_view(
    lengths,
    bucket_tokens: int | None,
    widths=(0, 4, 8, 16, 32, 64),
    max_batch_size: int = 16,
    measured: dict | None = None,
) -> dict:
    """What the bucket-width widget draws: the padding share at every width in `widths` (computed from
    the token lengths by `padding_by_bucket`), and beside it the measured share where `measured`
    ({width or 0: a bucketing_run result}) has one; the title reads the chosen width, with its measured
    throughput when there is one. Returns viz.bar_chart kwargs."""
    widths = [int(w or 0) for w in widths]
    key = int(bucket_tokens or 0)
    if key not in widths:
        raise ValueError(f"bucket_tokens={bucket_tokens!r} is not one of the widths shown {widths} (0: no buckets)")
    runs = {w: padding_by_bucket(lengths, w, max_batch_size) for w in widths}
    label = {w: f"{w} tokens" if w else "no buckets" for w in widths}
    series = {"padding, computed from the lengths (%)": [100 * runs[w]["padding_waste"] for w in widths]}
    measured = {int(k or 0): v for k, v in (measured or {}).items()}
    if measured:
        series["padding, measured through the batcher (%)"] = [
            100 * measured[w]["padding_waste"] if w in measured else 0.0 for w in widths
        ]
    c = runs[key]
    title = (
        f"{label[key]}: {c['padding_waste']:.1%} of {c['token_slots']:,} token slots are padding, "
        f"{c['batches']} batches (mean {c['mean_batch_size']:.1f})"
    )
    if key in measured:
        m = measured[key]
        title += f"; measured: {m['padding_waste']:.1%} padding, {m['texts_per_s']:.0f} texts/s"
    return {
        "categories": [label[w] for w in widths],
        "series": series,
        "title": title,
        "y_title": "% of token slots that are padding",
        "subtitle": f"{len(lengths)} texts submitted at once, max batch {max_batch_size}",
    }
