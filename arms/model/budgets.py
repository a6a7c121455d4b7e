"""The two training budgets of a retrofitted recurrent model (docs/science.md, design S).

- **Full-block** (arm A), :func:`apply_full_block_budget`: every pretrained weight
  frozen except the block layers; block + bridge trained. Returns named groups of
  whole, distinct tensors for ``arms.train.optim.build_optimizer`` (one learning rate
  per group; P_p and P_h are separate tensors, so they can get different rates).
- **Adapter** (arm E), :func:`apply_adapter_budget`: every pretrained weight
  frozen; one PEFT LoRA set on the 7 linear projections of each *block* layer
  (nothing outside the block), shared by all loops because the block modules
  are the same objects every loop; the bridge trained. Returns an
  :class:`AdapterRecurrentLM`, whose **loop 1 runs with the adapter disabled**,
  so loop 1 is the base model bit for bit however the adapter was trained.
  :func:`unload_adapter` removes the LoRA layers (PEFT ``unload``, no merge) and
  restores the base's module structure and weights bit for bit
  (:func:`state_dict_sha256` before injection == after unload).

Inference with the adapter: the unmerged LoRA path adds two rank-r matmuls to
every adapted projection at every loop >= 2. :func:`merged_block_copy` merges the
LoRA delta into a *second* deep copy of the block layers (the original block
stays unmerged, so loop 1 is still the base), and
``AdapterRecurrentLM.use_merged_block()`` runs loops >= 2 on that copy, so an
adapter loop costs what a full-block loop costs. Merged and unmerged readouts
agree to fp32 rounding (W x + s B(A x) vs (W + s B A) x): the tests use
``atol=rtol=1e-5`` on the tiny model (observed max |diff| ~1e-6 or less).
The merged copy is a snapshot: it refuses to run (``RuntimeError``) once any
adapter or block weight changed in place after the merge (an optimiser step), or
in training mode; call ``use_merged_block()`` again to refresh it.

Accounting caveat: ``arms.model.accounting.lora_target_modules`` finds ``nn.Linear``
modules named like the targets, so after injection (the targets are now PEFT
``lora.Linear`` wrappers) it finds none, and ``full_block_budget`` of an
injected model counts the LoRA tensors too. Take the predictions before
injecting (the tests do), or count with :func:`trainable_parameter_count`.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from arms.model.accounting import LORA_TARGETS, lora_target_modules, trainable_counts, unique_parameters
from arms.model.recurrent import RecurrentLM

if TYPE_CHECKING:
    from peft.tuners.lora import LoraModel
    from peft.tuners.tuners_utils import BaseTunerLayer

__all__ = [
    "AdapterRecurrentLM",
    "adapters_disabled",
    "apply_adapter_budget",
    "apply_full_block_budget",
    "bridge_param_groups",
    "lora_layers",
    "merged_block_copy",
    "merged_copy_fits",
    "state_dict_sha256",
    "trainable_parameter_count",
    "unload_adapter",
]

ADAPTER_NAME = "default"


# ----------------------------------------------------------------------------- helpers


def trainable_parameter_count(module: nn.Module) -> int:
    """Unique parameters with requires_grad (a tied/shared tensor counts once)."""
    return trainable_counts(module)["trainable"]


def state_dict_sha256(module: nn.Module) -> str:
    """SHA-256 over a module's state_dict: sorted keys, each key, dtype, shape and raw bytes.

    Bit-level: two modules hash equal iff they have the same keys and every
    tensor has the same dtype, shape and bytes (-0.0 vs 0.0 and NaN payloads
    included). Tensors are moved to CPU and made contiguous before hashing.
    """
    digest = hashlib.sha256()
    state = module.state_dict()
    for key in sorted(state):
        tensor = state[key].detach().to("cpu").contiguous()
        digest.update(key.encode())
        digest.update(str(tensor.dtype).encode())
        digest.update(str(tuple(tensor.shape)).encode())
        # view as bytes (works for every dtype, bfloat16 included)
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def bridge_param_groups(bridge: nn.Module | None) -> dict[str, list[nn.Parameter]]:
    """The bridge's tensors as the optimiser groups its kind declares (each bridge module says them)."""
    if bridge is None:
        return {}
    return cast(Any, bridge).param_groups()


def _check_groups_cover(module: nn.Module, groups: dict[str, list[nn.Parameter]]) -> None:
    """Every trainable tensor of `module` is in exactly one group, and nothing else is."""
    ids = [id(p) for ps in groups.values() for p in ps]
    if len(ids) != len(set(ids)):
        raise AssertionError("a tensor appears in two parameter groups")
    trainable = {id(p) for p in unique_parameters(module) if p.requires_grad}
    if set(ids) != trainable:
        raise AssertionError(
            f"parameter groups ({len(set(ids))} tensors) do not match the trainable tensors ({len(trainable)})"
        )


# ----------------------------------------------------------------------------- full-block budget


def apply_full_block_budget(recurrent_lm: RecurrentLM) -> dict[str, list[nn.Parameter]]:
    """Arm A: freeze the base (embeddings, prelude, coda, dropped layers, final norm,
    lm_head - tied or not), train the block layers and the bridge.

    Returns named groups of whole, distinct tensors, e.g. for a SplitBridge
    ``{"block": [...], "bridge_p": [P_p.weight], "bridge_h": [P_h.weight, P_h.bias],
    "bridge_rest": [norm.weight, norm.bias, g]}``; empty groups are left out.
    """
    surgery = recurrent_lm.surgery
    recurrent_lm.base.requires_grad_(False)  # covers a tied lm_head: same tensor as embed_tokens
    for layer in surgery.block:
        layer.requires_grad_(True)
    bridge = recurrent_lm.bridge
    if bridge is not None:
        bridge.requires_grad_(True)
    # A block tensor shared with a frozen module (never the case in HF decoders) would be unfrozen
    # there too; refuse rather than train the embeddings by accident.
    outside = (surgery.embed_tokens, surgery.norm, surgery.lm_head, *surgery.prelude, *surgery.coda, *surgery.dropped)
    frozen_elsewhere = {id(p) for m in outside for p in m.parameters()}
    block = list(unique_parameters(surgery.block))
    if any(id(p) in frozen_elsewhere for p in block):
        raise ValueError("a block-layer tensor is shared with a module outside the block")
    groups = {"block": block, **bridge_param_groups(bridge)}
    groups = {k: v for k, v in groups.items() if v}
    _check_groups_cover(recurrent_lm, groups)
    return groups


# ----------------------------------------------------------------------------- adapter budget


def lora_layers(modules: nn.Module | Iterable[nn.Module]) -> list[nn.Module]:
    """The PEFT LoRA layers (wrappers of adapted projections) inside `modules`."""
    from peft.tuners.lora import LoraLayer

    if isinstance(modules, nn.Module):
        modules = [modules]
    return [m for module in modules for m in module.modules() if isinstance(m, LoraLayer)]


@contextlib.contextmanager
def adapters_disabled(layers: Iterable[nn.Module]) -> Iterator[None]:
    """Run the given LoRA layers as their plain base layers inside the block.

    Sets PEFT's ``_disable_adapters`` flag directly rather than calling
    ``enable_adapters(False/True)``: the latter also flips ``requires_grad`` of the
    adapter tensors (and turns it back on for the active adapter on re-enable),
    which must not happen mid-forward nor to a deliberately frozen adapter. A
    disabled ``lora.Linear`` computes ``self.base_layer(x)`` and nothing else.
    """
    lora = cast("list[BaseTunerLayer]", list(layers))  # PEFT LoRA layers, as lora_layers() finds them
    previous = [layer._disable_adapters for layer in lora]
    for layer in lora:
        if layer.merged:
            raise RuntimeError("a live LoRA layer is merged into the base weights; loop 1 would not be the base")
        layer._disable_adapters = True
    try:
        yield
    finally:
        for layer, was in zip(lora, previous):
            layer._disable_adapters = was


def _lora_regex(surgery, targets) -> str:
    names = [name for name, _ in lora_target_modules(surgery, targets)]
    if not names:
        raise ValueError(f"no Linear named {tuple(targets)} in the block layers {surgery.block_idx}")
    return "^(" + "|".join(re.escape(n) for n in names) + ")$"


class AdapterRecurrentLM(RecurrentLM):
    """A design-S RecurrentLM whose block carries one LoRA set, disabled at loop 1.

    Loop 1 (the identity route) runs the block with every LoRA layer disabled,
    i.e. the base's own Linear calls; loops t >= 2 run bridge -> block with the
    adapter on (or, after :meth:`use_merged_block`, on a merged second copy of
    the block). Built by :func:`apply_adapter_budget`; it shares the base and the
    bridge with the RecurrentLM it came from (use this object from then on: the
    old one would run loop 1 through the adapter).
    """

    # set with object.__setattr__ (not registered as submodules, see __init__)
    _tuner: LoraModel | None
    _merged: nn.ModuleList | None
    _plain: nn.ModuleList | None
    _merged_fingerprint: tuple | None
    _merged_sources: list | None

    def __init__(self, surgery, bridge=None, **kwargs):
        super().__init__(surgery, bridge, **kwargs)
        if self.design != "S":
            raise ValueError("the adapter budget (loop 1 without the adapter) is defined for design S only")
        # Not registered as submodules: the tuner wraps the base (already registered), and the
        # merged copy is an inference-time snapshot that must not enter state_dict/parameters.
        object.__setattr__(self, "_tuner", None)
        object.__setattr__(self, "_merged", None)
        object.__setattr__(self, "_plain", None)  # loop 1's view of the block without PEFT wrappers (merged mode)
        object.__setattr__(self, "_merged_fingerprint", None)
        object.__setattr__(self, "_merged_sources", None)

    @classmethod
    def from_recurrent(cls, recurrent_lm: RecurrentLM) -> AdapterRecurrentLM:
        out = cls(recurrent_lm.surgery, recurrent_lm.bridge, **recurrent_lm.loop_options())
        out.train(recurrent_lm.training)
        return out

    # -- adapter bookkeeping --------------------------------------------------

    def lora_layers(self) -> list[nn.Module]:
        """The LoRA layers inside the block (empty after unload); listed once per injection, since walking the
        block's modules at every forward costs more than a loop of a tiny model."""
        cached = self.__dict__.get("_lora_layer_list")
        if cached is None or cached[0] is not self._tuner:
            cached = (self._tuner, lora_layers(self.surgery.block))
            object.__setattr__(self, "_lora_layer_list", cached)
        return cached[1]

    def lora_parameters(self) -> list[nn.Parameter]:
        return [p for layer in self.lora_layers() for n, p in layer.named_parameters() if "lora_" in n]

    def param_groups(self, split_lora: bool = False) -> dict[str, list[nn.Parameter]]:
        """Named groups of whole trainable tensors for arms.train.optim.build_optimizer:
        {"lora": [...]} (or "lora_A" / "lora_B" with split_lora) + "bridge_p", "bridge_h",
        "bridge_rest"; frozen tensors and empty groups left out."""
        a: list[nn.Parameter] = []
        b: list[nn.Parameter] = []
        for layer in self.lora_layers():
            lora_A, lora_B = cast(nn.ModuleDict, layer.lora_A), cast(nn.ModuleDict, layer.lora_B)
            a += [cast(nn.Parameter, lora_A[k].weight) for k in lora_A]
            b += [cast(nn.Parameter, lora_B[k].weight) for k in lora_B]
        lora = {"lora_A": a, "lora_B": b} if split_lora else {"lora": a + b}
        groups = {**lora, **bridge_param_groups(self.bridge)}
        # a tensor deliberately frozen after apply_adapter_budget (e.g. the bridge) is left out
        groups = {k: [p for p in v if p.requires_grad] for k, v in groups.items()}
        groups = {k: v for k, v in groups.items() if v}
        _check_groups_cover(self, groups)
        return groups

    # -- merged inference copy -------------------------------------------------

    def _fingerprint(self, tensors=None):
        """Identity and in-place version of every adapter and block tensor (the merged copy's sources); the
        tensors are listed once at merge time, since walking the modules costs more than a one-token loop."""
        if tensors is None:
            tensors = [*self.lora_parameters(), *unique_parameters(self.surgery.block)]
        return tuple((id(p), p._version, p.device, p.dtype) for p in tensors)

    def use_merged_block(self, enabled: bool = True) -> AdapterRecurrentLM:
        """Run loops >= 2 on a merged second copy of the block (inference only); False drops it."""
        if not enabled:
            object.__setattr__(self, "_merged", None)
            object.__setattr__(self, "_plain", None)
            object.__setattr__(self, "_merged_fingerprint", None)
            return self
        object.__setattr__(self, "_merged", merged_block_copy(self))
        object.__setattr__(self, "_plain", nn.ModuleList(base_layer_view(layer) for layer in self.surgery.block))
        object.__setattr__(self, "_merged_sources", [*self.lora_parameters(), *unique_parameters(self.surgery.block)])
        object.__setattr__(self, "_merged_fingerprint", self._fingerprint(self._merged_sources))
        return self

    @property
    def merged(self) -> bool:
        return self._merged is not None

    @contextlib.contextmanager
    def merged_block_off(self) -> Iterator[AdapterRecurrentLM]:
        """The unmerged LoRA loops for a while, the merged copy kept for afterwards (a bench compares both
        on one model without rebuilding the copy each call)."""
        kept = self._merged
        object.__setattr__(self, "_merged", None)
        try:
            yield self
        finally:
            object.__setattr__(self, "_merged", kept)

    # -- the loop --------------------------------------------------------------

    def _cache_from(self) -> int:
        return 2  # loop 1 runs without the adapter: the prompt's keys and values repeat from loop 2 on

    def _block_pass(self, t: int, entry: torch.Tensor, ctx, cache=None) -> torch.Tensor:
        if t == 1 and self._merged is not None and not self.training:
            # the base's own Linears without PEFT's wrappers: the same tensors and operations, so the same bits,
            # and a merged adapter arm's forward is then exactly a full-block arm's forward
            return self._run(self.surgery.block_idx, entry, ctx, layers=self._plain, cache=cache)
        if t == 1:  # identity route, adapter off: the base's own layers, bit for bit
            with adapters_disabled(self.lora_layers()):
                return super()._block_pass(t, entry, ctx, cache)
        if self._merged is None:
            return super()._block_pass(t, entry, ctx, cache)
        if self.training:
            raise RuntimeError("the merged block copy is for inference; call use_merged_block(False) to train")
        # checked at the first merged loop of each forward (weights cannot change within one): a per-loop
        # check costs a visible share of a one-token loop at batch 1
        if t == 2 and self._fingerprint(self._merged_sources) != self._merged_fingerprint:
            raise RuntimeError(
                "adapter or block weights changed since use_merged_block(); call it again to refresh the merged copy"
            )
        return self._run(self.surgery.block_idx, entry, ctx, layers=self._merged, cache=cache)


def apply_adapter_budget(
    recurrent_lm: RecurrentLM,
    rank: int = 16,
    alpha: float = 32,
    targets: Iterable[str] = LORA_TARGETS,
    dropout: float = 0.0,
    *,
    seed: int | None = None,
) -> AdapterRecurrentLM:
    """Arm E: freeze every pretrained weight, put one rank-`rank` LoRA set on the `targets`
    projections of the BLOCK layers only, train it and the bridge.

    LoRA B starts at zero (PEFT default; A is Kaiming-uniform, drawn from torch's
    global RNG, or from ``seed`` without touching the global state), so the
    untrained adapter is the identity. Returns an :class:`AdapterRecurrentLM`
    sharing `recurrent_lm`'s base and bridge; its ``param_groups()`` are the
    optimiser groups.
    """
    from peft import LoraConfig
    from peft.tuners.lora import LoraModel

    if recurrent_lm.design != "S":
        raise ValueError("the adapter budget is defined for design S (split bridge) only")
    if lora_layers(recurrent_lm.base):
        raise ValueError("the base already carries LoRA layers")
    targets = tuple(targets)
    surgery = recurrent_lm.surgery
    n_targets = len(lora_target_modules(surgery, targets))
    config = LoraConfig(
        r=rank,
        lora_alpha=alpha,  # type: ignore[arg-type]  # PEFT annotates int; a float alpha works (scaling = alpha / r)
        lora_dropout=dropout,
        target_modules=_lora_regex(surgery, targets),  # a string is matched as a full regex
        bias="none",
        init_lora_weights=True,
    )
    recurrent_lm.base.requires_grad_(False)
    with torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext():
        if seed is not None:
            torch.manual_seed(seed)
        # Same as peft.inject_adapter_in_model, but keeping the tuner for unload().
        tuner = LoraModel(recurrent_lm.base, config, adapter_name=ADAPTER_NAME)
    if recurrent_lm.bridge is not None:
        recurrent_lm.bridge.requires_grad_(True)
    out = AdapterRecurrentLM.from_recurrent(recurrent_lm)
    object.__setattr__(out, "_tuner", tuner)
    if not len(lora_layers(recurrent_lm.base)) == len(lora_layers(surgery.block)) == n_targets:
        raise AssertionError("LoRA layers were not injected on exactly the block's target projections")
    return out


def merged_block_copy(model: AdapterRecurrentLM) -> nn.ModuleList:
    """A deep copy of the block layers with the LoRA delta merged in and the PEFT wrappers
    removed (plain Linears), frozen. The live block (used by loop 1) is untouched."""
    copies = nn.ModuleList(copy.deepcopy(layer) for layer in model.surgery.block)
    for layer in copies:
        for name, module in list(layer.named_modules()):
            if not hasattr(module, "base_layer") or not hasattr(module, "merge"):
                continue
            with torch.no_grad():
                module.merge(safe_merge=True)
            parent_name, _, child = name.rpartition(".")
            parent = layer.get_submodule(parent_name) if parent_name else layer
            setattr(parent, child, module.get_base_layer())
    copies.requires_grad_(False)
    copies.train(False)
    if lora_layers(copies):
        raise AssertionError("merged copy still holds LoRA layers")
    return copies


def base_layer_view(module: nn.Module) -> nn.Module:
    """``module`` as its base computes it: a shallow copy of the module tree in which every PEFT LoRA wrapper is
    replaced by the Linear it wraps. No tensor is copied (parameters and buffers are shared), so the view costs
    no memory and always computes with the live weights; the original tree is untouched."""
    from peft.tuners.lora import LoraLayer

    view = copy.copy(module)
    view._parameters = dict(module._parameters)
    view._buffers = dict(module._buffers)
    view._modules = {
        name: None
        if child is None
        else (child.get_base_layer() if isinstance(child, LoraLayer) else base_layer_view(child))
        for name, child in module._modules.items()
    }
    return view


# The stated rule for evaluating on the merged copy: it must take at most this share of the memory free on
# the model's device (the copy is dropped after evaluation, so the share is transient).
MERGED_COPY_MEMORY_SHARE = 0.5


def merged_copy_bytes(model: AdapterRecurrentLM) -> int:
    """What ``merged_block_copy`` allocates: one copy of the block's base weights (the LoRA delta merged in)."""
    return sum(
        p.numel() * p.element_size()
        for layer in model.surgery.block
        for name, p in layer.named_parameters()
        if "lora_" not in name
    )


def merged_copy_fits(model: AdapterRecurrentLM, free_bytes: int) -> bool:
    """True when the merged copy takes at most ``MERGED_COPY_MEMORY_SHARE`` of the memory free on the model's
    device (``arms.device.free_memory_bytes``, which the caller reads)."""
    return merged_copy_bytes(model) <= MERGED_COPY_MEMORY_SHARE * free_bytes


def unload_adapter(model: AdapterRecurrentLM) -> RecurrentLM:
    """Remove the LoRA layers without merging (PEFT ``unload``): the base gets back its
    original Linear objects and weights, bit for bit. Returns a plain RecurrentLM over
    the same base and bridge; `model` itself keeps working as a RecurrentLM without adapter."""
    tuner = model._tuner
    if tuner is None:
        raise ValueError("this model carries no adapter injected by apply_adapter_budget")
    tuner.unload()  # replaces every wrapper by its base_layer, deletes base.peft_config
    if lora_layers(model.base):
        raise AssertionError("LoRA layers left after unload")
    object.__setattr__(model, "_tuner", None)
    model.use_merged_block(False)
    out = RecurrentLM(model.surgery, model.bridge, **model.loop_options())  # reentry included
    out.train(model.training)
    return out


# ----------------------------------------------------------------------------- the budget kinds' entry points
# (``ledger.protocol.arms.BUDGETS``): a budget spec applied to a freshly built RecurrentLM.


def full_block_budget(model: RecurrentLM, spec: Any, seed: int) -> tuple[RecurrentLM, dict[str, list[nn.Parameter]]]:
    """The block and the bridge train; ``seed`` is unused (nothing is drawn)."""
    return model, apply_full_block_budget(model)


def adapter_budget(model: RecurrentLM, spec: Any, seed: int) -> tuple[RecurrentLM, dict[str, list[nn.Parameter]]]:
    """One LoRA set (rank, alpha, targets, dropout of the spec) drawn from ``seed``, plus the bridge."""
    adapted = apply_adapter_budget(
        model, rank=spec.rank, alpha=spec.alpha, targets=tuple(spec.targets), dropout=spec.dropout, seed=seed
    )
    return adapted, adapted.param_groups()


def full_model_budget(model: RecurrentLM, spec: Any, seed: int) -> tuple[RecurrentLM, dict[str, list[nn.Parameter]]]:
    """Design M's recipe: every tensor the retrofit runs trains (the dropped layers stay frozen: nothing reads them).

    Groups: ``embeddings`` (the input table and an untied lm_head: the optimiser keeps them off Muon), ``model``
    (every other tensor of the prelude, block, coda and final norm) and the bridge's own groups."""
    surgery = model.surgery
    model.base.requires_grad_(False)
    used = [surgery.embed_tokens, *surgery.prelude, *surgery.block, *surgery.coda, surgery.norm, surgery.lm_head]
    for module in used:
        module.requires_grad_(True)
    if model.bridge is not None:
        model.bridge.requires_grad_(True)
    embeddings = list(unique_parameters([surgery.embed_tokens, surgery.lm_head]))
    taken = {id(p) for p in embeddings}
    rest = [p for p in unique_parameters(used[1:-1]) if id(p) not in taken]
    groups = {"embeddings": embeddings, "model": rest, **bridge_param_groups(model.bridge)}
    groups = {k: v for k, v in groups.items() if v}
    _check_groups_cover(model, groups)
    return model, groups
