import json
import subprocess
import sys

from ailab.cli import main


def test_doctor_passes_here_and_prints_json(capsys):
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and any(c["check"].startswith("model all-MiniLM") for c in report["checks"])


def test_doctor_fails_with_what_to_run(monkeypatch, capsys):
    from ailab import data

    monkeypatch.setitem(data.DATA_SHA256, "rotten_tomatoes_corpus.csv.bz2", "0" * 64)
    assert main(["doctor"]) == 1
    assert "make setup" in capsys.readouterr().out


def test_unknown_suite_lists_the_real_ones(capsys):
    assert main(["bench", "no-such-suite"]) == 2
    assert "unknown benchmark suite" in capsys.readouterr().err


def test_entry_point_is_installed():
    out = subprocess.run([sys.executable, "-m", "ailab.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "doctor" in out.stdout


def test_bench_help_lists_suites_and_shows_a_suites_own_options(capsys):
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("engine", "http", "memory", "scale", "serving"))
    assert main(["bench", "http", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--clients" in out and "--rate" in out and "--body" in out  # the suite's own options
    assert main(["bench", "memory", "--help"]) == 0  # prints, never runs the benchmark
    assert "no options of its own" in capsys.readouterr().out
    assert main(["bench"]) == 2 and "name a benchmark suite" in capsys.readouterr().err
