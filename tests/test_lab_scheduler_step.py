"""The scheduler-step lab's checks pass the right answer and reject plausible wrong ones.

Each wrong answer is one class of mistake: admitting beyond the free blocks, blocks not freed on finish, on
cancel or on preemption, cancelled requests kept, a long request overtaken (skip-ahead admission), a prefill
recomputed every step, one decode call per request, no preemption, no slot reserved before decoding,
max_running ignored, retiring only before the decode.
"""
from collections import deque

import pytest

from ailab.generation import OutOfBlocks
from ailab.labs import LabCheckFailed
from ailab.labs import lab_scheduler_step as L


def _drop_cancelled(state, free=True):
    for req in [r for r in state.running if r.id in state.cancelled]:
        state.running.remove(req)
        if free:
            state.blocks.free(req.id)
    state.waiting = deque(r for r in state.waiting if r.id not in state.cancelled)


def _retire(state, free=True):
    for req in [r for r in state.running if len(r.output) >= r.max_new_tokens]:
        state.running.remove(req)
        if free:
            state.blocks.free(req.id)
        state.finish(req)


def _admit(state, skip=False, check_blocks=True, seats=True):
    i = 0
    while i < len(state.waiting) and (not seats or len(state.running) < state.max_running):
        req = state.waiting[i]
        tokens = len(req.prompt) + len(req.output)
        if check_blocks and not state.blocks.can_allocate(tokens):
            if skip:
                i += 1
                continue
            break
        del state.waiting[i]
        state.blocks.allocate(req.id, tokens)
        state.prefill(req)
        state.running.append(req)


def _reserve(state, preempt=True, free_victim=True):
    for req in list(state.running):
        if req not in state.running:
            continue
        while True:
            try:
                state.blocks.append(req.id)
                break
            except OutOfBlocks:
                if not preempt:
                    raise
                victim = state.running.pop()
                if free_victim:
                    state.blocks.free(victim.id)
                state.waiting.appendleft(victim)
                if victim is req:
                    break


def right(state):
    _drop_cancelled(state)
    _admit(state)
    _retire(state)
    _reserve(state)
    state.decode(list(state.running))
    _retire(state)


def ignores_cancel(state):
    _admit(state)
    _retire(state)
    _reserve(state)
    state.decode(list(state.running))
    _retire(state)


def cancel_keeps_blocks(state):
    _drop_cancelled(state, free=False)
    _admit(state)
    _retire(state)
    _reserve(state)
    state.decode(list(state.running))
    _retire(state)


def finish_keeps_blocks(state):
    _drop_cancelled(state)
    _admit(state)
    _reserve(state)
    state.decode(list(state.running))
    _retire(state, free=False)


def admits_without_looking(state):
    _drop_cancelled(state)
    _admit(state, check_blocks=False)
    _retire(state)
    _reserve(state)
    state.decode(list(state.running))
    _retire(state)


def skips_ahead(state):
    _drop_cancelled(state)
    _admit(state, skip=True)
    _retire(state)
    _reserve(state)
    state.decode(list(state.running))
    _retire(state)


def ignores_max_running(state):
    _drop_cancelled(state)
    _admit(state, seats=False)
    _retire(state)
    _reserve(state)
    state.decode(list(state.running))
    _retire(state)


def decodes_one_by_one(state):
    _drop_cancelled(state)
    _admit(state)
    _retire(state)
    _reserve(state)
    for r in list(state.running):
        state.decode([r])
    _retire(state)


def no_preemption(state):
    _drop_cancelled(state)
    _admit(state)
    _retire(state)
    _reserve(state, preempt=False)
    state.decode(list(state.running))
    _retire(state)


def preempted_keep_blocks(state):
    _drop_cancelled(state)
    _admit(state)
    _retire(state)
    _reserve(state, free_victim=False)
    state.decode(list(state.running))
    _retire(state)


def no_slot_before_decode(state):
    _drop_cancelled(state)
    _admit(state)
    _retire(state)
    state.decode(list(state.running))
    _retire(state)


def retires_only_first(state):
    _drop_cancelled(state)
    _retire(state)
    _admit(state)
    _reserve(state)
    state.decode(list(state.running))


def prefills_every_step(state):
    """Right tokens, no cache reuse: every step recomputes each running request from its whole sequence."""
    _drop_cancelled(state)
    _admit(state)
    _retire(state)
    for r in list(state.running):
        state.blocks.free(r.id)
        state.blocks.allocate(r.id, len(r.prompt) + len(r.output))
        state.prefill(r)
    _retire(state)


def test_the_right_answer_passes_every_check():
    for c in (L.check_tokens, L.check_work, L.check_budget, L.check_cancel, L.check_no_starvation):
        c(right)


@pytest.mark.parametrize("fn, check, match", [
    (ignores_cancel, L.check_cancel, "leave both queues|held by"),
    (cancel_keeps_blocks, L.check_cancel, "give their blocks back"),
    (finish_keeps_blocks, L.check_tokens, "still held its blocks|give their blocks back|freed twice"),
    (admits_without_looking, L.check_budget, "blocks were free"),
    (skips_ahead, L.check_no_starvation, "nobody behind it"),
    (ignores_max_running, L.check_tokens, "max_running"),
    (decodes_one_by_one, L.check_tokens, "one call decodes every"),
    (no_preemption, L.check_budget, "preempt the newest"),
    (preempted_keep_blocks, L.check_budget, "give their blocks back|already has blocks"),
    (no_slot_before_decode, L.check_tokens, "needs a slot"),
    (retires_only_first, L.check_tokens, "got"),
    (prefills_every_step, L.check_work, "prefilled once"),
])
def test_wrong_answers_fail_with_a_message_that_names_the_mistake(fn, check, match):
    with pytest.raises(LabCheckFailed, match=match):
        check(fn)
