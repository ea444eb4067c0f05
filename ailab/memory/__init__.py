"""ailab.memory: make memory visible. Read the parts in this order:

- counters.py  the raw readers: RSS, glibc malloc bytes in use, malloc_trim, CUDA and NVML (DeviceCounters)
- sampler.py   the background timeline sampler: a child process on CPU, a thread on a GPU
- tracker.py   MemoryTracker: the counters per named phase, over the sampler's timeline
- timeline_figure.py  the timeline drawn, phases shaded
- overhead.py  sampler_overhead(): what the sampler costs a forward pass
- estimate.py  bytes before you run: parameters, activations, KV cache, the safe line
- measure.py   bytes when you run: a forward's measured peak, find_max_batch()
- kv.py        published decoder configs, paging vs max reservation, an LRU of models (arithmetic)
- leak.py      slope of memory over a soak, a planted leak and its fix, tracemalloc diffs
- blocks.py    (CUDA) the caching allocator's blocks: rounding rules, and allocated vs requested bytes measured
- fragmentation.py  (CUDA only) "free memory but OOM", with and without expandable_segments
"""

from ailab.memory.estimate import (
    DTYPE_BYTES,
    MINILM_SHAPE,
    EncoderShape,
    activation_bytes,
    dtype_bytes,
    forward_bytes,
    kv_cache_bytes,
    param_bytes,
    safe_line,
)
from ailab.memory.kv import PUBLISHED_CONFIGS, DecoderConfig, request_lengths, reservation_waste, simulate_lru
from ailab.memory.leak import (
    DEBUG_HISTORY,
    LeakReport,
    fixed_step,
    graph_keeping_step,
    leak_slope,
    leaky_step,
    soak,
    top_growth,
)
from ailab.memory.measure import (
    MaxBatch,
    cpu_peak_bytes,
    encoder_inputs,
    find_max_batch,
    forward_peak,
    peak_bytes,
    predicted_vs_measured,
    predicted_vs_measured_figure,
    rss_peak_delta,
)
from ailab.memory.counters import MiB, malloc_in_use, trim_malloc
from ailab.memory.overhead import sampler_overhead
from ailab.memory.tracker import MemoryTracker, Phase

__all__ = [
    "DTYPE_BYTES",
    "MINILM_SHAPE",
    "EncoderShape",
    "activation_bytes",
    "dtype_bytes",
    "forward_bytes",
    "kv_cache_bytes",
    "param_bytes",
    "safe_line",
    "PUBLISHED_CONFIGS",
    "DecoderConfig",
    "request_lengths",
    "reservation_waste",
    "simulate_lru",
    "DEBUG_HISTORY",
    "LeakReport",
    "fixed_step",
    "graph_keeping_step",
    "leak_slope",
    "leaky_step",
    "soak",
    "top_growth",
    "MaxBatch",
    "cpu_peak_bytes",
    "encoder_inputs",
    "find_max_batch",
    "forward_peak",
    "peak_bytes",
    "predicted_vs_measured",
    "predicted_vs_measured_figure",
    "rss_peak_delta",
    "MiB",
    "malloc_in_use",
    "MemoryTracker",
    "Phase",
    "sampler_overhead",
    "trim_malloc",
]
