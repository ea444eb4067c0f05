"""A fault drill's wrapper: make a real predictor slow, or make it fail, while a test or a notebook watches."""

from __future__ import annotations

import time

from ailab.server.predictor import Delegating


class InjectedSlowdown(Delegating):
    """Wrap a server predictor to inject faults: while `delay_s` > 0 every batch first sleeps that long;
    while `fail` is set every batch raises (the model "is unavailable"). The rest is the predictor's own.

    A fault drill: alerts and fallbacks are only trusted once they have been seen to work on a real fault.
    """

    def __init__(self, predictor):
        super().__init__(predictor)
        self.delay_s, self.fail = 0.0, False

    def __call__(self, texts):
        if self.fail:
            raise RuntimeError("injected fault: the model is unavailable")
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        return self.inner(texts)
