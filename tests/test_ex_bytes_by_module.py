"""The bytes-by-module exercise's checks pass the right answer and reject plausible wrong ones.

bytes_by_module(model, depth=1) -> dict[str, int]
| question | what the checks try |
|---|---|
| which input varies each field | each group changed alone: its dtype (fp32, fp16, bf16, fp64, int64, bool, int8, uint8, int32, complex64), its buffers, its nesting |
| boundaries | a model with no tensors ({}); a model with no children (one group, ''); depth 1 to 4, deeper than some modules; non-persistent buffers |
| a shape or type the notes never show | dtypes no note lists (bool, int8, uint8, int32, complex64); the whole model cast to bf16 while int buffers stay int64 |
| order or ties | tied weights and a module registered twice: counted once, under the first name listed |
| errors: type and message | - ; values are ints and add up to torch's own count |
| policy: which item | which group owns a shared tensor: the first name the model lists it under |


Each wrong answer is one class of mistake (the state_dict, which lists a tied tensor twice and leaves out
non-persistent buffers; parameters without buffers; a constant 4 bytes per element; elements instead of bytes;
duplicates kept; per-child sums that double-count shared modules and miss the model's own tensors; groups from
the tensor's name instead of its module's; `depth` ignored; a float result); each is rejected with the message
that names it.
"""

from collections import defaultdict

import pytest
import torch
from torch import nn

from ailab.labs import LabCheckFailed
from ailab.labs import ex_bytes_by_module as L


def _group(name, depth):
    return ".".join(name.split(".")[:-1][:depth])


def bytes_by_module(model, depth=1):
    out = defaultdict(int)
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        out[_group(name, depth)] += t.numel() * t.element_size()
    return dict(out)


def bytes_by_module_alt(model, depth=1):
    """Also right: walk the modules, remember what was counted by identity."""
    seen, out = set(), {}
    for path, module in model.named_modules():
        for t in list(module.parameters(recurse=False)) + list(module.buffers(recurse=False)):
            if id(t) in seen:
                continue
            seen.add(id(t))
            key = ".".join(path.split(".")[:depth]) if path else ""
            out[key] = out.get(key, 0) + t.nbytes
    return out


def _from(pairs, depth, size=lambda t: t.numel() * t.element_size(), key=_group):
    out = defaultdict(int)
    for name, t in pairs:
        out[key(name, depth)] += size(t)
    return dict(out)


def from_state_dict(model, depth=1):
    return _from(model.state_dict().items(), depth)


def parameters_only(model, depth=1):
    return _from(model.named_parameters(), depth)


def four_bytes_each(model, depth=1):
    return _from(list(model.named_parameters()) + list(model.named_buffers()), depth, size=lambda t: t.numel() * 4)


def counts_elements(model, depth=1):
    return _from(list(model.named_parameters()) + list(model.named_buffers()), depth, size=lambda t: t.numel())


def keeps_duplicates(model, depth=1):
    return _from(list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers()), depth)


def per_child(model, depth=1):
    """Sums each child's tensors: a shared module counts twice, the model's own tensors not at all, depth ignored."""
    return {
        name: sum(t.numel() * t.element_size() for t in list(child.parameters()) + list(child.buffers()))
        for name, child in model.named_children()
    }


def from_tensor_name(model, depth=1):
    """Cuts the tensor's full name instead of its module's path."""
    return _from(
        list(model.named_parameters()) + list(model.named_buffers()), depth, key=lambda n, d: ".".join(n.split(".")[:d])
    )


def ignores_depth(model, depth=1):
    return bytes_by_module(model, 1)


def float_values(model, depth=1):
    return {k: float(v) for k, v in bytes_by_module(model, depth).items()}


def last_name_wins(model, depth=1):
    """Attributes a shared tensor to the last name it appears under."""
    owner = {}
    for name, t in list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers()):
        owner[id(t)] = (name, t)
    return _from(owner.values(), depth)


def stub(*a, **k):
    raise NotImplementedError("bytes_by_module() is not implemented yet")


CHECKS = [L.check_bytes_and_buffers, L.check_tied, L.check_depth]


@pytest.mark.parametrize("fn", [bytes_by_module, bytes_by_module_alt])
def test_right_answers_pass(fn):
    for chk in CHECKS:
        chk(fn)


def test_the_models_hold_what_the_checks_say():
    assert bytes_by_module(L.toy()) == L.TOY
    assert bytes_by_module(L.tied()) == L.TIED
    for depth, expected in L.DEEP.items():
        assert bytes_by_module(L.deep(), depth) == expected
    assert sum(from_state_dict(L.tied()).values()) > sum(L.TIED.values())  # the trap is real


@pytest.mark.parametrize(
    "chk, wrong, message",
    [
        (
            L.check_bytes_and_buffers,
            from_state_dict,
            r"group 'embeddings' should hold 3328 bytes; got 3200.*not persistent",
        ),
        (L.check_tied, from_state_dict, r"group 'lm_head' should hold 200 bytes; got 1400.*weight tying"),
        (L.check_bytes_and_buffers, parameters_only, r"group 'embeddings' should hold 3328 bytes; got 3200"),
        (L.check_bytes_and_buffers, four_bytes_each, r"group 'embeddings' should hold 3328 bytes; got 3264.*int64"),
        (L.check_bytes_and_buffers, counts_elements, r"group 'embeddings' should hold 3328 bytes; got 816"),
        (L.check_tied, keeps_duplicates, r"group 'lm_head' should hold 200 bytes; got 1400"),
        (L.check_tied, per_child, r"group 'lm_head' should hold 200 bytes; got 1400.*weight tying"),
        (L.check_depth, per_child, r"group '' \(tensors held by the model itself\) is missing"),
        (L.check_depth, from_tensor_name, r"group '' .* is missing.*\['encoder', 'head', 'scale'\].*module path is ''"),
        (L.check_depth, ignores_depth, r"depth=2: group 'encoder.layer' is missing"),
        (L.check_bytes_and_buffers, float_values, r"a count of bytes is an int"),
        (L.check_tied, last_name_wins, r"group 'embeddings' is missing.*the first name the model lists it under"),
    ],
)
def test_wrong_answers_fail(chk, wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        chk(wrong)


def test_a_module_registered_twice_is_named():
    def counts_block_again(model, depth=1):
        out = bytes_by_module(model, depth)
        return {**out, "block_again": 168} if "block" in out else out

    with pytest.raises(LabCheckFailed, match=r"block_again is the same module as block.*got 168 bytes"):
        L.check_tied(counts_block_again)


def test_a_bare_linear_is_one_group():
    lone = nn.Linear(5, 3).to(torch.bfloat16)
    assert bytes_by_module(lone) == {"": 36}
    with pytest.raises(LabCheckFailed, match=r"no submodules: group '' .* is missing.*\['bias', 'weight'\]"):
        L.check_depth(lambda m, d=1: from_tensor_name(m, d) if isinstance(m, nn.Linear) else bytes_by_module(m, d))


@pytest.mark.parametrize("chk", CHECKS)
def test_stub_fails(chk):
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        chk(stub)


SIZES = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2, torch.float64: 8, torch.int64: 8}


def dtype_table(model, depth=1):
    """Element sizes from a table of the dtypes the notes show; anything else counts 4 bytes."""
    return _from(
        list(model.named_parameters()) + list(model.named_buffers()),
        depth,
        size=lambda t: t.numel() * SIZES.get(t.dtype, 4),
    )


def bits_over_eight(model, depth=1):
    """Element size as the dtype's bits / 8 from torch.finfo: integer and bool tensors raise."""
    return _from(
        list(model.named_parameters()) + list(model.named_buffers()),
        depth,
        size=lambda t: t.numel() * torch.finfo(t.dtype).bits // 8,
    )


@pytest.mark.parametrize(
    "wrong, message",
    [
        (dtype_table, r"bool mask.*group 'mask' should hold 100 bytes; got 400.*element_size"),
        (bits_over_eight, r"your code raised TypeError"),
    ],
)
def test_dtypes_nobody_listed(wrong, message):
    with pytest.raises(LabCheckFailed, match=message):
        L.check_bytes_and_buffers(wrong)


# --------------------------------------------------------------------------- the differential check (issue 42)


def _all(model):
    return list(model.named_parameters()) + list(model.named_buffers())


def finfo_iinfo_bits(model, depth=1):
    """Units: element size from finfo/iinfo bits / 8 (bool has no iinfo; complex64 reads as its float32 half)."""

    def size(t):
        info = torch.finfo(t.dtype) if t.is_floating_point() or t.is_complex() else torch.iinfo(t.dtype)
        return t.numel() * info.bits // 8

    return _from(_all(model), depth, size=size)


def rows_times_size(model, depth=1):
    """Units: len(t) (the rows) instead of numel() (the elements)."""
    return _from(_all(model), depth, size=lambda t: len(t) * t.element_size())


def shallow_modules_dropped(model, depth=1):
    """Boundaries: a tensor whose module path is shorter than `depth` is skipped instead of keeping its path."""
    out = defaultdict(int)
    for name, t in _all(model):
        parts = name.split(".")[:-1]
        if len(parts) >= depth:
            out[".".join(parts[:depth])] += t.numel() * t.element_size()
    return dict(out)


def model_group_named(model, depth=1):
    """Boundaries: the model's own tensors go to a group named 'model' instead of ''."""
    return {(k or "model"): v for k, v in bytes_by_module(model, depth).items()}


_SEEN: dict = {}


def cached_by_id(model, depth=1):
    """State: answers cached by the model's class and parameter count, so another model of the same class and
    size (other dtypes, other buffers) gets the old answer. (Keyed by id(model), the mistake shows only when
    CPython reuses a freed model's address, which no test can count on.)"""
    key = (type(model).__name__, sum(p.numel() for p in model.parameters()), depth)
    if key not in _SEEN:
        _SEEN[key] = bytes_by_module(model, depth)
    return _SEEN[key]


def casts_to_float32(model, depth=1):
    """State: calls model.float() first "to read every size the same way", which changes the caller's model."""
    return bytes_by_module(model.float(), depth)


def lowercased_groups(model, depth=1):
    """Order and parsing: group names lowercased, so 'Head' and 'head' merge."""
    out = defaultdict(int)
    for k, v in bytes_by_module(model, depth).items():
        out[k.lower()] += v
    return dict(out)


def alphabetical_owner(model, depth=1):
    """Order: a shared tensor counted under the alphabetically first of its names, not the first listed."""
    owner = {}
    for name, t in sorted(list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers())):
        owner.setdefault(id(t), (name, t))
    return _from(owner.values(), depth)


NEW_WRONG = [
    finfo_iinfo_bits,
    rows_times_size,
    shallow_modules_dropped,
    model_group_named,
    cached_by_id,
    casts_to_float32,
    lowercased_groups,
    alphabetical_owner,
]


@pytest.mark.parametrize("fn", [bytes_by_module, bytes_by_module_alt])
def test_right_answers_agree_with_the_reference(fn):
    L.check_same_as_reference(fn)


@pytest.mark.parametrize(
    "wrong",
    [
        from_state_dict,
        parameters_only,
        four_bytes_each,
        counts_elements,
        keeps_duplicates,
        per_child,
        from_tensor_name,
        ignores_depth,
        float_values,
        last_name_wins,
        dtype_table,
        bits_over_eight,
        *NEW_WRONG,
    ],
)
def test_the_differential_check_catches_every_wrong_answer(wrong):
    with pytest.raises(
        LabCheckFailed, match=r"bytes_by_module\(model, depth=|two different answers for the same input"
    ):
        L.check_same_as_reference(wrong)


def test_the_differential_check_names_the_model_and_both_answers():
    with pytest.raises(LabCheckFailed) as e:
        L.check_same_as_reference(alphabetical_owner)
    assert "the smallest input found where the two differ" in str(e.value)
    assert "(the same tensor)" in str(e.value) and "should hold" in str(e.value)
    with pytest.raises(LabCheckFailed, match=r"changed the model it was given"):
        L.check_same_as_reference(casts_to_float32)


def test_stub_fails_the_differential_check():
    with pytest.raises(LabCheckFailed, match="not implemented yet"):
        L.check_same_as_reference(stub)


def remembers_each_model(model, depth=1, _memo={}):
    """State: an answer memoised per model object, so a model cast after the first call keeps its old size."""
    key = (id(model), depth)
    if key not in _memo:
        _memo[key] = bytes_by_module(model, depth)
    return _memo[key]


def test_a_model_changed_between_calls_is_measured_again():
    L.check_sees_a_changed_model(bytes_by_module)
    with pytest.raises(LabCheckFailed, match="the one from before the change"):
        L.check_sees_a_changed_model(remembers_each_model)
