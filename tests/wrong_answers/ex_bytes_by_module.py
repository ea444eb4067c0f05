"""Independent wrong answers for ex_bytes_by_module, written from labs/1_hardware/ex_bytes_by_module.ipynb's contract
alone."""

import functools
from collections import defaultdict

import torch


def bytes_by_module(model, depth=1):
    groups = defaultdict(int)
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        module_path = name.split(".")[:-1]
        groups[".".join(module_path[:depth])] += tensor.numel() * tensor.element_size()
    return dict(groups)


def rsplit_module_path(model, depth=1):
    """Takes the module path with name.rsplit('.', 1)[0], which leaves a top-level tensor's own name ('weight')
    instead of ''."""
    # differs on: bytes_by_module(nn.Linear(3, 2)) -> right {"": 32}, wrong {"weight": 24, "bias": 8}
    groups = defaultdict(int)
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        module_path = name.rsplit(".", 1)[0].split(".")
        groups[".".join(module_path[:depth])] += tensor.numel() * tensor.element_size()
    return dict(groups)


def cuts_the_tensor_name(model, depth=1):
    """Cuts the full tensor name to `depth` parts without first dropping the attribute, so a shallow module's
    group name ends in 'weight'/'bias'."""
    # differs on: nn.Sequential(nn.Linear(3, 2)) at depth=2 -> right {"0": 32}, wrong {"0.weight": 24, "0.bias": 8}
    groups = defaultdict(int)
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        groups[".".join(name.split(".")[:depth])] += tensor.numel() * tensor.element_size()
    return dict(groups)


def walks_each_module(model, depth=1):
    """Walks named_modules() and each module's own tensors, so a weight tied between two different modules is
    counted once per module."""
    # differs on: emb = nn.Embedding(10, 4); head = nn.Linear(4, 10, bias=False); head.weight = emb.weight;
    #   nn.ModuleDict({"emb": emb, "head": head}) -> right {"emb": 160}, wrong {"emb": 160, "head": 160}
    groups = defaultdict(int)
    for mod_name, module in model.named_modules():
        prefix = ".".join(mod_name.split(".")[:depth]) if mod_name else ""
        for tensor in list(module.parameters(recurse=False)) + list(module.buffers(recurse=False)):
            groups[prefix] += tensor.numel() * tensor.element_size()
    return dict(groups)


def bytes_from_float_bits(model, depth=1):
    """Gets bytes per element from torch.finfo(dtype).bits // 8, which only knows float dtypes (an int64 buffer
    such as BatchNorm's num_batches_tracked raises)."""
    # differs on: nn.BatchNorm1d(4) -> right {"": 72}, wrong TypeError
    groups = defaultdict(int)
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        module_path = name.split(".")[:-1]
        groups[".".join(module_path[:depth])] += tensor.numel() * (torch.finfo(tensor.dtype).bits // 8)
    return dict(groups)


@functools.lru_cache(maxsize=None)
def remembers_each_model(model, depth=1):
    """Memoises the answer per (model, depth), so a model cast to another dtype after the first call reports its
    old size."""
    # differs on: m = nn.Linear(3, 2); f(m); m.half(); f(m) -> right {"": 16}, wrong {"": 32}
    groups = defaultdict(int)
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        module_path = name.split(".")[:-1]
        groups[".".join(module_path[:depth])] += tensor.numel() * tensor.element_size()
    return dict(groups)


RIGHT = {"bytes_by_module": bytes_by_module}
WRONG = [
    ("bytes_by_module", rsplit_module_path, "boundaries"),
    ("bytes_by_module", cuts_the_tensor_name, "order/parsing"),
    ("bytes_by_module", walks_each_module, "misread prose"),
    ("bytes_by_module", bytes_from_float_bits, "units/rounding"),
    ("bytes_by_module", remembers_each_model, "state"),
]
