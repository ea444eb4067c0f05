"""Scratch folders for files a notebook or a check makes and throws away (exported models, saved weights).

`tempfile.mkdtemp` alone leaves every folder behind: nbval kills each notebook's kernel rather than letting
it exit (so does a crash, an out-of-memory kill or killing a hung kernel), so neither atexit nor a
TemporaryDirectory's finalizer runs. One run of `make test` left 55 folders, 497 MB, in /tmp that way, and
every run added as much.

Here each process has one folder, <temp>/ailab-scratch-<uid>/<pid>/, and every scratch folder it asks for
lives inside it. The folder goes when the process exits normally; if the process was killed, the first
scratch_dir() call of any later process removes the folders of processes that are no longer running. What
stays on disk is bounded by the processes alive now, not by how many ran before.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

_MINE: Path | None = None  # this process's folder, once made


def scratch_root() -> Path:
    """Every process's scratch folders sit under this one (one per user: another user's stay theirs)."""
    return Path(tempfile.gettempdir()) / f"ailab-scratch-{os.getuid()}"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, as someone else
        return True
    return True


def sweep() -> list[Path]:
    """Remove the folders of processes that are no longer running; returns what was removed."""
    root, gone = scratch_root(), []
    if not root.is_dir():
        return gone
    for folder in root.iterdir():
        if folder.name.isdigit() and int(folder.name) != os.getpid() and not _running(int(folder.name)):
            shutil.rmtree(folder, ignore_errors=True)
            gone.append(folder)
    return gone


def scratch_dir(prefix: str = "ailab-") -> Path:
    """A new, empty folder for throw-away files, removed with this process's others (see the module's note)."""
    global _MINE
    if _MINE is None or not _MINE.is_dir():
        sweep()
        mine = scratch_root() / str(os.getpid())
        mine.mkdir(parents=True, exist_ok=True)
        if _MINE is None:
            atexit.register(shutil.rmtree, mine, True)
        _MINE = mine
    return Path(tempfile.mkdtemp(prefix=prefix, dir=_MINE))
