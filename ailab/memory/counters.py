"""Low-level memory counters of this process: RSS, glibc's malloc bytes, and the sampler process.

Kept apart from tracker.py so each reads in one sitting. Every reader returns None (never a fake 0)
where this machine has no such counter.
"""

from __future__ import annotations

import ctypes
import gc
import os


def _import_psutil():
    try:
        import psutil
    except ImportError:
        return None
    return psutil


def _import_pynvml():
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _statm_rss() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_size_t)
        for n in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.mallinfo2.restype = _MallInfo2
        except (OSError, AttributeError):  # not glibc, or glibc older than 2.33
            _LIBC = False
    return _LIBC


def malloc_in_use() -> int | None:
    """Bytes glibc malloc has handed out and not had back (mallinfo2: heap in use + mmapped chunks).

    CPU tensors are malloc'd, so this is the CPU's closest thing to CUDA's memory_allocated: exact
    bytes, not pages. None where the C library is not glibc >= 2.33. (Main arena plus mmapped
    chunks: allocations made by other threads' arenas are not counted.)
    """
    libc = _libc()
    if not libc:
        return None
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def trim_malloc() -> None:
    """gc, then ask glibc to hand freed heap pages back to the OS, so RSS reflects live memory."""
    gc.collect()
    libc = _libc()
    if libc:
        libc.malloc_trim(0)


# The RSS sampler process: stdlib only, started with -S, so it starts fast and stays tiny.
_CHILD_SAMPLER = r"""
import os, sys, time
pid, interval, path = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
page = os.sysconf("SC_PAGE_SIZE")
fd = os.open("/proc/%d/statm" % pid, os.O_RDONLY)
with open(path, "w", buffering=1) as out:
    while os.getppid() == pid:
        try:
            rss = int(os.pread(fd, 128, 0).split()[1]) * page
        except (OSError, ValueError, IndexError):
            break
        out.write("%r %d\n" % (time.monotonic(), rss))
        time.sleep(interval)
"""


def _child_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far (Linux /proc), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
