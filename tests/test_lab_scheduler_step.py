"""The scheduler-step lab's checks pass the right answer and reject plausible wrong ones.

schedule(waiting, running, blocks, max_running=None, policy="continuous") -> SchedulerOutput, run by the real engine
| question | what the checks try |
|---|---|
| which input varies each field | waiting (arrivals at step 0 and later), running (seats 3, 4, 8 and no limit), blocks (8 to 64, of 4 and 8 tokens), max_new_tokens 1 to 20 |
| boundaries | a request of 1 token (done after its prefill, retired by the engine); a pool smaller than everyone's need (preemption); a head of the queue that needs 14 of 16 blocks, or all 9 of a pool; max_running None |
| a shape the notes never show | a request preempted again after it was readmitted; a request preempted while it is the one short of a slot; arrivals while a long one waits |
| order or ties | admission order against the queue's; victims' order at the front of the queue; several requests finishing in the same step |
| errors: type and message | OutOfBlocks escaping the plan is named; over-asking, a second allocation or a second free of the blocks is named; a plan that is not a SchedulerOutput, or runs nothing while requests wait, is named |
| policy: which item | which requests each plan admits (head first, every seat that fits filled), which one it preempts (the newest), where it goes (the front), how many it preempts (no more than needed) |

Each wrong answer is one class of mistake. The contract (every check): admitting beyond the free blocks, max_running
ignored, never admitting (a stall), prefilling running requests again, admitting before planning the running ones
(a request in both prefill and decode), a decode batch capped below the running, a request listed twice in decode,
no preemption (OutOfBlocks escapes), a victim's blocks not freed, a victim not listed as preempted, a prefill count
without the output generated before a preemption, queues copied instead of updated in place, no SchedulerOutput.
The policy (each gives the right tokens): admitting newest first, skipping a head that does not fit, static
batching, one admission per step, preempting the oldest, the request short of a slot or the longest, preempting
everyone, requeueing at the back or behind the head.
The trace check (the plans against ailab.generation.schedule's, step by step, over generated traces) catches every
one of those, and more: admission asking one token, the whole output or a spare block more than it needs, or more
blocks than it takes, None read as a seat per waiting request, one seat too many (boundaries); blocks counted by
floor division or rounding (units); token counts memoized by id, max_running kept from the first call, the output
folded into the prompt (state); victims requeued newest first, the lowest id admitted first, the highest id
preempted, the admitted put at the front of `running` (order).
"""

from collections import deque

import pytest

from ailab.generation import OutOfBlocks, SchedulerOutput, schedule
from ailab.labs import LabCheckFailed
from ailab.labs import lab_scheduler_step as L

CHECKS = (L.check_tokens, L.check_plan, L.check_budget, L.check_no_starvation, L.check_continuous, L.check_preemption)


newest = lambda running, req: running[-1]  # noqa: E731
front = lambda waiting, victim: waiting.appendleft(victim)  # noqa: E731


def _reserve(
    waiting,
    running,
    blocks,
    plan,
    preempt=True,
    free_victim=True,
    listed=True,
    listed_before_slot=False,
    pick=newest,
    requeue=front,
):
    """A slot for every running request, oldest first; when none is free, preempt `pick`'s victim and `requeue` it."""
    i = 0
    while i < len(running):
        req = running[i]
        if listed_before_slot:
            plan.decode.append(req)
        try:
            blocks.append(req.id)
        except OutOfBlocks:
            if not preempt:
                raise
            victim = pick(running, req)
            j = running.index(victim)
            running.remove(victim)
            if free_victim:
                blocks.free(victim.id)
            requeue(waiting, victim)
            if listed:
                plan.preempted.append(victim)
            while victim in plan.decode:
                plan.decode.remove(victim)
            i -= j < i
            continue
        if not listed_before_slot:
            plan.decode.append(req)
        i += 1


def _admit(
    waiting,
    running,
    blocks,
    plan,
    max_running,
    skip=False,
    check_blocks=True,
    seats=True,
    with_output=True,
    one=False,
    newest_first=False,
):
    """Admit from the queue while seats and blocks allow."""
    i = 0
    while i < len(waiting) and (not seats or max_running is None or len(running) < max_running):
        req = waiting[-1 - i] if newest_first else waiting[i]
        tokens = len(req.prompt) + (len(req.output) if with_output else 0)
        if check_blocks and not blocks.can_allocate(tokens):
            if skip:
                i += 1
                continue
            break
        waiting.remove(req)
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, tokens))
        if one:
            break


def _planner(reserve=None, admit=None, admit_first=False, static=False):
    def plan_step(waiting, running, blocks, max_running=None, policy="continuous"):
        plan = SchedulerOutput()
        if admit_first:
            _admit(waiting, running, blocks, plan, max_running, **(admit or {}))
        _reserve(waiting, running, blocks, plan, **(reserve or {}))
        if not admit_first and not (static and running):
            _admit(waiting, running, blocks, plan, max_running, **(admit or {}))
        return plan

    return plan_step


right = _planner()


def test_the_right_answer_passes_every_check():
    for c in CHECKS:
        c(right)


def test_the_engines_own_planning_step_passes_every_check():
    for c in CHECKS:
        c(schedule)


# The contract: a plan the engine could not run, or that would give wrong tokens later.
admits_without_looking = _planner(admit={"check_blocks": False})
ignores_max_running = _planner(admit={"seats": False})
admits_before_planning_the_running = _planner(admit_first=True)
prefill_without_output = _planner(admit={"with_output": False})
no_preemption = _planner(reserve={"preempt": False})
preempted_keep_blocks = _planner(reserve={"free_victim": False})
preempted_not_listed = _planner(reserve={"listed": False})
listed_in_decode_before_its_slot = _planner(reserve={"listed_before_slot": True})


def never_admits(waiting, running, blocks, max_running=None, policy="continuous"):
    """Plans the running requests' slots and forgets the queue."""
    plan = SchedulerOutput()
    _reserve(waiting, running, blocks, plan)
    return plan


def prefills_the_running_again(waiting, running, blocks, max_running=None, policy="continuous"):
    """Right tokens, no cache reuse: every running request is recomputed from its whole sequence each step."""
    plan = SchedulerOutput()
    for r in running:
        blocks.free(r.id)
        blocks.allocate(r.id, len(r.prompt) + len(r.output))
        plan.prefill.append((r, len(r.prompt) + len(r.output)))
    _admit(waiting, running, blocks, plan, max_running)
    return plan


def decodes_at_most_two(waiting, running, blocks, max_running=None, policy="continuous"):
    """A decode batch capped at two: the others skip the step."""
    plan = SchedulerOutput()
    for r in running[:2]:
        blocks.append(r.id)
        plan.decode.append(r)
    _admit(waiting, running, blocks, plan, max_running)
    return plan


def works_on_copies(waiting, running, blocks, max_running=None, policy="continuous"):
    """Rebinds the queues to new objects: the engine never sees the admissions."""
    return right(deque(waiting), list(running), blocks, max_running, policy)


def returns_nothing(waiting, running, blocks, max_running=None, policy="continuous"):
    right(waiting, running, blocks, max_running, policy)


CONTRACT = [
    (admits_without_looking, L.check_budget, "blocks were free: check blocks.can_allocate"),
    (ignores_max_running, L.check_tokens, "max_running is 3"),
    (never_admits, L.check_tokens, "your plan runs nothing while requests"),
    (prefills_the_running_again, L.check_tokens, "was already running, and your plan prefills it again"),
    (admits_before_planning_the_running, L.check_tokens, "admitted in this step and is in plan.decode too"),
    (decodes_at_most_two, L.check_tokens, r"keep running but are not in plan.decode"),
    (listed_in_decode_before_its_slot, L.check_budget, "is in plan.decode twice"),
    (no_preemption, L.check_budget, "OutOfBlocks .* preempt the newest"),
    (preempted_keep_blocks, L.check_budget, "went back to the queue still holding"),
    (preempted_not_listed, L.check_budget, "list it in plan.preempted"),
    (prefill_without_output, L.check_budget, "recomputes them all"),
    (prefill_without_output, L.check_plan, "recomputes them all"),
    (works_on_copies, L.check_tokens, "in place"),
    (returns_nothing, L.check_tokens, "return a SchedulerOutput"),
]


# The policy: which request is admitted, preempted and requeued. Each of these gives the right tokens.
static_batching = _planner(static=True)
admits_one_per_step = _planner(admit={"one": True})
admits_newest_first = _planner(admit={"newest_first": True})
skips_ahead = _planner(admit={"skip": True})
preempts_oldest = _planner(reserve={"pick": lambda running, req: running[0]})
preempts_the_one_short_of_a_slot = _planner(reserve={"pick": lambda running, req: req})
preempts_the_longest = _planner(
    reserve={"pick": lambda running, req: max(running, key=lambda r: len(r.prompt) + len(r.output))}
)
requeues_at_the_back = _planner(reserve={"requeue": lambda waiting, victim: waiting.append(victim)})
requeues_behind_the_head = _planner(reserve={"requeue": lambda waiting, victim: waiting.insert(1, victim)})


def preempts_everyone(waiting, running, blocks, max_running=None, policy="continuous", admit_after=True):
    """On the first OutOfBlocks, sends every running request back (the oldest ends up first in the queue)."""
    plan = SchedulerOutput()
    for req in list(running):
        try:
            blocks.append(req.id)
            plan.decode.append(req)
        except OutOfBlocks:
            for victim in reversed(list(running)):
                running.remove(victim)
                blocks.free(victim.id)
                waiting.appendleft(victim)
                plan.preempted.append(victim)
            plan.decode = []
            break
    if admit_after or not plan.preempted:
        _admit(waiting, running, blocks, plan, max_running)
    return plan


def preempts_everyone_then_waits(waiting, running, blocks, max_running=None, policy="continuous"):
    """The same, admitting nobody in a step that preempted: the victims are not readmitted at once."""
    return preempts_everyone(waiting, running, blocks, max_running, policy, admit_after=False)


def preempts_two_at_a_time(waiting, running, blocks, max_running=None, policy="continuous"):
    """Sends back the two newest whenever a slot is missing, where one would do."""
    plan = SchedulerOutput()
    i = 0
    while i < len(running):
        try:
            blocks.append(running[i].id)
            plan.decode.append(running[i])
            i += 1
        except OutOfBlocks:
            for _ in range(min(2, len(running) - i)):
                victim = running.pop()
                blocks.free(victim.id)
                waiting.appendleft(victim)
                plan.preempted.append(victim)
    _admit(waiting, running, blocks, plan, max_running)
    return plan


POLICY = [
    (static_batching, L.check_continuous, "static batching"),
    (admits_one_per_step, L.check_continuous, "not one request per step"),
    (admits_newest_first, L.check_continuous, "admit from the head of the queue, in order"),
    (skips_ahead, L.check_continuous, "nobody behind it jumps ahead"),
    (skips_ahead, L.check_no_starvation, "nobody behind it"),
    (preempts_oldest, L.check_preemption, "Preempt the NEWEST"),
    (preempts_the_one_short_of_a_slot, L.check_preemption, "Preempt the NEWEST"),
    (preempts_the_longest, L.check_preemption, "Preempt the NEWEST"),
    (requeues_at_the_back, L.check_preemption, "at the FRONT of the queue"),
    (requeues_behind_the_head, L.check_preemption, "FRONT of the queue"),
    (preempts_everyone, L.check_preemption, "Preempt one request at a time"),
    (preempts_two_at_a_time, L.check_preemption, "Preempt one request at a time"),
    (preempts_everyone_then_waits, L.check_preemption, r"left \d+ blocks free, enough for request \d+ to have kept"),
    (no_preemption, L.check_preemption, "preempt the newest"),
]


def _name(fn) -> str:
    return next(name for name, value in globals().items() if value is fn)


@pytest.mark.parametrize(
    "fn, check, match",
    CONTRACT + POLICY,
    ids=[f"{_name(fn)}-{c.__name__}" for fn, c, _ in CONTRACT + POLICY],
)
def test_wrong_answers_fail_with_a_message_that_names_the_mistake(fn, check, match):
    with pytest.raises(LabCheckFailed, match=match):
        check(fn)


def test_the_policy_mistakes_pass_the_token_checks():
    """Why the policy needs checks of its own: each of these gives every request its greedy tokens."""
    L.check_tokens(static_batching)
    L.check_tokens(admits_newest_first)
    L.check_budget(preempts_oldest)
    L.check_budget(requeues_at_the_back)


# --------------------------------------------------------------------------- the trace check (issue 42, item 2)


def test_the_right_answers_make_the_reference_plans_on_every_trace():
    L.check_same_as_reference(right)
    L.check_same_as_reference(schedule)


def test_the_traces_preempt_several_requests_in_one_step():
    """The generated traces reach what the brief asks of them: steps that preempt two and three requests, ids
    beyond 2**31, no seat limit, a head that fits with nothing to spare."""
    from hypothesis import HealthCheck, settings
    from hypothesis import given as _given

    most, large, unlimited = [], [], []

    @settings(max_examples=300, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @_given(L._traces())
    def run(args):
        (trace,) = args
        steps = L._plans(schedule, trace)
        most.append(max((len(s["preempted"]) for s in steps), default=0))
        large.append(any(rid > 2**31 for rid, *_ in trace[3]))
        unlimited.append(trace[2] is None)

    run()
    assert max(most) >= 3 and sum(m >= 2 for m in most) >= 10
    assert any(large) and any(unlimited)
    assert max(len(s["preempted"]) for s in L._plans(schedule, L._EDGES[0])) == 3


def _tokens(req):
    return len(req.prompt) + len(req.output)


def _admit_if(fits, place=lambda running, req: running.append(req)):
    """A right planner whose admission asks `fits(req, blocks, tokens)` instead of blocks.can_allocate(tokens), and
    puts the admitted where `place` says."""

    def plan_step(waiting, running, blocks, max_running=None, policy="continuous"):
        plan = SchedulerOutput()
        _reserve(waiting, running, blocks, plan)
        while waiting and (max_running is None or len(running) < max_running):
            req = waiting[0]
            if not fits(req, blocks, _tokens(req)):
                break
            waiting.popleft()
            blocks.allocate(req.id, _tokens(req))
            place(running, req)
            plan.prefill.append((req, _tokens(req)))
        return plan

    return plan_step


# Boundaries: admission that asks for more room than it needs (the mistakes that got through before), and seats.
asks_one_token_more = _admit_if(lambda req, blocks, n: blocks.can_allocate(n + 1))
asks_for_the_whole_output = _admit_if(lambda req, blocks, n: blocks.can_allocate(len(req.prompt) + req.max_new_tokens))
asks_a_spare_block = _admit_if(lambda req, blocks, n: blocks.blocks_for(n) + 1 <= len(blocks.free_blocks))
needs_more_than_it_takes = _admit_if(lambda req, blocks, n: blocks.blocks_for(n) < len(blocks.free_blocks))


def none_is_a_seat_per_waiting_request(waiting, running, blocks, max_running=None, policy="continuous"):
    """max_running=None read as 'as many seats as requests waiting' (counted when the step begins)."""
    return right(waiting, running, blocks, len(waiting) if max_running is None else max_running, policy)


def one_seat_too_many(waiting, running, blocks, max_running=None, policy="continuous"):
    """Admits while len(running) <= max_running: one request beyond the limit."""
    return right(waiting, running, blocks, None if max_running is None else max_running + 1, policy)


# Units and rounding: blocks counted from tokens by floor division, or rounded.
floor_blocks = _admit_if(lambda req, blocks, n: n // blocks.block_size <= len(blocks.free_blocks))
rounded_blocks = _admit_if(lambda req, blocks, n: round(n / blocks.block_size) <= len(blocks.free_blocks))


# State that outlives a call.
_TOKENS_SEEN: dict = {}
_FIRST_SEATS: list = []


def tokens_memoized_by_id(waiting, running, blocks, max_running=None, policy="continuous"):
    """Keeps each request's token count, by id, from the first time it saw it: stale after a preemption, and for
    the next engine's request that has the same id."""
    plan = SchedulerOutput()
    _reserve(waiting, running, blocks, plan)
    while waiting and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = _TOKENS_SEEN.setdefault(req.id, _tokens(req))
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, tokens))
    return plan


def seats_from_the_first_call(waiting, running, blocks, max_running=None, policy="continuous"):
    """Reads max_running once, at its first call, and keeps it: the next engine's own limit is not seen."""
    if not _FIRST_SEATS:
        _FIRST_SEATS.append(max_running)
    return right(waiting, running, blocks, _FIRST_SEATS[0], policy)


def folds_the_output_into_the_prompt(waiting, running, blocks, max_running=None, policy="continuous"):
    """On preemption, moves the request's output into its prompt (prompt += output, output cleared): the same
    prefill count, but the caller's request is changed, and it now runs past its max_new_tokens."""

    def requeue(waiting, victim):
        victim.prompt.extend(victim.output)
        victim.output.clear()
        waiting.appendleft(victim)

    plan = SchedulerOutput()
    _reserve(waiting, running, blocks, plan, requeue=requeue)
    _admit(waiting, running, blocks, plan, max_running)
    return plan


# Order: the victims' order at the front of the queue, ids read as age, the admitted put first.
def requeues_victims_newest_first(waiting, running, blocks, max_running=None, policy="continuous"):
    """Collects the step's victims (newest first), then puts them back in that order: when two are preempted in
    one step, the newer ends up at the head of the queue."""
    plan, victims = SchedulerOutput(), []
    i = 0
    while i < len(running):
        try:
            blocks.append(running[i].id)
            plan.decode.append(running[i])
            i += 1
        except OutOfBlocks:
            victim = running.pop()
            blocks.free(victim.id)
            victims.append(victim)
            plan.preempted.append(victim)
    for victim in reversed(victims):
        waiting.appendleft(victim)  # the last appended left is the first victim, the newest
    _admit(waiting, running, blocks, plan, max_running)
    return plan


def admits_the_lowest_id_first(waiting, running, blocks, max_running=None, policy="continuous"):
    """Reads a lower id as an older request: sorts the queue by id before admitting."""
    ordered = sorted(waiting, key=lambda r: r.id)
    waiting.clear()
    waiting.extend(ordered)
    return right(waiting, running, blocks, max_running, policy)


preempts_the_highest_id = _planner(reserve={"pick": lambda running, req: max(running, key=lambda r: r.id)})
admitted_at_the_front_of_running = _admit_if(
    lambda req, blocks, n: blocks.can_allocate(n), place=lambda running, req: running.insert(0, req)
)


NEW_WRONG = [
    asks_one_token_more,
    asks_for_the_whole_output,
    asks_a_spare_block,
    needs_more_than_it_takes,
    none_is_a_seat_per_waiting_request,
    one_seat_too_many,
    floor_blocks,
    rounded_blocks,
    tokens_memoized_by_id,
    seats_from_the_first_call,
    folds_the_output_into_the_prompt,
    requeues_victims_newest_first,
    admits_the_lowest_id_first,
    preempts_the_highest_id,
    admitted_at_the_front_of_running,
]


@pytest.mark.parametrize("wrong", NEW_WRONG + list(dict.fromkeys(fn for fn, _, _ in CONTRACT + POLICY)), ids=_name)
def test_the_trace_check_catches_every_wrong_answer(wrong):
    _TOKENS_SEEN.clear()
    _FIRST_SEATS.clear()
    with pytest.raises(LabCheckFailed, match="is the first where the plans differ|the same plans for"):
        L.check_same_as_reference(wrong)


def test_the_trace_check_names_the_step_the_trace_and_both_plans():
    with pytest.raises(LabCheckFailed) as e:
        L.check_same_as_reference(requeues_victims_newest_first)
    message = str(e.value)
    assert "a trace of" in message and "is the first where the plans differ" in message
    assert "The reference plans: decode" in message and "Yours: decode" in message


def test_a_stub_is_not_implemented_yet():
    def stub(waiting, running, blocks, max_running=None, policy="continuous"):
        raise NotImplementedError("write schedule")

    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        L.check_same_as_reference(stub)
