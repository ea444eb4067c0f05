"""The decode-loop exercise's checks pass the right answer and reject plausible wrong ones.

greedy_decode(model, prompt_ids, max_new_tokens) -> LongTensor (B, max_new_tokens)
| question | what the checks try |
|---|---|
| which input varies each field | batch (1, 2, 3), prompt length (1, 5, 7, 12, 20, 40), max_new_tokens (1, 4 to 10), each against the cache-free oracle |
| boundaries | max_new_tokens = 1 (a prefill, no decode step); a one-token prompt; a cache with no room beyond the prompt |
| a shape or type the notes never show | several rows at once (the argmax per row, not over the batch); an integer dtype out |
| order or ties | the order of the work: the prompt once, then one token per step, never the prefix again |
| errors: type and message | a learner call that raises names the prompt's shape; the prompt tensor left as it was |
| policy: which item | which token is fed back: the one just chosen, not the prompt's last |


Each wrong answer is one class of mistake: the prompt returned with the new tokens, one token too few, a decode
step too many, recomputing the prefix, prefilling again at every step, the wrong token fed back, the argmax over
the wrong axis, only the first row, sampling instead of argmax, a list or floats returned, the prompt changed.
The differential check (against ailab.generation.generate) catches each of those, and more: ids stored as int8,
an argmax of rounded probabilities (units); a stop token of its own, >= at the positions limit, the prompt's last
id fed as a decode step (boundaries); answers memoized by shape, a cache kept from the first call (state); the
steps' tokens reshaped into rows the wrong way (order).
"""

import pytest
import torch

from ailab.generation import KVCache, NoCacheView, decode_one_token, next_token, prefill
from ailab.labs import LabCheckFailed
from ailab.labs import ex_decode_loop as L


def right(model, prompt_ids, max_new_tokens, room_for_new=True):
    batch, length = prompt_ids.shape
    cache = KVCache.for_model(model, batch, length + max_new_tokens * room_for_new)
    token = prefill(model, cache, prompt_ids).argmax(-1, keepdim=True)
    out = [token]
    for _ in range(max_new_tokens - 1):
        token = decode_one_token(model, cache, token).argmax(-1, keepdim=True)
        out.append(token)
    return torch.cat(out, dim=1)


def right_preallocated(model, prompt_ids, max_new_tokens):
    """Also right: a preallocated output and a cache one token larger than needed."""
    b, t = prompt_ids.shape
    cache = KVCache.for_model(model, b, t + max_new_tokens + 1)
    out = torch.empty(b, max_new_tokens, dtype=torch.long)
    logits = prefill(model, cache, prompt_ids)
    for i in range(max_new_tokens):
        out[:, i] = logits.argmax(-1)
        if i + 1 < max_new_tokens:
            logits = decode_one_token(model, cache, out[:, i : i + 1])
    return out


def with_prompt(model, p, n):
    return torch.cat([p, right(model, p, n)], dim=1)


def one_too_few(model, p, n):
    return right(model, p, max(1, n - 1)) if n > 1 else right(model, p, 1)[:, :0]


def one_step_too_many(model, p, n):
    b, t = p.shape
    cache = KVCache.for_model(model, b, t + n + 1)
    token, out = prefill(model, cache, p).argmax(-1, keepdim=True), []
    for _ in range(n):
        out.append(token)
        token = decode_one_token(model, cache, token).argmax(-1, keepdim=True)
    return torch.cat(out, dim=1)


def recomputes_the_prefix(model, p, n):
    seq = p
    for _ in range(n):
        with torch.inference_mode():
            logits = model(seq, NoCacheView(seq.shape[0], seq.shape[1]))
        seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return seq[:, p.shape[1] :]


def prefills_every_step(model, p, n):
    seq = p
    for _ in range(n):
        cache = KVCache.for_model(model, seq.shape[0], seq.shape[1])
        seq = torch.cat([seq, prefill(model, cache, seq).argmax(-1, keepdim=True)], dim=1)
    return seq[:, p.shape[1] :]


def feeds_the_prompts_last_token(model, p, n):
    b, t = p.shape
    cache = KVCache.for_model(model, b, t + n)
    out = [prefill(model, cache, p).argmax(-1, keepdim=True)]
    for _ in range(n - 1):
        out.append(decode_one_token(model, cache, p[:, -1:]).argmax(-1, keepdim=True))
    return torch.cat(out, dim=1)


def argmax_over_the_batch(model, p, n):
    b, t = p.shape
    cache = KVCache.for_model(model, b, t + n)
    logits = prefill(model, cache, p)
    token = logits.argmax(0, keepdim=True).T[:b] if b > 1 else logits.argmax(-1, keepdim=True)
    out = [token]
    for _ in range(n - 1):
        logits = decode_one_token(model, cache, token)
        token = logits.argmax(0, keepdim=True).T[:b] if b > 1 else logits.argmax(-1, keepdim=True)
        out.append(token)
    return torch.cat(out, dim=1) % 256


def first_row_only(model, p, n):
    return right(model, p[:1], n).expand(p.shape[0], n)


def samples(model, p, n):
    b, t = p.shape
    cache = KVCache.for_model(model, b, t + n)
    g = torch.Generator().manual_seed(0)
    token = next_token(prefill(model, cache, p), 1.0, g)
    out = [token]
    for _ in range(n - 1):
        token = next_token(decode_one_token(model, cache, token), 1.0, g)
        out.append(token)
    return torch.cat(out, dim=1)


def returns_a_list(model, p, n):
    return right(model, p, n).tolist()


def returns_floats(model, p, n):
    return right(model, p, n).float()


def changes_the_prompt(model, p, n):
    out = right(model, p, n)
    p[:, 0] = 0
    return out


@pytest.mark.parametrize("fn", [right, right_preallocated])
def test_right_answers_pass(fn):
    L.check_tokens(fn)
    L.check_work(fn)


@pytest.mark.parametrize(
    "fn, check, match",
    [
        (with_prompt, L.check_tokens, "only the new tokens"),
        (one_too_few, L.check_tokens, r"shape \(1, 10\)"),
        (one_step_too_many, L.check_work, "needs no step of its own"),
        (recomputes_the_prefix, L.check_work, "feed only the newest token"),
        (prefills_every_step, L.check_work, "feed only the newest token"),
        (feeds_the_prompts_last_token, L.check_tokens, "which token is fed"),
        (argmax_over_the_batch, L.check_tokens, "expected"),
        (first_row_only, L.check_tokens, "row 1"),
        (samples, L.check_tokens, "expected"),
        (returns_a_list, L.check_tokens, "return a tensor"),
        (returns_floats, L.check_tokens, "integers"),
        (changes_the_prompt, L.check_tokens, "prompt tensor was changed"),
    ],
)
def test_wrong_answers_fail_with_a_message_that_names_the_mistake(fn, check, match):
    with pytest.raises(LabCheckFailed, match=match):
        check(fn)


def cache_for_the_prompt_only(model, prompt_ids, max_new_tokens):
    """Sizes the cache for the prompt: the first decode step has no slot to write."""
    return right(model, prompt_ids, max_new_tokens, room_for_new=False)


def test_a_cache_without_room_for_the_new_tokens():
    with pytest.raises(
        LabCheckFailed,
        match=r"a prompt of shape \(1, 12\) and max_new_tokens=10: your code raised "
        r"ValueError: the cache holds 12 tokens",
    ):
        L.check_tokens(cache_for_the_prompt_only)


# --------------------------------------------------------------------------- the differential check (issue 42)


def _loop(model, prompt_ids, max_new_tokens, pick=lambda logits: logits.argmax(-1, keepdim=True), stop=None):
    """The right loop, with the next token chosen by `pick` and an optional early `stop(token)`."""
    batch, length = prompt_ids.shape
    cache = KVCache.for_model(model, batch, length + max_new_tokens)
    token = pick(prefill(model, cache, prompt_ids))
    out = [token]
    for _ in range(max_new_tokens - 1):
        if stop is not None and stop(token):
            break
        token = pick(decode_one_token(model, cache, token))
        out.append(token)
    return out


# Units and rounding: the ids squeezed into a byte; the probabilities rounded before the argmax.
def ids_as_int8(model, p, n):
    """Token ids stored as int8 to save memory: ids from 128 up wrap to negative numbers."""
    return right(model, p, n).to(torch.int8)


def argmax_of_rounded_probabilities(model, p, n):
    """Takes the argmax of the probabilities rounded to whole percents: close ones tie, and the lowest id wins."""
    pick = lambda logits: (logits.softmax(-1) * 100).round().argmax(-1, keepdim=True)  # noqa: E731
    return torch.cat(_loop(model, p, n, pick), dim=1)


# Boundaries: a stop token of its own, the positions limit, a one-token prompt.
def stops_at_token_zero(model, p, n):
    """Stops once every row has produced id 0, read as the end of text: the tiny model has no such token."""
    return torch.cat(_loop(model, p, n, stop=lambda token: bool((token == 0).all())), dim=1)


def refuses_the_last_position(model, p, n):
    """Guards the model's positions with >=: refuses a prompt and new tokens that fill them exactly."""
    if p.shape[1] + n >= model.max_positions:
        raise ValueError(f"{p.shape[1]} + {n} tokens do not fit the model's {model.max_positions} positions")
    return right(model, p, n)


def prefills_all_but_the_last(model, p, n):
    """Prefills the prompt without its last id, then feeds that id as the first decode step: one more call, and a
    one-token prompt prefills nothing."""
    b, t = p.shape
    cache = KVCache.for_model(model, b, t + n)
    if t > 1:
        prefill(model, cache, p[:, :-1])
    token = decode_one_token(model, cache, p[:, -1:]).argmax(-1, keepdim=True)
    out = [token]
    for _ in range(n - 1):
        token = decode_one_token(model, cache, token).argmax(-1, keepdim=True)
        out.append(token)
    return torch.cat(out, dim=1)


# State that outlives a call.
_SEEN: dict = {}
_CACHES: dict = {}


def memoized_by_shape(model, p, n):
    """Remembers its answers by the prompt's shape and max_new_tokens: another prompt of that shape gets the old
    answer."""
    key = (tuple(p.shape), n)
    if key not in _SEEN:
        _SEEN[key] = right(model, p, n)
    return _SEEN[key].clone()


def reuses_the_first_cache(model, p, n):
    """Allocates a cache once per batch size, sized for its first call, and empties it for the next calls: a
    later call that needs more room runs out."""
    b, t = p.shape
    cache = _CACHES.setdefault(b, KVCache.for_model(model, b, t + n))
    cache.length = 0
    token = prefill(model, cache, p).argmax(-1, keepdim=True)
    out = [token]
    for _ in range(n - 1):
        token = decode_one_token(model, cache, token).argmax(-1, keepdim=True)
        out.append(token)
    return torch.cat(out, dim=1)


# Order: the steps' tokens reshaped into rows the wrong way.
def steps_reshaped_into_rows(model, p, n):
    """Stacks the steps' (B, 1) tokens along dim 0, (n * B, 1), then views them as (B, n): rows and steps mixed."""
    return torch.cat(_loop(model, p, n), dim=0).view(p.shape[0], n)


def transposed_then_reshaped(model, p, n):
    """Builds (B, n), transposes it to (n, B), and reshapes back to (B, n) instead of transposing again."""
    return torch.cat(_loop(model, p, n), dim=1).T.reshape(p.shape[0], n)


NEW_WRONG = [
    ids_as_int8,
    argmax_of_rounded_probabilities,
    stops_at_token_zero,
    refuses_the_last_position,
    prefills_all_but_the_last,
    memoized_by_shape,
    reuses_the_first_cache,
    steps_reshaped_into_rows,
    transposed_then_reshaped,
]
OLD_WRONG = [
    with_prompt,
    one_too_few,
    one_step_too_many,
    recomputes_the_prefix,
    prefills_every_step,
    feeds_the_prompts_last_token,
    argmax_over_the_batch,
    first_row_only,
    samples,
    returns_a_list,
    returns_floats,
    changes_the_prompt,
    cache_for_the_prompt_only,
]


@pytest.mark.parametrize("fn", [right, right_preallocated])
def test_right_answers_agree_with_the_reference(fn):
    L.check_same_as_reference(fn)


@pytest.mark.parametrize("fn", NEW_WRONG + OLD_WRONG, ids=lambda fn: fn.__name__)
def test_the_differential_check_catches_every_wrong_answer(fn):
    _SEEN.clear()
    _CACHES.clear()
    with pytest.raises(LabCheckFailed, match="the two differ|on a prompt of shape"):
        L.check_same_as_reference(fn)


def test_the_differential_check_names_the_prompt_and_both_tokens():
    with pytest.raises(LabCheckFailed) as e:
        L.check_same_as_reference(feeds_the_prompts_last_token)
    message = str(e.value)
    assert "the smallest input found where the two differ" in message
    assert "the reference gives" in message and "yours" in message and "max_new_tokens=" in message


def test_a_stub_is_not_implemented_yet():
    def stub(model, prompt_ids, max_new_tokens):
        raise NotImplementedError("write greedy_decode")

    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        L.check_same_as_reference(stub)
