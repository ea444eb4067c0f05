"""The kit the check modules share (ailab/labs/core.py): calls that must answer or refuse, a time limit, one
object per process, and a tiny model on one thread."""

import threading
import time

import pytest
import torch

from ailab.labs import core
from ailab.labs.core import LabCheckFailed


def boom():
    raise KeyError("x")


def test_answer_names_the_case_and_lets_the_stub_through():
    assert core.answer(lambda a, b=0: a + b, 1, b=2, what="one and two") == 3
    with pytest.raises(LabCheckFailed, match=r"^an empty dict: your code raised KeyError: 'x'$"):
        core.answer(boom, what="an empty dict")
    with pytest.raises(NotImplementedError):
        core.answer(lambda: (_ for _ in ()).throw(NotImplementedError("not implemented yet")), what="stub")


def test_refused_returns_the_error_and_names_what_else_happened():
    e = core.refused(lambda: int("z"), what="a letter", should="raise ValueError")
    assert isinstance(e, ValueError)
    with pytest.raises(LabCheckFailed, match=r"^a letter: raise ValueError; it returned 7$"):
        core.refused(lambda: 7, what="a letter", should="raise ValueError")
    with pytest.raises(LabCheckFailed, match=r"^a letter: raise ValueError; your code raised KeyError: 'x'$"):
        core.refused(boom, what="a letter", should="raise ValueError")
    with pytest.raises(NotImplementedError):  # a stub is never a refusal, even of a RuntimeError
        core.refused(
            lambda: (_ for _ in ()).throw(NotImplementedError("stub")), error=RuntimeError, what="w", should="s"
        )


def test_within_time_returns_raises_and_gives_up_with_words():
    assert core.within_time(lambda: 5, 1.0, "slow") == 5
    with pytest.raises(KeyError):
        core.within_time(boom, 1.0, "slow")
    release, unstuck = threading.Event(), []
    t0 = time.monotonic()
    with pytest.raises(LabCheckFailed, match="^it waits for room$"):
        core.within_time(release.wait, 0.2, "it waits for room", unstick=lambda: (unstuck.append(1), release.set()))
    assert unstuck == [1] and time.monotonic() - t0 < 2.0


def test_shared_builds_once_and_again_when_the_object_died():
    built = []

    def build():
        built.append(object())
        return built[-1]

    key = f"test-{time.monotonic()}"
    first = core.shared(key, build)
    assert core.shared(key, build) is first and len(built) == 1
    again = core.shared(key, build, alive=lambda obj: False)
    assert again is not first and len(built) == 2


def test_torch_threads_gives_the_count_back_and_works_as_a_decorator():
    before = torch.get_num_threads()
    with core.torch_threads(1):
        assert torch.get_num_threads() == 1

    @core.torch_threads(1)
    def inside():
        return torch.get_num_threads()

    assert inside() == 1 and torch.get_num_threads() == before
    with pytest.raises(ValueError), core.torch_threads(1):
        raise ValueError("the count comes back even so")
    assert torch.get_num_threads() == before
