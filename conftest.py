"""How `make test` shares the tests and notebooks among its workers (pytest-xdist, --dist loadfile): a file at a
time, except the files that start a Ray cluster, which go to one worker together, one after the other.

Why: Ray starts a dozen processes per cluster (GCS, raylets, dashboard, workers). Two clusters starting at once on
a 2-core machine, beside the other worker and the computing lane, time out ("the current node timed out during
startup ... the GCS has become overloaded"): two fresh-clone runs failed so, once in tests/test_ray_serve.py and
once in chapter 4/05, each time while the other was running on the second worker."""

from __future__ import annotations

import pytest

RAY_CLUSTERS = frozenset({"tests/test_ray_serve.py", "notebooks/4_application/05_outgrowing_one_machine.ipynb"})


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: a run without xdist (the GPU suite's) has no such hook
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None  # xdist's own
    from xdist.scheduler import LoadFileScheduling

    class OneRayClusterAtATime(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "ray clusters" if scope in RAY_CLUSTERS else scope

    return OneRayClusterAtATime(config, log)
