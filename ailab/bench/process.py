"""What a server process, and the workers it started, holds and has spent: read from outside, as an operator would.

A soak reads the memory, a sweep the CPU time. Both count the whole tree: a server's worker processes (the
engine core, a queue worker) are part of what it costs. A child that exits between the listing and the
reading counts as nothing, not as an error.
"""

from __future__ import annotations

import psutil


def _tree(pid: int, children: bool = True) -> list:
    proc = psutil.Process(pid)  # NoSuchProcess for a pid that is gone: the caller learns it at once
    return [proc] + (proc.children(recursive=True) if children else [])


def _sum_over(procs: list, read) -> float:
    total = 0.0
    for p in procs:
        try:
            total += read(p)
        except psutil.NoSuchProcess:
            pass
    return total


def process_tree_rss_mib(pid: int, children: bool = True) -> float:
    """Resident memory of `pid` and, with `children`, every process under it (a server's worker processes, its
    engine core, count too), in MiB (2**20 bytes). The one RSS reading: every server, soak and suite uses it."""
    return _sum_over(_tree(pid, children), lambda p: p.memory_info().rss) / 2**20


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) `pid` and its children have spent so far."""
    return _sum_over(_tree(pid), lambda p: sum(p.cpu_times()[:2]))
