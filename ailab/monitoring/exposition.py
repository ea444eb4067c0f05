"""What a server's /metrics says: the Prometheus text format read into snapshots of cumulative counters, and
statistics over the window between two of them (p50/p99 by histogram_quantile, as Prometheus computes them)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

LATENCY_METRIC = "ailab_request_latency_seconds"  # labelled by route: the latency SLO is /v1/predict's
REQUESTS_METRIC = "ailab_requests"  # exposed as ailab_requests_total{route="...",status="..."}
PREDICT_ROUTE = "/v1/predict"
NOT_TRAFFIC = ("/healthz", "/readyz", "/metrics")  # probes and scrapes: counted by the server, not users' requests
RSS_METRIC = "ailab_process_resident_memory_bytes"


@dataclass
class Snapshot:
    """Cumulative counters of one scrape (Prometheus counters only ever go up)."""

    t: float
    buckets: dict[float, float]  # upper bound (s) -> cumulative count, including +Inf
    requests: dict[str, float]  # HTTP status -> count
    rss_bytes: float = math.nan


def samples(text: str):
    """Every sample (name, labels, value) of a Prometheus text exposition: the one parser the course uses."""
    from prometheus_client.parser import text_string_to_metric_families

    for fam in text_string_to_metric_families(text):
        yield from fam.samples


def read_metrics(text: str) -> dict:
    """Prometheus text -> {sample name + labels: value}, e.g. 'ailab_requests_total{route="/v1/predict",status="200"}'."""
    out = {}
    for s in samples(text):
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


def histogram_from_metrics(metrics: dict, name: str) -> tuple[list[float], list[float]]:
    """(upper bounds, count per bucket - not cumulative) of a Prometheus histogram read by read_metrics."""
    cum = sorted(
        ((float(k.split('le="')[1].rstrip('"}')), v) for k, v in metrics.items() if k.startswith(name + "_bucket")),
        key=lambda kv: kv[0],
    )
    bounds = [b for b, _ in cum]
    counts = [v - (cum[i - 1][1] if i else 0) for i, (_, v) in enumerate(cum)]
    return bounds, counts


def parse_exposition(text: str, t: float | None = None, route: str = PREDICT_ROUTE) -> Snapshot:
    """Read the Prometheus text format (what /metrics returns) into a Snapshot: the latency of `route`, and the
    requests of every route but the probes and /metrics (as the rules in monitoring/alerts.yml select them)."""
    buckets, requests, rss = {}, {}, math.nan
    for s in samples(text):
        where = s.labels.get("route")
        if s.name == LATENCY_METRIC + "_bucket" and where in (None, route):
            buckets[float(s.labels["le"])] = s.value
        elif s.name == REQUESTS_METRIC + "_total" and where not in NOT_TRAFFIC:
            status = s.labels.get("status", "")
            requests[status] = requests.get(status, 0.0) + s.value
        elif s.name == RSS_METRIC:
            rss = s.value
    if not buckets:
        raise ValueError(f"no {LATENCY_METRIC} histogram in the metrics: is this an ailab server's /metrics?")
    return Snapshot(time.time() if t is None else t, buckets, requests, rss)


def scrape(url: str, timeout_s: float = 5.0, headers: dict | None = None) -> Snapshot:
    """GET `url` (a /metrics endpoint) and parse it."""
    import httpx

    try:
        r = httpx.get(url, timeout=timeout_s, headers=headers)
    except httpx.HTTPError as e:
        raise ConnectionError(f"cannot scrape {url}: {type(e).__name__}: {e}") from None
    if r.status_code != 200:
        raise ConnectionError(f"scraping {url} answered HTTP {r.status_code}: {r.text[:200]}")
    return parse_exposition(r.text)


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """Prometheus's histogram_quantile: find the bucket holding rank q*count, interpolate linearly in it."""
    bounds = sorted(buckets)
    counts = [buckets[b] for b in bounds]
    total = counts[-1] if counts else 0
    if total <= 0:
        return math.nan
    rank = q * total
    prev_b, prev_c = 0.0, 0.0
    for b, c in zip(bounds, counts):
        if c >= rank:
            if math.isinf(b):  # beyond the last finite bucket: the best answer is that bucket's bound
                return prev_b
            return prev_b + (b - prev_b) * (rank - prev_c) / (c - prev_c) if c > prev_c else b
        prev_b, prev_c = b, c
    return prev_b


def window_stats(old: Snapshot, new: Snapshot) -> dict:
    """p50/p99 latency (ms), error rate (5xx share) and req/s between two snapshots."""
    dt = new.t - old.t
    if dt <= 0:
        raise ValueError("the second snapshot must be later than the first")
    delta = {b: new.buckets.get(b, 0) - old.buckets.get(b, 0) for b in new.buckets}
    n = sum(new.requests.values()) - sum(old.requests.values())
    errors = sum(v - old.requests.get(k, 0) for k, v in new.requests.items() if k.startswith("5"))
    return {
        "p50_ms": histogram_quantile(0.5, delta) * 1e3,
        "p99_ms": histogram_quantile(0.99, delta) * 1e3,
        "error_rate": errors / n if n > 0 else math.nan,
        "rps": n / dt,
        "rss_mb": new.rss_bytes / 2**20 if not math.isnan(new.rss_bytes) else math.nan,
    }
