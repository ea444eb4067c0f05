import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


import threading  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _no_learner_thread_left_spinning():
    """A wrong answer that loops for ever runs in a learner thread; a check's time limit must stop it (see
    ailab.labs.core.stop_thread). One left spinning would take a core from every test after it in this worker."""
    before = {t.ident for t in threading.enumerate()}
    yield
    left = [t for t in threading.enumerate() if t.ident not in before and t.name.startswith("ailab-lab-learner")]
    if not left:
        return
    import time

    import psutil

    def cpu():
        times = {t.id: t.user_time + t.system_time for t in psutil.Process().threads()}
        return sum(times.get(t.native_id, 0.0) for t in left)

    c0 = cpu()
    time.sleep(0.3)
    spent = cpu() - c0
    assert spent < 0.1, f"{len(left)} learner thread(s) left running, spending {spent / 0.3:.0%} of a core"
