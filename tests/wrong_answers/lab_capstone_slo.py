"""Independent wrong answers for lab_capstone_slo, written from labs/4_application/lab_capstone_slo.ipynb's contract alone."""


def slo_verdict(result, target_rps, p99_bound_ms, max_error_rate):
    problems = []
    if result.rps < 0.9 * target_rps:
        problems.append(f"served {result.rps:.1f} req/s < 90% of {target_rps:g}")
    if result.stats.p99_ms > p99_bound_ms:
        problems.append(f"p99 {result.stats.p99_ms:.0f} ms > {p99_bound_ms:g} ms")
    if result.error_rate > max_error_rate:
        problems.append(f"error rate {result.error_rate:.1%} > {max_error_rate:.0%}")
    return (not problems), "; ".join(problems) or "meets the SLO"


def choose_settings():
    return {"max_batch_size": 16, "max_wait_ms": 5, "length_bucket_tokens": 16}


def verdict_p99_at_bound_fails(result, target_rps, p99_bound_ms, max_error_rate):
    """A p99 that reaches the bound misses it."""
    # differs on rps 50, p99 500.0 ms, error 0.0 against (50, 500, 0.01): (False, ...) instead of (True, ...)
    problems = []
    if result.rps < 0.9 * target_rps:
        problems.append(f"served {result.rps:.1f} req/s < 90% of {target_rps:g}")
    if result.stats.p99_ms >= p99_bound_ms:
        problems.append(f"p99 {result.stats.p99_ms:.0f} ms >= {p99_bound_ms:g} ms")
    if result.error_rate > max_error_rate:
        problems.append(f"error rate {result.error_rate:.1%} > {max_error_rate:.0%}")
    return (not problems), "; ".join(problems) or "meets the SLO"


def verdict_error_rate_in_percent(result, target_rps, p99_bound_ms, max_error_rate):
    """Compares the error rate in percent with the bound (1 % of requests)."""
    # differs on rps 50, p99 100 ms, error 0.005 against (50, 500, 0.01): (False, "error rate 0.5% > ...")
    # instead of (True, ...)
    problems = []
    if result.rps < 0.9 * target_rps:
        problems.append(f"served {result.rps:.1f} req/s < 90% of {target_rps:g}")
    if result.stats.p99_ms > p99_bound_ms:
        problems.append(f"p99 {result.stats.p99_ms:.0f} ms > {p99_bound_ms:g} ms")
    if 100 * result.error_rate > max_error_rate:
        problems.append(f"error rate {100 * result.error_rate:.1f}% > {max_error_rate}")
    return (not problems), "; ".join(problems) or "meets the SLO"


def verdict_full_rate(result, target_rps, p99_bound_ms, max_error_rate):
    """Requires the whole offered rate to be served."""
    # differs on rps 47, p99 100 ms, error 0.0 against (50, 500, 0.01): (False, ...) instead of (True, ...)
    problems = []
    if result.rps < target_rps:
        problems.append(f"served {result.rps:.1f} req/s < {target_rps:g}")
    if result.stats.p99_ms > p99_bound_ms:
        problems.append(f"p99 {result.stats.p99_ms:.0f} ms > {p99_bound_ms:g} ms")
    if result.error_rate > max_error_rate:
        problems.append(f"error rate {result.error_rate:.1%} > {max_error_rate:.0%}")
    return (not problems), "; ".join(problems) or "meets the SLO"


def verdict_empty_reason(result, target_rps, p99_bound_ms, max_error_rate):
    """The reason is the joined problems: nothing to say when all is well."""
    # differs on rps 50, p99 100 ms, error 0.0 against (50, 500, 0.01): (True, "") instead of (True, "meets the SLO")
    problems = []
    if result.rps < 0.9 * target_rps:
        problems.append(f"served {result.rps:.1f} req/s < 90% of {target_rps:g}")
    if result.stats.p99_ms > p99_bound_ms:
        problems.append(f"p99 {result.stats.p99_ms:.0f} ms > {p99_bound_ms:g} ms")
    if result.error_rate > max_error_rate:
        problems.append(f"error rate {result.error_rate:.1%} > {max_error_rate:.0%}")
    return (not problems), "; ".join(problems)


def verdict_p99_in_seconds(result, target_rps, p99_bound_ms, max_error_rate):
    """Converts the p99 to seconds before the comparison, as latencies are reported in seconds elsewhere."""
    # differs on rps 50, p99 900 ms, error 0.0 against (50, 500, 0.01): (True, ...) instead of (False, "p99 900 ms > 500 ms")
    problems = []
    if result.rps < 0.9 * target_rps:
        problems.append(f"served {result.rps:.1f} req/s < 90% of {target_rps:g}")
    if result.stats.p99_ms / 1000 > p99_bound_ms:
        problems.append(f"p99 {result.stats.p99_ms / 1000:.3f} s > {p99_bound_ms:g}")
    if result.error_rate > max_error_rate:
        problems.append(f"error rate {result.error_rate:.1%} > {max_error_rate:.0%}")
    return (not problems), "; ".join(problems) or "meets the SLO"


def settings_misspelled_bucket():
    """Names the length band setting after the batcher's bucket_fn."""
    # differs: {"max_batch_size": 16, "max_wait_ms": 5, "bucket_tokens": 16} (no such server setting)
    return {"max_batch_size": 16, "max_wait_ms": 5, "bucket_tokens": 16}


def settings_band_is_model_length():
    """Sets the band width to the model's 64 word pieces, so no text is cut."""
    # differs: length_bucket_tokens 64 puts short and (truncated) long texts in one band: no bucketing at all
    return {"max_batch_size": 16, "max_wait_ms": 5, "length_bucket_tokens": 64}


RIGHT = {"slo_verdict": slo_verdict, "settings": choose_settings}
WRONG = [
    ("slo_verdict", verdict_p99_at_bound_fails, "boundaries"),
    ("slo_verdict", verdict_error_rate_in_percent, "units"),
    ("slo_verdict", verdict_full_rate, "misread prose"),
    ("slo_verdict", verdict_empty_reason, "boundaries: empty list"),
    ("slo_verdict", verdict_p99_in_seconds, "units"),
    ("settings", settings_misspelled_bucket, "parsing"),
    ("settings", settings_band_is_model_length, "misread prose"),
]
