"""Independent wrong answers for lab_capstone_llm, written from labs/5_generation/lab_capstone_llm.ipynb's contract alone."""

import math

import numpy as np


def _tpot_ms(r):
    return (r.e2e_s - r.ttft_s) * 1000 / (r.output_tokens - 1) if r.output_tokens >= 2 else None


def judge_run(result, ttft_ms, tpot_ms):
    ok = [r for r in result.records if r.ok]
    ttfts = [r.ttft_s * 1000 for r in ok]
    tpots = [_tpot_ms(r) for r in ok if r.output_tokens >= 2]
    good = sum(1 for r in ok if r.ttft_s * 1000 <= ttft_ms and (_tpot_ms(r) is None or _tpot_ms(r) <= tpot_ms))
    ttft_p99 = float(np.percentile(ttfts, 99)) if ttfts else math.nan
    tpot_p99 = float(np.percentile(tpots, 99)) if tpots else math.nan
    meets = bool(ok) and len(ok) == len(result.records) and ttft_p99 <= ttft_ms
    meets = meets and (math.isnan(tpot_p99) or tpot_p99 <= tpot_ms)
    return {
        "good": good,
        "goodput": good / result.duration_s,
        "ttft_p99_ms": ttft_p99,
        "tpot_p99_ms": tpot_p99,
        "meets_slo": meets,
    }


def choose_settings():
    return {"seats": 16, "kv_blocks": 600, "max_num_batched_tokens": 192, "prefix_caching": True}


def vllm_flags(settings, block_size, kv_bytes_per_token, max_model_len):
    seats, budget = settings["seats"], settings["max_num_batched_tokens"]
    budget = seats * max_model_len if budget is None else budget
    return [
        "--max-num-seqs",
        str(seats),
        "--kv-cache-memory-bytes",
        str(settings["kv_blocks"] * block_size * kv_bytes_per_token),
        "--enable-chunked-prefill",
        "--max-num-batched-tokens",
        str(budget),
        "--enable-prefix-caching" if settings["prefix_caching"] else "--no-enable-prefix-caching",
    ]


def _changed(**parts):
    """judge_run with some of its parts computed another way."""

    def judge(result, ttft_ms, tpot_ms):
        out = judge_run(result, ttft_ms, tpot_ms)
        for key, how in parts.items():
            out[key] = how(result, ttft_ms, tpot_ms, out)
        return out

    return judge


def judge_mean_not_p99(result, ttft_ms, tpot_ms):
    """Reads the tail with the mean: the average TTFT and TPOT stand in for the p99s."""
    # differs on 95 requests at 100 ms and 5 at 900 ms: ttft_p99_ms 140 instead of 900, and the SLO "met"
    ok = [r for r in result.records if r.ok]
    ttfts = [r.ttft_s * 1000 for r in ok]
    tpots = [_tpot_ms(r) for r in ok if r.output_tokens >= 2]
    out = judge_run(result, ttft_ms, tpot_ms)
    out["ttft_p99_ms"] = float(np.mean(ttfts)) if ttfts else math.nan
    out["tpot_p99_ms"] = float(np.mean(tpots)) if tpots else math.nan
    out["meets_slo"] = (
        bool(ok)
        and len(ok) == len(result.records)
        and out["ttft_p99_ms"] <= ttft_ms
        and not out["tpot_p99_ms"] > tpot_ms
    )
    return out


def judge_ttft_only(result, ttft_ms, tpot_ms):
    """A good request is one whose first token came in time; TPOT is left to the p99."""
    # differs on 10 of 100 requests decoding at 30 ms a token against 20: good 100 instead of 90
    return _changed(
        good=lambda res, t, p, out: sum(1 for r in res.records if r.ok and r.ttft_s * 1000 <= t),
        goodput=lambda res, t, p, out: sum(1 for r in res.records if r.ok and r.ttft_s * 1000 <= t) / res.duration_s,
    )(result, ttft_ms, tpot_ms)


def judge_tpot_counts_first_token(result, ttft_ms, tpot_ms):
    """TPOT as the whole answer's time over its tokens: e2e / output_tokens."""
    # differs on a request of 150 ms TTFT then 31 tokens 10 ms apart, TPOT bound 12: 14.4 ms, judged bad
    ok = [r for r in result.records if r.ok]

    def tpot(r):
        return r.e2e_s * 1000 / r.output_tokens if r.output_tokens else 0.0

    good = sum(1 for r in ok if r.ttft_s * 1000 <= ttft_ms and tpot(r) <= tpot_ms)
    tpots = [tpot(r) for r in ok if r.output_tokens >= 2]
    out = judge_run(result, ttft_ms, tpot_ms)
    out.update(good=good, goodput=good / result.duration_s)
    out["tpot_p99_ms"] = float(np.percentile(tpots, 99)) if tpots else math.nan
    return out


def judge_bound_is_a_miss(result, ttft_ms, tpot_ms):
    """'Within the bound' read as strictly below it."""
    # differs on a TTFT of exactly 250 ms against 250: that request judged bad
    ok = [r for r in result.records if r.ok]
    good = sum(1 for r in ok if r.ttft_s * 1000 < ttft_ms and (_tpot_ms(r) is None or _tpot_ms(r) < tpot_ms))
    out = judge_run(result, ttft_ms, tpot_ms)
    out.update(good=good, goodput=good / result.duration_s)
    return out


def judge_failed_requests_count(result, ttft_ms, tpot_ms):
    """The SLO judged on the answers that came back: failed requests are simply left out of the verdict."""
    # differs on 8 fast answers, a timeout and a 503: meets_slo True instead of False
    out = judge_run(result, ttft_ms, tpot_ms)
    out["meets_slo"] = out["good"] > 0 and out["ttft_p99_ms"] <= ttft_ms and not out["tpot_p99_ms"] > tpot_ms
    return out


def judge_goodput_per_request(result, ttft_ms, tpot_ms):
    """Goodput as the share of requests that were good."""
    # differs on any run: 1.0 for 99 good of 99 instead of 49.5 req/s over 2 s
    out = judge_run(result, ttft_ms, tpot_ms)
    out["goodput"] = out["good"] / len(result.records) if result.records else 0.0
    return out


def judge_one_token_fails_tpot(result, ttft_ms, tpot_ms):
    """A one-token answer has an infinite time per further token: it can never be good."""
    # differs on 5 one-token answers: good 5 instead of 10
    ok = [r for r in result.records if r.ok]
    good = sum(1 for r in ok if r.output_tokens >= 2 and r.ttft_s * 1000 <= ttft_ms and _tpot_ms(r) <= tpot_ms)
    out = judge_run(result, ttft_ms, tpot_ms)
    out.update(good=good, goodput=good / result.duration_s)
    return out


def judge_bounds_in_seconds(result, ttft_ms, tpot_ms):
    """Compares the record's seconds with the bounds as given."""
    # differs on TTFT 100 ms against a 90 ms bound: 0.1 <= 90, judged good
    ok = [r for r in result.records if r.ok]
    good = sum(1 for r in ok if r.ttft_s <= ttft_ms and (r.output_tokens < 2 or r.tpot_s <= tpot_ms))
    out = judge_run(result, ttft_ms, tpot_ms)
    out.update(good=good, goodput=good / result.duration_s)
    return out


def judge_empty_is_zero(result, ttft_ms, tpot_ms):
    """No samples, no tail: a p99 of 0.0 when nothing succeeded or nothing has a TPOT."""
    # differs on only one-token answers: tpot_p99_ms 0.0 instead of NaN
    out = judge_run(result, ttft_ms, tpot_ms)
    for key in ("ttft_p99_ms", "tpot_p99_ms"):
        if math.isnan(out[key]):
            out[key] = 0.0
    return out


def settings_defaults():
    """Tunes nothing: the engine's own defaults, written out."""
    # differs: 8 seats for 16 users, 256 blocks, no budget, no prefix caching: ~9 % of the requests good
    return {"seats": 8, "kv_blocks": 256, "max_num_batched_tokens": None, "prefix_caching": False}


def settings_seats_only():
    """A seat for every user, nothing else."""
    # differs: 16 seats with 256 blocks run out of blocks; the first burst is prefilled in one step
    return {"seats": 16, "kv_blocks": 256, "max_num_batched_tokens": None, "prefix_caching": False}


def settings_vllm_names():
    """Names the knobs as vLLM does."""
    # differs: max_num_seqs and num_gpu_blocks are vLLM's names, not the lab's keys
    return {"max_num_seqs": 16, "num_gpu_blocks": 512, "max_num_batched_tokens": 256, "prefix_caching": True}


def settings_budget_below_seats():
    """A tiny chunk budget, so no step is ever long."""
    # differs: a budget of 8 tokens is below the 16 seats' decodes (refused)
    return {"seats": 16, "kv_blocks": 512, "max_num_batched_tokens": 8, "prefix_caching": True}


def flags_seats_as_budget(settings, block_size, kv_bytes_per_token, max_model_len):
    """Seats as the step's token budget, vLLM's other 'how many at once' flag."""
    # differs: no --max-num-seqs; --max-num-batched-tokens 16
    out = vllm_flags(settings, block_size, kv_bytes_per_token, max_model_len)
    i = out.index("--max-num-seqs")
    del out[i : i + 2]
    j = out.index("--max-num-batched-tokens")
    out[j + 1] = str(settings["seats"])
    return out


def flags_blocks_without_block_size(settings, block_size, kv_bytes_per_token, max_model_len):
    """The cache's bytes as blocks times the bytes per token."""
    # differs: --kv-cache-memory-bytes 2097152 for 512 blocks, 16 times too small
    out = vllm_flags(settings, block_size, kv_bytes_per_token, max_model_len)
    out[out.index("--kv-cache-memory-bytes") + 1] = str(settings["kv_blocks"] * kv_bytes_per_token)
    return out


def flags_cache_in_gib(settings, block_size, kv_bytes_per_token, max_model_len):
    """The KV space in whole GiB, as VLLM_CPU_KVCACHE_SPACE counts it."""
    # differs: --kv-cache-memory-bytes 0 (32 MiB rounds down to 0 GiB)
    out = vllm_flags(settings, block_size, kv_bytes_per_token, max_model_len)
    i = out.index("--kv-cache-memory-bytes") + 1
    out[i] = str(settings["kv_blocks"] * block_size * kv_bytes_per_token // 2**30)
    return out


def flags_prefix_off_omitted(settings, block_size, kv_bytes_per_token, max_model_len):
    """Prefix caching off is the flag left out."""
    # differs: no --no-enable-prefix-caching when off (vLLM's default is on)
    out = vllm_flags(settings, block_size, kv_bytes_per_token, max_model_len)
    return [f for f in out if f != "--no-enable-prefix-caching"]


def flags_no_budget_omitted(settings, block_size, kv_bytes_per_token, max_model_len):
    """No budget: neither the chunked-prefill switch nor a budget."""
    # differs: with max_num_batched_tokens None, no --max-num-batched-tokens at all
    out = vllm_flags(settings, block_size, kv_bytes_per_token, max_model_len)
    if settings["max_num_batched_tokens"] is None:
        i = out.index("--max-num-batched-tokens")
        del out[i : i + 2]
        out.remove("--enable-chunked-prefill")
    return out


def flags_no_budget_is_one_context(settings, block_size, kv_bytes_per_token, max_model_len):
    """No budget: one whole context a step."""
    # differs: --max-num-batched-tokens 512 instead of 8 x 512 for the defaults
    out = vllm_flags(settings, block_size, kv_bytes_per_token, max_model_len)
    if settings["max_num_batched_tokens"] is None:
        out[out.index("--max-num-batched-tokens") + 1] = str(max_model_len)
    return out


def flags_numbers(settings, block_size, kv_bytes_per_token, max_model_len):
    """The values as numbers; subprocess will convert them."""
    # differs: 16 instead of "16"
    return [int(f) if f.isdigit() else f for f in vllm_flags(settings, block_size, kv_bytes_per_token, max_model_len)]


RIGHT = {"judge_run": judge_run, "settings": choose_settings, "vllm_flags": vllm_flags}
WRONG = [
    ("judge_run", judge_mean_not_p99, "misread prose: mean for p99"),
    ("judge_run", judge_ttft_only, "misread prose: one bound"),
    ("judge_run", judge_tpot_counts_first_token, "formula: TPOT"),
    ("judge_run", judge_bound_is_a_miss, "boundaries"),
    ("judge_run", judge_failed_requests_count, "errors: failures ignored"),
    ("judge_run", judge_goodput_per_request, "units: a share for a rate"),
    ("judge_run", judge_one_token_fails_tpot, "boundaries: one token"),
    ("judge_run", judge_bounds_in_seconds, "units"),
    ("judge_run", judge_empty_is_zero, "boundaries: empty"),
    ("settings", settings_defaults, "tunes nothing"),
    ("settings", settings_seats_only, "one knob"),
    ("settings", settings_vllm_names, "parsing: names"),
    ("settings", settings_budget_below_seats, "boundaries"),
    ("vllm_flags", flags_seats_as_budget, "mapping: wrong flag"),
    ("vllm_flags", flags_blocks_without_block_size, "units: blocks"),
    ("vllm_flags", flags_cache_in_gib, "units: GiB"),
    ("vllm_flags", flags_prefix_off_omitted, "defaults differ"),
    ("vllm_flags", flags_no_budget_omitted, "boundaries: None"),
    ("vllm_flags", flags_no_budget_is_one_context, "misread prose"),
    ("vllm_flags", flags_numbers, "types"),
]
