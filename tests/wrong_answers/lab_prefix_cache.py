"""Independent wrong answers for lab_prefix_cache, written from labs/5_generation/lab_prefix_cache.ipynb's contract alone.

The right answer is written afresh (not the solution's code); each wrong answer is a subclass that replaces one method
with one plausible mistake.
"""

from ailab.generation import BlockAllocator, OutOfBlocks
from ailab.generation.prefix_cache import FreeBlockQueue


class PrefixCache(BlockAllocator):
    def __init__(self, num_blocks, block_size):
        super().__init__(num_blocks, block_size)
        self.free_blocks = FreeBlockQueue(range(num_blocks))
        self.ref_count = [0] * num_blocks
        self.hash_of = {}
        self.cached = {}
        self.hashes = {}
        self.computed = {}
        self.queries = self.hits = 0

    def block_hash(self, parent, tokens):
        return hash(("block", parent, *tokens))

    def _block(self, ids, i):
        return ids[i * self.block_size : (i + 1) * self.block_size]

    def cache_hit(self, token_ids):
        out, name = [], None
        usable = (len(token_ids) - 1) // self.block_size
        for i in range(usable):
            name = self.block_hash(name, self._block(token_ids, i))
            if name not in self.cached:
                return out
            out.append(self.cached[name])
        return out

    def can_allocate(self, tokens, token_ids=None):
        return self._fits(tokens, self.cache_hit(token_ids) if token_ids is not None else [])

    def _fits(self, tokens, hit):
        taken_from_free = sum(self.ref_count[b] == 0 for b in hit)
        return self.blocks_for(tokens) - len(hit) + taken_from_free <= len(self.free_blocks)

    def allocate(self, seq, tokens, token_ids=None):
        if seq in self.tables:
            raise ValueError(f"sequence {seq!r} already has blocks; free it first")
        if tokens < 1:
            raise ValueError(f"a sequence starts with at least one token, got {tokens}")
        hit = self.cache_hit(token_ids) if token_ids is not None else []
        if not self._fits(tokens, hit):
            raise OutOfBlocks(self.blocks_for(tokens), len(self.free_blocks))
        return self._take(seq, tokens, token_ids, hit)

    def _take(self, seq, tokens, token_ids, hit):
        for b in hit:
            if b in self.free_blocks:
                self.free_blocks.remove(b)
            self.ref_count[b] += 1
        table = list(hit)
        while len(table) < self.blocks_for(tokens):
            table.append(self._take_free())
        self.tables[seq] = table
        self.lengths[seq] = tokens
        self.hashes[seq] = [self.hash_of[b] for b in hit]
        self.computed[seq] = self.block_size * len(hit)
        if token_ids is not None:
            self.queries += tokens
            self.hits += self.block_size * len(hit)
        return table

    def _take_free(self):
        b = self.free_blocks.popleft()
        name = self.hash_of.pop(b, None)
        if name is not None:
            self.cached.pop(name, None)
        self.ref_count[b] = 1
        return b

    def computed_tokens(self, seq):
        return self.computed.get(seq, 0)

    def append(self, seq):
        pos, table = self.lengths[seq], self.tables[seq]
        if pos == len(table) * self.block_size:
            if not self.free_blocks:
                raise OutOfBlocks(1, 0)
            table.append(self._take_free())
        self.lengths[seq] = pos + 1
        return self.slot(seq, pos)

    def cache_full_blocks(self, seq, prompt, output, computed):
        ids = list(prompt) + list(output)
        names, table = self.hashes[seq], self.tables[seq]
        for i in range(len(names), computed // self.block_size):
            name = self.block_hash(names[-1] if names else None, self._block(ids, i))
            names.append(name)
            self._name(table[i], name)

    def _name(self, block, name):
        if name in self.cached or block in self.hash_of:
            return
        self.cached[name] = block
        self.hash_of[block] = name

    def free(self, seq):
        table = self.tables.pop(seq)
        for b in table[::-1]:
            self.ref_count[b] -= 1
            if self.ref_count[b] > 0:
                continue
            if b in self.hash_of:
                self.free_blocks.append(b)
            else:
                self.free_blocks.appendleft(b)
        for d in (self.lengths, self.hashes, self.computed):
            del d[seq]


# --------------------------------------------------------------------------- the name


class HashWithoutParent(PrefixCache):
    """Names a block by its own tokens alone."""

    # differs on block [5, 6, 7, 8] after [1, 2, 3, 4] and as a first block: one name, so a prompt that begins with
    # [5, 6, 7, 8] would take K/V computed after other tokens
    def block_hash(self, parent, tokens):
        return hash(tuple(tokens))


class HashOfTheListsText(PrefixCache):
    """Names a block by the text of its parent and its tokens, as they come."""

    # differs on (1, 2, 3, 4) against [1, 2, 3, 4]: "(1, 2, 3, 4)" and "[1, 2, 3, 4]" are other strings
    def block_hash(self, parent, tokens):
        return f"{parent}/{tokens}"


class HashOfTheSum(PrefixCache):
    """Names a block by its parent and the sum of its tokens: cheap, and blocks rarely sum alike."""

    # differs on [4, 3, 2, 1] against [1, 2, 3, 4]
    def block_hash(self, parent, tokens):
        return hash((parent, sum(tokens)))


# --------------------------------------------------------------------------- the lookup


class LookupServesTheLastToken(PrefixCache):
    """Takes every full cached block of the prompt, the one that holds its last token too."""

    # differs on a prompt of exactly two cached blocks: both taken, nothing left to compute for the logits
    def cache_hit(self, token_ids):
        out, name = [], None
        for i in range(len(token_ids) // self.block_size):
            name = self.block_hash(name, self._block(token_ids, i))
            if name not in self.cached:
                break
            out.append(self.cached[name])
        return out


class LookupGoesOnAfterAMiss(PrefixCache):
    """Skips a block that is not cached and keeps looking for the ones after it."""

    # differs when a prefix's middle block was evicted but a later one is still cached: the table gets a gap
    def cache_hit(self, token_ids):
        out, name = [], None
        for i in range((len(token_ids) - 1) // self.block_size):
            name = self.block_hash(name, self._block(token_ids, i))
            if name in self.cached:
                out.append(self.cached[name])
        return out


class LookupCountsQueries(PrefixCache):
    """Counts the query and the hit where the lookup is made."""

    # differs on any admission: can_allocate looks the prompt up too, so every prompt is counted twice
    def cache_hit(self, token_ids):
        out = super().cache_hit(token_ids)
        self.queries += len(token_ids)
        self.hits += len(out) * self.block_size
        return out

    def _take(self, seq, tokens, token_ids, hit):
        return super()._take(seq, tokens, None, hit)


# --------------------------------------------------------------------------- allocate


class HitWithoutAUser(PrefixCache):
    """Gives a hit block one user, as a fresh block has."""

    # differs on two requests sharing a prefix: the count says 1, and the block goes back on the queue when the
    # first leaves, while the second still reads it
    def _take(self, seq, tokens, token_ids, hit):
        table = super()._take(seq, tokens, token_ids, hit)
        for b in hit:
            self.ref_count[b] = 1
        return table


class HitLeftOnTheFreeQueue(PrefixCache):
    """Takes a hit block without taking it off the free queue: it is in use, so it is not free anyway."""

    # differs on a prompt that hits a block nobody held: it stays on the queue and is handed out again
    def _take(self, seq, tokens, token_ids, hit):
        for b in hit:
            self.ref_count[b] += 1
        table = list(hit)
        while len(table) < self.blocks_for(tokens):
            table.append(self._take_free())
        self.tables[seq], self.lengths[seq] = table, tokens
        self.hashes[seq] = [self.hash_of[b] for b in hit]
        self.computed[seq] = self.block_size * len(hit)
        if token_ids is not None:
            self.queries += tokens
            self.hits += self.block_size * len(hit)
        return table


class HitsCountedInBlocks(PrefixCache):
    """Counts the hit blocks and the blocks asked for."""

    # differs on any lookup: hits and queries are in tokens
    def _take(self, seq, tokens, token_ids, hit):
        table = super()._take(seq, tokens, None, hit)
        if token_ids is not None:
            self.queries += self.blocks_for(tokens)
            self.hits += len(hit)
        return table


class ComputedCountsBlocks(PrefixCache):
    """Records the number of hit blocks as the sequence's computed count."""

    # differs on any hit: the engine would compute the found tokens again, and write over shared K/V
    def _take(self, seq, tokens, token_ids, hit):
        table = super()._take(seq, tokens, token_ids, hit)
        self.computed[seq] = len(hit)
        return table


# --------------------------------------------------------------------------- eviction


class EvictionKeepsTheName(PrefixCache):
    """Takes the head of the queue for new tokens and leaves its name alone."""

    # differs when a named block is reused: a later prompt hits K/V being overwritten
    def _take_free(self):
        b = self.free_blocks.popleft()
        self.ref_count[b] = 1
        return b


class EvictionForgetsOneMap(PrefixCache):
    """Evicts a block by deleting its entry in hash_of."""

    # differs when a named block is reused: cached still maps its name to it
    def _take_free(self):
        b = self.free_blocks.popleft()
        self.hash_of.pop(b, None)
        self.ref_count[b] = 1
        return b


class FreedBlocksEvictedAtOnce(PrefixCache):
    """Forgets a block's name as soon as nobody holds it."""

    # differs on any prompt sent again after the first one left: nothing is found
    def free(self, seq):
        for b in self.tables[seq]:
            if self.ref_count[b] == 1 and b in self.hash_of:
                del self.cached[self.hash_of.pop(b)]
        super().free(seq)


class MostRecentlyFreedFirst(PrefixCache):
    """Puts every freed block at the head of the queue, the last one freed reused first."""

    # differs on two requests freed in turn: the second's blocks are evicted before the first's
    def free(self, seq):
        table = self.tables.pop(seq)
        for b in table[::-1]:
            self.ref_count[b] -= 1
            if self.ref_count[b] == 0:
                self.free_blocks.appendleft(b)
        for d in (self.lengths, self.hashes, self.computed):
            del d[seq]


class NamedBeforeUnnamed(PrefixCache):
    """Puts every freed block at the tail: a block nobody can hit is reused after the cached ones."""

    # differs on a request with an unnamed tail block: its named blocks are evicted before the unnamed one
    def free(self, seq):
        table = self.tables.pop(seq)
        for b in table[::-1]:
            self.ref_count[b] -= 1
            if self.ref_count[b] == 0:
                self.free_blocks.append(b)
        for d in (self.lengths, self.hashes, self.computed):
            del d[seq]


class FreedFirstToLast(PrefixCache):
    """Gives a sequence's blocks back in table order."""

    # differs on a named prefix of two blocks: its first block is evicted before its last
    def free(self, seq):
        table = self.tables.pop(seq)
        for b in table:
            self.ref_count[b] -= 1
            if self.ref_count[b] == 0:
                if b in self.hash_of:
                    self.free_blocks.append(b)
                else:
                    self.free_blocks.appendleft(b)
        for d in (self.lengths, self.hashes, self.computed):
            del d[seq]


class FreeKeepsTheRecord(PrefixCache):
    """Frees the blocks and the table, and leaves the other records for the next admission to overwrite."""

    # differs on free: hashes, lengths and computed keep the sequence
    def free(self, seq):
        table = self.tables.pop(seq)
        for b in reversed(table):
            self.ref_count[b] -= 1
            if self.ref_count[b] == 0:
                (self.free_blocks.append if b in self.hash_of else self.free_blocks.appendleft)(b)


# --------------------------------------------------------------------------- naming


class NamedBeforeFull(PrefixCache):
    """Names the block the written tokens reach, full or not."""

    # differs on 10 tokens written in blocks of 4: the third block is named with two tokens in it
    def cache_full_blocks(self, seq, prompt, output, computed):
        super().cache_full_blocks(seq, prompt, output, -(-computed // self.block_size) * self.block_size)


class NamesEveryTokenHeld(PrefixCache):
    """Names the full blocks of prompt and output, written or not."""

    # differs under chunked prefill: a prompt's blocks are named before its later chunks are computed
    def cache_full_blocks(self, seq, prompt, output, computed):
        super().cache_full_blocks(seq, prompt, output, len(prompt) + len(output))


class PromptOnly(PrefixCache):
    """Names the prompt's full blocks; generated tokens are not part of the prompt."""

    # differs on a second turn of a chat: the first answer's blocks are never found
    def cache_full_blocks(self, seq, prompt, output, computed):
        super().cache_full_blocks(seq, prompt, [], min(computed, len(prompt)))


class LastCopyTakesTheName(PrefixCache):
    """Names each full block, the newest copy taking over a name already in use."""

    # differs on two equal prompts computed in one step: the first copy's block keeps a name that leads elsewhere
    def _name(self, block, name):
        if block in self.hash_of:
            return
        self.cached[name] = block
        self.hash_of[block] = name


class ChainFromTheBlocksName(PrefixCache):
    """Takes each block's parent name from the previous block's entry in hash_of."""

    # differs when the previous block stayed unnamed (a second copy): the chain restarts from None
    def cache_full_blocks(self, seq, prompt, output, computed):
        ids = list(prompt) + list(output)
        names, table = self.hashes[seq], self.tables[seq]
        for i in range(len(names), computed // self.block_size):
            parent = self.hash_of.get(table[i - 1]) if i else None
            name = self.block_hash(parent, self._block(ids, i))
            names.append(name)
            self._name(table[i], name)


class HashesOnlyTheNamed(PrefixCache):
    """Lists in hashes[seq] only the names its own blocks took."""

    # differs after a second copy: the chain's next name is made from the wrong parent
    def cache_full_blocks(self, seq, prompt, output, computed):
        ids = list(prompt) + list(output)
        names, table = self.hashes[seq], self.tables[seq]
        for i in range(len(names), computed // self.block_size):
            name = self.block_hash(names[-1] if names else None, self._block(ids, i))
            if name not in self.cached and table[i] not in self.hash_of:
                self._name(table[i], name)
                names.append(name)


RIGHT = {"PrefixCache": PrefixCache}  # the checks take the class as `PrefixCache`
WRONG = [
    ("PrefixCache", HashWithoutParent, "misread prose: the chain"),
    ("PrefixCache", HashOfTheListsText, "types: list against tuple"),
    ("PrefixCache", HashOfTheSum, "collisions: order lost"),
    ("PrefixCache", LookupServesTheLastToken, "boundaries: the last token"),
    ("PrefixCache", LookupGoesOnAfterAMiss, "order: a gap in the prefix"),
    ("PrefixCache", LookupCountsQueries, "state: a lookup that changes things"),
    ("PrefixCache", HitWithoutAUser, "resources: reference count"),
    ("PrefixCache", HitLeftOnTheFreeQueue, "resources: a block on the queue while held"),
    ("PrefixCache", HitsCountedInBlocks, "units: blocks for tokens"),
    ("PrefixCache", ComputedCountsBlocks, "units: blocks for tokens"),
    ("PrefixCache", EvictionKeepsTheName, "stale cache: eviction"),
    ("PrefixCache", EvictionForgetsOneMap, "stale cache: one map of two"),
    ("PrefixCache", FreedBlocksEvictedAtOnce, "misread prose: freed is not evicted"),
    ("PrefixCache", MostRecentlyFreedFirst, "order: LRU reversed"),
    ("PrefixCache", NamedBeforeUnnamed, "order: named reused before unnamed"),
    ("PrefixCache", FreedFirstToLast, "order: a prefix's first block evicted first"),
    ("PrefixCache", FreeKeepsTheRecord, "state: leftovers"),
    ("PrefixCache", NamedBeforeFull, "boundaries: a block not full"),
    ("PrefixCache", NamesEveryTokenHeld, "boundaries: K/V not written yet"),
    ("PrefixCache", PromptOnly, "misread prose: generated tokens"),
    ("PrefixCache", LastCopyTakesTheName, "order: which copy keeps the name"),
    ("PrefixCache", ChainFromTheBlocksName, "state: the chain through an unnamed copy"),
    ("PrefixCache", HashesOnlyTheNamed, "state: the chain's record"),
]
