"""The serving notebooks' widget callbacks: plain functions over measured rows or token lengths (no server, no
model), each tested in pytest and replayed by a slider.

- grid_figure        notebook 3/02: the batcher grid (max wait x max batch size) at the chosen cell
- padding_by_bucket  notebook 3/03: the padding a batch of lengths costs at one bucket width, computed
- bucketing_view     notebook 3/03: that padding at every width, beside what the batcher measured
"""

from __future__ import annotations


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
