"""Independent wrong answers for ex_chunked_prefill, written from labs/5_generation/ex_chunked_prefill.ipynb's contract alone."""

from ailab.generation import OutOfBlocks, SchedulerOutput


def _slots(waiting, running, blocks, plan, skip=()):
    """5.2's loop: a slot for each running request not in `skip`, oldest first, the newest preempted when none is
    free."""
    i = 0
    while i < len(running):
        req = running[i]
        if req.id in skip:
            i += 1
            continue
        try:
            blocks.append(req.id)
        except OutOfBlocks:
            victim = running.pop()
            blocks.free(victim.id)
            waiting.appendleft(victim)
            plan.preempted.append(victim)
            continue
        plan.decode.append(req)
        i += 1


def schedule(waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None):
    plan = SchedulerOutput()
    left = float("inf") if max_num_batched_tokens is None else max_num_batched_tokens
    prefilling = [r.id for r in running if blocks.lengths[r.id] > r.num_computed_tokens]
    _slots(waiting, running, blocks, plan, skip=prefilling)
    left -= len(plan.decode)
    for req in running:
        if req.id in prefilling and left > 0:
            n = min(blocks.lengths[req.id] - req.num_computed_tokens, left)
            plan.prefill.append((req, n))
            left -= n
    while waiting and left > 0 and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        n = min(tokens, left)
        plan.prefill.append((req, n))
        left -= n
    return plan


def ignores_the_budget(waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None):
    """Accepts the new argument and plans as 5.2 did: every admitted prompt computed whole."""
    # differs on a 20-token prompt under a budget of 8: one chunk of 20 instead of 8, 8 and 4 over three steps
    plan = SchedulerOutput()
    _slots(waiting, running, blocks, plan)
    while waiting and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, tokens))
    return plan


def decodes_are_free(waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None):
    """Gives the whole budget to the chunks and admissions: the decodes are counted after them, on top."""
    # differs on two requests decoding and a 20-token prompt, budget 8: the step computes 2 + 8 tokens, not 8
    plan = SchedulerOutput()
    left = float("inf") if max_num_batched_tokens is None else max_num_batched_tokens
    prefilling = [r.id for r in running if blocks.lengths[r.id] > r.num_computed_tokens]
    _slots(waiting, running, blocks, plan, skip=prefilling)
    for req in running:
        if req.id in prefilling and left > 0:
            n = min(blocks.lengths[req.id] - req.num_computed_tokens, left)
            plan.prefill.append((req, n))
            left -= n
    while waiting and left > 0 and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, min(tokens, left)))
        left -= min(tokens, left)
    return plan


def chunks_before_decodes(waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None):
    """Serves the prompt chunks first, then decodes while the budget lasts."""
    # differs on one request decoding and a 20-token prompt prefilling, budget 8: the chunk takes 8 and the decode
    # waits, instead of 1 decode and a chunk of 7
    plan = SchedulerOutput()
    left = float("inf") if max_num_batched_tokens is None else max_num_batched_tokens
    prefilling = [r.id for r in running if blocks.lengths[r.id] > r.num_computed_tokens]
    for req in running:
        if req.id in prefilling and left > 0:
            n = min(blocks.lengths[req.id] - req.num_computed_tokens, left)
            plan.prefill.append((req, n))
            left -= n
    decoders = [r for r in running if r.id not in prefilling]
    for req in decoders:
        if left <= 0:
            break
        try:
            blocks.append(req.id)
        except OutOfBlocks:
            break
        plan.decode.append(req)
        left -= 1
    while waiting and left > 0 and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, min(tokens, left)))
        left -= min(tokens, left)
    return plan


def admits_with_a_spent_budget(
    waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None
):
    """Keeps admitting while seats and blocks allow; a request admitted once the budget is spent gets no chunk yet."""
    # differs on a budget of 4 with three 6-token prompts waiting: the second and third are admitted with nothing
    # to compute, instead of waiting in the queue
    plan = SchedulerOutput()
    left = float("inf") if max_num_batched_tokens is None else max_num_batched_tokens
    prefilling = [r.id for r in running if blocks.lengths[r.id] > r.num_computed_tokens]
    _slots(waiting, running, blocks, plan, skip=prefilling)
    left -= len(plan.decode)
    for req in running:
        if req.id in prefilling and left > 0:
            n = min(blocks.lengths[req.id] - req.num_computed_tokens, left)
            plan.prefill.append((req, n))
            left -= n
    while waiting and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        n = min(tokens, left)
        if n > 0:
            plan.prefill.append((req, n))
            left -= n
    return plan


def chunk_is_the_budget_left(
    waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None
):
    """Gives a prompt still prefilling the whole budget left as its chunk, even past the end of its prompt."""
    # differs on a 10-token prompt with 2 tokens left and a budget of 8: a chunk of 8 instead of 2
    plan = SchedulerOutput()
    left = float("inf") if max_num_batched_tokens is None else max_num_batched_tokens
    prefilling = [r.id for r in running if blocks.lengths[r.id] > r.num_computed_tokens]
    _slots(waiting, running, blocks, plan, skip=prefilling)
    left -= len(plan.decode)
    for req in running:
        if req.id in prefilling and left > 0:
            plan.prefill.append((req, left))
            left = 0
    while waiting and left > 0 and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, min(tokens, left)))
        left -= min(tokens, left)
    return plan


def slot_for_everyone(waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None):
    """Gives every running request its slot and decode as in 5.2, then the prompts still prefilling their chunks."""
    # differs on a 20-token prompt prefilling under a budget of 8: it is decoded (and sampled) in the same step as
    # its chunk, before its prompt is complete
    plan = SchedulerOutput()
    left = float("inf") if max_num_batched_tokens is None else max_num_batched_tokens
    prefilling = [r.id for r in running if blocks.lengths[r.id] > r.num_computed_tokens]
    _slots(waiting, running, blocks, plan)
    left -= len(plan.decode)
    for req in running:
        if req.id in prefilling and left > 0:
            n = min(blocks.lengths[req.id] - 1 - req.num_computed_tokens, left)
            if n > 0:
                plan.prefill.append((req, n))
                left -= n
    while waiting and left > 0 and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, min(tokens, left)))
        left -= min(tokens, left)
    return plan


def budget_for_each_request(
    waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None
):
    """Reads the budget as a limit per request: each chunk and each admission gets up to the full budget."""
    # differs on two 20-token prompts arriving together, budget 8: chunks of 8 and 8 (16 tokens) in one step
    plan = SchedulerOutput()
    cap = float("inf") if max_num_batched_tokens is None else max_num_batched_tokens
    prefilling = [r.id for r in running if blocks.lengths[r.id] > r.num_computed_tokens]
    _slots(waiting, running, blocks, plan, skip=prefilling)
    for req in running:
        if req.id in prefilling:
            plan.prefill.append((req, min(blocks.lengths[req.id] - req.num_computed_tokens, cap)))
    while waiting and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, min(tokens, cap)))
    return plan


def stops_before_the_last_token(
    waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None
):
    """Reads "while budget is left" as "while more than one token is left": the last token of the budget unused."""
    # differs on a budget of 8 with 7 tokens spent: the head of the queue waits instead of a chunk of 1
    plan = SchedulerOutput()
    left = float("inf") if max_num_batched_tokens is None else max_num_batched_tokens
    prefilling = [r.id for r in running if blocks.lengths[r.id] > r.num_computed_tokens]
    _slots(waiting, running, blocks, plan, skip=prefilling)
    left -= len(plan.decode)
    for req in running:
        if req.id in prefilling and left > 0:
            n = min(blocks.lengths[req.id] - req.num_computed_tokens, left)
            plan.prefill.append((req, n))
            left -= n
    while waiting and left > 1 and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, min(tokens, left)))
        left -= min(tokens, left)
    return plan


def blocks_for_this_chunk(waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None):
    """Allocates blocks for the chunk computed now, not for the whole prompt: the rest is found later."""
    # differs on a 20-token prompt under a budget of 8: its blocks hold 8 tokens after admission, not 20
    plan = SchedulerOutput()
    left = float("inf") if max_num_batched_tokens is None else max_num_batched_tokens
    prefilling = [r.id for r in running if blocks.lengths[r.id] > r.num_computed_tokens]
    _slots(waiting, running, blocks, plan, skip=prefilling)
    left -= len(plan.decode)
    for req in running:
        if req.id in prefilling and left > 0:
            n = min(blocks.lengths[req.id] - req.num_computed_tokens, left)
            plan.prefill.append((req, n))
            left -= n
    while waiting and left > 0 and (max_running is None or len(running) < max_running):
        req = waiting[0]
        n = min(len(req.prompt) + len(req.output), left)
        if not blocks.can_allocate(n):
            break
        waiting.popleft()
        blocks.allocate(req.id, n)
        running.append(req)
        plan.prefill.append((req, n))
        left -= n
    return plan


def prefilling_means_no_output(
    waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None
):
    """Tells a prompt still prefilling by its empty output: a request preempted after it made tokens, admitted again
    in chunks, is taken for a decoder."""
    # differs on a request preempted with 3 tokens of output, readmitted with 13 tokens under a budget of 4: it is
    # decoded after its first chunk instead of getting its next one
    plan = SchedulerOutput()
    left = float("inf") if max_num_batched_tokens is None else max_num_batched_tokens
    prefilling = [r.id for r in running if not r.output and blocks.lengths[r.id] > r.num_computed_tokens]
    _slots(waiting, running, blocks, plan, skip=prefilling)
    left -= len(plan.decode)
    for req in running:
        if req.id in prefilling and left > 0:
            n = min(blocks.lengths[req.id] - req.num_computed_tokens, left)
            plan.prefill.append((req, n))
            left -= n
    while waiting and left > 0 and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, min(tokens, left)))
        left -= min(tokens, left)
    return plan


def prefilling_found_after_the_slots(
    waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None
):
    """Hands out the decode slots first and only then looks for the prompts still prefilling."""
    # differs on one request decoding and a 20-token prompt prefilling: the prefilling one gets a slot and a
    # decode; the decoder, whose blocks now hold one more token than it computed, gets a chunk as well
    plan = SchedulerOutput()
    left = float("inf") if max_num_batched_tokens is None else max_num_batched_tokens
    _slots(waiting, running, blocks, plan)
    left -= len(plan.decode)
    for req in running:
        if blocks.lengths[req.id] > req.num_computed_tokens and left > 0:
            n = min(blocks.lengths[req.id] - req.num_computed_tokens, left)
            if req not in plan.decode:
                plan.prefill.append((req, n))
                left -= n
    while waiting and left > 0 and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, min(tokens, left)))
        left -= min(tokens, left)
    return plan


def records_the_chunk_as_computed(
    waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None
):
    """Adds each chunk to req.num_computed_tokens itself, though the engine does that after running it."""
    # differs on any prompt under a budget smaller than it: the engine starts the first chunk where it should end
    plan = SchedulerOutput()
    left = float("inf") if max_num_batched_tokens is None else max_num_batched_tokens
    prefilling = [r.id for r in running if blocks.lengths[r.id] > r.num_computed_tokens]
    _slots(waiting, running, blocks, plan, skip=prefilling)
    left -= len(plan.decode)
    for req in running:
        if req.id in prefilling and left > 0:
            n = min(blocks.lengths[req.id] - req.num_computed_tokens, left)
            plan.prefill.append((req, n))
            req.num_computed_tokens += n
            left -= n
    while waiting and left > 0 and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        n = min(tokens, left)
        plan.prefill.append((req, n))
        req.num_computed_tokens += n
        left -= n
    return plan


def no_budget_is_zero(waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None):
    """Reads a missing budget as a budget of 0 tokens instead of no limit."""
    # differs on max_num_batched_tokens=None: nobody is admitted, the engine never moves
    return schedule(waiting, running, blocks, max_running, policy, max_num_batched_tokens or 0)


def spares_the_prompts_in_progress(
    waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None
):
    """When no block is free, preempts the newest request that decodes, sparing a prompt already half computed."""
    # differs on a pool where the newest running request is still prefilling: an older decoder goes back instead
    plan = SchedulerOutput()
    left = float("inf") if max_num_batched_tokens is None else max_num_batched_tokens
    prefilling = [r.id for r in running if blocks.lengths[r.id] > r.num_computed_tokens]
    i = 0
    while i < len(running):
        req = running[i]
        if req.id in prefilling:
            i += 1
            continue
        try:
            blocks.append(req.id)
        except OutOfBlocks:
            victim = next(r for r in reversed(running) if r.id not in prefilling)
            running.remove(victim)
            blocks.free(victim.id)
            waiting.appendleft(victim)
            plan.preempted.append(victim)
            continue
        plan.decode.append(req)
        i += 1
    left -= len(plan.decode)
    for req in running:
        if req.id in prefilling and left > 0:
            n = min(blocks.lengths[req.id] - req.num_computed_tokens, left)
            plan.prefill.append((req, n))
            left -= n
    while waiting and left > 0 and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, min(tokens, left)))
        left -= min(tokens, left)
    return plan


def admits_before_the_chunks(
    waiting, running, blocks, max_running=None, policy="continuous", max_num_batched_tokens=None
):
    """Admits new requests right after the decodes, and gives the prompts already prefilling what is left."""
    # differs on a 20-token prompt prefilling and a short one waiting, budget 8: the newcomer takes the budget
    # first
    plan = SchedulerOutput()
    left = float("inf") if max_num_batched_tokens is None else max_num_batched_tokens
    prefilling = [r.id for r in running if blocks.lengths[r.id] > r.num_computed_tokens]
    _slots(waiting, running, blocks, plan, skip=prefilling)
    left -= len(plan.decode)
    while waiting and left > 0 and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, min(tokens, left)))
        left -= min(tokens, left)
    for req in running:
        if req.id in prefilling and left > 0:
            n = min(blocks.lengths[req.id] - req.num_computed_tokens, left)
            plan.prefill.append((req, n))
            left -= n
    return plan


RIGHT = {"schedule": schedule}
WRONG = [
    ("schedule", ignores_the_budget, "misread prose: the budget ignored"),
    ("schedule", decodes_are_free, "units: the decodes not counted"),
    ("schedule", chunks_before_decodes, "order: chunks before decodes"),
    ("schedule", admits_with_a_spent_budget, "boundaries: admission not stopped when the budget is spent"),
    ("schedule", chunk_is_the_budget_left, "boundaries: a chunk not clipped to what is left"),
    ("schedule", slot_for_everyone, "state: a prefilling request given a decode slot"),
    ("schedule", budget_for_each_request, "misread prose: the budget reset per request"),
    ("schedule", stops_before_the_last_token, "boundaries: off by one at the budget's edge"),
    ("schedule", blocks_for_this_chunk, "resources: blocks reserved for the chunk only"),
    ("schedule", prefilling_means_no_output, "state: prefilling told by the output"),
    ("schedule", prefilling_found_after_the_slots, "order: prefilling found after the slots"),
    ("schedule", records_the_chunk_as_computed, "state: the engine's counter changed"),
    ("schedule", no_budget_is_zero, "boundaries: None read as 0"),
    ("schedule", spares_the_prompts_in_progress, "policy: the victim"),
    ("schedule", admits_before_the_chunks, "order: admissions before the chunks"),
]
