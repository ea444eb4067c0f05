"""Independent wrong answers for lab_scheduler_step, written from labs/5_generation/lab_scheduler_step.ipynb's contract alone."""

from ailab.generation import OutOfBlocks, SchedulerOutput


def schedule(waiting, running, blocks, max_running=None, policy="continuous"):
    plan = SchedulerOutput()
    i = 0
    while i < len(running):
        req = running[i]
        try:
            blocks.append(req.id)
        except OutOfBlocks:
            victim = running.pop()  # the newest; when it is req itself, the loop ends here
            blocks.free(victim.id)
            waiting.appendleft(victim)  # the oldest of those sent back ends up first
            plan.preempted.append(victim)
            continue
        plan.decode.append(req)
        i += 1
    while waiting and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)  # after a preemption, what it had generated is recomputed
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, tokens))
    return plan


def preempted_to_the_back(waiting, running, blocks, max_running=None, policy="continuous"):
    """Sends a preempted request back to the end of the queue, like any request that has to wait."""
    # differs on running [r0 (8 tokens), r1 (8 tokens)] in 2 blocks of 8, waiting [w]: waiting becomes [w, r1]
    # instead of [r1, w]
    plan = SchedulerOutput()
    i = 0
    while i < len(running):
        req = running[i]
        try:
            blocks.append(req.id)
        except OutOfBlocks:
            victim = running.pop()
            blocks.free(victim.id)
            waiting.append(victim)
            plan.preempted.append(victim)
            continue
        plan.decode.append(req)
        i += 1
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


def one_seat_too_many(waiting, running, blocks, max_running=None, policy="continuous"):
    """Admits while the running count has not passed max_running."""
    # differs on max_running=1, running [], waiting [a, b], plenty of blocks: admits a and b instead of a
    plan = SchedulerOutput()
    i = 0
    while i < len(running):
        req = running[i]
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
    while waiting and (max_running is None or len(running) <= max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, tokens))
    return plan


def reserves_first_token(waiting, running, blocks, max_running=None, policy="continuous"):
    """Admits a request only if its tokens plus the one its prefill will produce fit."""
    # differs on waiting [a with an 8-token prompt], 1 free block of 8: admits nothing instead of a
    plan = SchedulerOutput()
    i = 0
    while i < len(running):
        req = running[i]
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
    while waiting and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens + 1):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, tokens))
    return plan


def admits_before_decoding(waiting, running, blocks, max_running=None, policy="continuous"):
    """Fills the free seats from the queue first, then gives the requests that were running their slots."""
    # differs on running [r0 with 8 tokens] in blocks of 8 with 1 block free, waiting [w with 8 tokens]:
    # w takes the free block, then r0 finds no slot and w (the newest) is preempted at once: preempted [w]
    # instead of [] (r0 decoding, w simply waiting)
    plan = SchedulerOutput()
    were_running = len(running)
    while waiting and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens):
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, tokens))
    i = 0
    while i < were_running and i < len(running):
        req = running[i]
        try:
            blocks.append(req.id)
        except OutOfBlocks:
            victim = running.pop()
            blocks.free(victim.id)
            waiting.appendleft(victim)
            plan.preempted.append(victim)
            if (victim, len(victim.prompt) + len(victim.output)) in plan.prefill:
                plan.prefill.remove((victim, len(victim.prompt) + len(victim.output)))
            were_running = min(were_running, len(running))
            continue
        plan.decode.append(req)
        i += 1
    return plan


def plan_as_default_argument(waiting, running, blocks, max_running=None, policy="continuous", plan=SchedulerOutput()):
    """Keeps the plan object as a default argument, so it is built once."""
    # differs on two successive steps with one running request: the second plan's decode lists it twice
    i = 0
    while i < len(running):
        req = running[i]
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


def preempts_without_freeing(waiting, running, blocks, max_running=None, policy="continuous"):
    """Preempts the newest request but leaves its blocks for the engine to reclaim."""
    # differs on running [r0, r1] (8 tokens each) in 2 blocks of 8: r1's block stays allocated, and r0 is
    # preempted too (no slot freed), instead of r0 decoding in r1's freed block
    plan = SchedulerOutput()
    i = 0
    while i < len(running):
        req = running[i]
        try:
            blocks.append(req.id)
        except OutOfBlocks:
            victim = running.pop()
            waiting.appendleft(victim)
            plan.preempted.append(victim)
            continue
        plan.decode.append(req)
        i += 1
    while waiting and (max_running is None or len(running) < max_running):
        req = waiting[0]
        tokens = len(req.prompt) + len(req.output)
        if not blocks.can_allocate(tokens) or req.id in blocks.tables:
            break
        waiting.popleft()
        blocks.allocate(req.id, tokens)
        running.append(req)
        plan.prefill.append((req, tokens))
    return plan


def catches_memory_error(waiting, running, blocks, max_running=None, policy="continuous"):
    """Running out of KV blocks is running out of memory: catches MemoryError."""
    # differs on running [r0, r1] (8 tokens each) in 2 blocks of 8: OutOfBlocks propagates instead of preempting r1
    plan = SchedulerOutput()
    i = 0
    while i < len(running):
        req = running[i]
        try:
            blocks.append(req.id)
        except MemoryError:
            victim = running.pop()
            blocks.free(victim.id)
            waiting.appendleft(victim)
            plan.preempted.append(victim)
            continue
        plan.decode.append(req)
        i += 1
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


RIGHT = {"schedule": schedule}
WRONG = [
    ("schedule", preempted_to_the_back, "misread prose"),
    ("schedule", one_seat_too_many, "boundaries"),
    ("schedule", reserves_first_token, "boundaries"),
    ("schedule", admits_before_decoding, "order"),
    ("schedule", plan_as_default_argument, "state: mutable default"),
    ("schedule", preempts_without_freeing, "resources: leak"),
    ("schedule", catches_memory_error, "error handling"),
]
