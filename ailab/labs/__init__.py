"""Labs: checks the learner runs, the solutions -> labs generator, and the notebook runner.

Each lab has a module here (`lab00_latency`, ...) with its check functions. `solutions/` is the
source of truth; `ailab labs build` writes `labs/` with every answer replaced by a stub.
"""

from ailab.labs.core import LabCheckFailed, check, expect

__all__ = ["LabCheckFailed", "check", "expect"]
