"""The CUDA caching allocator's arithmetic (ailab.memory.blocks) and the fragmentation probe's plan and cap
(ailab.memory.fragmentation), on a CPU: the rules are PyTorch's, the probe's call into torch.cuda is checked
with torch's own argument validation and a stand-in for the driver call it would make."""

from __future__ import annotations

import types

import pytest
import torch

from ailab.memory import blocks, fragmentation

MiB = 2**20


# --- blocks: what memory_allocated counts ----------------------------------------------------------------
def test_requests_round_to_512_bytes():
    assert [blocks.round_request(n) for n in (0, 1, 512, 513, 1000)] == [512, 512, 512, 1024, 1024]
    with pytest.raises(ValueError):
        blocks.round_request(-1)


@pytest.mark.parametrize(
    "request_mib,segment_mib", [(0.5, 2), (1, 2), (1.5, 20), (9.9, 20), (10, 10), (35, 36), (35.5, 36), (36, 36)]
)
def test_segment_sizes(request_mib, segment_mib):
    assert blocks.segment_bytes(int(request_mib * MiB)) == segment_mib * MiB


def test_kv_cache_of_notebook_5_01_on_the_h200():
    # bf16, 8 sequences: K and V of tiny_gpt('30m') are 5, 10, 20 and 35 MiB each at 64..448 tokens. Measured on
    # the H200 (2026-12-04): exact at the first three, 2 x 36 MiB at 448 tokens (+2 MiB, 2.86 % of the formula).
    for mib, got in ((5, 5), (10, 10), (20, 20), (35, 36)):
        assert blocks.fresh_blocks([mib * MiB, mib * MiB]) == [got * MiB, got * MiB]
    assert blocks.fresh_blocks([35 * MiB] * 2, expandable=True) == [35 * MiB] * 2  # split down to 512 bytes


def test_a_block_is_split_only_when_more_than_1_mib_is_left():
    # 9.75 MiB: a 20 MiB segment, split (10.25 left); the second request takes the 10.25 MiB whole (0.5 left)
    assert blocks.fresh_blocks([int(9.75 * MiB)] * 2) == [int(9.75 * MiB), int(10.25 * MiB)]
    # small pool: split whenever 512 bytes or more are left
    assert blocks.fresh_blocks([100, 1000, 600]) == [512, 1024, 1024]


def test_block_bounds_hold_the_fresh_prediction_between_them():
    reqs = [int(x * MiB) for x in (0.3, 2.25, 2.25, 44.7, 9.75, 9.75, 35)]
    least, most = blocks.block_bounds(reqs)
    assert least == sum(blocks.round_request(r) for r in reqs)
    assert least <= sum(blocks.fresh_blocks(reqs)) <= most
    assert most - least < 6 * MiB + 512


# --- the fragmentation probe -------------------------------------------------------------------------------
def test_default_plan_holds_the_same_live_set_in_both_modes():
    plan = fragmentation.Plan().check()
    assert plan.fillers == 7 and plan.live_mib == 8 * 64 + 7 * 130 == 1422
    holes = plan.blocks // 2 * plan.block_mib
    room = plan.cap_mib - plan.blocks * plan.block_mib - plan.fillers * plan.filler_mib
    assert plan.block_mib < plan.request_mib <= holes and room < plan.request_mib


@pytest.mark.parametrize(
    "bad,why",
    [
        ({"request_mib": 64}, "larger than any hole"),
        ({"request_mib": 600}, "fit in the holes"),
        ({"filler_mib": 60}, "larger than a hole"),
        ({"filler_mib": 129}, "multiple of 2 MiB"),
        ({"request_mib": 100}, "room left under the cap"),
        ({"cap_mib": 2200}, "page rounding"),
    ],
)
def test_a_plan_that_cannot_show_the_lesson_is_refused(bad, why):
    with pytest.raises(ValueError, match=why):
        fragmentation.Plan(**bad).check()


@pytest.fixture
def fake_driver(monkeypatch):
    """torch.cuda as a CUDA machine presents it, down to the driver call: torch's own set_per_process_memory_fraction
    (its argument checks included) runs, and the call it would make into the allocator is recorded."""
    calls = []
    total = 143_771 * MiB  # the H200's total memory

    class Reached(Exception):
        pass

    def set_fraction(fraction, device):
        calls.append((fraction, device))
        raise Reached  # the probe would go on to allocate; this machine has no GPU to do it on

    monkeypatch.setattr(torch.cuda.memory, "_lazy_init", lambda: None)
    monkeypatch.setattr(torch._C, "_cuda_setMemoryFraction", set_fraction, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(total_memory=total))
    return types.SimpleNamespace(calls=calls, total=total, Reached=Reached)


def test_probe_caps_the_allocator_by_device_index(fake_driver):
    # The first GPU run crashed here: torch.device("cuda") has no index, and torch refuses it (ValueError).
    with pytest.raises(fake_driver.Reached):
        fragmentation.probe()
    ((fraction, device),) = fake_driver.calls
    assert device == 0 and isinstance(device, int)
    assert fraction == pytest.approx(2048 * MiB / fake_driver.total)


def test_the_old_call_is_what_torch_refuses(fake_driver):
    with pytest.raises(ValueError, match="specified index"):
        torch.cuda.set_per_process_memory_fraction(0.5, torch.device("cuda"))
    with pytest.raises(TypeError, match="GPU index"):
        fragmentation.cap_process_memory(2**30, torch.device("cuda"))
    assert fake_driver.calls == []


def test_compare_reads_the_three_claims():
    plain = {
        "live_mib": 1422.0,
        "request_mib": 192,
        "cap_mib": 2048,
        "fillers": 7,
        "oom": True,
        "free_in_reserved_mib": 512.0,
        "room_under_cap_mib": 114.0,
    }
    fixed = dict(plain, oom=False, free_in_reserved_mib=518.0, room_under_cap_mib=108.0)
    assert fragmentation.compare(plain, fixed) == {
        "same_live_set_and_request": True,
        "default_ooms_with_free_memory": True,
        "expandable_avoids_it": True,
    }
    # the first GPU run's shape: the two modes held different sets (the fillers took the holes)
    assert not fragmentation.compare(plain, dict(fixed, live_mib=1800.0))["expandable_avoids_it"]
    assert not fragmentation.compare(plain, dict(plain))["expandable_avoids_it"]
