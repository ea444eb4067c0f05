"""`ailab bench peers`: every peer starts and answers on a tiny model, and hey's summary is read right. Who is
faster is the benchmark's question (`ailab bench peers --json`), not a unit test's."""

import json
import shutil

import pytest

from ailab.suites import peers

HEY_OUTPUT = """
Summary:
  Total:\t5.0012 secs
  Slowest:\t0.2100 secs
  Fastest:\t0.0040 secs
  Average:\t0.0950 secs
  Requests/sec:\t334.1200

Latency distribution:
  10% in 0.0400 secs
  50% in 0.0880 secs
  99% in 0.1500 secs

Status code distribution:
  [200]\t1660 responses
  [503]\t10 responses

Error distribution:
  [3]\tPost "http://127.0.0.1:1/inference": context deadline exceeded
"""


def test_hey_summary_is_parsed_with_failures_counted():
    got = peers.parse_hey(HEY_OUTPUT)
    assert got == {"rps": 334.12, "p50_ms": 88.0, "p99_ms": 150.0, "errors": 13, "n": 1673}
    with pytest.raises(ValueError, match="no throughput"):
        peers.parse_hey("connection refused")


def test_hey_with_fewer_than_100_answers_gives_no_p99():
    # what hey prints for 50 answers (checked against the Debian package): no 99 % line, a "0%" line in its place
    few = HEY_OUTPUT.replace("  99% in 0.1500 secs", "  0% in 0.0000 secs").replace("[200]\t1660", "[200]\t40")
    got = peers.parse_hey(few)
    assert got["p99_ms"] is None and got["p50_ms"] == 88.0 and got["n"] == 53


def test_a_peer_is_held_as_every_server_we_start(tmp_path):
    """One holder for every process we start: a peer is a services.HeldServer whose stop() ends its session."""
    from ailab import services

    assert issubclass(peers.PeerServer, services.HeldServer) and peers.PeerServer.whole_session
    assert not {"pid", "stop", "rss_mib", "__enter__", "__exit__"} & set(vars(peers.PeerServer))
    peer = peers.PeerServer(8123, tmp_path, name="mosec", path="/inference")
    assert peer.url == "http://127.0.0.1:8123/inference" and peer.log.parent == peer.trace.parent == tmp_path
    peer.stop()  # no process yet: only its folder to remove
    assert not tmp_path.exists()


def test_an_unknown_peer_is_refused_by_name():
    with pytest.raises(SystemExit, match="unknown peer"):
        peers.run(argv=["--peers", "ailab,triton"])


@pytest.mark.skipif(shutil.which("hey") is None, reason="hey is not installed (make services)")
def test_bench_peers_quick_starts_every_peer_and_answers():
    pytest.importorskip("mosec")
    pytest.importorskip("litserve")
    out = peers.run(quick=True)
    assert set(out["summary"]) == {"ailab", "mosec", "litserve"} and out["model"] == "tiny"
    for peer, by_generator in out["summary"].items():
        assert set(by_generator) == {"ailab.bench", "hey"}, peer
        for generator, by_clients in by_generator.items():
            assert by_clients["8"]["rps"] > 0 and by_clients["8"]["errors"] == 0, (peer, generator, by_clients)
    assert all(mib > 50 for mib in out["rss_mib"].values()), out["rss_mib"]
    for peer, by_generator in out["summary"].items():  # every peer's model traced from inside, under load
        side = by_generator["hey"]["8"]
        assert 0 < side["model_busy"] <= 1 and 1 <= side["batch_mean"] <= 32 and side["gap_ms_p50"] >= 0, (peer, side)
    assert set(out["ailab_over_mosec"]) == {"ailab.bench", "hey"}
    json.dumps(out)


def test_a_traced_predictor_is_the_predictor_plus_one_line_per_batch(tmp_path):
    from ailab.suites._peer_model import TracedPredictor

    from test_server_helpers import PlainPredictor

    class Lengths(PlainPredictor):
        name = "lengths"

        def __call__(self, texts):
            return [len(t) for t in texts]

    inner, path = Lengths(), tmp_path / "batches"
    traced = TracedPredictor(inner, str(path))
    assert traced(["ab", "c"]) == [2, 1] and traced.name == "lengths" and traced.count_tokens("a b") == 2
    traced.on_stages = print  # ailab's server sets its observer: it must reach the predictor
    assert inner.on_stages is print
    start, end, n = path.read_text().split()
    assert float(start) <= float(end) and n == "2"


def test_the_trace_gives_busy_share_batch_and_gap_inside_the_window_only(tmp_path):
    from ailab.suites._peer_model import read_trace

    path = tmp_path / "batches"
    # three batches in the window: busy 0.06 s of the 0.10 s from the first start to the last end; gaps 20 ms
    path.write_text("5.00 5.02 4\n10.00 10.02 32\n10.04 10.06 16\n10.08 10.10 30\n20.0 20.5 1\n")
    got = read_trace(path, 9.0, 11.0)
    assert abs(got["model_busy"] - 0.6) < 1e-9 and got["batch_mean"] == 26 and abs(got["gap_ms_p50"] - 20) < 1e-6
    assert read_trace(path, 19.0, 21.0) == {"model_busy": None, "batch_mean": None, "gap_ms_p50": None}
