"""The chunked-prefill exercise's checks pass the right answer and reject plausible wrong ones.

schedule(waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None) ->
SchedulerOutput, run by the real engine with a token budget
| question | what the checks try |
|---|---|
| which input varies each field | the budget (1, 3 to 13, 128, above the longest prompt, None), seats (1 to 5, None), blocks (1, 2, 4, 8 tokens), prompts of 1 to 70 tokens, arrivals at step 0 and later |
| boundaries | a budget spent by the decodes alone; a chunk that ends the prompt exactly; a budget equal to the prompt; a budget of 1; a budget left over by one token |
| a shape the notes never show | a prompt preempted while it is still prefilling; a request preempted after it made tokens, computed again (prompt and output) in chunks |
| order or ties | decodes, then chunks of the prompts prefilling (oldest first), then admissions; which requests are prefilling read before any slot is given |
| errors: type and message | a chunk of 0 tokens, a budget exceeded, a prefilling request decoded, a chunk beyond what is left, blocks for the chunk only, OutOfBlocks escaping, a plan that runs nothing: each named |
| policy: which item | who gets the budget first, and who is preempted (the newest, a prefilling one too) |

Each wrong answer is one class of mistake: the budget ignored, the decodes not counted, chunks before decodes,
admission not stopped when the budget is spent, a chunk not clipped to what is left, a prefilling request given a
decode slot, which requests are prefilling read after the slots, the budget reset per request, stopping one token
early, blocks reserved for the chunk only, admissions before the chunks, prefilling told by "no output yet" or by
the prompt alone, None read as a budget of 0, the engine's num_computed_tokens changed by the plan, an admission
with no chunk. The trace check (the plans against ailab.generation.schedule's, step by step) catches every one of
those, and a policy mistake that gives the right tokens and breaks no rule the engine watches: a prompt still
prefilling spared from preemption.
"""

import math

import pytest

from ailab.generation import OutOfBlocks, SchedulerOutput, schedule
from ailab.labs import LabCheckFailed
from ailab.labs import ex_chunked_prefill as L

CHECKS = (L.check_tokens, L.check_budget, L.check_chunks, L.check_preemption)


def _planner(
    decodes_first=True,
    count_decodes=True,
    stop_when_spent=True,
    clip_to_left=True,
    skip_prefilling=True,
    prefilling_after_slots=False,
    reset_per_request=False,
    spare=0,
    blocks_for_chunk_only=False,
    admit_before_chunks=False,
    prefilling=None,
    victim=None,
    none_is_zero=False,
):
    """The contract, with one knob per mistake."""

    def is_prefilling(req, blocks):
        if prefilling is not None:
            return prefilling(req, blocks)
        return blocks.lengths[req.id] > req.num_computed_tokens

    def plan_step(waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None):
        plan = SchedulerOutput()
        if max_num_batched_tokens is None:
            full = 0 if none_is_zero else math.inf
        else:
            full = max_num_batched_tokens
        budget = [full]  # what is left of it
        found = set() if prefilling_after_slots else {r.id for r in running if is_prefilling(r, blocks)}

        def share(want):
            return min(want, full) if reset_per_request else min(want, budget[0] - spare)

        def open_(for_decode=False):
            return budget[0] - spare > 0 or not stop_when_spent

        def decode(limited):
            i = 0
            while i < len(running):
                req = running[i]
                if skip_prefilling and req.id in found:
                    i += 1
                    continue
                if limited and budget[0] <= 0:  # the decodes get what the chunks left: this one waits
                    i += 1
                    continue
                try:
                    blocks.append(req.id)
                except OutOfBlocks:
                    out = running[-1] if victim is None else victim(running, found)
                    if out is None:
                        raise
                    running.remove(out)
                    blocks.free(out.id)
                    waiting.appendleft(out)
                    plan.preempted.append(out)
                    continue
                plan.decode.append(req)
                if limited:
                    budget[0] -= 1
                i += 1

        def chunks():
            for req in list(running):
                if req.id in found and open_():
                    left = blocks.lengths[req.id] - req.num_computed_tokens
                    n = share(left) if clip_to_left else budget[0]
                    plan.prefill.append((req, n))
                    budget[0] -= n

        def admit():
            while waiting and open_() and (max_running is None or len(running) < max_running):
                req = waiting[0]
                tokens = len(req.prompt) + len(req.output)
                if not blocks.can_allocate(tokens):
                    break
                waiting.popleft()
                n = share(tokens)
                blocks.allocate(req.id, n if blocks_for_chunk_only else tokens)
                running.append(req)
                plan.prefill.append((req, n))
                budget[0] -= n

        if decodes_first:
            decode(limited=False)
            if prefilling_after_slots:
                found.update(r.id for r in running if is_prefilling(r, blocks))
            if count_decodes:
                budget[0] -= len(plan.decode)
        for part in (admit, chunks) if admit_before_chunks else (chunks, admit):
            part()
        if not decodes_first:
            decode(limited=True)
        return plan

    return plan_step


right = _planner()


def test_the_right_answer_passes_every_check():
    for c in (*CHECKS, L.check_same_as_reference):
        c(right)


def test_the_engines_own_planning_step_passes_every_check():
    for c in (*CHECKS, L.check_same_as_reference):
        c(schedule)


def budget_ignored(waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None):
    """Takes the budget argument and never reads it: 5.2's planner, every prompt computed whole."""
    return right(waiting, running, blocks, max_running, policy)


decodes_not_counted = _planner(count_decodes=False)
chunks_before_decodes = _planner(decodes_first=False)
admits_when_spent = _planner(stop_when_spent=False)
chunk_not_clipped = _planner(clip_to_left=False)
prefilling_decoded = _planner(skip_prefilling=False)
prefilling_read_after_slots = _planner(prefilling_after_slots=True)
budget_reset_per_request = _planner(reset_per_request=True)
stops_one_token_early = _planner(spare=1)
blocks_for_the_chunk_only = _planner(blocks_for_chunk_only=True)
admits_before_chunks = _planner(admit_before_chunks=True)
prefilling_when_no_output = _planner(prefilling=lambda req, blocks: not req.output)
prefilling_by_the_prompt = _planner(prefilling=lambda req, blocks: req.num_computed_tokens < len(req.prompt))
none_is_a_budget_of_zero = _planner(none_is_zero=True)
never_preempts_a_prefilling_request = _planner(
    victim=lambda running, found: next(r for r in reversed(running) if r.id not in found)
)


def records_the_chunk_as_computed(
    waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None
):
    """Adds each chunk to num_computed_tokens itself: the engine then counts it twice."""
    plan = right(waiting, running, blocks, max_running, policy, max_num_batched_tokens)
    for req, n in plan.prefill:
        req.num_computed_tokens += n
    return plan


def admits_without_a_chunk(
    waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None
):
    """Moves the head of the queue to running with its blocks when the budget is spent, planning no chunk for it."""
    plan = right(waiting, running, blocks, max_running, policy, max_num_batched_tokens)
    if waiting and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if blocks.can_allocate(tokens):
            blocks.allocate(req.id, tokens)
            running.append(waiting.popleft())
    return plan


NAMED = [
    (records_the_chunk_as_computed, L.check_tokens, "changed request 0's num_computed_tokens from 0 to 4"),
    (admits_without_a_chunk, L.check_tokens, "without a chunk in plan.prefill"),
    (budget_ignored, L.check_tokens, "max_num_batched_tokens is 4: the decodes count"),
    (decodes_not_counted, L.check_tokens, "the decodes count, one token each"),
    (chunks_before_decodes, L.check_tokens, "gave it no token in this step"),
    (admits_when_spent, L.check_tokens, "every chunk computes at least one token"),
    (chunk_not_clipped, L.check_tokens, "has only .* left to compute"),
    (prefilling_decoded, L.check_tokens, "before its prompt is complete"),
    (prefilling_read_after_slots, L.check_tokens, "before its prompt is complete|in plan.decode and in plan.prefill"),
    (budget_reset_per_request, L.check_tokens, "max_num_batched_tokens is"),
    (stops_one_token_early, L.check_budget, r"token\(s\) of the budget were left"),
    (blocks_for_the_chunk_only, L.check_tokens, "reserves blocks for all its"),
    (admits_before_chunks, L.check_budget, "get their next chunks first"),
    (prefilling_when_no_output, L.check_preemption, "before its prompt is complete"),
    (prefilling_by_the_prompt, L.check_preemption, "before its prompt is complete"),
    (none_is_a_budget_of_zero, L.check_tokens, "runs nothing"),
]
TRACE_ONLY = [never_preempts_a_prefilling_request]


@pytest.mark.parametrize("fn, check, match", NAMED, ids=[fn.__name__ for fn, _, _ in NAMED])
def test_wrong_answers_fail_with_a_message_that_names_the_mistake(fn, check, match):
    with pytest.raises(LabCheckFailed, match=match):
        check(fn)


@pytest.mark.parametrize(
    "fn",
    [fn for fn, _, _ in NAMED] + TRACE_ONLY,
    ids=[fn.__name__ for fn, _, _ in NAMED] + ["never_preempts_prefilling"],
)
def test_the_trace_check_catches_every_wrong_answer(fn):
    with pytest.raises(LabCheckFailed, match="the two differ|on a trace of"):
        L.check_same_as_reference(fn)


def test_the_trace_check_names_the_step_the_trace_and_both_plans():
    with pytest.raises(LabCheckFailed) as e:
        L.check_same_as_reference(stops_one_token_early)
    message = str(e.value)
    assert "(the smallest input found where the two differ)" in message
    assert "is the first where the plans differ" in message and "max_num_batched_tokens=" in message
    assert "The reference plans: decode" in message and "Yours: decode" in message


def test_a_stub_is_not_implemented_yet():
    def stub(waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None):
        raise NotImplementedError("write schedule")

    for c in (*CHECKS, L.check_same_as_reference):
        with pytest.raises(LabCheckFailed, match="not implemented yet"):
            c(stub)


def test_an_escaping_out_of_blocks_is_named():
    no_preemption = _planner(victim=lambda running, found: None)

    with pytest.raises(LabCheckFailed, match="OutOfBlocks .* preempt the newest"):
        L.check_preemption(no_preemption)


def test_a_planning_step_that_never_returns_is_named():
    def spins(waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None):
        """Forgets to move past a request it skips."""
        i = 0
        while i < len(running):
            if blocks.lengths[running[i].id] > running[i].num_computed_tokens:
                continue
            i += 1
        return right(waiting, running, blocks, max_running, policy, max_num_batched_tokens)

    with pytest.raises(LabCheckFailed, match=r"step \d+: your schedule did not return within 5 s"):
        L.check_tokens(spins)
