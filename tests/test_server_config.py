"""One source of server settings: ServerConfig's fields give the defaults, the bounds, the `ailab serve`
flags and the AILAB_* environment variables."""

import pytest

from ailab.server import ServerConfig, create_app, serve_main
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
    finally:
        engine.close()
