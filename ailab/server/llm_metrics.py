"""The generation's own Prometheus series, in the app's registry (vLLM exports the same kinds). The output
processor observes the per-request ones (time to first token, gaps between tokens, ends by reason); the gauges
read the engine's figures after its latest step."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
E2E_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class GenerationMetrics:
    def __init__(self, registry, engine):
        r = registry
        self.ttft = Histogram(
            "ailab_generation_ttft_seconds",
            "Time from a generation request's arrival to its first token",
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "ailab_generation_inter_token_seconds",
            "Time between two tokens of one request",
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "ailab_generation_e2e_seconds",
            "Time from a generation request's arrival to its end",
            buckets=E2E_BUCKETS,
            registry=r,
        )
        self.tokens = Counter("ailab_generation_tokens", "Tokens generated", registry=r)
        self.prompt_tokens = Counter("ailab_generation_prompt_tokens", "Prompt tokens taken in", registry=r)
        self.requests = Counter(
            "ailab_generation_requests", "Generation requests ended, by finish reason", ["reason"], registry=r
        )
        # What the engine core did with its time: steps taken and the seconds inside them (the rest it waited for
        # work), and the sequences each step decoded. `ailab bench generation-serve` reads these to say where
        # tokens/s goes between the core alone and the core behind HTTP.
        self.steps = Counter("ailab_generation_steps", "Scheduler steps taken", registry=r)
        self.step_seconds = Counter(
            "ailab_generation_step_seconds", "Seconds the engine core spent inside steps", registry=r
        )
        self.decoded = Counter("ailab_generation_decoded_sequences", "Sequences decoded, summed over steps", registry=r)
        # vLLM's two, in tokens: the hit rate is hits / queries (0 / 0 while prefix caching is off)
        self.prefix_cache_queries = Counter(
            "ailab_prefix_cache_queries", "Prompt tokens looked up in the prefix cache", registry=r
        )
        self.prefix_cache_hits = Counter(
            "ailab_prefix_cache_hits", "Prompt tokens whose KV was found in the prefix cache", registry=r
        )
        Gauge("ailab_generation_running", "Sequences running", registry=r).set_function(lambda: engine.running)
        Gauge("ailab_generation_waiting", "Sequences waiting for blocks or a seat", registry=r).set_function(
            lambda: engine.waiting
        )
        Gauge("ailab_kv_blocks_used", "KV blocks held by sequences", registry=r).set_function(
            lambda: engine.blocks_total - engine.blocks_free
        )
        Gauge("ailab_kv_blocks_free", "KV blocks free", registry=r).set_function(lambda: engine.blocks_free)
