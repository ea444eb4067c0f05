"""The scheduler-step lab's checks pass the right answer and reject plausible wrong ones.

scheduler_step(state) -> None
| question | what the checks try |
|---|---|
| which input varies each field | waiting (arrivals at step 0 and later), running (seats 2, 3, 4, 8), blocks (8 to 64, of 4 and 8 tokens), cancelled (one waiting, one running), max_new_tokens 1 to 30 |
| boundaries | a request of 1 token (done after its prefill); a pool smaller than everyone's need (preemption); a head of the queue that needs 14 of 16 blocks; a prompt that fills whole blocks |
| a shape the notes never show | a request preempted again after it was readmitted; a request admitted and preempted in the same step; arrivals while a long one waits |
| order or ties | admission order against the queue's; several requests finishing in the same step; victims' order at the front of the queue |
| errors: type and message | OutOfBlocks escaping the step is named; a second free or a finish with blocks held is named |
| policy: which item | which requests each step admits (head first, every seat that fits filled), which one it preempts (the newest), where it goes (the front), how many it preempts (no more than needed), tokens per request per step |

Each wrong answer is one class of mistake: admitting beyond the free blocks, blocks not freed on finish, on
cancel or on preemption, cancelled requests kept, a long request overtaken (skip-ahead admission), a prefill
recomputed every step, one decode call per request, no preemption, no slot reserved before decoding,
max_running ignored, retiring only before the decode; and, for the policy (all of which give the right tokens):
static batching, one admission per step, preempting the oldest, the request short of a slot or the longest,
preempting everyone, requeueing at the back or behind the head, new requests left out of their first decode,
a decode batch capped below the seats.
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


def _reserve(
    state,
    preempt=True,
    free_victim=True,
    pick=lambda state, req: state.running[-1],
    requeue=lambda state, victim: state.waiting.appendleft(victim),
):
    """Give every running request a slot; when none is free, preempt `pick`'s victim and `requeue` it."""
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
                victim = pick(state, req)
                state.running.remove(victim)
                if free_victim:
                    state.blocks.free(victim.id)
                requeue(state, victim)
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


WRONG_ANSWERS = [
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
]


# The policy: which request is admitted, preempted and requeued, and what each step gives each request.
def _admit_static(state):
    if not state.running:
        _admit(state)


def static_batching(state):
    """Admits only when every running request has finished: a freed seat stays empty until the batch ends."""
    _drop_cancelled(state)
    _admit_static(state)
    _retire(state)
    _reserve(state)
    state.decode(list(state.running))
    _retire(state)


def admits_one_per_step(state):
    _drop_cancelled(state)
    if state.waiting and len(state.running) < state.max_running:
        req = state.waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if state.blocks.can_allocate(tokens):
            state.waiting.popleft()
            state.blocks.allocate(req.id, tokens)
            state.prefill(req)
            state.running.append(req)
    _retire(state)
    _reserve(state)
    state.decode(list(state.running))
    _retire(state)


def _step_with(pick, requeue):
    def step(state):
        _drop_cancelled(state)
        _admit(state)
        _retire(state)
        _reserve(state, pick=pick, requeue=requeue)
        state.decode(list(state.running))
        _retire(state)

    return step


newest = lambda state, req: state.running[-1]  # noqa: E731
front = lambda state, victim: state.waiting.appendleft(victim)  # noqa: E731
preempts_oldest = _step_with(lambda state, req: state.running[0], front)
preempts_the_one_short_of_a_slot = _step_with(lambda state, req: req, front)
preempts_the_longest = _step_with(
    lambda state, req: max(state.running, key=lambda r: len(r.prompt) + len(r.output)), front
)
requeues_at_the_back = _step_with(newest, lambda state, victim: state.waiting.append(victim))
requeues_behind_the_head = _step_with(newest, lambda state, victim: state.waiting.insert(1, victim))


def preempts_everyone(state):
    """On the first OutOfBlocks, sends every running request back (newest first to the front)."""
    _drop_cancelled(state)
    _admit(state)
    _retire(state)
    for req in list(state.running):
        try:
            state.blocks.append(req.id)
        except OutOfBlocks:
            for victim in reversed(list(state.running)):
                state.running.remove(victim)
                state.blocks.free(victim.id)
                state.waiting.appendleft(victim)
            break
    state.decode(list(state.running))
    _retire(state)


def admitted_wait_a_step(state):
    """Decodes only the requests that were running before this step's admissions."""
    _drop_cancelled(state)
    old = list(state.running)
    _admit(state)
    _retire(state)
    for r in [r for r in state.running if r not in old]:
        state.blocks.free(r.id)  # (so the blocks held match what the new ones need)
        state.blocks.allocate(r.id, len(r.prompt) + len(r.output))
    _reserve_subset = [r for r in state.running if r in old]
    for r in _reserve_subset:
        state.blocks.append(r.id)
    state.decode(_reserve_subset)
    _retire(state)


def decodes_at_most_two(state):
    """A decode batch capped at two: the others skip the step."""
    _drop_cancelled(state)
    _admit(state)
    _retire(state)
    batch = list(state.running)[:2]
    for r in batch:
        state.blocks.append(r.id)
    state.decode(batch)
    _retire(state)


POLICY = (L.check_continuous, L.check_step_tokens, L.check_preemption)


def test_the_right_answer_passes_the_policy_checks():
    for c in POLICY:
        c(right)


@pytest.mark.parametrize(
    "fn, check, match",
    WRONG_ANSWERS
    + [
        (static_batching, L.check_continuous, "static batching"),
        (admits_one_per_step, L.check_continuous, r"your step admitted \[\d+\] while"),
        (skips_ahead, L.check_continuous, "admit from the head of the queue"),
        (preempts_oldest, L.check_preemption, "Preempt the NEWEST"),
        (preempts_the_one_short_of_a_slot, L.check_preemption, "Preempt the NEWEST"),
        (preempts_the_longest, L.check_preemption, "Preempt the NEWEST"),
        (requeues_at_the_back, L.check_preemption, "at the FRONT of the queue"),
        (requeues_behind_the_head, L.check_preemption, "at the FRONT of the queue"),
        (preempts_everyone, L.check_preemption, "Preempt one request at a time"),
        (no_preemption, L.check_preemption, "preempt the newest"),
        (admitted_wait_a_step, L.check_step_tokens, "admitted \\(prefilled\\) in this step but left out"),
        (decodes_at_most_two, L.check_step_tokens, "left out of the step's decode"),
    ],
)
def test_wrong_answers_fail_with_a_message_that_names_the_mistake(fn, check, match):
    with pytest.raises(LabCheckFailed, match=match):
        check(fn)


def test_the_policy_mistakes_pass_the_token_checks():
    """Why the policy needs checks of its own: each of these gives every request its greedy tokens."""
    L.check_tokens(static_batching)
    L.check_budget(preempts_oldest)
    L.check_budget(requeues_at_the_back)
