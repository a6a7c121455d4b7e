"""Counting the calls that make the host wait for the device, on any device, the CPU included.

On a GPU, a call that needs a device tensor's value on the host (``.item()``, ``bool(t)``, ``.tolist()``, a
boolean-mask index, ``nonzero``, a copy to the host) waits until every kernel queued before it has run.
``torch.cuda.set_sync_debug_mode`` reports them on CUDA only. This counter sees the same calls through a
``TorchFunctionMode`` wherever the code runs, so that a CPU test can hold the hot path to zero of them.

On the CPU every tensor lives on the host, so the counter tells device tensors from host ones the way a GPU
would place them: a tensor is on the device when it is a watched module's parameter or buffer, a gradient,
the result of a move to a device (``.to(device)``, ``device=`` of a factory), or computed from a device
tensor. Host bookkeeping (a batch drawn with a CPU generator, the optimiser's CPU step counters, the reader's
encoding before it is moved) costs nothing and is not counted.

    with HostSyncs(model) as syncs:
        model(ids, mask, loops=8)
    syncs.count, syncs.by_site  # how many, and where (name@file:line of the nearest caller in this repository)
"""

from __future__ import annotations

import sys
import traceback
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

# Tensor methods whose result is a host value read from the tensor's data.
_READS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__complex__", "is_nonzero"})
# Operations whose output shape depends on the data: the host needs the count before it can allocate.
_DATA_SHAPED = frozenset({"nonzero", "masked_select", "unique", "unique_consecutive", "argwhere"})
_INDEXING = frozenset({"__getitem__", "__setitem__", "index_put", "index_put_"})
_REPOSITORY = str(Path(__file__).resolve().parents[1])


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _bool_index(args) -> bool:
    """A boolean tensor among an indexing call's indices (a mask index is a ``nonzero`` underneath)."""
    if len(args) < 2:
        return False
    index = args[1]
    indices = index if isinstance(index, (tuple, list)) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool and i.ndim > 0 for i in indices)


def _to_host(name: str, args, kwargs) -> bool:
    """A copy to the host: ``.cpu()``, ``.numpy()``, or ``.to("cpu")`` named as the host."""
    if name == "cpu":
        return True
    return name == "to" and any(isinstance(a, str) and a == "cpu" for a in (*args[1:], *kwargs.values()))


def _to_device(name: str, args, kwargs) -> bool:
    """A move to (or a factory on) a device that is not named as the host."""
    if kwargs.get("device") is not None and not (isinstance(kwargs["device"], str) and kwargs["device"] == "cpu"):
        return True
    if name in ("to", "cuda"):
        return not _to_host(name, args, kwargs) and any(isinstance(a, (torch.device, str)) for a in args[1:])
    return False


class HostSyncs(TorchFunctionMode):
    """Counts host syncs on device tensors while active; ``by_site`` names the nearest caller in this repository.

    ``modules``: the models whose parameters and buffers are device tensors (tensors moved to a device are
    device tensors in any case)."""

    def __init__(self, *modules: torch.nn.Module) -> None:
        super().__init__()
        self.by_site: Counter[str] = Counter()
        self._device: WeakIdKeyDictionary = WeakIdKeyDictionary()
        for module in modules:
            self.watch(list(module.parameters()) + list(module.buffers()))

    def watch(self, tensors: Iterable[torch.Tensor]) -> None:
        for tensor in tensors:
            self._device[tensor] = True

    @property
    def count(self) -> int:
        return sum(self.by_site.values())

    def _on_device(self, args, kwargs) -> bool:
        return any(t in self._device for t in _tensors((args, kwargs)))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        on_device = self._on_device(args, kwargs)
        if on_device and (
            name in _READS
            or name in _DATA_SHAPED
            or (name in _INDEXING and _bool_index(args))
            or _to_host(name, args, kwargs)
        ):
            self.by_site[_caller(name)] += 1
        result = func(*args, **kwargs)
        # a parameter's attributes (``p.grad``: a getter named __get__) are device tensors
        gradient = name == "__get__" and bool(args) and isinstance(args[0], torch.nn.Parameter)
        if on_device or gradient or _to_device(name, args, kwargs):
            if not _to_host(name, args, kwargs):
                self.watch(_tensors(result))
        return result


def _caller(name: str) -> str:
    """``name@file:line`` of the innermost frame in this repository (else the innermost frame outside torch)."""
    frames = traceback.extract_stack(sys._getframe(2), limit=40)
    for frame in reversed(frames):
        inside = frame.filename.startswith(_REPOSITORY) and "/.venv/" not in frame.filename
        if inside and not frame.filename.endswith("host_syncs.py"):
            return f"{name}@{Path(frame.filename).relative_to(_REPOSITORY)}:{frame.lineno}"
    for frame in reversed(frames):
        if "/torch/" not in frame.filename:
            return f"{name}@{Path(frame.filename).name}:{frame.lineno}"
    return name
