"""Lab checks: prefix caching, the block pool that remembers (topics H3, S2).

The learner writes `PrefixCache`, a BlockAllocator that keeps full blocks' K/V after their last user leaves: the
contract of `ailab.generation.prefix_cache.PrefixCachingAllocator`. The lab gives its state (`__init__`), the fit
test (`can_allocate`, `_fits`), `computed_tokens` and `append`; the learner writes six methods:
  block_hash(parent, tokens)   a full block's name, from its parent's name (None for a first block) and its tokens:
                               the same for the same tokens, list or tuple, in every pool; another parent or another
                               token gives another name; hashable;
  cache_hit(token_ids)         the cached blocks the tokens begin with, in order: full blocks only, stopping at the
                               first name not cached, and never all of the tokens (the last one is computed for its
                               logits); it changes nothing;
  allocate(seq, tokens, ids)   (after the given checks) the hit blocks, each gaining a user (a block nobody held
                               leaves the free queue), then fresh blocks from `_take_free`; `tables`, `lengths`,
                               `hashes` (the hit blocks' names), `computed` (hit tokens); queries += tokens and
                               hits += hit tokens when `token_ids` are given; returns the table;
  _take_free()                 the block at the head of the free queue, its name dropped from both maps if it has
                               one (evicted), its reference count 1;
  cache_full_blocks(seq, prompt, output, computed)
                               names the blocks full of written K/V (the first `computed` tokens of prompt + output)
                               not named yet, in order, each from its parent's name; `hashes[seq]` gets every name;
                               a block is named only if no other block holds the name (the first copy keeps it);
  free(seq)                    each block, from the table's last to its first, loses a user; one that nobody holds
                               goes on the free queue: at the tail when named (least recently freed reused first),
                               at the head when not (nobody can hit it); the sequence leaves every map.

The checks, each with words for the mistake it finds:
  check_block_hash     the name: hashable, deterministic across pools, the same for a list and a tuple, changed by
                       the parent and by every token and its order;
  check_lookup         cache_hit over a hand-built cache: the longest cached prefix of full blocks, in order, never
                       the last token, stopping at the first miss; nothing changed by looking;
  check_allocate       a hit shares blocks (reference count + 1, out of the free queue), fresh blocks come from the
                       head of the queue, computed tokens and the hit counters in tokens; free takes one user off
                       each block, and a block still held stays off the queue;
  check_eviction       the free queue's order (unnamed at the head, named at the tail, last block first, least
                       recently freed first), names kept by a freed block, dropped when its block is taken again;
  check_naming         cache_full_blocks: only full blocks of written K/V, the chain of names, generated tokens
                       too, the first copy keeps a name, nothing renamed on a second call;
  check_engine_tokens  the real engine (EngineCore over a tiny GPT-2) with the learner's pool: requests sharing a
                       system prompt, a second turn, a repeated prompt, a pool small enough to preempt: the tokens
                       equal greedy generation without caching, prompts hit, every block free at the end; the pool's
                       invariants (below) judged after every step;
  check_same_as_reference
                       the learner's pool and the reference's side by side in the engine's scheduler, over many
                       generated traces (Hypothesis: prompts drawn from shared prefixes, second turns, repeats,
                       cancellations, pools that preempt, chunked prefill), the model replaced by a witness that
                       records which token's K/V each slot holds and checks every slot a request reads: block tables,
                       reference counts, the free queue, the named blocks, computed tokens, queries and hits must be
                       the same after every step. A difference names the first step, the smallest trace and both.
The invariants, judged after each step of the engine checks: each block's reference count equals the number of
requests that hold it; the free queue holds exactly the blocks nobody holds, once each; a block held by two requests
is named and at the same place in both tables; `hash_of` and `cached` agree; no block beyond a running request's
written K/V is named; a request's hit never covers its last token, nor a slot that holds another prefix's K/V.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from ailab.generation.engine_core import EngineCore
from ailab.generation.paged import PagedKVCache
from ailab.generation.prefix_cache import PrefixCachingAllocator, block_hash
from ailab.generation.request import Request
from ailab.generation.scheduler import Scheduler
from ailab.labs.core import LabCheckFailed, _is_checker_file, _owner_frame, answer, check, expect, tiny_decoder
from ailab.labs.core import torch_threads
from ailab.labs.differential import same_as_reference, short

LAB = "lab_prefix_cache"

METHODS = ("block_hash", "cache_hit", "allocate", "_take_free", "cache_full_blocks", "free", "computed_tokens")
FIELDS = ("free_blocks", "ref_count", "hash_of", "cached", "hashes", "computed", "queries", "hits", "tables")


def model():
    return tiny_decoder(5)


class Reference(PrefixCachingAllocator):
    """The engine's own allocator, with the name as a method, as the lab's class has it."""

    def block_hash(self, parent, tokens):
        return block_hash(parent, tokens)


class _Broken(Exception):
    """The learner's pool did something the checks must report in words (raised inside a check's own run)."""


def _make(cls, num_blocks: int, block_size: int, what: str):
    """A pool of the learner's class, or a failure that says why there is none."""
    if not isinstance(cls, type):
        raise LabCheckFailed(
            f"{what}: the checks take your class itself (PrefixCache, a subclass of BlockAllocator) and make their "
            f"own pools with it; they were given {short(cls)}"
        )
    pool = answer(cls, num_blocks, block_size, what=f"{what}: PrefixCache({num_blocks}, {block_size})")
    missing = [n for n in METHODS + FIELDS + ("num_blocks", "block_size", "lengths") if not hasattr(pool, n)]
    expect(
        not missing,
        f"{what}: a pool of your class has no {', '.join(missing)}: keep the lab's __init__ (its state) and write "
        "the methods it names, in a subclass of BlockAllocator",
    )
    return pool


def _said(e: BaseException) -> str:
    """An exception in words, with where it came from when that is the learner's code."""
    frame = _owner_frame(e)
    where = (
        f" (in {frame.name}, line {frame.lineno} of your code)"
        if frame and not _is_checker_file(frame.filename)
        else ""
    )
    return f"{type(e).__name__}: {e}{where}"


def _call(what: str, fn, *args):
    """Call one of the learner's methods; its exception becomes a failure naming the case."""
    return answer(fn, *args, what=what)


# --------------------------------------------------------------------------- reading a pool


def _state(pool, running=()) -> dict:
    """What a pool holds between steps, in the terms the lab uses. Raises _Broken when it cannot be read."""
    try:
        return {
            "block tables": {k: list(v) for k, v in pool.tables.items()},
            "reference counts": list(pool.ref_count),
            "free queue (head first)": list(pool.free_blocks),
            "named blocks": sorted(pool.hash_of, key=repr),
            "computed tokens": {r.id: pool.computed_tokens(r.id) for r in running if r.id in pool.tables},
            "queries": pool.queries,
            "hits": pool.hits,
        }
    except Exception as e:  # noqa: BLE001 - the learner's state may be anything
        raise _Broken(f"your pool's state could not be read ({_said(e)}): keep the fields the lab's __init__ makes")


def _invariants(pool, running=()) -> str | None:
    """The first rule the pool breaks, in words, or None. `running`: the engine's running requests."""
    try:
        return _first_broken_rule(pool, running)
    except Exception as e:  # noqa: BLE001 - a state the rules cannot even read is itself the finding
        return f"your pool's state could not be read ({_said(e)}): keep the fields the lab's __init__ makes"


def _first_broken_rule(pool, running) -> str | None:
    holders: dict[Any, list] = {}
    for seq, table in pool.tables.items():
        if len(set(table)) != len(table):
            return (
                f"request {seq}'s block table {list(table)} holds a block twice: each of its blocks holds other "
                "tokens, so a fresh block is taken for each"
            )
        for b in table:
            holders.setdefault(b, []).append(seq)
    for b in range(pool.num_blocks):
        held_by, rc = holders.get(b, []), pool.ref_count[b]
        if rc < len(held_by):
            return f"block {b} is held by requests {held_by} but its reference count is {rc}: " + (
                "a block a request takes from the cache (a hit) gains a user, its count one more"
                if len(held_by) > 1
                else "a block handed out has one user"
            )
        if rc > len(held_by):
            return (
                f"block {b}'s reference count is {rc}, yet "
                + (f"only request(s) {held_by} hold it" if held_by else "no request holds it")
                + ": a request that leaves (free) takes one user off each of its blocks"
            )
    free = list(pool.free_blocks)
    on_queue = set()
    for b in free:
        if b in on_queue:
            return f"block {b} is on the free queue twice ({free}): it would be handed to two requests"
        on_queue.add(b)
        if holders.get(b):
            return (
                f"block {b} is on the free queue while request(s) {holders[b]} hold it: a block is free only when "
                "nobody holds it (a hit on a cached block that sits on the queue takes it out of the queue)"
            )
    lost = [b for b in range(pool.num_blocks) if b not in holders and b not in on_queue]
    if lost:
        return (
            f"block(s) {lost} are held by nobody and are not on the free queue: lost for good. When a block's last "
            "user leaves, it goes back on the free queue"
        )
    for b, seqs in holders.items():
        if len(seqs) < 2:
            continue
        if b not in pool.hash_of:
            return (
                f"block {b} is in the tables of requests {seqs} but holds no name: a block is shared only through a "
                "hit on a named (cached) block; a fresh block goes to one request"
            )
        places = sorted({pool.tables[s].index(b) for s in seqs})
        if len(places) > 1:
            return (
                f"block {b} is at places {places} in the tables of requests {seqs}: a cached block holds the K/V of "
                "tokens at fixed positions, so it is shared at the same place"
            )
    for b, name in pool.hash_of.items():
        if b not in range(pool.num_blocks) or pool.cached.get(name) != b:
            return (
                f"hash_of names block {b!r}, but cached maps that name to {pool.cached.get(name)!r}: the two maps "
                "are one map read both ways (name -> block, block -> name), kept together"
            )
    if len(pool.cached) != len(pool.hash_of):
        gone = [n for n, b in pool.cached.items() if pool.hash_of.get(b) != n][:3]
        return (
            f"cached holds {len(pool.cached)} names but hash_of {len(pool.hash_of)} (cached maps names "
            f"{[short(n) for n in gone]} to blocks that no longer carry them): a name leaves both maps together, "
            "when its block is taken for new tokens (evicted)"
        )
    for req in running:
        table = pool.tables.get(req.id, [])
        written = req.num_computed_tokens // pool.block_size
        for i in range(written, len(table)):
            if table[i] in pool.hash_of and len(pool.hashes.get(req.id, ())) <= i:
                return (
                    f"block {table[i]} (place {i} in request {req.id}'s table) still carries a name from before it "
                    f"was taken for request {req.id}'s tokens: a block taken from the free queue for new tokens "
                    "(_take_free) is evicted, its name dropped from both maps, or a prompt would hit K/V being "
                    "overwritten"
                )
            if table[i] in pool.hash_of:
                return (
                    f"block {table[i]} (place {i} in request {req.id}'s table, its tokens {i * pool.block_size} to "
                    f"{(i + 1) * pool.block_size - 1}) is named, but request {req.id} has written the K/V of only its "
                    f"first {req.num_computed_tokens} tokens: a block is named once it is full of written K/V (the "
                    "`computed` that cache_full_blocks is given), never before, or a prompt could hit K/V not there yet"
                )
    return None


# --------------------------------------------------------------------------- the witness: the model replaced


def _fake_next(ids) -> int:
    """The stand-in model's next token: a function of the tokens so far, as greedy decoding is."""
    return (ids[-1] * 3 + len(ids) + (ids[-2] if len(ids) > 1 else 0)) % 6


def _continue(prompt, n: int) -> list[int]:
    out = list(prompt)
    for _ in range(n):
        out.append(_fake_next(out))
    return out[len(prompt) :]


def _prefix_ids(ids) -> list[int]:
    """What the K/V at each position stands for: that token after every token before it (a chained hash)."""
    out, h = [], None
    for t in ids:
        h = hash((h, t))
        out.append(h)
    return out


class _Witness:
    """The executor with the model replaced by a ledger: for each KV slot, which token after which tokens wrote it.
    Every slot a request reads (the cached prefix at admission, everything before its new token at a decode) must
    hold that request's own K/V, as attention would need; a hit on anything else is named at once."""

    def __init__(self, pool):
        self.pool, self.slots, self.seen = pool, {}, set()

    def execute(self, plan) -> dict[int, int]:
        tokens = {}
        for rid in plan.finished_ids:
            self.seen.discard(rid)
        for req in plan.preempted:
            self.seen.discard(req.id)
        for req, n in plan.prefill:
            ids, start = req.prompt + req.output, req.num_computed_tokens
            if req.id not in self.seen:  # admitted in this step: `start` is what it found in the cache
                self.seen.add(req.id)
                if start >= len(ids):
                    raise _Broken(
                        f"request {req.id} was admitted with all of its {len(ids)} tokens found in the cache "
                        f"(computed_tokens {start}): its last token is always computed, for the logits of its first "
                        "new token, so a lookup never covers all of the tokens"
                    )
                if start % self.pool.block_size:
                    raise _Broken(
                        f"request {req.id} was admitted with {start} tokens found in the cache, not a whole number of "
                        f"blocks of {self.pool.block_size}: only full blocks are named, and so only they are hit"
                    )
            self._read(req, ids, start)
            self._write(req, ids, start, start + n)
            if start + n == len(ids):
                tokens[req.id] = _fake_next(ids)
        for req in plan.decode:
            self.seen.add(req.id)
            ids, pos = req.prompt + req.output, req.num_computed_tokens
            self._read(req, ids, pos)
            self._write(req, ids, pos, pos + 1)
            tokens[req.id] = _fake_next(ids)
        return tokens

    def _read(self, req, ids, upto: int) -> None:
        want = _prefix_ids(ids[:upto])
        bs = self.pool.block_size
        for p in range(upto):
            slot = self.pool.slot(req.id, p)
            if self.slots.get(slot) != want[p]:
                block = self.pool.tables[req.id][p // bs]
                what = "holds nothing written yet" if slot not in self.slots else "holds the K/V of other tokens"
                raise _Broken(
                    f"request {req.id} reads the K/V of its token {p} from block {block} (place {p // bs} in its "
                    f"table), which {what}: a block is served from the cache only when its name says the same "
                    "tokens at the same positions, after the same tokens before them, were written into it"
                )

    def _write(self, req, ids, start: int, end: int) -> None:
        want = _prefix_ids(ids[:end])
        for p in range(start, end):
            self.slots[self.pool.slot(req.id, p)] = want[p]


def _events(plan, cancelled) -> str:
    parts = []
    if plan.preempted:
        parts.append(f"preempted {[r.id for r in plan.preempted]}")
    if plan.prefill:
        parts.append("prefilled " + ", ".join(f"{r.id} ({n} tokens)" for r, n in plan.prefill))
    if plan.decode:
        parts.append(f"decoded {[r.id for r in plan.decode]}")
    if cancelled:
        parts.append(f"cancelled {cancelled} before it")
    return "; ".join(parts) or "nothing ran"


def _run_trace(cls, trace, judge: bool = False, max_steps: int = 400) -> list[dict]:
    """Run `trace` through the engine's scheduler over a pool of `cls`, the model replaced by the witness; record
    each step: what ran, then the pool's state. A failure of the learner's pool ends the record with words."""
    num_blocks, block_size, max_running, budget, reqs = trace
    steps: list[dict] = []
    try:
        pool = cls(num_blocks, block_size)
    except (NotImplementedError, LabCheckFailed):
        raise
    except Exception as e:  # noqa: BLE001 - the learner's code may raise anything
        return [{"bad": f"PrefixCache({num_blocks}, {block_size}) raised {_said(e)}"}]
    sched = Scheduler(pool, 10**6, max_running, max_num_batched_tokens=budget)
    witness = _Witness(pool)
    arrivals, cancels = {}, {}
    for rid, prompt, new, at, cancel in reqs:
        arrivals.setdefault(at, []).append(Request(rid, list(prompt), new))
        if cancel is not None:
            cancels.setdefault(cancel, []).append(rid)
    while not sched.idle or arrivals:
        k = len(steps)
        try:
            for req in arrivals.pop(k, []):
                sched.add_request(req)
            cancelled = [rid for rid in cancels.pop(k, []) if sched.finish_request(rid)]
            plan = sched.schedule()
            events = _events(plan, cancelled)
            sched.update_from_output(plan, witness.execute(plan))
            entry = {"events": events, **_state(pool, sched.running)}
        except (NotImplementedError, LabCheckFailed):
            raise
        except _Broken as e:
            steps.append({"bad": str(e)})
            return steps
        except Exception as e:  # noqa: BLE001 - the learner's pool failed inside the engine
            steps.append({"bad": f"the engine stopped with {_said(e)}"})
            return steps
        broken = _invariants(pool, sched.running) if judge else None
        if broken:  # said as the rule it breaks, in place of the state that differs
            steps.append({"bad": f"after it, {broken}"})
            return steps
        steps.append(entry)
        if len(steps) >= max_steps:
            steps.append({"bad": f"not done after {max_steps} steps: does every request get its blocks?"})
            return steps
    return steps


# --------------------------------------------------------------------------- the checks on the class alone


def _reads_state(fn):
    """A check that reads the pool's fields itself: a field the learner's code made unreadable is said in words."""

    @functools.wraps(fn)
    def wrapper(PrefixCache):
        try:
            return fn(PrefixCache)
        except (LabCheckFailed, NotImplementedError):
            raise
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
            raise LabCheckFailed(
                f"your pool's state could not be read ({_said(e)}): keep the fields the lab's __init__ makes, of the "
                "same kinds (lists, dicts, the FreeBlockQueue), and change them as the contract says"
            ) from None

    return wrapper


def _chain(pool, tokens, blocks: int, what: str) -> list:
    names, parent = [], None
    for i in range(blocks):
        bs = pool.block_size
        parent = _call(f"{what}: block_hash", pool.block_hash, parent, list(tokens[i * bs : (i + 1) * bs]))
        names.append(parent)
    return names


def _name_by_hand(pool, blocks, names) -> None:
    """Put names into the cache as cache_full_blocks would: the checks of the other methods do not depend on it."""
    for b, name in zip(blocks, names):
        pool.cached[name], pool.hash_of[b] = b, name


@check(LAB, "block_hash: the name stands for the block's tokens and every token before them")
@_reads_state
def check_block_hash(PrefixCache):
    pool = _make(PrefixCache, 8, 4, "block_hash")
    name = _call("block_hash(None, [1, 2, 3, 4])", pool.block_hash, None, [1, 2, 3, 4])
    try:
        hash(name)
    except TypeError:
        raise LabCheckFailed(
            f"block_hash(None, [1, 2, 3, 4]) returned {short(name)}, which cannot be a dict key: the name is looked "
            "up in `cached`, so it must be hashable (an int, or a tuple of ints and names)"
        ) from None
    expect(name is not None, "block_hash(None, [1, 2, 3, 4]) returned None: return the block's name")

    def same(parent, tokens, what):
        return _call(f"block_hash({what})", pool.block_hash, parent, tokens)

    expect(
        same(None, [1, 2, 3, 4], "None, [1, 2, 3, 4]") == name,
        "block_hash(None, [1, 2, 3, 4]) gave two names on two calls: a name depends on the parent and the tokens alone",
    )
    other = _make(PrefixCache, 4, 4, "block_hash")
    expect(
        _call("block_hash in a second pool", other.block_hash, None, [1, 2, 3, 4]) == name,
        "two pools give the same tokens different names: a name depends on the parent's name and the tokens alone "
        "(not on a counter, the pool, or the object's id), so that it means the same K/V wherever it is computed",
    )
    expect(
        same(None, (1, 2, 3, 4), "None, (1, 2, 3, 4)") == name,
        "the tokens 1, 2, 3, 4 as a tuple and as a list get different names: the engine passes lists (slices of a "
        "prompt), a check or a caller may pass tuples; the same tokens are the same block",
    )
    for tokens, why in (
        ([1, 2, 3, 5], "the last token differs"),
        ([4, 3, 2, 1], "the same tokens in another order"),
        ([2, 1, 3, 4], "the first two tokens swapped"),
        ([1, 2, 3, 4, 5], "one token more"),
    ):
        expect(
            same(None, tokens, f"None, {tokens}") != name,
            f"block_hash(None, {tokens}) equals block_hash(None, [1, 2, 3, 4]) ({why}): every token, in its place, "
            "goes into the name, or two different blocks would be taken for one",
        )
    tail = [5, 6, 7, 8]
    first, after_ones, after_nines = (
        same(None, tail, "None, [5, 6, 7, 8]"),
        same(name, tail, "<the name of [1, 2, 3, 4]>, [5, 6, 7, 8]"),
        same(same(None, [9, 9, 9, 9], "None, [9, 9, 9, 9]"), tail, "<the name of [9, 9, 9, 9]>, [5, 6, 7, 8]"),
    )
    expect(
        after_ones != after_nines and after_ones != first and after_nines != first,
        "block [5, 6, 7, 8] gets the same name after [1, 2, 3, 4], after [9, 9, 9, 9] or as a first block: the "
        "parent's "
        "name goes into the name. The K/V of a token depends on every token before it, so a block's name must stand "
        "for its whole prefix, or a prompt would take K/V computed after other tokens",
    )


@check(LAB, "cache_hit: the longest cached prefix of full blocks, never the last token")
@_reads_state
def check_lookup(PrefixCache):
    pool = _make(PrefixCache, 8, 4, "cache_hit")
    prompt = list(range(10, 24))  # 14 tokens: three full blocks and two more
    names = _chain(pool, prompt, 3, "cache_hit")
    blocks = [5, 2, 7]
    _name_by_hand(pool, blocks, names)
    try:
        before = _state(pool)
    except _Broken as e:
        raise LabCheckFailed(f"cache_hit: {e}") from None
    said = "blocks 5, 2 and 7 hold the three full blocks of prompt P = [10, 11, ..., 23] (named, nobody holds them)"
    cases = [
        (prompt, [5, 2, 7], "P itself (14 tokens): its three full blocks, in order"),
        (prompt[:13], [5, 2, 7], "P's first 13 tokens: three full blocks and one token more"),
        (
            prompt[:12],
            [5, 2],
            "P's first 12 tokens, exactly three blocks: the last token is always computed (for the logits of the "
            "first new token), so the block that holds it is not served from the cache",
        ),
        (prompt[:6], [5], "P's first 6 tokens: one full block; the second, half full, is never a hit"),
        (prompt[:4], [], "P's first 4 tokens: one block, which holds the last token"),
        (
            prompt[:4] + [0, 0, 0, 0] + prompt[8:],
            [5],
            "P with its second block changed: the lookup stops at the first miss",
        ),
        (
            [0, 0, 0, 0] + prompt[4:],
            [],
            "P with its first block changed: the second block has the same tokens, but another parent, so another name",
        ),
        ([10], [], "a one-token prompt"),
    ]
    for ids, want, what in cases:
        got = _call(f"cache_hit({short(ids)})", pool.cache_hit, ids)
        try:
            got = list(got)
        except TypeError:
            raise LabCheckFailed(f"cache_hit returned {short(got)}: return a list of block ids") from None
        expect(got == want, f"with {said}, cache_hit on {what} returned {short(got)}; expected {want}")
    gap = _make(PrefixCache, 8, 4, "cache_hit")
    _name_by_hand(gap, [5, 7], [names[0], names[2]])
    got = _call(f"cache_hit({short(prompt)})", gap.cache_hit, prompt)
    expect(
        isinstance(got, list) and got == [5],
        f"with P's first and third blocks cached in blocks 5 and 7 but its second evicted, cache_hit(P) returned "
        f"{short(got)}; expected [5]: the lookup stops at the first block not cached. The blocks it takes are the "
        "table's first places, so a gap would put the third block's K/V at the second block's positions",
    )
    try:
        after = _state(pool)
    except _Broken as e:
        raise LabCheckFailed(f"cache_hit: {e}") from None
    changed = [k for k in before if before[k] != after[k]]
    expect(
        not changed,
        f"cache_hit changed the pool's {', '.join(changed)} ({short(before[changed[0]])} -> {short(after[changed[0]])}"
        "): it only looks; can_allocate calls it before anything is decided"
        if changed
        else "",
    )


@check(LAB, "allocate and free: a hit shares blocks, reference counts say who holds them")
@_reads_state
def check_allocate(PrefixCache):
    pool = _make(PrefixCache, 8, 4, "allocate")
    prompt = list(range(30, 41))  # 11 tokens
    names = _chain(pool, prompt, 2, "allocate")
    _name_by_hand(pool, [5, 2], names)
    said = "blocks 5 and 2 cached (the first 8 of 11 tokens of prompt P, nobody holding them), every block free"
    table = _call("allocate('x', 11, P)", pool.allocate, "x", 11, prompt)
    expect(
        isinstance(table, list) and table == pool.tables.get("x"),
        f"allocate returned {short(table)}; return the new block table (the list in tables[seq])",
    )
    expect(
        table[:2] == [5, 2],
        f"with {said}, allocate('x', 11, P) gave the table {table}: it begins with the hit blocks [5, 2], in order",
    )
    expect(
        table == [5, 2, 0],
        f"with {said}, allocate('x', 11, P) gave the table {table}; expected [5, 2, 0]: the tokens not found get "
        "fresh blocks (here one), each from the head of the free queue (_take_free)",
    )
    counts = [pool.ref_count[b] for b in (5, 2, 0)]
    expect(
        counts == [1, 1, 1],
        f"after allocate('x', 11, P), blocks 5, 2 and 0 have reference counts {counts}; each "
        "has one user now, request x",
    )
    free = list(pool.free_blocks)
    expect(
        free == [1, 3, 4, 6, 7],
        f"after allocate('x', 11, P) the free queue is {free}; expected [1, 3, 4, 6, 7]: a hit block nobody held sat "
        "on the free queue, and leaves it when it is taken (from wherever it is), or another request could get it",
    )
    got = (pool.computed_tokens("x"), pool.queries, pool.hits)
    expect(
        got == (8, 11, 8),
        f"after allocate('x', 11, P), computed_tokens('x'), queries and hits are {got}; expected (8, 11, 8): they "
        "count tokens, not blocks (8 tokens found of the 11 asked for)",
    )
    expect(
        pool.lengths.get("x") == 11 and list(pool.hashes.get("x", ())) == names,
        f"after allocate('x', 11, P), lengths['x'] is {pool.lengths.get('x')} and hashes['x'] "
        f"{short(pool.hashes.get('x'))}; "
        "expected 11 and the two hit blocks' names (the chain goes on from them when the rest fills)",
    )
    other = prompt[:8] + [50, 51]
    table = _call("allocate('y', 10, ...)", pool.allocate, "y", 10, other)
    expect(
        list(table) == [5, 2, 1],
        f"allocate('y', 10, P's first 8 tokens + [50, 51]) gave {table}, with x holding [5, 2, 0]; expected [5, 2, 1]: "
        "both hit blocks shared, one fresh block from the head of the queue",
    )
    counts = [pool.ref_count[b] for b in (5, 2, 1)]
    expect(
        counts == [2, 2, 1],
        f"with x and y both holding blocks 5 and 2, their reference counts are {counts[:2]}; expected 2 each: a hit "
        "adds a user. Counted once, the block would go back on the free queue when x leaves, while y still reads it",
    )
    got = (pool.computed_tokens("y"), pool.queries, pool.hits)
    expect(got == (8, 21, 16), f"after y, computed_tokens('y'), queries and hits are {got}; expected (8, 21, 16)")
    _call("free('x')", pool.free, "x")
    counts = [pool.ref_count[b] for b in (5, 2, 0)]
    expect(
        counts == [1, 1, 0],
        f"after free('x'), blocks 5, 2, 0 have reference counts {counts}; expected [1, 1, 0]: free takes one user "
        "off each of the sequence's blocks (y still holds 5 and 2)",
    )
    free = list(pool.free_blocks)
    expect(
        5 not in free and 2 not in free,
        f"after free('x') the free queue is {free}: blocks 5 and 2 are on it while y holds them. A block goes back "
        "only when its last user leaves",
    )
    expect(
        free == [0, 3, 4, 6, 7],
        f"after free('x') the free queue is {free}; expected [0, 3, 4, 6, 7]: block 0, which holds no name, goes at "
        "the head (nobody can hit it, so it is the first to reuse)",
    )
    left = [k for k in ("tables", "lengths", "hashes", "computed") if "x" in getattr(pool, k)]
    expect(not left, f"after free('x'), x is still in {', '.join(left)}: a freed sequence leaves every map")


@check(LAB, "eviction: a freed block keeps its name until its slot is needed, least recently freed first")
@_reads_state
def check_eviction(PrefixCache):
    pool = _make(PrefixCache, 8, 4, "eviction")
    a, b = list(range(100, 112)), list(range(200, 208))  # 12 and 8 tokens: 3 and 2 blocks
    _call("allocate('a', 12, A)", pool.allocate, "a", 12, a)
    _call("allocate('b', 8, B)", pool.allocate, "b", 8, b)
    names_a, names_b = _chain(pool, a, 2, "eviction"), _chain(pool, b, 1, "eviction")
    _name_by_hand(pool, [0, 1], names_a)
    _name_by_hand(pool, [3], names_b)
    said = "a holds blocks [0, 1, 2] (0 and 1 named, 2 not), b holds [3, 4] (3 named), blocks 5, 6, 7 free"
    _call("free('a')", pool.free, "a")
    expect(
        0 in pool.hash_of and 1 in pool.hash_of and len(pool.cached) == 3,
        f"with {said}, free('a') dropped names (named blocks now {sorted(pool.hash_of)}): a freed block keeps its "
        "K/V and its name; it is evicted only when it is taken for new tokens",
    )
    free = list(pool.free_blocks)
    want = [2, 5, 6, 7, 1, 0]
    expect(
        free == want,
        f"with {said}, after free('a') the free queue (head first) is {free}; expected {want}: walk a's blocks "
        "from the last to the first; one without a name goes at the head (nobody can hit it: reused first), a named "
        "one at the tail (kept as long as possible), so a's last block is evicted before its first",
    )
    _call("free('b')", pool.free, "b")
    free = list(pool.free_blocks)
    want = [4, 2, 5, 6, 7, 1, 0, 3]
    expect(
        free == want,
        f"after free('b') the free queue is {free}; expected {want}: b's named block 3 behind a's (a was freed first, "
        "so a's blocks are reused first: least recently freed first), its unnamed block 4 at the head",
    )
    hit = _call("cache_hit(A + [0])", pool.cache_hit, a + [0])
    expect(list(hit) == [0, 1], f"cache_hit(A + [0]) after both left returned {hit}; expected [0, 1]: still cached")
    _call("allocate('c', 20, C)", pool.allocate, "c", 20, list(range(300, 320)))
    expect(
        list(pool.tables.get("c", ())) == [4, 2, 5, 6, 7] and len(pool.hash_of) == 3,
        f"allocate('c', 20 new tokens) took {pool.tables.get('c')} and left named blocks {sorted(pool.hash_of)}; "
        "expected [4, 2, 5, 6, 7], with 0, 1 and 3 still named: blocks are taken from the head of the queue",
    )
    _call("allocate('d', 4, D)", pool.allocate, "d", 4, [400, 401, 402, 403])
    expect(
        list(pool.tables.get("d", ())) == [1],
        f"allocate('d', 4 new tokens) took {pool.tables.get('d')}; expected [1], the head of the queue [1, 0, 3]",
    )
    expect(
        1 not in pool.hash_of and names_a[1] not in pool.cached,
        "block 1 was taken for d's tokens but still carries A's name: a block taken from the free queue is evicted, "
        "its name dropped from both maps, or a later prompt would hit K/V that is being overwritten",
    )
    expect(pool.ref_count[1] == 1, f"block 1, taken for d, has reference count {pool.ref_count[1]}; expected 1")
    hit = _call("cache_hit(A + [0])", pool.cache_hit, a + [0])
    expect(list(hit) == [0], f"after block 1's eviction, cache_hit(A + [0]) returned {hit}; expected [0]")
    _call("allocate('e', 5, A[:4] + [9])", pool.allocate, "e", 5, a[:4] + [9])
    expect(
        list(pool.tables.get("e", ())) == [0, 3] and list(pool.free_blocks) == [],
        f"allocate('e', A's first block + [9]) took {pool.tables.get('e')} and left the free queue "
        f"{list(pool.free_blocks)}; expected [0, 3] and []: the hit block 0 leaves the queue from its middle, then "
        "the head, block 3, is taken (and evicted)",
    )
    expect(3 not in pool.hash_of, "block 3 was taken for e's tokens but still carries B's name: evict it")


@check(LAB, "cache_full_blocks: full blocks of written K/V are named, in a chain, the first copy keeps the name")
@_reads_state
def check_naming(PrefixCache):
    pool = _make(PrefixCache, 8, 4, "cache_full_blocks")
    prompt = list(range(60, 70))  # 10 tokens: 3 blocks
    _call("allocate('a', 10, P)", pool.allocate, "a", 10, prompt)
    names = _chain(pool, prompt + [70, 71], 3, "cache_full_blocks")
    _call("cache_full_blocks('a', P, [], 3)", pool.cache_full_blocks, "a", prompt, [], 3)
    expect(
        not pool.hash_of and not list(pool.hashes.get("a", ())),
        f"cache_full_blocks('a', P, [], computed=3) named blocks {sorted(pool.hash_of)}: 3 tokens written fill no "
        "block of 4. Only a block full of written K/V gets a name",
    )
    _call("cache_full_blocks('a', P, [], 10)", pool.cache_full_blocks, "a", prompt, [], 10)
    expect(
        pool.hash_of == {0: names[0], 1: names[1]},
        f"after cache_full_blocks('a', P (10 tokens), [], computed=10), the named blocks are {sorted(pool.hash_of)}"
        + (
            " with other names than the chain block_hash gives (the first from None, each next from its parent's)"
            if sorted(pool.hash_of) == [0, 1]
            else "; expected [0, 1]: the first two are full of written K/V, the third holds 2 of its 4 tokens"
        ),
    )
    expect(
        pool.cached == {names[0]: 0, names[1]: 1} and list(pool.hashes.get("a", ())) == names[:2],
        "after naming a's blocks 0 and 1, cached should map their names to them and hashes['a'] list both names in "
        f"order; cached has {len(pool.cached)} entries, hashes['a'] is {short(pool.hashes.get('a'))}",
    )
    _call("cache_full_blocks('a', P, [70], 11)", pool.cache_full_blocks, "a", prompt, [70], 11)
    expect(
        sorted(pool.hash_of) == [0, 1],
        "cache_full_blocks with 11 tokens written named a third block: it holds 3 of its 4 tokens' K/V",
    )
    _call("cache_full_blocks('a', P, [70, 71, 72], 12)", pool.cache_full_blocks, "a", prompt, [70, 71, 72], 12)
    expect(
        pool.hash_of.get(2) == names[2] and list(pool.hashes.get("a", ())) == names,
        f"after 12 tokens written (P and two generated tokens), block 2 has the name {short(pool.hash_of.get(2))}; "
        "expected the chain's third name, from the second's and its tokens (two of the prompt, two generated): "
        "generated tokens are named too, so a second turn of a chat finds them",
    )
    before = dict(pool.hash_of)
    _call("cache_full_blocks('a', P, [70, 71, 72], 12) again", pool.cache_full_blocks, "a", prompt, [70, 71, 72], 12)
    expect(
        pool.hash_of == before and list(pool.hashes.get("a", ())) == names,
        "a second cache_full_blocks with nothing new written changed the names: name only the blocks not named yet "
        f"(hashes['a'] is {short(pool.hashes.get('a'))})",
    )
    _call("allocate('b', 10, P)", pool.allocate, "b", 10, prompt)
    table = list(pool.tables.get("b", ()))
    expect(table[:2] == [0, 1], f"allocate('b', 10, P) gave {table}: it should hit a's blocks 0 and 1")
    _call("cache_full_blocks('b', P, [70, 71], 12)", pool.cache_full_blocks, "b", prompt, [70, 71], 12)
    expect(
        pool.cached.get(names[2]) == 2 and table[2] not in pool.hash_of,
        f"b computed the same third block as a, in block {table[2]}: its name is already block 2's. The first copy "
        f"keeps the name and the second stays unnamed (cached maps it to {pool.cached.get(names[2])!r}, block "
        f"{table[2]} named {short(pool.hash_of.get(table[2]))})",
    )
    expect(
        list(pool.hashes.get("b", ())) == names,
        f"hashes['b'] is {short(pool.hashes.get('b'))}: it lists the names of all of b's full blocks, in order, the "
        "one whose block kept no name too (the chain goes on from it)",
    )


# --------------------------------------------------------------------------- the real engine


def _requests(seed: int = 3):
    """A chat service's morning: five users behind one 24-token system prompt, one user's second turn (the first
    answer in its prompt), a prompt sent twice, and one alone."""
    g = torch.Generator().manual_seed(seed)

    def ids(n):
        return torch.randint(0, 256, (n,), generator=g).tolist()

    system = ids(24)
    users = [system + ids(n) for n in (5, 9, 3, 12, 6)]
    first = users[0]
    second_turn = first + list(_greedy(tuple(first), 6)) + ids(4)
    alone = ids(13)
    prompts = users + [second_turn, users[2], alone]
    news = [6, 8, 10, 4, 12, 5, 7, 9]
    reqs = [Request(i, p, n) for i, (p, n) in enumerate(zip(prompts, news))]
    return reqs, {0: reqs[:3], 2: reqs[3:5], 12: reqs[5:7], 14: reqs[7:]}


@functools.cache
@torch_threads(1)
def _greedy(prompt: tuple, n: int) -> tuple:
    from ailab.generation import generate

    return tuple(generate(model(), torch.tensor([prompt]), n)[0].tolist())


@torch_threads(1)
def _serve(PrefixCache, what: str, num_blocks: int, block_size: int, max_running: int, judge: bool = True):
    """The real engine over a pool of the learner's class; the pool's invariants judged after every step."""
    reqs, arrivals = _requests()
    m = model()
    pool = _make(PrefixCache, num_blocks, block_size, what)
    core = EngineCore(m, PagedKVCache(m.n_layer, m.n_head, m.head_dim, pool), max_running)
    steps, preempted, k = core.run(arrivals), 0, 0
    while True:
        try:
            report = next(steps, None)
        except (NotImplementedError, LabCheckFailed):
            raise
        except Exception as e:  # noqa: BLE001 - the learner's pool failed inside the engine
            raise LabCheckFailed(f"{what}, step {k + 1}: the engine stopped with {_said(e)}") from None
        if report is None:
            break
        k, preempted = k + 1, preempted + report.preempted
        broken = _invariants(pool, core.running) if judge else None
        expect(not broken, f"{what}, after step {k}: {broken}")
        expect(k <= 500, f"{what}: not done after 500 steps ({len(core.waiting)} waiting, {len(core.running)} running)")
    return reqs, pool, preempted


@check(LAB, "in the engine: the same tokens as without caching, prompts that share a prefix hit it")
def check_engine_tokens(PrefixCache):
    for num_blocks, max_running, what in (
        (64, 4, "eight requests, four seats, 64 blocks of 4 tokens"),
        (14, 3, "the same eight requests in 14 blocks of 4 tokens, three seats (it preempts)"),
    ):
        reqs, pool, preempted = _serve(PrefixCache, what, num_blocks, 4, max_running)
        for r in reqs:
            want = list(_greedy(tuple(r.prompt), r.max_new_tokens))
            expect(
                r.output == want,
                f"{what}: request {r.id}'s tokens {r.output[:8]}... differ from generation without caching "
                f"{want[:8]}...: a block served from the cache must hold the K/V of the same tokens, at the same "
                "positions, after the same tokens",
            )
        expect(
            pool.hits > 0,
            f"{what}: no prompt found a cached block (hits {pool.hits} of {pool.queries} tokens), though seven of "
            "the eight share a 24-token system prompt: name the full blocks once written (cache_full_blocks), and "
            "look them up (cache_hit) when a prompt is admitted",
        )
        expect(
            len(pool.free_blocks) == pool.num_blocks and not any(pool.ref_count),
            f"{what}: when every request is done, {len(pool.free_blocks)} of {pool.num_blocks} blocks are free and "
            f"reference counts are {[c for c in pool.ref_count if c][:6]}...: every block should be free again",
        )
        if num_blocks == 14:
            expect(preempted > 0, f"{what}: the check meant to preempt and did not (a check defect)")


def engine(PrefixCache, num_blocks: int = 64, block_size: int = 4, max_running: int = 4) -> EngineCore:
    """The real engine over a pool of `PrefixCache` (a class) and the checks' tiny model, for the lab's last cell."""
    m = model()
    pool = PrefixCache(num_blocks, block_size)
    return EngineCore(m, PagedKVCache(m.n_layer, m.n_head, m.head_dim, pool), max_running)


def requests(seed: int = 3):
    """The engine check's requests (fresh objects) and their arrival steps, for the lab's last cell."""
    return _requests(seed)


# --------------------------------------------------------------------------- against the reference


_FIELDS = (
    "block tables",
    "reference counts",
    "free queue (head first)",
    "named blocks",
    "computed tokens",
    "queries",
    "hits",
)


def _same_steps(mine: list[dict], ref: list[dict]) -> str | None:
    """The first step where the two pools differ, with both."""
    for k, (m, r) in enumerate(zip(mine, ref)):
        if "bad" not in m and "bad" not in r and all(m[f] == r[f] for f in _FIELDS):
            continue
        if "bad" in r:
            return f"step {k + 1}: the reference's pool failed ({r['bad']}), a check defect; please report it"
        head = f"step {k + 1} ({r['events']})"
        if "bad" in m:
            return f"{head}: {m['bad']}"
        differ = [f for f in _FIELDS if m[f] != r[f]]
        return f"{head} is the first after which the pools differ: " + "; ".join(
            f"{f}: yours {short(m[f])}, the reference's {short(r[f])}" for f in differ
        )
    if len(mine) != len(ref):
        longer, who = (mine, "yours") if len(mine) > len(ref) else (ref, "the reference's")
        last = longer[min(len(mine), len(ref))]
        return f"the same pools for {min(len(mine), len(ref))} steps, after which only {who} goes on" + (
            f": {last['bad']}" if "bad" in last else f" ({last['events']})"
        )
    return None


def _describe(trace) -> str:
    num_blocks, block_size, max_running, budget, reqs = trace
    each = "; ".join(
        f"request {rid}: prompt {list(p)}, {new} new token{'s' * (new != 1)}, at step {at}"
        + (f", cancelled before step {c}" if c is not None else "")
        for rid, p, new, at, c in reqs
    )
    return (
        f"a trace over {num_blocks} blocks of {block_size} token{'s' * (block_size != 1)}, max_running={max_running}"
        + (f", max_num_batched_tokens={budget}" if budget else "")
        + f" ({each})"
    )


def _traces():
    """Hypothesis: traces the engine accepts (each request fits the whole pool), with prompts drawn from a few shared
    prefixes over a six-token vocabulary (so blocks repeat, inside a prompt and across prompts), second turns (an
    earlier prompt, its output, more), exact repeats, cancellations, pools tight enough to preempt and evict, blocks
    of 1 to 4 tokens, seats None or 1 to 4, and chunked prefill or not."""
    from hypothesis import strategies as st

    tokens = st.integers(0, 5)

    @st.composite
    def draw(d):
        block_size = d(st.integers(1, 4))
        num_blocks = d(st.integers(2, 12))
        cap = min(num_blocks * block_size, 36)
        max_running = d(st.one_of(st.none(), st.integers(1, 4)))
        budget = d(st.one_of(st.none(), st.integers(max(max_running or 1, 2), 10)))
        prefixes = [d(st.lists(tokens, max_size=cap - 2)) for _ in range(d(st.integers(1, 3)))]
        reqs = []
        for rid in range(d(st.integers(1, 6))):
            kind = d(st.sampled_from(["shared", "turn", "repeat", "fresh"]))
            if kind in ("turn", "repeat") and reqs:
                _, prompt, new, _, _ = reqs[d(st.integers(0, len(reqs) - 1))]
                if kind == "turn":
                    prompt = list(prompt) + _continue(prompt, new) + d(st.lists(tokens, max_size=4))
            else:
                base = prefixes[d(st.integers(0, len(prefixes) - 1))] if kind == "shared" else []
                prompt = base + d(st.lists(tokens, min_size=0 if base else 1, max_size=8))
            prompt = list(prompt)[: cap - 1] or [0]
            new = d(st.integers(1, min(8, cap - len(prompt))))
            at = d(st.integers(0, 10))
            cancel = d(st.one_of(st.none(), st.integers(at + 1, at + 8))) if d(st.integers(0, 3)) == 0 else None
            reqs.append((rid, tuple(prompt), new, at, cancel))
        return (num_blocks, block_size, max_running, budget, tuple(reqs))

    return draw().map(lambda trace: (trace,))


# The contract's corners, tried first and shown as they are: a prompt of exactly two blocks sent again (one hit, the
# last token computed); two equal prompts admitted in the same step (the first copy keeps the names); a second turn
# that hits generated tokens; a tight pool where freed prefixes are evicted in order and hit again, with a preemption.
_EDGES = [
    (8, 4, None, None, ((0, tuple(range(8)), 2, 0, None), (1, tuple(range(8)), 2, 4, None))),
    (
        8,
        2,
        None,
        None,
        ((0, (1, 2, 3, 4, 5), 3, 0, None), (1, (1, 2, 3, 4, 5), 3, 0, None), (2, (1, 2, 3, 4, 0), 1, 6, None)),
    ),
    (
        10,
        2,
        2,
        None,
        ((0, (3, 1, 4, 1, 5), 5, 0, None), (1, (3, 1, 4, 1, 5, *_continue((3, 1, 4, 1, 5), 5), 2), 2, 7, None)),
    ),
    (
        6,
        2,
        3,
        None,
        (
            (0, (1, 1, 2, 2, 3), 2, 0, None),
            (1, (4, 4, 5, 5, 0), 2, 3, None),
            (2, (2, 2, 3, 3, 4, 4), 2, 6, None),
            (3, (1, 1, 2, 2, 0), 4, 9, None),
            (4, (4, 4, 5, 5, 1), 5, 9, 13),
            (5, (1, 1, 3), 6, 9, None),
        ),
    ),
]


@check(LAB, "the same pool as the reference, step by step, on every trace tried")
def check_same_as_reference(PrefixCache):
    from hypothesis import strategies as st

    if not isinstance(PrefixCache, type):
        _make(PrefixCache, 8, 4, "the trace check")  # says what it was given instead of a class

    def mine(trace):
        return _run_trace(PrefixCache, trace, judge=True)

    def ref(trace):
        return _run_trace(Reference, trace)

    say = {"describe": _describe, "compare": _same_steps, "arg_names": ("trace",)}
    same_as_reference(
        mine, ref, st.just(_EDGES[0]).map(lambda t: (t,)), edges=[(t,) for t in _EDGES], examples=1, **say
    )
    same_as_reference(mine, ref, _traces(), examples=250, **say)
