"""Exercise checks: where a model's bytes sit, module by module (topic H1: where the bytes go).

The learner writes
  bytes_by_module(model, depth=1) -> dict[str, int]
      the bytes of the model's parameters and buffers (numel x element size, as stored), grouped by the name of
      the module that holds each tensor, cut to its first `depth` components ('encoder.layer.0.attention' ->
      'encoder' at depth 1, 'encoder.layer' at depth 2); a tensor held by the model itself goes under ''. A
      tensor shared by several modules (tied weights) is counted once, in the group of the first name the model
      lists it under. The values add up to what torch counts (ailab.memory.param_bytes).

The checks are derived from what the function must guarantee, on small models built here:
  every group on its own, in bytes, for float32, float16, bfloat16, float64 and int64 tensors, and for bool, int8,
  uint8, int32 and complex64 ones that no note lists (no size per element is constant, and a table of dtypes
  misses some); buffers count, non-persistent ones too (a state_dict() does not list those); tied weights and a
  submodule registered twice are counted once, in the first group; groups come from the module path, not from
  the tensor's own name (a model with no children is one group, ''); depth 2 and 3 (a module shallower than
  `depth` keeps its own path); a model with no tensors gives {}; values are ints; the total equals torch's count.
  Groups worth 0 bytes may be present or absent.
  Then the same groups as a reference written from this contract, on generated models: trees up to four modules
  deep with parameters and buffers of ten dtypes and of any shape (empty and 0-d included), non-persistent
  buffers, tensors held by the model itself, parameters tied across modules in either order, a submodule
  registered under a second name, sibling names that differ only in case, any depth from 1 to 5; the model is
  left as it was given, and nothing is kept from one model to the next.
"""

from __future__ import annotations

import numbers

import torch
from torch import nn

from ailab import memory
from ailab.labs.core import LabCheckFailed, check, expect
from ailab.labs.differential import same_as_reference, short

LAB = "ex_bytes_by_module"


def toy() -> nn.Module:
    """embeddings (fp32 table + an int64 non-persistent buffer), encoder (fp16), norm (BatchNorm: buffers), head (fp64)."""
    torch.manual_seed(0)
    m = nn.Module()
    m.embeddings = nn.Embedding(100, 8)  # 800 x 4 = 3200
    m.embeddings.register_buffer("position_ids", torch.arange(16), persistent=False)  # 16 x 8 = 128
    m.encoder = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8)).to(torch.float16)  # 280 x 2 = 560
    m.norm = nn.BatchNorm1d(8)  # weight, bias, running_mean, running_var: 4 x 8 x 4 = 128; + int64 8 = 136
    m.head = nn.Linear(8, 2).to(torch.float64)  # 18 x 8 = 144
    return m


TOY = {"embeddings": 3328, "encoder": 560, "norm": 136, "head": 144}


def tied() -> nn.Module:
    """An output layer that reuses the embedding table (weight tying), and one block registered twice."""
    m = nn.Module()
    m.embeddings = nn.Embedding(50, 6)  # 300 x 4 = 1200
    m.block = nn.Linear(6, 6)  # 42 x 4 = 168
    m.block_again = m.block  # the same module under a second name
    m.lm_head = nn.Linear(6, 50)  # weight tied below; its bias: 50 x 4 = 200
    m.lm_head.weight = m.embeddings.weight
    return m


TIED = {"embeddings": 1200, "block": 168, "lm_head": 200}


def deep() -> nn.Module:
    """Nesting for depth 2 and 3, a parameter held by the model itself, and a bfloat16 module."""
    m = nn.Module()
    m.scale = nn.Parameter(torch.ones(5))  # '' : 20
    m.encoder = nn.Module()
    m.encoder.layer = nn.ModuleList([nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)) for _ in range(2)])  # 2 x 112
    m.encoder.final = nn.LayerNorm(4).to(torch.bfloat16)  # 8 x 2 = 16
    m.head = nn.Linear(4, 3)  # 15 x 4 = 60
    return m


def odd_dtypes() -> nn.Module:
    """Tensors whose element sizes no note lists: a bool mask, int8 weights with a float scale, uint8 and int32
    buffers, a complex64 filter."""
    m = nn.Module()
    m.mask = nn.Module()
    m.mask.register_buffer("keep", torch.ones(10, 10, dtype=torch.bool))  # 100 x 1 = 100
    m.quant = nn.Module()
    m.quant.register_buffer("weight", torch.zeros(16, 16, dtype=torch.int8))  # 256 x 1 = 256
    m.quant.scale = nn.Parameter(torch.ones(16))  # 16 x 4 = 64
    m.quant.register_buffer("zero_point", torch.zeros(16, dtype=torch.uint8))  # 16 x 1 = 16
    m.tokens = nn.Module()
    m.tokens.register_buffer("ids", torch.zeros(8, dtype=torch.int32))  # 8 x 4 = 32
    m.spectral = nn.Module()
    m.spectral.filter = nn.Parameter(torch.zeros(4, 4, dtype=torch.complex64))  # 16 x 8 = 128
    return m


ODD = {"mask": 100, "quant": 336, "tokens": 32, "spectral": 128}


DEEP = {
    1: {"": 20, "encoder": 240, "head": 60},
    2: {"": 20, "encoder.layer": 224, "encoder.final": 16, "head": 60},
    3: {"": 20, "encoder.layer.0": 112, "encoder.layer.1": 112, "encoder.final": 16, "head": 60},
    4: {
        "": 20,
        "encoder.layer.0.0": 80,
        "encoder.layer.0.1": 32,
        "encoder.layer.1.0": 80,
        "encoder.layer.1.1": 32,
        "encoder.final": 16,
        "head": 60,
    },
}


def _groups(fn, model, depth, what) -> dict:
    out = fn(model) if depth is None else fn(model, depth)
    expect(
        isinstance(out, dict),
        f"{what}: bytes_by_module() should return a dict of group -> bytes; got {type(out).__name__}",
    )
    for k, v in out.items():
        expect(isinstance(k, str), f"{what}: group names are strings (module paths); got the key {k!r}")
        expect(
            isinstance(v, numbers.Integral) and not isinstance(v, bool),
            f"{what}: group {k!r} holds {v!r} ({type(v).__name__}); a count of bytes is an int",
        )
    return {k: int(v) for k, v in out.items() if v != 0}


def _compare(got: dict, expected: dict, what: str, why: dict | None = None, extras: bool = True) -> None:
    why = why or {}
    for name, want in expected.items():
        label = repr(name) + (" (tensors held by the model itself)" if name == "" else "")
        expect(
            name in got,
            f"{what}: group {label} is missing; expected {want} bytes there. Your groups: "
            f"{sorted(got)}.{' ' + why[name] if name in why else ''}",
        )
        expect(
            got[name] == want,
            f"{what}: group {label} should hold {want} bytes; got {got[name]}.{' ' + why[name] if name in why else ''}",
        )
    extra = sorted(set(got) - set(expected))
    expect(
        not extras or not extra,
        f"{what}: unexpected group(s) {extra} (expected only {sorted(expected)}). A group is the path "
        "of the module that holds the tensor, cut to `depth` parts - not the tensor's own name",
    )


def _total(got: dict, model, what: str) -> None:
    truth = memory.param_bytes(model)
    expect(
        sum(got.values()) == truth,
        f"{what}: your groups add up to {sum(got.values())} bytes; torch counts "
        f"{truth} (every parameter and buffer once)",
    )


@check(LAB, "bytes per group: every dtype, buffers included")
def check_bytes_and_buffers(bytes_by_module):
    model = toy()
    got = _groups(bytes_by_module, model, None, "the toy model, default depth")
    _compare(
        got,
        TOY,
        "the toy model at depth 1",
        why={
            "embeddings": "It holds a float32 table (100 x 8) and an int64 buffer of 16 position ids that is not "
            "persistent (a state_dict() leaves it out, but it is in memory).",
            "encoder": "Its two Linear layers are float16: 2 bytes per element.",
            "norm": "BatchNorm1d(8) has weight and bias, and three buffers: running_mean, running_var (float32) and "
            "num_batches_tracked (one int64).",
            "head": "Linear(8, 2) in float64: 8 bytes per element.",
        },
    )
    _total(got, model, "the toy model")
    model = toy().to(torch.bfloat16)
    got = _groups(bytes_by_module, model, 1, "the toy model cast to bfloat16")
    _compare(
        got,
        {"embeddings": 1728, "encoder": 560, "norm": 72, "head": 36},
        "the toy model cast to bfloat16 (integer buffers keep int64)",
        why={
            "embeddings": "Each element size comes from the tensor itself: the table is now 2 bytes per "
            "element, the int64 ids still 8."
        },
    )
    model = odd_dtypes()
    got = _groups(bytes_by_module, model, 1, "bool, int8, uint8, int32 and complex64 tensors")
    _compare(
        got,
        ODD,
        "a model with a bool mask, int8 weights, uint8 and int32 buffers and a complex64 parameter",
        why={
            k: "Ask each tensor its element size (tensor.element_size()) rather than a table of dtypes: bool, "
            "int8 and uint8 take 1 byte, int32 4, complex64 8."
            for k in ODD
        },
    )
    _total(got, model, "bool, int8, uint8, int32 and complex64 tensors")


@check(LAB, "tied weights and shared modules are counted once")
def check_tied(bytes_by_module):
    model = tied()
    got = _groups(bytes_by_module, model, 1, "tied weights")
    tie = (
        "lm_head.weight is the same tensor as embeddings.weight (weight tying): it takes memory once, and "
        "counts in the group of the first name the model lists it under"
    )
    shared = "block_again is the same module as block: its tensors are already counted under 'block'"
    _compare(
        got,
        TIED,
        "tied weights",
        why={"embeddings": tie, "lm_head": tie + "; lm_head's own bias is 200 bytes", "block": shared},
        extras=False,
    )
    expect("block_again" not in got, f"tied weights: {shared}; got {got.get('block_again')} bytes in 'block_again'")
    _compare(got, TIED, "tied weights")
    _total(got, model, "tied weights")


@check(LAB, "groups follow the module path, cut at depth")
def check_depth(bytes_by_module):
    model = deep()
    for depth, expected in DEEP.items():
        got = _groups(bytes_by_module, model, depth, f"depth={depth}")
        _compare(
            got,
            expected,
            f"a nested model at depth={depth}",
            why={
                "": "`scale` is a parameter of the model itself (no submodule), so its module path is ''",
                "head": f"head is a single Linear: its path 'head' has fewer than {depth} parts, so it stays 'head'",
                "encoder.final": "encoder.final is a bfloat16 LayerNorm(4) held directly by encoder",
            },
        )
        _total(got, model, f"a nested model at depth={depth}")
    lone = nn.Linear(5, 3).to(torch.bfloat16)
    got = _groups(bytes_by_module, lone, 1, "a model with no children")
    _compare(
        got,
        {"": 36},
        "a bare bfloat16 Linear(5, 3), which has no submodules",
        why={"": "weight and bias belong to the model itself, so both are in the group ''"},
    )
    got = _groups(bytes_by_module, nn.Sequential(nn.ReLU(), nn.Dropout()), 2, "a model with no tensors")
    expect(got == {}, f"a model with no parameters or buffers has no bytes to group; got {got}")


# --------------------------------------------------------------------------- the differential check (issue 42)


_DTYPES = (
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
)
_MODULE_NAMES = ("encoder", "layer", "0", "1", "head", "Head", "attn", "LayerNorm", "emb_2")
_TENSOR_NAMES = ("weight", "bias", "running_mean", "scale", "ids", "Weight")


def _reference_bytes_by_module(model, depth=1) -> dict:
    """The contract: each tensor once, under the first name the model lists it by, grouped by its module's path."""
    groups: dict[str, int] = {}
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        key = ".".join(name.split(".")[:-1][:depth])
        groups[key] = groups.get(key, 0) + tensor.numel() * tensor.element_size()
    return groups


def _build(spec) -> nn.Module:
    """A model from a plain-data spec: (tree, ties, shares); tree = (tensors, children), built in order."""
    tree, ties, shares = spec
    modules: list[nn.Module] = []
    params: list[nn.Parameter] = []

    def make(node) -> nn.Module:
        tensors, children = node
        m = nn.Module()
        modules.append(m)
        for kind, name, dtype, shape, persistent in tensors:
            t = torch.zeros(shape, dtype=getattr(torch, dtype))
            if kind == "param":
                p = nn.Parameter(t, requires_grad=t.is_floating_point() or t.is_complex())
                m.register_parameter(name, p)
                params.append(p)
            else:
                m.register_buffer(name, t, persistent=persistent)
        for name, child in children:
            m.add_module(name, make(child))
        return m

    root = make(tree)
    for k, (src, dst, new) in enumerate(ties):  # the same Parameter set on another module: tied weights
        if params:
            target = modules[dst % len(modules)]
            target.register_parameter(f"{new}_tied{k}", params[src % len(params)])
    for k, (src, dst, new) in enumerate(shares):  # a submodule registered a second time, under another name
        if len(modules) > 1:
            shared, parent = modules[1 + src % (len(modules) - 1)], modules[dst % len(modules)]
            if not any(m is parent for m in shared.modules()):  # no cycles
                parent.add_module(f"{new}_again{k}", shared)
    return root


def _models():
    """Hypothesis: (spec, depth) for a model as the contract describes it."""
    from hypothesis import strategies as st

    tensor = st.tuples(
        st.sampled_from(["param", "buffer"]),
        st.sampled_from(_TENSOR_NAMES),
        st.sampled_from([str(d).removeprefix("torch.") for d in _DTYPES]),
        st.lists(st.integers(0, 5), max_size=3).map(tuple),
        st.booleans(),
    )
    tensors = st.lists(tensor, max_size=3, unique_by=lambda t: t[1])

    def nodes(level):
        children = (
            st.just([])
            if level >= 4
            else st.lists(
                st.tuples(st.sampled_from(_MODULE_NAMES), nodes(level + 1)), max_size=3, unique_by=lambda c: c[0]
            )
        )
        return st.tuples(tensors, children)

    link = st.tuples(st.integers(0, 50), st.integers(0, 50), st.sampled_from(["lm_head", "out", "Alias"]))
    spec = st.tuples(nodes(0), st.lists(link, max_size=2), st.lists(link, max_size=1))
    return st.tuples(spec, st.integers(1, 5))


def _say_model(spec, depth) -> str:
    model = _build(spec)
    first: dict[int, str] = {}
    items = []
    for kind, named in (
        ("", model.named_parameters(remove_duplicate=False)),
        ("buffer ", model.named_buffers(remove_duplicate=False)),
    ):
        for name, t in named:
            if id(t) in first:
                items.append(f"{name} = {first[id(t)]} (the same tensor)")
                continue
            first[id(t)] = name
            owner = model.get_submodule(".".join(name.split(".")[:-1]))
            np_ = " not persistent" if kind and name.split(".")[-1] in owner._non_persistent_buffers_set else ""
            items.append(f"{kind}{name}: {str(t.dtype).removeprefix('torch.')}{list(t.shape)}{np_}")
    held = "; ".join(items) if items else "no tensors"
    return f"bytes_by_module(model, depth={depth}) for a model holding {held[:700]}{'...' if len(held) > 700 else ''}"


def _snapshot(model) -> list:
    return [
        (name, t.dtype, tuple(t.shape), t.data_ptr(), t.requires_grad)
        for name, t in list(model.named_parameters(remove_duplicate=False))
        + list(model.named_buffers(remove_duplicate=False))
    ] + [name for name, _ in model.named_modules(remove_duplicate=False)]


def _same_groups(mine, ref) -> str | None:
    if not isinstance(mine, dict):
        return f"bytes_by_module() should return a dict of group -> bytes like {short(ref)}; got {short(mine)}"
    for k, v in mine.items():
        if not isinstance(k, str):
            return f"group names are strings (module paths); got the key {short(k)}"
        if not isinstance(v, numbers.Integral) or isinstance(v, bool):
            return f"group {k!r} holds {short(v)} ({type(v).__name__}); a count of bytes is an int"
    got = {k: int(v) for k, v in mine.items() if v != 0}
    want = {k: v for k, v in ref.items() if v != 0}
    for k, v in want.items():
        if k not in got:
            return f"group {k!r} should hold {v} bytes; it is missing from yours ({short(sorted(got))})"
        if got[k] != v:
            return f"group {k!r} should hold {v} bytes; yours holds {got[k]}"
    extra = sorted(set(got) - set(want))
    if extra:
        return f"your group(s) {extra} should not be there (the groups are {sorted(want)})"
    return None


@check(LAB, "the same groups as the reference on every model tried")
def check_same_as_reference(bytes_by_module):
    def learner(spec, depth):
        model = _build(spec)
        before = _snapshot(model)
        out = bytes_by_module(model, depth)
        if _snapshot(model) != before:
            raise LabCheckFailed(
                f"on {_say_model(spec, depth)}: your function changed the model it was given (its tensors' dtype, "
                "shape, storage or requires_grad, or its modules): count what is there, and leave it as it was"
            )
        return out

    same_as_reference(
        learner,
        lambda spec, depth: _reference_bytes_by_module(_build(spec), depth),
        _models(),
        describe=_say_model,
        compare=_same_groups,
        arg_names=("model", "depth"),
        examples=100,
    )


@check(LAB, "a model changed between two calls is measured again")
def check_sees_a_changed_model(bytes_by_module):
    """State that outlives a call: the same model object, cast to half precision and given a new buffer after the
    first call, must be measured as it is now, not as it was (a cache keyed by the model, or by its id, fails)."""
    model = toy()
    first = _groups(bytes_by_module, model, 1, "the toy model")
    _compare(first, {k: v for k, v in _reference_bytes_by_module(model, 1).items() if v}, "the toy model")
    model.half()
    model.register_buffer("step", torch.zeros(3, dtype=torch.int64))
    what = "the same toy model after model.half() and a new int64 buffer on the model itself"
    got = _groups(bytes_by_module, model, 1, what)
    want = {k: v for k, v in _reference_bytes_by_module(model, 1).items() if v}
    expect(
        got != first or want == first,
        f"{what}: your answer is the one from before the change ({first}); measure the model each time you are "
        "called, keep nothing from one call to the next",
    )
    _compare(got, want, what)
