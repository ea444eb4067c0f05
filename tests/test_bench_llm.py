"""The LLM load generator (ailab.bench.llm) and the generation-serve suite's parts: the figures vllm bench serve
reports, by its definitions; the byte-level tokenizer vLLM's client needs; the trace; and no growth: a finished
generation request leaves the server (object counts, and the RSS slope of a soak by the soak tool)."""

from __future__ import annotations

import gc
import math

import pytest

from ailab.bench.llm import GenRecord, ServeResult, serve_bench
from ailab.generation import Decoder, Request
from ailab.models import tiny_gpt
from ailab.server import create_app, start_in_thread
from ailab.server.async_llm import AsyncLLM
from ailab.server.output_processor import RequestState
from ailab.suites.generation_serve import byte_tokenizer
from ailab.traces import make_trace


@pytest.fixture(scope="module")
def served():
    engine = AsyncLLM(Decoder(tiny_gpt("1m")), num_blocks=64, block_size=16, max_running=4, name="g")
    with start_in_thread(create_app(generation=engine)) as handle:
        yield handle.url, engine


def test_serve_bench_measures_every_request_as_vllm_defines_it(served):
    url, _ = served
    trace = make_trace(12, prompt_bytes=20, output_tokens=9)
    result = serve_bench(url, "g", trace, max_concurrency=3)
    assert len(result.records) == 12 and all(r.ok for r in result.records)
    for r in result.records:
        assert r.output_tokens == 9 and r.prompt_tokens == 20
        assert 0 < r.ttft_s <= r.e2e_s and len(r.itl_s) >= 1 and all(x >= 0 for x in r.itl_s)
        assert r.tpot_s == pytest.approx((r.e2e_s - r.ttft_s) / 8)
        assert sum(r.itl_s) == pytest.approx(r.e2e_s - r.ttft_s, abs=1e-6), "the gaps add up to the decode time"
    s = result.summary({"ttft": 1e6, "tpot": 1e6})
    assert s["completed"] == 12 and s["failed"] == 0 and s["errors"] == []
    assert s["output_throughput"] == pytest.approx(12 * 9 / result.duration_s)
    assert s["request_goodput"] == pytest.approx(s["request_throughput"]), "an SLO nobody misses: goodput = all"
    assert result.summary({"ttft": 1e-6})["request_goodput"] == 0.0
    assert s["median_ttft_ms"] <= s["p99_ttft_ms"] and s["mean_e2el_ms"] >= s["mean_ttft_ms"]


def test_failures_count_and_the_slo_names_are_checked(served):
    url, _ = served
    bad = serve_bench(url, "no-such-model", make_trace(3, 10, 4), max_concurrency=2)
    assert [r.status for r in bad.records] == [404] * 3 and bad.summary()["failed"] == 3
    assert bad.summary()["errors"] == ["404"] and math.isnan(bad.summary()["median_ttft_ms"])
    with pytest.raises(ValueError, match="ttft, tpot and e2el"):
        ServeResult([GenRecord(0.0)], 1.0, 1, None).summary({"latency": 5})
    with pytest.raises(ValueError, match="empty"):
        serve_bench(url, "g", [])


def test_a_rate_spreads_the_requests_out(served):
    url, _ = served
    result = serve_bench(url, "g", make_trace(8, 10, 2), max_concurrency=None, request_rate=40.0, seed=1)
    sent = sorted(r.sent_s for r in result.records)
    assert all(r.ok for r in result.records) and sent[-1] - sent[0] > 0.05, "Poisson arrivals, not one burst"


def test_the_byte_tokenizer_gives_the_bytes_as_ids(tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(byte_tokenizer(tmp_path / "tok")))
    for text in ("This movie", "héllo € ünïcode", "\x00\n\t"):
        ids = tok(text, add_special_tokens=False).input_ids
        assert ids == list(text.encode()) and tok.decode(ids) == text
    assert len(tok) == 256


def _live(kind) -> int:
    gc.collect()
    return sum(isinstance(o, kind) for o in gc.get_objects())


def test_a_finished_request_leaves_the_server(served):
    """The leak the issue measured (Scheduler.finished kept every request, ~3.3 KB each): after 300 requests the
    server holds no more generation requests than before."""
    url, engine = served
    serve_bench(url, "g", make_trace(20, 16, 4), max_concurrency=4)  # warm
    before = (_live(Request), _live(RequestState))
    serve_bench(url, "g", make_trace(300, 16, 4), max_concurrency=8)
    assert (_live(Request), _live(RequestState)) == before
    assert engine.in_engine == 0 and not engine.core.running and not engine.core.waiting


def test_a_generation_soak_is_flat():
    """The soak tool on `ailab serve --generate` in its own process: whole answers back to back; the RSS slope after
    warm-up stays under 1 MB per 1,000 requests (the leak was 3.3 MB per 1,000)."""
    from ailab import bench
    from ailab.services import start_ailab_server

    with start_ailab_server(["--generate", "1m"]) as server:
        payloads = [
            {"model": "ailab-gpt-1m", "prompt": t.text, "max_tokens": t.max_tokens, "temperature": 0}
            for t in make_trace(64, 24, 2)
        ]
        sk = bench.soak(
            server.url + "/v1/completions",
            payloads,
            duration_s=16.0,
            clients=8,
            pid=server.pid,
            sample_every_s=0.5,
            warmup_s=4.0,
            progress=False,
        )
    per_1000 = sk.rss_slope_mb_per_min / (sk.load.rps * 60) * 1000
    assert sk.load.n_ok >= 1000 and sk.load.n_ok == sk.load.n, (sk.load.n_ok, sk.load.n)
    assert per_1000 < 1.0, (per_1000, sk.samples)


def test_the_bare_decode_step_is_timed_with_every_seat_decoding_and_nothing_admitted():
    from ailab.generation import Decoder
    from ailab.models import tiny_gpt
    from ailab.suites.generation_serve import bare_decode_step_ms

    ms = bare_decode_step_ms(Decoder(tiny_gpt("1m")), seats=4, context=20, steps=5)
    assert 0 < ms < 5_000


def test_peers_generation_names_each_feature_as_each_server_does():
    from ailab.suites import peers_generation as peers

    assert peers.ailab_feature_flags(64) == ["--enable-prefix-caching", "--max-num-batched-tokens", "64"]
    on = peers.vllm_feature_flags(True, 64, 16)
    assert "--enable-prefix-caching" in on and "--enable-chunked-prefill" in on
    assert on[on.index("--max-num-batched-tokens") + 1] == "64"
    off = peers.vllm_feature_flags(False, 64, 16)  # vLLM's own defaults have both on: off says so
    assert "--no-enable-prefix-caching" in off and "--no-enable-chunked-prefill" in off
    args = peers.parse_args(["--trace", "mixed", "--features", "both"])
    assert (args.trace, args.features, args.long_prompt_bytes) == ("mixed", "both", 1000)


def test_compare_flags_adds_the_flags_to_the_second_server_and_rates_it_per_round(monkeypatch):
    """--compare-flags: the same trace through the server as the suite starts it and through one with the flags
    added (later flags win over the suite's --torch-threads), in every round; more-is-better ratios on over off."""
    from ailab.suites import generation_serve as gs

    started = []

    class Server:
        def __init__(self, argv):
            self.argv, self.url = argv, f"http://server-{len(started)}"
            started.append(self)

        def stop(self):
            pass

    speed = {"http://server-0": 100.0, "http://server-1": 150.0}

    class Bench:
        def __init__(self, url):
            self.url = url

        def summary(self, slo):  # the second server 1.5x the first; TPOT and ITL the same on both
            s = speed[self.url]
            return {
                "request_goodput": s / 10,
                "output_throughput": s,
                "median_ttft_ms": 1e3 / s,
                "p99_tpot_ms": 5.0,
                "p99_itl_ms": 5.0,
            }

    def fake_bench(url, model, trace, max_concurrency):
        return Bench(url)

    monkeypatch.setattr("ailab.services.start_ailab_server", Server)
    monkeypatch.setattr("ailab.bench.llm.serve_bench", fake_bench)
    monkeypatch.setattr(gs, "engine_counters", lambda url, headers: {})
    monkeypatch.setattr(gs, "where_it_goes", lambda before, after: {})
    args = gs.parse_args(["--compare-flags", "--torch-threads 2 --generate-seats 16", "--rounds", "2"])
    out = gs.feature_ab(args, trace=[object()] * 20, slo={}, threads=1, flags=gs.shlex.split(args.compare_flags))
    off, on = (s.argv for s in started)
    assert off == ["--generate", "1m", "--torch-threads", "1"]
    assert on == off + ["--torch-threads", "2", "--generate-seats", "16"]
    assert len(out["rounds_detail"]) == 2
    assert out["output_throughput_on_over_off"] == pytest.approx(1.5)
    assert out["request_goodput_on_over_off"] == pytest.approx(1.5)
    assert out["ttft_off_over_on"] == pytest.approx(1.5)
