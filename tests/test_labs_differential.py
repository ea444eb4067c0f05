"""The differential kit (ailab/labs/differential.py): it finds a difference where there is one, names the smallest
input and both answers, sees a changed input, compares refusals, and says the same thing on every run."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import strategies as st

from ailab.labs import LabCheckFailed
from ailab.labs.differential import as_set, close, exactly, same_as_reference, same_value, short

INTS = st.tuples(st.lists(st.integers(-1000, 1000), max_size=20))


def total(xs):
    return sum(xs)


def test_a_right_answer_passes():
    same_as_reference(lambda xs: sum(reversed(xs)), total, INTS)


def test_the_smallest_differing_input_is_named_with_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        same_as_reference(lambda xs: sum(x for x in xs if x > 1), total, INTS, arg_names=("xs",))
    msg = str(e.value)
    assert "on [1] (the smallest input found where the two differ)" in msg, msg
    assert "yours is 0 where the reference's is 1" in msg, msg


def test_the_message_is_the_same_on_every_run():
    def wrong(xs):
        return sum(xs) + (len(xs) > 3)

    msgs = set()
    for _ in range(2):
        with pytest.raises(LabCheckFailed) as e:
            same_as_reference(wrong, total, INTS)
        msgs.add(str(e.value))
    assert len(msgs) == 1


def test_an_answer_that_changes_its_input_fails_naming_it():
    def sorts_in_place(xs):
        xs.sort()
        return sum(xs)

    with pytest.raises(LabCheckFailed, match="changed its input `xs`"):
        same_as_reference(sorts_in_place, total, INTS, arg_names=("xs",))


def test_refusals_are_compared():
    def refuses_empty(xs):
        if not xs:
            raise ValueError("no numbers")
        return sum(xs)

    with pytest.raises(LabCheckFailed, match=r"should raise ValueError \(no numbers\); yours returned 0"):
        same_as_reference(total, refuses_empty, INTS)
    with pytest.raises(LabCheckFailed, match="should raise ValueError.*yours raised KeyError"):
        same_as_reference(lambda xs: {}[0] if not xs else sum(xs), refuses_empty, INTS)
    same_as_reference(lambda xs: refuses_empty(list(xs)), refuses_empty, INTS)


def test_an_exception_where_the_reference_answers_is_named():
    with pytest.raises(LabCheckFailed, match="your code raised ZeroDivisionError.*the reference returns 0"):
        same_as_reference(lambda xs: sum(xs) / len(xs) * 0 + sum(xs), total, INTS)


def test_the_stub_is_not_a_difference():
    def stub(xs):
        raise NotImplementedError("write it")

    with pytest.raises(NotImplementedError):
        same_as_reference(stub, total, INTS)


def test_edges_are_tried_first_as_given():
    with pytest.raises(LabCheckFailed) as e:
        same_as_reference(lambda xs: sum(xs[:1000]), total, INTS, edges=[(list(range(1001)),)])
    assert "smallest" not in str(e.value)


def test_a_loop_that_never_ends_fails_in_time():
    def forever(xs):
        while True:
            pass

    with pytest.raises(LabCheckFailed, match="did not return within 0.2 s"):
        same_as_reference(forever, total, INTS, limit_s=0.2, examples=1)


def test_compare_close_exactly_and_as_set():
    assert close()(1.0, 1.0 + 1e-12) is None
    assert close()(1.0, 1.001) is not None
    assert close()(math.nan, math.nan) is None
    assert close()({"a": [1, 2.0]}, {"a": [1, 2.0000000001]}) is None
    assert "at ['a'][1]" in close()({"a": [1, 3]}, {"a": [1, 2]})
    assert "should be a number" in close()("1", 1)
    assert "keys" in close()({"b": 1}, {"a": 1})
    assert "items" in close()([1], [1, 2])
    assert "index (1,)" in close()(np.array([1.0, 2.0]), np.array([1.0, 2.5]))
    assert "shape" in close()(np.zeros(2), np.zeros(3))
    assert exactly(0.1 + 0.2, 0.3) is not None
    assert exactly([1, "a"], [1, "a"]) is None
    assert as_set([3, 1, 2], [1, 2, 3]) is None
    assert "lacks 3" in as_set([1, 2], [1, 2, 3])
    assert "not as many times" in as_set([1, 1, 2], [1, 2, 2])


def test_same_value_tells_a_changed_input():
    assert same_value(np.array([1.0, math.nan]), np.array([1.0, math.nan]))
    assert not same_value(np.array([1, 2]), np.array([1.0, 2.0]))  # another dtype is a change
    assert not same_value({"a": 1, "b": 2}, {"b": 2, "a": 1})  # another order is a change
    assert not same_value([1, 2], (1, 2))
    assert same_value(math.nan, math.nan)


def test_short_cuts_long_values():
    assert len(short(list(range(10_000)))) < 200
    assert "shape=(1000,)" in short(np.zeros(1000))


def test_an_answer_that_keeps_state_between_calls_gets_words_not_a_flaky_error():
    seen = []

    def remembers(xs):
        seen.append(len(xs))
        return sum(xs) + (len(seen) > 3 and len(xs) == 1)

    with pytest.raises(LabCheckFailed) as e:
        same_as_reference(remembers, total, INTS)
    assert "could not judge" not in str(e.value)


def test_tensors_and_modules_are_compared_as_data():
    import copy

    import torch

    t = torch.tensor([1.0, float("nan")])
    assert same_value(t, t.clone())
    assert not same_value(t, t.to(torch.float64))
    assert not same_value(torch.zeros(2), torch.ones(2))
    m = torch.nn.Linear(2, 2)
    twin = copy.deepcopy(m)
    assert same_value(m, twin)
    with torch.no_grad():
        twin.weight.zero_()
    assert not same_value(m, twin)


def test_the_inputs_do_not_depend_on_the_modules_loaded():
    """Hypothesis draws literals from loaded modules' source; inside a check it must not, or a learner's notebook
    (or the tests that ran before) would change the questions asked."""
    from hypothesis.internal.conjecture import providers

    from ailab.labs.differential import _only_the_strategys_own_constants

    before = providers._get_local_constants
    with _only_the_strategys_own_constants():
        local = providers._get_local_constants()
        assert not (local.integers or local.floats or local.bytes or local.strings)
        assert providers.CONSTANTS_CACHE == {}
    assert providers._get_local_constants is before


def test_a_strategy_that_draws_no_tuple_is_a_checker_defect():
    with pytest.raises(TypeError, match="not a tuple of arguments"):
        same_as_reference(total, total, st.fixed_dictionaries({"xs": st.just([1])}))
