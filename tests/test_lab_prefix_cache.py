"""The prefix-cache lab's checks pass the right answer and reject plausible wrong ones.

PrefixCache(num_blocks, block_size), a BlockAllocator: block_hash, cache_hit, allocate, _take_free, cache_full_blocks,
free; run on pools the checks build, in the real engine, and beside the reference in the engine's scheduler
| question | what the checks try |
|---|---|
| which input varies each field | blocks of 1 to 4 tokens, pools of 2 to 64 blocks, seats None or 1 to 4, chunked prefill or not, prompts from shared prefixes over a 6-token vocabulary (the engine check: 256) |
| boundaries | a prompt of exactly k full blocks (k - 1 hit: the last token is computed); 3 of 4 tokens written (no name); a one-token prompt; a pool small enough to preempt and evict |
| a shape the notes never show | a prefix whose middle block was evicted and whose later block is still cached; a second turn that hits generated tokens; two equal prompts computed in one step (the first copy keeps the name); a cancelled request's half-full block |
| order or ties | the free queue's order after frees (unnamed at the head, named at the tail, last block first, least recently freed first); which block a hit takes out of the middle of the queue; the order of hit blocks in a table |
| errors: type and message | a class that is not one, a method that raises or returns garbage: said in words (never a crash of the check) |
| state | reference counts against the tables, after every engine step; names kept after free, dropped at eviction; hashes, lengths, computed left behind by free; a lookup that changes the pool |

Each wrong answer is one class of mistake, and the message names it: a name without its parent, a list and a tuple
named apart, tokens summed; a lookup that serves the last token or skips a miss, or counts queries; a hit without a
user, left on the free queue, counted in blocks; eviction that keeps the name or drops one map of two; names dropped
at free; the free queue most-recently-freed first, named before unnamed, first block first; records left after
free; names before the block is full, prompt tokens only, the last copy taking the name. The trace check (the pool
against ailab.generation.prefix_cache.PrefixCachingAllocator's, step by step, over generated traces with a
witness of every KV slot read) catches most of those alone.
"""

import contextlib
import io
import json
from pathlib import Path

import pytest

from ailab.labs import LabCheckFailed
from ailab.labs import lab_prefix_cache as L
from ailab.labs.build import build_notebook

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "5_generation" / "lab_prefix_cache.ipynb"
QUICK = (L.check_block_hash, L.check_lookup, L.check_allocate, L.check_eviction, L.check_naming)
CHECKS = QUICK + (L.check_engine_tokens, L.check_same_as_reference)


def _class_from(cells) -> type:
    source = next(c["source"] for c in cells if c["cell_type"] == "code" and "class PrefixCache" in c["source"])
    namespace: dict = {}
    exec(compile(source, "<the lab's cell>", "exec"), namespace)
    return namespace["PrefixCache"]


@pytest.fixture(scope="module")
def right() -> type:
    nb = json.loads(SOLUTION.read_text())
    return _class_from([{**c, "source": "".join(c["source"])} for c in nb["cells"]])


def _fails(check, cls, *patterns):
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(LabCheckFailed) as e:
        check(cls)
    message = str(e.value)
    assert "could not judge" not in message, message
    for p in patterns:
        assert p in message, f"expected {p!r} in: {message}"
    return message


def test_the_solution_passes_every_check(right):
    with contextlib.redirect_stdout(io.StringIO()):
        for c in CHECKS:
            c(right)


def test_the_engines_own_pool_passes_every_check():
    with contextlib.redirect_stdout(io.StringIO()):
        for c in CHECKS:
            c(L.Reference)


def test_the_stub_fails_every_check_with_its_message():
    stub = _class_from(build_notebook(SOLUTION).cells)
    for c in CHECKS:
        _fails(c, stub, "not implemented yet")


def test_a_class_that_is_not_one_is_named():
    for c in QUICK + (L.check_same_as_reference,):
        _fails(c, lambda *a: None, "the checks take your class itself")


def _wrong(right, **methods) -> type:
    return type("Wrong", (right,), methods)


def _hash_without_parent(self, parent, tokens):
    return hash(tuple(tokens))


def _lookup_with_last_token(self, ids):
    hit, parent = [], None
    for i in range(len(ids) // self.block_size):
        parent = self.block_hash(parent, ids[i * self.block_size : (i + 1) * self.block_size])
        if parent not in self.cached:
            break
        hit.append(self.cached[parent])
    return hit


def _lookup_past_a_miss(self, ids):
    hit, parent = [], None
    for i in range((len(ids) - 1) // self.block_size):
        parent = self.block_hash(parent, ids[i * self.block_size : (i + 1) * self.block_size])
        if parent in self.cached:
            hit.append(self.cached[parent])
    return hit


def _evict_keeping_name(self):
    b = self.free_blocks.popleft()
    self.ref_count[b] = 1
    return b


def _free_all_at_head(right):
    def free(self, seq):
        table = self.tables.pop(seq)
        for b in reversed(table):
            self.ref_count[b] -= 1
            if self.ref_count[b] == 0:
                self.free_blocks.appendleft(b)
        del self.lengths[seq], self.hashes[seq], self.computed[seq]

    return free


def _free_in_table_order(self, seq):
    table = self.tables.pop(seq)
    for b in table:
        self.ref_count[b] -= 1
        if self.ref_count[b] == 0:
            (self.free_blocks.append if b in self.hash_of else self.free_blocks.appendleft)(b)
    del self.lengths[seq], self.hashes[seq], self.computed[seq]


def _free_dropping_names(right):
    def free(self, seq):
        for b in self.tables[seq]:
            if self.ref_count[b] == 1 and b in self.hash_of:
                del self.cached[self.hash_of.pop(b)]
        right.free(self, seq)

    return free


def _allocate_hit_without_user(right):
    def allocate(self, seq, tokens, token_ids=None):
        table = right.allocate(self, seq, tokens, token_ids)
        for b in table:
            self.ref_count[b] = 1
        return table

    return allocate


def _allocate_hits_in_blocks(right):
    def allocate(self, seq, tokens, token_ids=None):
        before = self.hits
        table = right.allocate(self, seq, tokens, token_ids)
        self.hits = before + (self.hits - before) // self.block_size
        return table

    return allocate


def _names_rounding_up(right):
    def cache_full_blocks(self, seq, prompt, output, computed):
        right.cache_full_blocks(self, seq, prompt, output, -(-computed // self.block_size) * self.block_size)

    return cache_full_blocks


def _names_prompt_only(right):
    def cache_full_blocks(self, seq, prompt, output, computed):
        right.cache_full_blocks(self, seq, prompt, [], min(computed, len(prompt)))

    return cache_full_blocks


WRONG = {
    "hash without its parent": (lambda r: {"block_hash": _hash_without_parent}, L.check_block_hash, "the parent's"),
    "hash of a list's text": (
        lambda r: {"block_hash": lambda self, p, t: f"{p}/{t}"},
        L.check_block_hash,
        "as a tuple and as a list",
    ),
    "hash of the tokens' sum": (
        lambda r: {"block_hash": lambda self, p, t: hash((p, sum(t)))},
        L.check_block_hash,
        "in another order",
    ),
    "lookup that serves the last token": (
        lambda r: {"cache_hit": _lookup_with_last_token},
        L.check_lookup,
        "the last token is always computed",
    ),
    "lookup past a miss": (lambda r: {"cache_hit": _lookup_past_a_miss}, L.check_lookup, "stops at the first block"),
    "hit without a user": (
        lambda r: {"allocate": _allocate_hit_without_user(r)},
        L.check_allocate,
        "a hit adds a user",
    ),
    "hits in blocks": (lambda r: {"allocate": _allocate_hits_in_blocks(r)}, L.check_allocate, "they count tokens"),
    "eviction that keeps the name": (
        lambda r: {"_take_free": _evict_keeping_name},
        L.check_eviction,
        "still carries A's name",
    ),
    "freed blocks evicted at once": (
        lambda r: {"free": _free_dropping_names(r)},
        L.check_eviction,
        "keeps its K/V and its name",
    ),
    "most recently freed reused first": (
        lambda r: {"free": _free_all_at_head(r)},
        L.check_eviction,
        "a named one at the tail",
    ),
    "a prefix's first block evicted first": (
        lambda r: {"free": _free_in_table_order},
        L.check_eviction,
        "from the last to the first",
    ),
    "names before the block is full": (
        lambda r: {"cache_full_blocks": _names_rounding_up(r)},
        L.check_naming,
        "fill no block",
    ),
    "prompt blocks only": (
        lambda r: {"cache_full_blocks": _names_prompt_only(r)},
        L.check_naming,
        "generated tokens are named too",
    ),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_answer_fails_with_words_for_its_mistake(name, right):
    methods, check, words = WRONG[name]
    _fails(check, _wrong(right, **methods(right)), words)


@pytest.mark.parametrize(
    "name, words",
    [
        ("hash without its parent", "holds the K/V of other tokens"),
        ("lookup that serves the last token", "its last token is always computed"),
        ("hit without a user", "reference count"),
        ("most recently freed reused first", "free queue (head first)"),
        ("prompt blocks only", "named blocks"),
    ],
)
def test_the_trace_check_alone_names_the_step_and_the_smallest_trace(name, words, right):
    methods, _, _ = WRONG[name]
    message = _fails(L.check_same_as_reference, _wrong(right, **methods(right)), "step ", "a trace over", words)
    assert "request 0: prompt" in message


def test_the_engine_check_judges_reference_counts_after_every_step(right):
    _fails(
        L.check_engine_tokens,
        _wrong(right, allocate=_allocate_hit_without_user(right)),
        "after step",
        "a block a request takes from the cache (a hit) gains a user",
    )


def test_a_method_that_returns_garbage_is_said_in_words(right):
    for methods in (
        {"cache_hit": lambda self, ids: None},
        {"allocate": lambda self, seq, tokens, ids=None: None},
        {"block_hash": lambda self, p, t: [p, t]},
        {"free": lambda self, seq: self.tables.clear()},
        {"_take_free": lambda self: -1},
    ):
        cls = _wrong(right, **methods)
        for c in CHECKS:
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    c(cls)
                except LabCheckFailed as e:
                    assert "could not judge" not in str(e), f"{methods}: {c.__name__}: {e}"
