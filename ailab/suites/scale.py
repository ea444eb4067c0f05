"""`ailab bench scale`: ailab.server vs Ray Serve on one machine, then a concurrency sweep and a soak.

Both servers run the same predictor (MiniLM sentiment, torch FP32, ailab.server.sentiment_predictor),
batch up to 32 texts waiting at most 10 ms, and get the same closed-loop load from ailab.bench
(32 clients, the same texts), one after the other in the same run:

  ailab   `ailab serve` in a child process (its own GIL and RSS)
  ray     Ray Serve: one replica, @serve.batch(32, 10 ms), max_ongoing_requests=64,
          max_queued_requests back-pressure, HTTP on 127.0.0.1 only

Then ailab.server alone: a concurrency sweep (the best req/s with p99 within --slo-ms) and a soak
(--soak-minutes) sampling the server process's RSS (slope in MiB/min).

    ailab bench --json scale                       # full run (~3 min + a 1-minute soak)
    ailab bench --json scale --soak-minutes 10     # the 10-minute soak (make soak)
    ailab bench --json --quick scale               # ~30 s, no Ray (tests)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

from ailab.server.ray_serve import RayCluster, RayServePredictor


def _texts(n: int = 256) -> list[str]:
    from ailab.data import bench_texts

    return bench_texts(n)


# --------------------------------------------------------------------------- Ray Serve


class RayServe(RayServePredictor):
    """RayServePredictor (Ray Serve's own batcher over ailab's predictor, at /predict), with the resident memory
    of its processes read as ailab.bench reads every server's: the peer this suite and `ailab bench peers` run."""

    def rss_mib(self) -> float:
        """Resident memory of every Ray process on this machine (see processes()), in MiB."""
        import psutil

        from ailab.bench.process import process_tree_rss_mib

        total = 0.0
        for pid in self.processes():
            try:
                total += process_tree_rss_mib(pid, children=False)
            except (psutil.NoSuchProcess, psutil.AccessDenied):  # gone since the listing, or not ours to read
                pass
        return total


def autoscaling_trace(
    cluster: RayCluster, url: str, payloads, steps, poll_s: float = 0.5, window_s: float = 2.0, timeout_s: float = 10.0
) -> dict:
    """Offer `steps` [(req/s, seconds), ...] as open loops one after the other, while a thread reads how many
    replicas run every `poll_s`. Returns {"replicas": [(s, n)], "windows": [{t, p99_ms, n, failed}],
    "offered": [(start_s, end_s, req/s)], "placement": [...]}: the replica count over time, the p99 of what
    finished in each `window_s` (failures counted at the time they took), and the node of each replica, asked
    of the replicas while more than one ran."""
    import threading

    import numpy as np

    from ailab import bench

    t0 = time.perf_counter()
    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    # Where each replica ran, asked of the replicas: the first before any load (a replica with a long queue
    # answers late), each new one as it appears (it is idle, so it answers at once; it may not be in the
    # router's table at the first asking, hence the asking again).
    placement = {r["replica"]: r for r in cluster.placement(timeout_s=30.0)}

    def poll():
        while not stop.is_set():
            samples.append((time.perf_counter() - t0, cluster.running_replicas()))
            if samples[-1][1] > len(placement):
                placement.update((r["replica"], r) for r in cluster.placement(calls=40, timeout_s=5.0))
            stop.wait(poll_s)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    done, offered = [], []  # done: (finished at s, latency ms, ok)
    try:
        for i, (rate, seconds) in enumerate(steps):
            start = time.perf_counter() - t0
            res = bench.open_loop(
                url, payloads, rate_rps=rate, duration_s=seconds, warmup_s=0.0, seed=i, timeout_s=timeout_s
            )
            done += [(start + r.done_s, r.latency_ms, r.ok) for r in res.records]
            offered.append((round(start, 2), round(time.perf_counter() - t0, 2), rate))
    finally:
        stop.set()
        watcher.join(timeout=poll_s + 45.0)  # one poll: serve.status() and one placement bounded at 5 s
    if watcher.is_alive():
        raise RuntimeError("the replica poller did not stop within 45 s: Ray's controller is not answering")
    windows = []
    for lo in np.arange(0.0, max(t for t, _, _ in done), window_s):
        inside = [(ms, ok) for t, ms, ok in done if lo <= t < lo + window_s]
        windows.append(
            {
                "t": round(float(lo + window_s), 2),
                "n": len(inside),
                "p99_ms": round(float(np.percentile([ms for ms, _ in inside], 99)), 1) if inside else None,
                "failed": sum(1 for _, ok in inside if not ok),
            }
        )
    return {
        "replicas": [(round(t, 2), n) for t, n in samples],
        "windows": windows,
        "offered": offered,
        "placement": sorted(placement.values(), key=lambda r: r["replica"]),
    }


AUTOSCALING_DEMO = {
    "min_replicas": 1,
    "max_replicas": 2,
    "target_ongoing_requests": 2,
    "upscale_delay_s": 1.0,
    "downscale_delay_s": 4.0,
    "metrics_interval_s": 0.5,
    "look_back_period_s": 1.0,
}


def autoscaling_run(payloads, steps=((0.1, 4), (1.0, 30), (0.1, 8)), settle_s: float = 30.0) -> dict:
    """ailab's own app on a two-node Ray test cluster (1 CPU each, 1 CPU per replica), autoscaled by
    AUTOSCALING_DEMO, under a rising open loop. `steps` are (multiple of one replica's flat-out rate, seconds).

    First one fixed replica measures what one replica serves flat out here (an autoscaled one would scale up
    under that very measurement); then the autoscaled app gets the steps, and at the end up to `settle_s` at no
    load for the way back down. Returns the figures and the trace (see autoscaling_trace)."""
    from ray import serve

    from ailab import bench
    from ailab.server import ServerConfig
    from ailab.server.app import default_models
    from ailab.server.ray_serve import deployment

    models, default = default_models("torch_eager")
    settings = ServerConfig(max_batch_size=32, max_wait_ms=10)
    cluster = RayCluster(
        deployment(models, default, settings, replicas=1, name="probe").bind(),
        nodes=2,
        cpus_per_node=1,
        app_name="probe",
        route_prefix="/probe",
    )
    try:
        out = {"ray_start_s": round(cluster.start_s, 1), "probe_deploy_s": round(cluster.deploy_s, 1)}
        one = bench.closed_loop(cluster.url + "/v1/predict", payloads, clients=16, duration_s=3.0, warmup_s=1.0)
        out.update(one_replica_rps=round(one.rps, 1), one_replica_p99_ms=one.stats.p99_ms)
        serve.delete("probe")
        cluster.deploy(deployment(models, default, settings, autoscaling=AUTOSCALING_DEMO).bind())
        out["replicas_at_start"] = cluster.running_replicas()
        trace = autoscaling_trace(
            cluster, cluster.url + "/v1/predict", payloads, [(k * one.rps, seconds) for k, seconds in steps]
        )
        deadline = time.monotonic() + settle_s
        while cluster.running_replicas() > 1 and time.monotonic() < deadline:  # the way back down, at no load
            time.sleep(0.5)
        out["replicas_after_settling"] = cluster.running_replicas()
    finally:
        cluster.stop()
    up = next((t for t, n in trace["replicas"] if n > 1), None)
    lo, hi = trace["offered"][1][:2] if len(trace["offered"]) > 1 else (0, 0)
    high = [w for w in trace["windows"] if lo < w["t"] <= hi and w["p99_ms"] is not None]
    out.update(
        trace=trace,
        max_replicas=max(n for _, n in trace["replicas"]),
        second_replica_at_s=up,
        nodes_used=len({r["node"] for r in trace["placement"]}),
        p99_ms_high_before_second=max((w["p99_ms"] for w in high if up is None or w["t"] <= up), default=None),
        p99_ms_high_last_6s=max((w["p99_ms"] for w in high if w["t"] > hi - 6), default=None),
    )
    return out


# --------------------------------------------------------------------------- the suite


@contextlib.contextmanager
def stdout_to_stderr():
    """Ray's processes print to file descriptor 1; keep `ailab bench --json` stdout pure JSON."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def merge_results(results):
    """One LoadResult from several runs of the same kind: all requests, summed measured time."""
    from ailab.bench import LoadResult

    first = results[0]
    return LoadResult(
        first.mode,
        first.url,
        first.clients,
        first.rate_rps,
        sum(r.duration_s for r in results),
        first.warmup_s,
        [rec for r in results for rec in r.records],
        sum(r.elapsed_s for r in results),
    )


def parse_args(argv):
    p = argparse.ArgumentParser(prog="ailab bench scale")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        help="measured seconds per server, over all rounds (default 15, quick 3)",
    )
    p.add_argument("--slo-ms", type=float, default=500.0, help="p99 bound for the best throughput within the SLO (ms)")
    p.add_argument("--sweep", default=None, help="comma-separated concurrencies (default 1,2,4,8,16,32)")
    p.add_argument("--soak-minutes", type=float, default=None, help="soak length in minutes (default 1, quick 0.1)")
    p.add_argument("--no-ray", action="store_true", help="skip the Ray Serve comparison")
    p.add_argument("--rounds", type=int, default=3, help="interleaved ailab/Ray rounds (default 3)")
    p.add_argument("--json", action="store_true", help="accepted; `ailab bench --json scale` prints JSON")
    return p.parse_args(argv or [])


def run(quick: bool = False, argv: list[str] | None = None) -> dict:
    from ailab import bench
    from ailab.device import describe_hardware
    from ailab.services import start_ailab_server

    args = parse_args(argv)
    duration = args.duration or (3.0 if quick else 15.0)
    soak_min = args.soak_minutes if args.soak_minutes is not None else (0.1 if quick else 1.0)
    sweep_c = [int(c) for c in args.sweep.split(",")] if args.sweep else ([1, 8] if quick else [1, 2, 4, 8, 16, 32])
    payloads = [{"inputs": t} for t in _texts()]
    out: dict = {
        "device": describe_hardware().one_line(),
        "clients": args.clients,
        "duration_s": duration,
        "ray_rps": None,
        "ray_p99_ms": None,
        "ratio": None,  # stay None when Ray is skipped
        "load_generator": "ailab.bench closed loop in this process (raw asyncio HTTP/1.1); "
        "the servers run in their own processes",
    }

    rounds = 1 if quick else max(1, args.rounds)
    with (
        stdout_to_stderr(),
        start_ailab_server(["--max-batch-size", "32", "--max-wait-ms", "10", "--max-queue", "1024"]) as srv,
    ):
        url = srv.url + "/v1/predict"
        ray = None
        if not args.no_ray and not quick:  # Ray needs ~2 GB and 20-40 s to start: not in the quick run
            t0 = time.perf_counter()
            ray = RayServe()
            out.update(ray_start_s=ray.start_s, ray_deploy_s=ray.deploy_s)
        try:
            # Interleaved rounds: on a shared machine, background load then hits both servers alike.
            mine, theirs = [], []
            for _ in range(rounds):
                mine.append(bench.closed_loop(url, payloads, args.clients, duration / rounds, warmup_s=2.0))
                if ray is not None:
                    theirs.append(bench.closed_loop(ray.url, payloads, args.clients, duration / rounds, warmup_s=2.0))
            r = merge_results(mine)
            out.update(
                ailab_rps=r.rps,
                ailab_p50_ms=r.stats.p50_ms,
                ailab_p99_ms=r.stats.p99_ms,
                ailab_errors=r.errors_by_status,
            )
            one = bench.closed_loop(url, payloads[:1], 1, 1.5 if quick else 3.0, warmup_s=0.5)
            out["ailab_p50_ms_1_client"] = one.stats.p50_ms
            if ray is not None:
                rr = merge_results(theirs)
                out.update(
                    ray_rps=rr.rps,
                    ray_p50_ms=rr.stats.p50_ms,
                    ray_p99_ms=rr.stats.p99_ms,
                    ray_errors=rr.errors_by_status,
                    replicas=ray.replicas(),
                )
                one = bench.closed_loop(ray.url, payloads[:1], 1, 3.0, warmup_s=0.5)
                out["ray_p50_ms_1_client"] = one.stats.p50_ms
                out["ray_rss_mib"], out["ray_processes"] = ray.rss_mib(), len(ray.processes())
                out["ailab_rss_mib"] = srv.rss_mib()
        finally:
            if ray is not None:
                ray.stop()
                out["ray_total_s"] = time.perf_counter() - t0
        if ray is not None:
            out["ratio"] = out["ailab_rps"] / out["ray_rps"] if out.get("ray_rps") else None
            out["ailab_faster"] = bool(out["ratio"] and out["ratio"] >= 1.3 and out["ailab_p99_ms"] < out["ray_p99_ms"])

        if ray is not None:  # ailab's own app on Ray: two nodes, autoscaling under a rising load
            auto = autoscaling_run(payloads)
            out.update({f"ailab_on_ray_{k}": v for k, v in auto.items() if k != "trace"})

        # Ray is gone: the sweep and the soak see only the ailab server.
        sw = bench.sweep(
            url,
            payloads,
            sweep_c,
            slo_p99_ms=args.slo_ms,
            duration_s=1.5 if quick else 4.0,
            warmup_s=0.5 if quick else 1.0,
        )
        best = sw.best_within_slo or {}
        out.update(
            slo_p99_ms=args.slo_ms,
            best_within_slo_clients=best.get("clients"),
            best_within_slo_rps=best.get("rps"),
            best_within_slo_p99_ms=best.get("p99_ms"),
            sweep=[{k: round(v, 2) if isinstance(v, float) else v for k, v in p.items()} for p in sw.points()],
        )
        sk = bench.soak(
            url,
            payloads,
            duration_s=soak_min * 60,
            clients=8,
            pid=srv.pid,
            sample_every_s=max(1.0, soak_min * 60 / 30),
            warmup_s=1.0 if quick else 2.0,
            progress=soak_min >= 1,
        )
        out.update(sk.summary())
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}
