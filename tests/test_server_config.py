"""One source of server settings: ServerConfig's fields give the defaults, the bounds, the `ailab serve`
flags and the AILAB_* environment variables."""

import httpx
import pytest

from ailab.server import ServerConfig, create_app, serve_main, start_in_thread
from ailab.server.config import config_from_args, misspelt_env_settings
from ailab.server.run import build_parser


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def test_every_scalar_setting_has_a_flag_whose_default_comes_from_the_config(monkeypatch):
    for name in ServerConfig.model_fields:
        monkeypatch.delenv("AILAB_" + name.upper(), raising=False)
    parser = build_parser()
    flags = {}
    for action in parser._actions:  # the first action of a dest is its flag (--timeout-s is an alias)
        flags.setdefault(action.dest, action)
    for name, info in ServerConfig.model_fields.items():
        if name == "fallback":  # a dict: --fallback-label builds it
            continue
        assert name in flags, f"ServerConfig.{name} has no {_flag(name)} flag"
        assert flags[name].default is None, f"{_flag(name)} repeats a default; it must come from ServerConfig"
        assert info.description and f"AILAB_{name.upper()}" in flags[name].help
    assert config_from_args(parser.parse_args([])) == ServerConfig()


def test_a_flag_beats_the_environment_which_beats_the_default(monkeypatch):
    monkeypatch.setenv("AILAB_MAX_BATCH_SIZE", "8")
    monkeypatch.setenv("AILAB_TOO_LONG", "reject")
    monkeypatch.setenv("AILAB_FALLBACK", '{"label": "unknown"}')
    cfg = config_from_args(build_parser().parse_args(["--max-batch-size", "4", "--timeout-s", "2.5"]))
    assert (cfg.max_batch_size, cfg.too_long, cfg.request_timeout_s) == (4, "reject", 2.5)
    assert cfg.fallback == {"label": "unknown"}
    assert config_from_args(build_parser().parse_args([])).max_batch_size == 8
    assert ServerConfig().max_batch_size == 32, "a plain ServerConfig() must not read the environment"


@pytest.mark.parametrize(
    "env, value, words",
    [
        ("AILAB_MAX_BATCH_SIZE", "0", "max_batch_size"),
        ("AILAB_MAX_WAIT_MS", "soon", "max_wait_ms"),
        ("AILAB_TOO_LONG", "drop", "too_long"),
    ],
)
def test_a_bad_setting_from_the_environment_is_named_and_nothing_starts(monkeypatch, capsys, env, value, words):
    monkeypatch.setenv(env, value)
    assert serve_main(["--port", "0"]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err


def test_a_misspelt_variable_is_pointed_out_and_other_ailab_variables_are_left_alone():
    env = {"AILAB_MAX_BATCH_SIZ": "8", "AILAB_CACHE": "/tmp/x", "AILAB_MAX_BATCH_SIZE": "4", "HOME": "/root"}
    assert misspelt_env_settings(env) == [
        "AILAB_MAX_BATCH_SIZ is not a server setting and is ignored; did you mean AILAB_MAX_BATCH_SIZE?"
    ]


def test_bad_values_are_refused_by_name_from_python_too():
    for kw in (
        {"max_batch_size": 0},
        {"max_wait_ms": -1},
        {"length_bucket_tokens": 0},
        {"too_long": "drop"},
        {"request_timeout_s": 0},
    ):
        with pytest.raises(ValueError, match=next(iter(kw))):
            ServerConfig(**kw)
    with pytest.raises(ValueError, match="max_batch_sise"):
        create_app({"t": lambda: None}, "t", max_batch_sise=8)
    base = ServerConfig(max_queue=7)
    assert base.replace(max_wait_ms=1).max_queue == 7
    with pytest.raises(ValueError, match="max_queue"):
        base.replace(max_queue=0)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--generate", "1m", "--generate-seats", "0"], "between 1 and 256"),
        (["--generate", "1m", "--generate-seats", "257"], "between 1 and 256"),
        (["--generate-seats", "16"], "need --generate SIZE"),
        (["--generate", "1m", "--generate-blocks", "0"], "between 1 and 65536 blocks"),
        (["--generate-blocks", "512"], "need --generate SIZE"),
    ],
)
def test_bad_generation_seats_are_named_and_nothing_starts(capsys, argv, words):
    assert serve_main(["--port", "0", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err


def test_the_generation_engine_takes_its_seats_from_the_flag():
    from ailab.server.run import build_parser, generation_engine

    engine = generation_engine(
        build_parser().parse_args(["--generate", "1m", "--generation-in-thread", "--generate-seats", "3"])
    )
    try:
        assert engine.ready.wait(60) and engine.core.scheduler.max_running == 3
    finally:
        engine.close()


def test_the_generation_engine_takes_its_kv_blocks_from_the_flag():
    from ailab.server.run import build_parser, generation_engine

    engine = generation_engine(
        build_parser().parse_args(["--generate", "1m", "--generation-in-thread", "--generate-blocks", "40"])
    )
    try:
        assert engine.ready.wait(60) and engine.core.cache.allocator.num_blocks == 40
        assert engine.settings["num_blocks"] == 40, "the pool's size, as /healthz shows it"
    finally:
        engine.close()


def test_tiny_gpt_params_counts_what_the_model_holds():
    from ailab.models import TINY_GPT_SIZES, tiny_gpt, tiny_gpt_params

    for size in TINY_GPT_SIZES:
        assert tiny_gpt_params(size) == sum(p.numel() for p in tiny_gpt(size).parameters()), size
    with pytest.raises(ValueError, match="choose one of"):
        tiny_gpt_params("3b")


def test_the_engine_defaults_follow_the_models_arithmetic():
    """A step that is mostly Python (1m) leaves a core to the HTTP side and keeps 8 seats; a step that is
    arithmetic (30m) takes every core and twice the seats; the reason names the figure that decided."""
    from ailab.server.generation_policy import COMPUTE_BOUND_STEP_GFLOP, engine_defaults

    small, large = engine_defaults("1m", cores=2), engine_defaults("30m", cores=2)
    assert (small.seats, small.core_threads) == (8, 1) and "HTTP side" in small.why
    assert (large.seats, large.core_threads) == (16, 2) and "GFLOP" in large.why
    assert engine_defaults("1m", cores=1).core_threads == 1, "never zero threads"
    assert engine_defaults("30m", cores=8).core_threads == 8
    assert small.step_gflop < COMPUTE_BOUND_STEP_GFLOP <= large.step_gflop
    with pytest.raises(ValueError, match="choose one of"):
        engine_defaults("3b")
    from ailab.labs.lab_capstone_llm import DEFAULTS, SIZE

    assert DEFAULTS["seats"] == engine_defaults(SIZE).seats, "the capstone's baseline is the server's defaults"


def test_the_generation_engine_says_what_it_chose_and_why(capsys):
    from ailab.server.run import build_parser, generation_engine

    engine = generation_engine(build_parser().parse_args(["--generate", "1m", "--generation-in-thread"]), None)
    try:
        assert engine.ready.wait(60) and engine.core.scheduler.max_running == engine.settings["seats"] == 8
        assert engine.settings["chosen_by"] == {"seats": "default", "core_threads": "default"}
        with start_in_thread(create_app(generation=engine, config=ServerConfig(api_key="k"))) as h:
            mine = httpx.get(h.url + "/healthz", headers={"Authorization": "Bearer k"}, timeout=10).json()
            anyone = httpx.get(h.url + "/healthz", timeout=10).json()
        assert mine["generation_engine"] == engine.settings and "generation_engine" not in anyone
    finally:
        engine.close()
    line = capsys.readouterr().err
    assert "generation engine for 1m (0.9 M parameters): 8 seats (default)" in line and "because" in line, line
    told = generation_engine(
        build_parser().parse_args(["--generate", "1m", "--generation-in-thread", "--generate-seats", "3"]), 2
    )
    try:
        assert told.settings["chosen_by"] == {"seats": "flag", "core_threads": "flag"}
        assert (told.settings["seats"], told.settings["core_threads"]) == (3, 2)
    finally:
        told.close()
