"""The memory counters this process can read, and `DeviceCounters`, the set one tracker reads for its device.

  always: process RSS (psutil, else /proc/self/statm).
  on CPU with glibc: malloc_in_use (mallinfo2), the exact bytes malloc has handed out.
  CUDA: memory_allocated (live tensors), memory_reserved (allocator cache), num_alloc_retries (cudaMalloc
        retried after freeing the cache: the fragmentation signal), and device-used from NVML when present.

Every reader returns None (never a fake 0) where this machine has no such counter, and
`DeviceCounters.available()` says which exist here and why not.
"""

from __future__ import annotations

import ctypes
import gc
import os

import torch

MiB = 2**20


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


def nvml_handle(device: torch.device):
    """(pynvml, the device's NVML handle), or None where nvidia-ml-py or the NVIDIA driver is missing."""
    pynvml = _import_pynvml()
    if pynvml is None:
        return None
    try:
        pynvml.nvmlInit()
        index = device.index if device.index is not None else torch.cuda.current_device()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - no driver / no permission: NVML is simply unavailable
        return None


class DeviceCounters:
    """The counters a tracker reads for `device`, in bytes: RSS and malloc's bytes on any device, the CUDA
    allocator's and NVML's on a GPU. Found once, at construction: psutil and NVML are looked up here."""

    def __init__(self, device: torch.device):
        self.device = device
        psutil = _import_psutil()
        self._proc = psutil.Process() if psutil else None
        self.nvml = nvml_handle(device) if device.type == "cuda" else None

    def available(self) -> dict[str, str]:
        """Each counter -> 'yes' or the reason it is missing on this machine."""
        cuda = self.device.type == "cuda"
        no_cuda = f"no (device is {self.device.type}; CUDA allocator counters exist only on a GPU)"
        return {
            "rss": "yes (psutil)"
            if self._proc
            else ("yes (/proc/self/statm; psutil not installed)" if _statm_rss() else "no (no psutil, no /proc)"),
            "malloc_in_use": "yes (glibc mallinfo2)" if malloc_in_use() is not None else "no (not glibc >= 2.33)",
            "cuda_allocated": "yes" if cuda else no_cuda,
            "cuda_reserved": "yes" if cuda else no_cuda,
            "cuda_peak": "yes" if cuda else no_cuda,
            "alloc_retries": "yes" if cuda else no_cuda,
            "nvml_used": ("yes" if self.nvml else "no (nvidia-ml-py missing or no NVIDIA driver)") if cuda else no_cuda,
        }

    def rss(self) -> int | None:
        if self._proc is not None:
            return self._proc.memory_info().rss
        return _statm_rss()

    def cuda_now(self) -> dict[str, float | None]:
        """The CUDA allocator's counters now (and NVML's device-used); {} on any other device."""
        if self.device.type != "cuda":
            return {}
        stats = torch.cuda.memory_stats(self.device)
        out = {
            "cuda_allocated": float(torch.cuda.memory_allocated(self.device)),
            "cuda_reserved": float(torch.cuda.memory_reserved(self.device)),
            "alloc_retries": float(stats.get("num_alloc_retries", 0)),
        }
        if self.nvml:
            pynvml, handle = self.nvml
            out["nvml_used"] = float(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        return out

    def snapshot(self) -> dict[str, float | None]:
        """Current counters, in bytes."""
        snap = {"rss": self.rss(), "malloc_in_use": malloc_in_use()}
        snap.update(self.cuda_now())
        return snap
