"""Scratch folders go with their process: on a normal exit, and at the next process's first call if it was killed."""

import os
import subprocess
import sys
import time

from ailab.scratch import scratch_dir, scratch_root, sweep

MAKE = (
    "from ailab.scratch import scratch_dir; d = scratch_dir('ailab-t-'); (d / 'model.onnx').write_bytes(b'0' * 4096); "
    "print(d, flush=True)"
)


def _child(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_each_call_gives_a_new_empty_folder_inside_this_process_one():
    a, b = scratch_dir("ailab-t-"), scratch_dir("ailab-t-")
    assert a != b and a.is_dir() and b.is_dir() and not any(a.iterdir())
    assert a.parent == b.parent == scratch_root() / str(os.getpid()) and a.name.startswith("ailab-t-")


def test_a_process_that_exits_takes_its_folders_with_it():
    child = _child(MAKE)
    made = child.communicate(timeout=60)[0].strip()
    assert child.returncode == 0 and made and not os.path.exists(made)


def test_a_killed_process_folders_are_swept_and_a_running_one_is_left_alone():
    mine = scratch_dir("ailab-t-")
    killed = _child(MAKE + "; import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    made_by_killed = killed.communicate(timeout=60)[0].strip()
    assert killed.returncode == -9 and os.path.exists(made_by_killed)  # no atexit ran: it is still there
    gone = sweep()
    assert not os.path.exists(made_by_killed) and scratch_root() / str(killed.pid) in gone
    assert mine.is_dir(), "this process's own scratch folder must stay"
    running = _child(MAKE + "; import time; time.sleep(60)")
    try:
        made_by_running = running.stdout.readline().strip()
        sweep()
        assert os.path.exists(made_by_running), "a running process's scratch folder must stay"
    finally:
        running.kill()
        running.wait()
    time.sleep(0.05)
    sweep()
    assert not os.path.exists(made_by_running)
