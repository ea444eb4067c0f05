"""Serving generation under an open-loop arrival trace: continuous batching, static batching, and Hugging Face
`generate` on padded batches, on the same requests, in one run.

Requests arrive at Poisson times whatever the server is doing (an open loop: a slow server builds a queue,
as it would in production). Each engine is run in real time: what has arrived by now is submitted, the
engine takes one step (or one whole padded batch), and the clock is read again. The figures: output tokens
per second over the whole run, time to first token (TTFT) and end-to-end latency, each from the request's
arrival, and time per output token after the first (TPOT).
"""

from __future__ import annotations

import copy
import time
from collections import deque
from typing import Sequence

import numpy as np
import torch

from ailab.generation.paged import PagedKVCache
from ailab.generation.engine_core import EngineCore
from ailab.generation.request import Request
from ailab.traces import TraceRequest, make_trace


def arrival_trace(
    n: int = 24,
    rate_rps: float = 4.0,
    prompt_bytes: tuple[int, int] = (8, 96),
    output_tokens: tuple[int, int] = (4, 96),
    seed: int = 0,
    text: torch.Tensor | None = None,
) -> list[Request]:
    """`n` requests as the engine core's Requests: prompts cut from `text` (default: the held-out snippets; lengths
    uniform in prompt_bytes), outputs of log-uniform length in output_tokens (many short, a few long), Poisson
    arrivals at `rate_rps`. The trace is ailab.traces.make_trace's (source "corpus"), the one every bench uses."""
    return as_requests(make_trace(n, prompt_bytes, output_tokens, rate_rps, source="corpus", seed=seed, text=text))


def as_requests(trace: Sequence[TraceRequest]) -> list[Request]:
    """A trace as the engine core takes it: request i's prompt as token ids (its bytes), greedy, its arrival."""
    return [Request(i, list(t.prompt), t.max_tokens, t.arrival_s) for i, t in enumerate(trace)]


def _summary(name: str, reqs: Sequence[Request], makespan_s: float, tpot_ms: Sequence[float] | None = None) -> dict:
    ttft = np.array([(r.first_token_s - r.arrival_s) * 1e3 for r in reqs])
    latency = np.array([(r.finished_s - r.arrival_s) * 1e3 for r in reqs])
    # time per output token after the first (TPOT); a request of one token has none
    tpot = np.array(
        tpot_ms
        if tpot_ms is not None
        else [(r.finished_s - r.first_token_s) * 1e3 / (len(r.output) - 1) for r in reqs if len(r.output) > 1]
    )
    tokens = sum(len(r.output) for r in reqs)
    return {
        "engine": name,
        "requests": len(reqs),
        "output_tokens": tokens,
        "seconds": makespan_s,
        "tokens_per_s": tokens / makespan_s,
        "ttft_p50_ms": float(np.percentile(ttft, 50)),
        "ttft_p99_ms": float(np.percentile(ttft, 99)),
        "latency_p50_ms": float(np.percentile(latency, 50)),
        "latency_p99_ms": float(np.percentile(latency, 99)),
        "tpot_p50_ms": float(np.percentile(tpot, 50)) if tpot.size else None,
        "tpot_p99_ms": float(np.percentile(tpot, 99)) if tpot.size else None,
        "preemptions": sum(r.preemptions for r in reqs),
    }


def run_scheduler(
    model,
    trace: Sequence[Request],
    policy: str = "continuous",
    num_blocks: int = 256,
    block_size: int = 16,
    max_running: int = 8,
    timeline: bool = False,
    compile: bool = False,
) -> dict:
    """Serve `trace` in real time with the EngineCore; times are taken relative to the run's start.
    With `timeline`, the row also holds (seconds, blocks in use, running, waiting) after every step.
    With `compile`, the decode step runs compiled (compiled.py), compiled before the clock starts."""
    reqs = [copy.deepcopy(r) for r in trace]
    cache = PagedKVCache.for_model(model, num_blocks, block_size)
    t0 = time.perf_counter()
    clock = lambda: time.perf_counter() - t0  # noqa: E731 - the scheduler stamps requests in run time
    core = EngineCore(model, cache, max_running, policy, clock, compile=compile)
    core.warm_up(2)  # no run pays a first call's cost (a compilation, a GPU's first kernels) in its time
    t0 = time.perf_counter()
    pending = sorted(reqs, key=lambda r: r.arrival_s)
    steps: list[tuple[float, int, int, int]] = []
    n_steps, forward_s, overhead_s = 0, 0.0, 0.0
    decode_steps: dict[int, list[tuple[float, float]]] = {}  # batch -> (wall s, forward s) of steps that only decode
    admitting: list[tuple[int, float]] = []  # (rows, wall s) of the steps that admitted someone
    in_steps_s = 0.0
    saturated = None  # (seconds, tokens) when the last request was let in: until then, demand exceeded seats
    while pending or not core.idle:
        now = clock()
        while pending and pending[0].arrival_s <= now:
            core.add_request(pending.pop(0))
        if core.idle:
            time.sleep(max(0.0, pending[0].arrival_s - clock()))
            continue
        started = time.perf_counter()
        report = core.step()
        wall, times = time.perf_counter() - started, report.times
        n_steps, forward_s, overhead_s = n_steps + 1, forward_s + times.forward_s, overhead_s + times.overhead_s
        in_steps_s += wall
        if report.decoded and not report.admitted and not report.preempted:
            decode_steps.setdefault(report.decoded, []).append((wall, times.forward_s))
        elif report.admitted:
            admitting.append((report.admitted + report.decoded, wall))
        if saturated is None and not pending and not core.waiting:
            saturated = (clock(), sum(len(r.output) for r in reqs))
        if timeline:
            steps.append((clock(), num_blocks - len(cache.allocator.free_blocks), len(core.running), len(core.waiting)))
    row = _summary(policy, reqs, clock())
    # While requests wait, the engine serves all it can: tokens/s over that window is its capacity, without the
    # drain at the end, where the last long answers run alone under either policy.
    row["saturated_tokens_per_s"] = saturated[1] / saturated[0] if saturated and saturated[0] > 0 else None
    # the step's time split: the model's forward, and the scheduler's own (plan, block tables, sampling, apply)
    row["steps"] = n_steps
    row["forward_ms_per_step"] = forward_s * 1e3 / n_steps if n_steps else None
    row["overhead_ms_per_step"] = overhead_s * 1e3 / n_steps if n_steps else None
    # What a decode step cost in this run, by batch size (medians): the prices continuous_bound takes, from the very
    # steps served, so the share of the bound compares the run with itself, on the same machine at the same moment.
    row["step_cost_in_run"] = [
        {
            "batch": b,
            "steps": len(runs),
            "step_ms": float(np.median([w for w, _ in runs])) * 1e3,
            "forward_ms": float(np.median([f for _, f in runs])) * 1e3,
        }
        for b, runs in sorted(decode_steps.items())
    ]
    # Where the run's time went beyond its steps priced as decode steps (what continuous_bound counts): what the
    # steps that admitted cost over a decode step of as many rows (their prompts' tokens, packed in their forward),
    # and the time between steps (submitting, the loop, waiting for an arrival).
    costs = row["step_cost_in_run"]
    priced = np.interp([n for n, _ in admitting], [c["batch"] for c in costs], [c["step_ms"] for c in costs])
    row["admitting_steps"] = len(admitting)
    row["prompt_extra_ms"] = float(sum(w * 1e3 for _, w in admitting) - priced.sum()) if costs else None
    row["between_steps_ms"] = (row["seconds"] - in_steps_s) * 1e3
    return {**row, "timeline": steps} if timeline else row


@torch.inference_mode()
def run_hf_padded(hf_model, trace: Sequence[Request], batch_size: int = 8, pad_id: int = 0) -> dict:
    """Hugging Face `generate` (greedy, its own cache) on left-padded batches of whatever has arrived when
    the previous batch ends, up to batch_size; each batch runs to its longest output. generate returns at the
    end, so a request's first token reaches it with its last; its TPOT is the batch's time per decoding step."""
    reqs = [copy.deepcopy(r) for r in trace]
    t0, tpot = time.perf_counter(), []
    pending = sorted(reqs, key=lambda r: r.arrival_s)
    while pending:
        now = time.perf_counter() - t0
        if pending[0].arrival_s > now:
            time.sleep(pending[0].arrival_s - now)
            continue
        batch = [r for r in pending if r.arrival_s <= now][:batch_size]
        for r in batch:
            pending.remove(r)
        width = max(len(r.prompt) for r in batch)
        ids = torch.tensor([[pad_id] * (width - len(r.prompt)) + r.prompt for r in batch], device=hf_model.device)
        mask = torch.tensor([[0] * (width - len(r.prompt)) + [1] * len(r.prompt) for r in batch], device=ids.device)
        # ids and mask: (B, width), on the model's device
        out = hf_model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=max(r.max_new_tokens for r in batch),
            do_sample=False,
            pad_token_id=pad_id,
        )[:, width:]
        done = time.perf_counter() - t0
        steps = max(r.max_new_tokens for r in batch)
        for r, row in zip(batch, out.tolist()):
            r.output, r.first_token_s, r.finished_s = row[: r.max_new_tokens], done, done
            tpot.append((done - now) * 1e3 / steps)  # the batch's time per decoding step
    return _summary("hf_generate_padded", reqs, time.perf_counter() - t0, tpot)


def compare_batching(
    model, trace: Sequence[Request], rounds: int = 2, max_running: int = 8, num_blocks: int = 256, block_size: int = 16
) -> list[dict]:
    """The three engines on the same trace, interleaved (`rounds` times each, in turn): one row per run."""
    rows = []
    for i in range(rounds):
        rows.append({"round": i, **run_scheduler(model, trace, "continuous", num_blocks, block_size, max_running)})
        rows.append({"round": i, **run_scheduler(model, trace, "static", num_blocks, block_size, max_running)})
        rows.append({"round": i, **run_hf_padded(model.hf, trace, max_running)})
    return rows


def compare_compiled(model, trace: Sequence[Request], rounds: int = 3, max_running: int = 8) -> list[dict]:
    """The continuous scheduler on `trace` with its decode step eager and compiled, interleaved (`rounds` times
    each, in turn; the compilation happens before the first compiled run's clock starts): one row per run."""
    rows = []
    for i in range(rounds):
        for compiled in (False, True):
            row = run_scheduler(model, trace, "continuous", max_running=max_running, compile=compiled)
            rows.append({"round": i, **row, "engine": "compiled" if compiled else "eager"})
    return rows


def per_round_ratio(rows: Sequence[dict], key: str, a: str, b: str) -> float:
    """Engine `a` over engine `b` in `key`, as the median of the per-round ratios of compare_batching's (or
    compare_compiled's) rows. Each round runs both on the same trace back to back, so a burst of load elsewhere
    spoils a round, not a side: one round's tail against another's would compare the neighbour, not the engines."""
    by_round: dict[int, dict] = {}
    for r in rows:
        by_round.setdefault(r["round"], {})[r["engine"]] = r.get(key)  # HF generate rows have no saturated figure
    return float(np.median([e[a] / e[b] for e in by_round.values()]))


def flat_out_gain(
    rows: Sequence[dict], key: str = "saturated_tokens_per_s", engines: tuple[str, str] = ("continuous", "static")
) -> float:
    """engines[0] over engines[1] (default: continuous over static) in `key` (default: tokens/s while requests
    waited): per_round_ratio, named for what the flat-out comparison asks."""
    return per_round_ratio(rows, key, *engines)


def static_occupancy(trace: Sequence[Request], max_running: int = 8) -> float:
    """The share of seat-steps that produce a token under static batching of a burst: each batch of `max_running`
    (in arrival order) holds all its seats until its longest member ends. If a decode step cost the same at any
    batch size (nearly so on a GPU), continuous batching, whose seats stay full, would serve 1 / this as much."""
    wants = [r.max_new_tokens for r in sorted(trace, key=lambda r: r.arrival_s)]
    batches = [wants[i : i + max_running] for i in range(0, len(wants), max_running)]
    return sum(wants) / sum(len(b) * max(b) for b in batches)


def step_cost_by_batch(
    model,
    batches: Sequence[int] = (1, 2, 4, 8, 16),
    context: int = 64,
    steps: int = 10,
    rounds: int = 3,
    compile: bool = False,
) -> list[dict]:
    """The time of one decode step of the EngineCore with `b` sequences of `context` tokens running, for each b
    (the median of `rounds`, the batch sizes taken in turn each round), and its parts in that same round: the
    model's forward and the scheduler's own overhead (plan, prepare: block tables and token tensors, sampling,
    apply), each in ms per step.
    Where the step grows with b, a half-empty static batch costs less per step and continuous batching gains less
    than the seats' occupancy says. With `compile`, the decode step compiled (compiled.py; compiled in the warm-up)."""
    parts = ("plan", "prepare", "forward", "sample", "apply")
    samples: dict[int, list[dict]] = {b: [] for b in batches}
    for _ in range(rounds):
        for b in batches:
            cache = PagedKVCache.for_model(model, b * (context // 16 + 4) + 4, 16)
            core = EngineCore(model, cache, max_running=b, compile=compile)
            for i in range(b):
                core.add_request(Request(i, [i % 256] * context, steps + 4))
            core.step()  # admits and prefills every sequence
            core.step()  # warm-up
            sums = dict.fromkeys(parts, 0.0)
            t0 = time.perf_counter()
            for _ in range(steps):
                times = core.step().times
                for p in parts:
                    sums[p] += getattr(times, f"{p}_s")
            wall = time.perf_counter() - t0
            samples[b].append({"step": wall, **sums})
    rows = []
    for b, runs in samples.items():
        # The median round, whole: its parts come from the same steps as its total, so they add up to at most the
        # total. (A median taken part by part can sum past the median total: seen in a fresh-clone make test.)
        median_round = sorted(runs, key=lambda r: r["step"])[len(runs) // 2]
        ms = {k: median_round[k] * 1e3 / steps for k in ("step",) + parts}
        rows.append(
            {
                "batch": b,
                "step_ms": ms["step"],
                "ms_per_token": ms["step"] / b,
                "forward_ms": ms["forward"],
                "overhead_ms": ms["plan"] + ms["prepare"] + ms["sample"] + ms["apply"],
                **{f"{p}_ms": ms[p] for p in parts if p != "forward"},
            }
        )
    return rows


def continuous_batch_sizes(trace: Sequence[Request], max_running: int = 8) -> list[int]:
    """The batch of each step when all of `trace` waits at once and continuous batching keeps every seat full:
    requests take seats in arrival order, each makes one token per step (its first in the step that admits it, from
    its prefill), and a seat freed in one step is taken in the next. The sizes add up to the tokens made."""
    queue = deque(r.max_new_tokens for r in sorted(trace, key=lambda r: r.arrival_s))
    running: list[int] = []  # tokens each seated request still has to make
    sizes = []
    while queue or running:
        while queue and len(running) < max_running:
            running.append(queue.popleft())
        sizes.append(len(running))
        running = [n - 1 for n in running if n > 1]
    return sizes


def continuous_bound(
    trace: Sequence[Request],
    step_cost: Sequence[dict],
    max_running: int = 8,
    key: str = "step_ms",
    prefill_cost: Sequence[dict] | None = None,
) -> float:
    """The tokens/s continuous batching would serve on `trace`, all waiting at once, if every step cost what a
    decode step of its batch size was measured to cost: the steps of `continuous_batch_sizes`, each priced from
    `step_cost` (rows of step_cost_by_batch, or a run's `step_cost_in_run`; linear between measured sizes, the
    nearest end outside them), tokens over their sum. It counts what a batch costs on this machine (unlike
    1 / static_occupancy, which prices every step the same), and nothing else: nobody waits for a block, the
    scheduler is as fast as it was in the measured steps (`key="forward_ms"`: as if it took no time at all), and a
    prompt's prefill is free unless `prefill_cost` (rows of prefill_cost_by_length) prices each request's prefill
    by its prompt's length. A run's tokens/s over it is the share of the bound reached."""
    sizes = continuous_batch_sizes(trace, max_running)
    rows = sorted(step_cost, key=lambda r: r["batch"])
    ms = float(np.interp(sizes, [r["batch"] for r in rows], [r[key] for r in rows]).sum())
    if prefill_cost:
        rows = sorted(prefill_cost, key=lambda r: r["tokens"])
        prompts = [len(r.prompt) for r in trace]
        ms += float(np.interp(prompts, [r["tokens"] for r in rows], [r["ms"] for r in rows]).sum())
    return sum(sizes) / (ms / 1e3)


def roofline_bound(
    trace: Sequence[Request], model, max_running: int, peak_gflops: float, bandwidth_gbps: float
) -> dict:
    """The tokens/s this machine's measured matmul peak and memory bandwidth allow on `trace`, all waiting at once,
    served by continuous batching as `continuous_batch_sizes` seats it (each prompt prefilled in the step that
    admits it, beside the decodes). Each step costs at least max(FLOPs / peak, bytes / bandwidth): about 2 FLOPs
    per weight per token computed, plus attention (Q.K and A.V: 4 x layers x width x the context, per token); the
    weights read once a step, each decoding row's cache read, each new token's K/V written. Nothing else costs time
    (no overhead, no idle core): a run's tokens/s over it is the share of the machine's limit it reached, and
    `compute_bound_steps` says which wall the steps meet."""
    from ailab.generation.kv_cache import kv_bytes_per_token

    params = sum(p.numel() for p in model.hf.parameters())
    itemsize = torch.empty((), dtype=model.dtype).element_size()
    weight_bytes, kv_token = params * itemsize, kv_bytes_per_token(model, model.dtype)
    attn = 4 * model.n_layer * model.n_embd  # FLOPs per token per token of context it attends to
    queue = deque(sorted(trace, key=lambda r: r.arrival_s))
    running: list[tuple[int, int]] = []  # (tokens in its cache, tokens still to make) of each decoding request
    seconds = flops_all = bytes_all = 0.0
    compute_bound = steps = made = 0
    while queue or running:
        flops, moved = 0.0, float(weight_bytes)
        for context, _ in running:  # a decode: one token, attending to its cache and itself
            flops += 2 * params + attn * (context + 1)
            moved += kv_token * (context + 1)  # its cache read, the new token's K/V written
        decoded = [(context + 1, left - 1) for context, left in running]
        seated = len(running)
        while queue and seated < max_running:  # a seat free: the whole prompt, which makes the first token
            req = queue.popleft()
            n = len(req.prompt)
            flops += 2 * params * n + attn * n * (n + 1) / 2
            moved += kv_token * n
            decoded.append((n, req.max_new_tokens - 1))
            seated += 1
        made += seated
        t_compute, t_memory = flops / (peak_gflops * 1e9), moved / (bandwidth_gbps * 1e9)
        seconds += max(t_compute, t_memory)
        compute_bound += t_compute >= t_memory
        flops_all, bytes_all, steps = flops_all + flops, bytes_all + moved, steps + 1
        running = [row for row in decoded if row[1] > 0]
    return {
        "tokens_per_s": made / seconds,
        "seconds": seconds,
        "steps": steps,
        "compute_bound_steps": compute_bound / steps,
        "intensity": flops_all / bytes_all,
        "peak_gflops": peak_gflops,
        "bandwidth_gbps": bandwidth_gbps,
    }


def prefill_cost_by_length(model, lengths: Sequence[int] = (8, 32, 64, 96), rounds: int = 7) -> list[dict]:
    """The time of one prompt's prefill (`prefill_paged`, the forward alone, the view built before the clock) at
    each length: the median of `rounds`, the lengths taken in turn each round. What continuous_bound adds per
    request when it prices the prefills too."""
    from ailab.generation.decode import prefill_paged

    samples: dict[int, list[float]] = {n: [] for n in lengths}
    for i in range(rounds + 1):  # the first round warms up
        for n in lengths:
            cache = PagedKVCache.for_model(model, -(-n // 16), 16)
            cache.allocator.allocate(0, n)
            view, ids = cache.view([0], n), torch.full((1, n), 32, device=cache.k.device)  # ids (1, n)
            t0 = time.perf_counter()
            prefill_paged(model, view, ids).cpu()  # to the host: on a GPU, the forward has finished
            if i:
                samples[n].append(time.perf_counter() - t0)
    return [{"tokens": n, "ms": float(np.median(v)) * 1e3} for n, v in samples.items()]


def scheduler_view(
    model,
    rate_rps: float,
    max_running: int,
    seconds: float = 3.0,
    num_blocks: int = 128,
    block_size: int = 16,
    seed: int = 0,
) -> dict:
    """What the scheduling widget draws: `seconds` of Poisson arrivals at `rate_rps`, served by the continuous
    EngineCore with `max_running` seats, run for real here; KV blocks in use and sequences running and waiting
    after every step, titled with tokens/s and TTFT p50/p99. Returns viz.line_chart kwargs."""
    for name, value in (("rate_rps", rate_rps), ("max_running", max_running), ("seconds", seconds)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    if int(max_running) != max_running:
        raise ValueError(f"max_running must be a whole number of sequences, got {max_running!r}")
    n = max(1, int(round(rate_rps * seconds)))
    row = run_scheduler(
        model,
        arrival_trace(n=n, rate_rps=float(rate_rps), seed=seed),
        "continuous",
        num_blocks,
        block_size,
        int(max_running),
        timeline=True,
    )
    t, used, running, waiting = zip(*row["timeline"])
    return {
        "x": list(t),
        "series": {"KV blocks in use": list(used), "running": list(running), "waiting": list(waiting)},
        "title": f"{n} requests at {rate_rps:g}/s, {int(max_running)} seats: {row['tokens_per_s']:.0f} tokens/s, "
        f"TTFT p50 {row['ttft_p50_ms']:.0f} ms, p99 {row['ttft_p99_ms']:.0f} ms",
        "x_title": "seconds",
        "y_title": f"count (of {num_blocks} blocks)",
    }
