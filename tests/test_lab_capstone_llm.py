"""The LLM capstone's checks fail on plausible wrong answers and pass on the right ones.

judge_run(result, ttft_ms, tpot_ms) -> {good, goodput, ttft_p99_ms, tpot_p99_ms, meets_slo}
| question | what the checks try |
|---|---|
| which input varies each field | TTFT and TPOT each miss alone; the bounds varied as arguments on one run; the duration varies goodput |
| boundaries | a TTFT and a TPOT exactly at the bound (good); 5 of 100 requests slow (p99 high, mean low) |
| a shape the notes never show | one-token answers (no TPOT), only one-token answers (NaN p99), a 200 with no token, an empty run |
| order or ties | - (records in any order give the same answer) |
| errors: type and message | failed requests: never good, left out of the p99s, and the run misses the SLO |
| policy: which item | - |

settings (check_engine_settings, then check_settings_meet_the_target live)
| question | what the checks try |
|---|---|
| which input varies each field | each key alone out of range; the live check runs the settings beside the defaults |
| boundaries | seats 0 and 257, blocks 31 and 2049, a budget below the seats, True for a number |
| a type the notes never show | a missing key, an unknown one, None, a function returning the dict |
| policy | live: the defaults and 16 seats alone are rejected, each with the question that fits it |

vllm_flags(settings, block_size, kv_bytes_per_token, max_model_len) -> list[str]: compared with the reference as a
set of flags and values over generated settings, block sizes and bytes per token.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ailab.labs import lab_capstone_llm as lab
from ailab.labs.core import LabCheckFailed


def right_judge(result, ttft_ms, tpot_ms):
    ok = [r for r in result.records if r.ok]

    def tpot(r):
        return (r.e2e_s - r.ttft_s) * 1e3 / (r.output_tokens - 1) if r.output_tokens > 1 else None

    good = sum(1 for r in ok if r.ttft_s * 1e3 <= ttft_ms and (tpot(r) is None or tpot(r) <= tpot_ms))
    ttfts = [r.ttft_s * 1e3 for r in ok]
    tpots = [tpot(r) for r in ok if tpot(r) is not None]
    t99 = float(np.percentile(ttfts, 99)) if ttfts else math.nan
    p99 = float(np.percentile(tpots, 99)) if tpots else math.nan
    meets = bool(ok) and len(ok) == len(result.records) and t99 <= ttft_ms and (math.isnan(p99) or p99 <= tpot_ms)
    return {
        "good": good,
        "goodput": good / result.duration_s,
        "ttft_p99_ms": t99,
        "tpot_p99_ms": p99,
        "meets_slo": meets,
    }


def stub(*args):
    raise NotImplementedError("judge_run() is not implemented yet")


def _with(good_rule=None, p99=None, meets_rule=None, per=None):
    """A judge built like right_judge with one part changed."""

    def judge(result, ttft_ms, tpot_ms):
        out = right_judge(result, ttft_ms, tpot_ms)
        if good_rule is not None:
            out["good"] = sum(1 for r in result.records if good_rule(r, ttft_ms, tpot_ms))
            out["goodput"] = out["good"] / result.duration_s
        if p99 is not None:
            ok = [r for r in result.records if r.ok]
            out["ttft_p99_ms"] = p99([r.ttft_s * 1e3 for r in ok]) if ok else math.nan
        if meets_rule is not None:
            out["meets_slo"] = meets_rule(result, out, ttft_ms, tpot_ms)
        if per is not None:
            out["goodput"] = per(result, out)
        return out

    return judge


def _tpot_ms(r):
    return r.tpot_s * 1e3


WRONG_JUDGES = {
    "TTFT only": (_with(good_rule=lambda r, t, p: r.ok and r.ttft_s * 1e3 <= t), "both bounds"),
    "the bound itself misses": (
        _with(good_rule=lambda r, t, p: r.ok and r.ttft_s * 1e3 < t and _tpot_ms(r) < p),
        "includes the bound",
    ),
    "TPOT counts the first token": (
        _with(good_rule=lambda r, t, p: r.ok and r.ttft_s * 1e3 <= t and r.e2e_s * 1e3 / max(r.output_tokens, 1) <= p),
        "e2e - TTFT",
    ),
    "a failed request is good": (
        _with(good_rule=lambda r, t, p: r.ttft_s is None or (r.ttft_s * 1e3 <= t and _tpot_ms(r) <= p)),
        "failed request",
    ),
    "goodput is the share of requests": (
        _with(per=lambda res, out: out["good"] / max(len(res.records), 1)),
        "duration",
    ),
    "mean instead of p99": (_with(p99=lambda xs: float(np.mean(xs))), "p99"),
    "bounds read as seconds": (
        _with(good_rule=lambda r, t, p: r.ok and r.ttft_s <= t and r.tpot_s <= p),
        "milliseconds",
    ),
    "failures do not touch the verdict": (
        _with(meets_rule=lambda res, out, t, p: out["ttft_p99_ms"] <= t and not out["tpot_p99_ms"] > p),
        "misses the SLO",
    ),
    "a NaN TPOT p99 misses": (
        _with(
            meets_rule=lambda res, out, t, p: (
                all(r.ok for r in res.records)
                and bool(res.records)
                and out["ttft_p99_ms"] <= t
                and out["tpot_p99_ms"] <= p
            )
        ),
        "bounds nothing",
    ),
    "stub": (stub, "not implemented"),
}


def test_the_right_judges_pass_both_checks():
    for judge in (right_judge, lab._reference_judge_run):
        lab.check_judge_run(judge)
        lab.check_judge_run_same_as_reference(judge)


@pytest.mark.parametrize("name", list(WRONG_JUDGES))
def test_each_wrong_judge_fails_the_cases_naming_what_to_look_at(name):
    judge, match = WRONG_JUDGES[name]
    with pytest.raises(LabCheckFailed, match=match):
        lab.check_judge_run(judge)


@pytest.mark.parametrize("name", list(WRONG_JUDGES))
def test_each_wrong_judge_fails_the_differential_check(name):
    judge, _ = WRONG_JUDGES[name]
    with pytest.raises(LabCheckFailed, match="differ|not implemented|changed its input"):
        lab.check_judge_run_same_as_reference(judge)


def status_200_is_success(result, ttft_ms, tpot_ms):
    """Parsing: a status of 200 taken for success, where `ok` also needs a first token (a stream can end empty)."""
    kept = [r for r in result.records if r.status == 200]
    out = right_judge(result, ttft_ms, tpot_ms)
    out["meets_slo"] = out["meets_slo"] or (
        bool(kept)
        and len(kept) == len(result.records)
        and out["ttft_p99_ms"] <= ttft_ms
        and not out["tpot_p99_ms"] > tpot_ms
    )
    return out


def sorts_the_records(result, ttft_ms, tpot_ms):
    """State: sorts the caller's records by TTFT to read the tail."""
    result.records.sort(key=lambda r: -1 if r.ttft_s is None else r.ttft_s)
    return right_judge(result, ttft_ms, tpot_ms)


def whole_milliseconds(result, ttft_ms, tpot_ms):
    """Units and rounding: TTFT rounded to whole milliseconds before it meets its bound (200.4 ms 'meets' 200)."""
    out = right_judge(result, ttft_ms, tpot_ms)
    ok = [r for r in result.records if r.ok]
    out["good"] = sum(1 for r in ok if round(r.ttft_s * 1e3) <= ttft_ms and r.tpot_s * 1e3 <= tpot_ms)
    out["goodput"] = out["good"] / result.duration_s
    return out


NEW_WRONG_JUDGES = {
    "a 200 is a success": status_200_is_success,
    "sorts the records": sorts_the_records,
    "whole milliseconds": whole_milliseconds,
}


@pytest.mark.parametrize("name", list(NEW_WRONG_JUDGES))
def test_subtle_wrong_judges_pass_the_cases_but_not_the_differential_check(name):
    judge = NEW_WRONG_JUDGES[name]
    lab.check_judge_run(judge)  # the listed cases do not show these
    with pytest.raises(LabCheckFailed, match="differ|changed its input"):
        lab.check_judge_run_same_as_reference(judge)


def test_the_judge_check_reads_a_bare_dict_wrongly_shaped_answer_with_words():
    with pytest.raises(LabCheckFailed, match="exactly the keys"):
        lab.check_judge_run(lambda res, t, p: {**right_judge(res, t, p), "extra": 1})
    with pytest.raises(LabCheckFailed, match="should return a dict"):
        lab.check_judge_run(lambda res, t, p: (True, "fine"))
    with pytest.raises(LabCheckFailed, match="meets_slo should be True or False"):
        lab.check_judge_run(lambda res, t, p: {**right_judge(res, t, p), "meets_slo": "yes"})


# --------------------------------------------------------------------------- vllm_flags


def right_flags(settings, block_size, kv_bytes_per_token, max_model_len):
    s = settings
    budget = s["max_num_batched_tokens"] or s["seats"] * max_model_len
    out = ["--enable-prefix-caching" if s["prefix_caching"] else "--no-enable-prefix-caching"]
    out += ["--max-num-batched-tokens", str(budget), "--enable-chunked-prefill"]
    return (
        out
        + ["--kv-cache-memory-bytes", str(s["kv_blocks"] * block_size * kv_bytes_per_token)]
        + [
            "--max-num-seqs",
            str(s["seats"]),
        ]
    )


def _flags_with(**change):
    def flags(settings, block_size, kv_bytes_per_token, max_model_len):
        d = lab.parse_flags(right_flags(settings, block_size, kv_bytes_per_token, max_model_len))
        for k, v in change.items():
            v = v(settings, block_size, kv_bytes_per_token, max_model_len) if callable(v) else v
            d.pop(k, None) if v is None else d.__setitem__(k, v)
        return [x for k, v in d.items() for x in ([k] if v is True else [k, v])]

    return flags


WRONG_FLAGS = {
    "seats as the step budget": (
        _flags_with(**{"--max-num-seqs": None, "--max-num-batched-tokens": lambda s, *_: str(s["seats"])}),
        "--max-num-seqs",
    ),
    "blocks without the block size": (
        _flags_with(**{"--kv-cache-memory-bytes": lambda s, b, per, m: str(s["kv_blocks"] * per)}),
        "--kv-cache-memory-bytes",
    ),
    "blocks as a block count": (
        _flags_with(
            **{"--kv-cache-memory-bytes": None, "--num-gpu-blocks-override": lambda s, *_: str(s["kv_blocks"])}
        ),
        "--kv-cache-memory-bytes",
    ),
    "prefix caching off left out": (_flags_with(**{"--no-enable-prefix-caching": None}), "--no-enable-prefix-caching"),
    "no budget left out": (
        _flags_with(
            **{
                "--max-num-batched-tokens": lambda s, *_: (
                    None if s["max_num_batched_tokens"] is None else str(s["max_num_batched_tokens"])
                )
            }
        ),
        "--max-num-batched-tokens",
    ),
    "no budget as one context": (
        _flags_with(**{"--max-num-batched-tokens": lambda s, b, per, m: str(s["max_num_batched_tokens"] or m)}),
        "--max-num-batched-tokens",
    ),
    "numbers not strings": (
        lambda *a: [int(x) if x.isdigit() else x for x in right_flags(*a)],
        "list of str",
    ),
}


def test_the_right_flags_pass_in_any_order():
    lab.check_vllm_flags(right_flags)
    lab.check_vllm_flags(lab._reference_vllm_flags)


@pytest.mark.parametrize("name", list(WRONG_FLAGS))
def test_each_wrong_mapping_fails_naming_the_flag(name):
    flags, match = WRONG_FLAGS[name]
    with pytest.raises(LabCheckFailed, match=match):
        lab.check_vllm_flags(flags)


def test_parse_flags_refuses_what_is_not_a_command_line():
    assert lab.parse_flags(["--a", "1", "--b", "--c", "x"]) == {"--a": "1", "--b": True, "--c": "x"}
    for bad, match in ((["16"], "neither"), (["--a", "1", "--a", "2"], "twice"), ("--a 1", "list of str")):
        with pytest.raises(ValueError, match=match):
            lab.parse_flags(bad)


# --------------------------------------------------------------------------- settings


def test_the_settings_check_never_crashes_and_agrees_with_its_rules():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    values = st.one_of(
        st.sampled_from([None, True, False, 0, 1, 8, 16, 31, 32, 256, 257, 2048, 2049, 8192, 8193, 16.0, "16"]),
        st.integers(-2, 9000),
    )
    keys = st.sampled_from([*lab.SETTING_KEYS, "max_running", "Seats"])

    def allowed(s):
        if set(s) != set(lab.SETTING_KEYS):
            return False
        whole = [isinstance(s[k], int) and not isinstance(s[k], bool) for k in ("seats", "kv_blocks")]
        if not all(whole) or not 1 <= s["seats"] <= 256 or not 32 <= s["kv_blocks"] <= 2048:
            return False
        b = s["max_num_batched_tokens"]
        if b is not None and not (isinstance(b, int) and not isinstance(b, bool) and s["seats"] <= b <= 8192):
            return False
        return isinstance(s["prefix_caching"], bool)

    @settings(max_examples=200, deadline=None, database=None)
    @given(st.dictionaries(keys, values, min_size=3, max_size=5))
    def run(s):
        try:
            lab.check_engine_settings(s)
            passed = True
        except LabCheckFailed as e:
            passed = False
            assert "could not judge" not in str(e), str(e)
        assert passed == allowed(s), (s, passed)

    run()


@pytest.mark.parametrize(
    "settings, match",
    [
        ({**lab.DEFAULTS, "seats": 0}, "seats"),
        ({**lab.DEFAULTS, "kv_blocks": 31}, "one request of the model's whole context"),
        ({**lab.DEFAULTS, "max_num_batched_tokens": 4}, "every seat decodes a token a step"),
        ({**lab.DEFAULTS, "prefix_caching": 1}, "True or False"),
        ({"seats": 16}, "give every setting"),
        ({**lab.DEFAULTS, "max_running": 16}, "unknown"),
    ],
)
def test_malformed_settings_are_refused_with_the_rule(settings, match):
    with pytest.raises(LabCheckFailed, match=match):
        lab.check_engine_settings(settings)
    with pytest.raises(LabCheckFailed, match=match):  # the live check refuses them before it runs anything
        lab.check_settings_meet_the_target(settings)


def test_the_verdict_is_the_median_round_and_a_defaults_run_with_nothing_good_keeps_the_ratio_finite():
    def row(i, name, goodput, share):
        return {"round": i, "name": name, "goodput": goodput, "good_share": share}

    rows = [row(0, "defaults", 2.0, 0.1), row(0, "yours", 20.0, 1.0), row(1, "defaults", 0.0, 0.0)]
    rows += [row(1, "yours", 1.0, 0.05), row(2, "defaults", 2.0, 0.1), row(2, "yours", 8.0, 0.9)]
    v = lab._verdict(rows)
    assert v["ratios"] == [10.0, 60.0, 4.0] and v["ratio"] == 10.0 and v["share"] == 0.9


# --------------------------------------------------------------------------- the live parts (few, short)


def test_an_in_process_run_is_a_serve_result_and_a_run_cut_short_fails_what_was_in_flight():
    from ailab.bench.llm import ServeResult

    trace = lab.workload()[:24]
    whole = lab.run_in_process({**lab.DEFAULTS, "seats": 4}, trace, clients=6)
    assert isinstance(whole, ServeResult) and len(whole.records) == 24 and all(r.ok for r in whole.records)
    assert [r.output_tokens for r in whole.records] == [t.max_tokens for t in trace]
    assert all(0 < r.ttft_s <= r.e2e_s for r in whole.records)
    cut = lab.run_in_process(lab.DEFAULTS, trace, clients=6, limit_s=0.01)
    statuses = [r.status for r in cut.records]
    assert 6 <= len(statuses) < 24 and "timeout" in statuses and set(statuses) <= {200, "timeout"}, statuses
    assert not lab._reference_judge_run(cut, 1e9, 1e9)["meets_slo"]


def test_the_engine_server_runs_the_settings_over_http():
    """start_engine_server (the vLLM section's ailab side) serves the trace with every knob set."""
    from ailab.bench.llm import serve_bench

    with lab.start_engine_server(
        {"seats": 4, "kv_blocks": 64, "max_num_batched_tokens": 64, "prefix_caching": True}
    ) as s:
        result = serve_bench(s.url, lab.MODEL, lab.workload()[:8], max_concurrency=4)
    assert [r.status for r in result.records] == [200] * 8
    assert [r.output_tokens for r in result.records] == [t.max_tokens for t in lab.workload()[:8]]


def test_without_vllm_the_vllm_part_says_why_it_skips(monkeypatch, tmp_path):
    monkeypatch.setenv("AILAB_VLLM_PYTHON", str(tmp_path / "no-python"))
    out = lab.both_servers(lab.REFERENCE_SETTINGS, lab._reference_vllm_flags)
    assert out == {"skipped": f"no python at {tmp_path / 'no-python'}"}


@pytest.mark.parametrize(
    "name, settings, match",
    [
        ("the engine's defaults (tunes nothing)", lab.DEFAULTS, "8 seats: where does a message wait"),
        ("a seat for every user, and the defaults' blocks", {**lab.DEFAULTS, "seats": 16}, "blocks of 16 tokens hold"),
    ],
)
def test_the_live_check_rejects_naive_settings(monkeypatch, name, settings, match):
    # One round a try (the check's own three would take a minute each here): both miss the target by far in every
    # round measured (the defaults 8-17 % of the requests good; 16 seats with 256 blocks 5-67 %).
    monkeypatch.setattr(lab, "ROUNDS", 1)
    with pytest.raises(LabCheckFailed, match=match):
        lab.check_settings_meet_the_target(settings)


# That the live check passes good settings is proved by nbval over the solution notebook, which runs it on the
# solution's settings.


def test_what_vllm_says_of_its_cache_is_read_from_its_log():
    log = (
        "\x1b[0;36m(APIServer pid=1)\x1b[0;0m INFO [scheduler.py:307] Chunked prefill is enabled with "
        "max_num_batched_tokens=256.\nnoise\n(EngineCore pid=2) INFO [kv_cache_utils.py:2327] CPU KV cache size: "
        "8,192 tokens, Maximum concurrency for 512 tokens per request: 16.00x"
    )
    said = lab._vllm_says(log)
    assert said["vllm_kv_tokens"] == 8192 == lab.REFERENCE_SETTINGS["kv_blocks"] * lab.BLOCK_SIZE
    assert said["vllm_log"][0] == "Chunked prefill is enabled with max_num_batched_tokens=256."
    assert lab._vllm_says("nothing")["vllm_kv_tokens"] is None
