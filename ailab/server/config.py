"""The server's settings, defined once: defaults, bounds, the `ailab serve` flags and AILAB_* variables.

    ServerConfig(max_batch_size=8)          the settings a library caller passes (defaults for the rest)
    ServerConfig.from_env(max_wait_ms=5)    the same, with AILAB_<FIELD> environment variables applied under
                                            the given values (what `ailab serve` does: flag > env > default)
    add_config_flags(parser)                one --flag per scalar field, its help and default from here

Every field's bound lives in its Field(...), so a bad value is refused with the field's name, the same
way from Python, from a flag and from the environment. A plain ServerConfig() never reads the
environment: a notebook or a test must not change behaviour because an operator exported AILAB_API_KEY.
"""

from __future__ import annotations

import argparse
import difflib
import os
import types
import typing
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "AILAB_"


class ServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    max_batch_size: int = Field(32, ge=1, description="texts per forward pass at most")
    max_wait_ms: float = Field(10.0, ge=0, le=60_000, description="how long a batch's first text waits for company")
    max_queue: int = Field(256, ge=1, description="texts waiting per model; beyond this, 503 at once")
    request_timeout_s: float = Field(
        5.0, gt=0, description="default deadline per request (504 after it); X-Timeout-Ms may lower it"
    )
    max_body_bytes: int = Field(64 * 1024, ge=1, description="a bigger body is refused 413 before it is parsed")
    body_timeout_s: float = Field(
        10.0, gt=0, description="the whole body must arrive within this, else 408 and the connection closed"
    )
    max_concurrency: int = Field(
        512, ge=1, description="requests inside the server at once (probes and /metrics exempt); beyond it, 503 at once"
    )
    max_items: int = Field(64, ge=1, description="texts per request")
    max_chars: int = Field(5_000, ge=1, description="characters per text")
    too_long: Literal["truncate", "reject"] = Field(
        "truncate", description="a text over the model's word pieces: truncate it (flagged) or reject it (413)"
    )
    api_key: str | None = Field(
        None,
        description="when set, every route but /healthz and /readyz needs "
        "'Authorization: Bearer <key>'; unset, /admin answers loopback only",
    )
    fallback: dict | None = Field(
        None, description="degraded answer when no model can serve, e.g. {'label': 'unknown'}"
    )
    max_models: int = Field(2, ge=1, description="models loaded at once (least recently used evicted)")
    max_model_bytes: int | None = Field(None, ge=1, description="memory budget for loaded models' weights")
    max_rss_bytes: int | None = Field(None, ge=1, description="memory watermark: above it, 503 instead of more work")
    torch_threads: int | None = Field(None, ge=1, description="intra-op threads for each model's worker thread")
    length_bucket_tokens: int | None = Field(
        None,
        ge=1,
        le=512,
        description="batch together only texts whose word-piece counts fall in the same band "
        "of this width, so a short text is not padded to a long one (off when unset)",
    )
    retry_after_s: int = Field(1, ge=0, description="the Retry-After of a 503")
    warmup: bool = Field(True, description="run the batch shapes once before taking traffic")
    freeze_gc: bool = Field(
        True,
        description="once a model is loaded, move every live object out of the garbage "
        "collector's passes (gc.freeze): a full pass over MiniLM's ~420k objects took ~200 ms "
        "and stalled every request in flight",
    )
    load_before_serving: bool = Field(
        False,
        description="finish start-up only once the default model is loaded "
        "and warmed (Ray Serve routes to a replica only after its start-up)",
    )

    def replace(self, **changes) -> "ServerConfig":
        """A copy with `changes` applied, validated like a new one (an unknown name is refused)."""
        return type(self)(**{**self.model_dump(), **changes})

    @classmethod
    def from_env(cls, **given) -> "ServerConfig":
        """`given` values, then AILAB_<FIELD> variables (AILAB_MAX_BATCH_SIZE=8), then the defaults."""
        return cls(**_FromEnv(**given).model_dump())


class _FromEnv(ServerConfig, BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")


def misspelt_env_settings(environ=None) -> list[str]:
    """A warning for each AILAB_* variable that is no setting but nearly is one (AILAB_MAX_BATCH_SIZ):
    pydantic-settings ignores unknown names, and an operator would otherwise never learn that theirs did
    nothing. Other AILAB_* variables (AILAB_CACHE, ...) belong to the rest of ailab and are left alone."""
    names = [ENV_PREFIX + f.upper() for f in ServerConfig.model_fields]
    warnings = []
    for key in sorted(environ if environ is not None else os.environ):
        if key.startswith(ENV_PREFIX) and key not in names:
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.85)
            if close:
                warnings.append(f"{key} is not a server setting and is ignored; did you mean {close[0]}?")
    return warnings


def _scalar_type(annotation):
    """(argparse type, choices) of a field, or None for one a flag cannot hold (a dict)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = args[0] if len(args) == 1 else None
    if typing.get_origin(annotation) is Literal:
        return str, list(typing.get_args(annotation))
    if annotation is bool:
        return (lambda s: s.lower() in ("1", "true", "yes", "on")), None
    return (annotation, None) if annotation in (int, float, str) else None


def add_config_flags(parser: argparse.ArgumentParser, skip: tuple = ()) -> None:
    """One --kebab-case flag per scalar ServerConfig field. Unset flags stay None, so ServerConfig.from_env
    can tell "not given" from a value: pass it {k: v for k, v in vars(args).items() if v is not None}."""
    for name, info in ServerConfig.model_fields.items():
        kind = _scalar_type(info.annotation)
        if name in skip or kind is None:
            continue
        type_, choices = kind
        default = "unset" if info.default is None else info.default
        metavar = None if choices else {int: "N", float: "X", str: "TEXT"}.get(type_, "yes|no")
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            type=type_,
            choices=choices,
            default=None,
            metavar=metavar,
            help=f"{info.description} (default {default}; env {ENV_PREFIX}{name.upper()})",
        )


def config_from_args(args: argparse.Namespace, **extra) -> ServerConfig:
    """The ServerConfig for parsed `ailab serve` arguments: flags over AILAB_* variables over defaults."""
    given = {k: v for k, v in vars(args).items() if k in ServerConfig.model_fields and v is not None}
    return ServerConfig.from_env(**given, **extra)
