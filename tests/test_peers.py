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
    assert all(mb > 50 for mb in out["rss_mb"].values()), out["rss_mb"]
    assert set(out["ailab_over_mosec"]) == {"ailab.bench", "hey"}
    json.dumps(out)
