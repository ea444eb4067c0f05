"""Generation: a real decoder, its KV cache, paged KV blocks and continuous batching (topics H3, S2).

    decoder.py    Decoder: GPT-2's forward over a Hugging Face model's weights; attention reads ailab's cache
    kv_cache.py   KVCache (contiguous, reserved up front), kv_bytes_per_token, the no-cache view
    decode.py     prefill, decode_one_token, generate, generate_without_cache; prefill_paged, decode_paged,
                  step_paged (prompts and decodes in one forward)
    paged.py      BlockAllocator, PagedKVCache, PackedView, OutOfBlocks: fixed-size blocks, a free list, block tables
    attention.py  masked_attention: the one attention kernel every cache view calls
    sampling_params.py SamplingParams: max_tokens, temperature, top_p, seed, stop; one value, route to sampler
    request.py    Request, RequestStatus, FinishReason: one request's record in the core (StrEnums)
    plan.py       schedule() -> SchedulerOutput: a step's plan from the queues and the free blocks (no model)
    scheduler.py  Scheduler: the queues and blocks; schedule(), update_from_output(), finish_request()
    executor.py   ModelExecutor: runs a plan over the paged cache, returns each request's new token
    engine_core.py EngineCore: step() = schedule, execute, update: continuous batching (static to compare with)
    core_io.py    EngineCoreRequest in, EngineCoreOutputs out: what crosses between a front end and the core
    core_loop.py  run_busy_loop: the core as a server runs it, in a thread or in a process of its own
    chat.py       the chat template of the byte-level model
    train.py      train_lm: a byte-level model trained here on the course's review snippets; save_lm/load_lm
    measure.py    cache bytes per token, cached vs recomputed decode, prefill vs decode, paged waste
    trace.py      continuous vs static batching vs Hugging Face generate, on an open-loop arrival trace

The model comes from ailab.models.tiny_gpt(size); Decoder(tiny_gpt("1m")) runs it.
"""

from __future__ import annotations

from ailab.generation.decode import (
    decode_one_token,
    decode_paged,
    generate,
    generate_without_cache,
    next_token,
    prefill,
    prefill_paged,
    step_paged,
)
from ailab.generation.decoder import Decoder
from ailab.generation.kv_cache import KVCache, NoCacheView, kv_bytes_per_token
from ailab.generation.paged import BlockAllocator, OutOfBlocks, PackedView, PagedKVCache
from ailab.generation.sampling_params import SamplingParams
from ailab.generation.request import FinishReason, Request, RequestStatus
from ailab.generation.executor import ModelExecutor, ModelOutput
from ailab.generation.plan import SchedulerOutput, schedule
from ailab.generation.scheduler import RequestTooLarge, Scheduler
from ailab.generation.engine_core import EngineCore, StepReport, StepTimes
from ailab.generation.core_io import (
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    EngineCoreRequestType,
    SchedulerStats,
)
