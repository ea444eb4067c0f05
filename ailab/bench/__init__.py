"""The course's one load generator, and what it measures: any HTTP endpoint (or a batcher, in-process).

- records.py  Record (one request, typed), Window, LoadResult (failures count in the tail; send lag;
              the generator's own CPU share; p99 only above a minimum sample count)
- http.py     a lean keep-alive HTTP/1.1 client (raw asyncio streams), BenchTargetError
- loops.py    closed_loop / open_loop over HTTP, drive_batcher for a DynamicBatcher in-process
- child.py    in_subprocess: the same loops in a child process with its own GIL
- sweep.py    sweep by concurrency in rounds (best throughput within an SLO), rate_sweep (the capacity knee),
              keeps_up (did a queue build over an open loop?)
- soak.py     soak: RSS and p99 slopes over minutes, with a verdict
- process.py  process_tree_rss_mib, process_cpu_s: a server's process tree read from outside

Warm-up requests are sent but excluded from every figure. The functions are synchronous and also work
inside Jupyter (the event loop runs on a helper thread).
"""

from ailab.bench.child import in_subprocess
from ailab.bench.http import BenchTargetError
from ailab.bench.loops import closed_loop, drive_batcher, open_loop
from ailab.bench.records import MIN_SAMPLES_FOR_P99, LoadResult, Record, Window
from ailab.bench.process import process_cpu_s, process_tree_rss_mib
from ailab.bench.soak import SoakResult, soak
from ailab.bench.sweep import RateSweepResult, SweepResult, keeps_up, rate_sweep, sweep
