"""Optimiser groups with per-group learning rates on SEPARATE tensors, and the update audit.

The published pitfall (docs/science.md, design S): scaling the learning rate of a *slice* of one
tensor does nothing - Adam's per-element normalisation cancels a constant gradient
factor (realised difference 1.3e-9) and Muon's orthogonalisation discards global
scale. Here

- :func:`build_optimizer` only accepts whole leaf tensors as group members and refuses
  (``ValueError``) a parameter in two groups, a view/slice of a tensor, two tensors that
  share storage, a frozen or non-leaf tensor, a ``(tensor, index)`` pair or any other
  attempt to express a per-slice learning rate;
- the tests' update audit (`tests/arms/update_audit.py`) measures, after one real optimiser step, how far each group
  actually moved and raises :class:`UpdateAuditError` when the realised step sizes do
  not follow the configured learning-rate ratios (which is what a per-slice lr,
  implemented e.g. by a gradient hook, looks like).

Which update measure tracks the learning rate
--------------------------------------------
``||delta|| / ||theta||`` does not (it depends on each tensor's norm). What does:

- **Adam/AdamW** (``measure="adam"``): on the first step from fresh state
  ``m_hat = g``, ``v_hat = g^2`` so each element moves ``lr * g / (|g| + eps)``,
  i.e. ``lr * sign(g)``, plus decoupled weight decay ``lr * wd * theta``. The realised
  step size is ``mean |delta|`` over the group's elements; ``mean |delta| / lr ~ 1``
  (``1 + wd * mean|theta|``). A constant factor on the gradient cancels exactly.
  After many steps ``|m_hat| / sqrt(v_hat) < 1`` and varies with gradient noise, so run
  the audit on the first step (or on a fresh copy of the optimiser).
- **Muon** (``measure="muon"``): the update is ``lr * a(shape) * O`` with ``O`` the
  Newton-Schulz orthogonalisation of the (Nesterov) momentum, singular values ~1,
  ``a = sqrt(max(1, A/B))`` (torch's ``"original"`` adjustment). Either way
  ``RMS(O) * a = 1 / sqrt(B)`` (B = ``shape[1]``, fan-in), so the realised step size is
  ``RMS(delta) * sqrt(B)`` (~ lr times the NS singular-value level, ~0.7-1.1). For
  ``adjust_lr_fn="match_rms_adamw"`` it is ``RMS(delta) / 0.2``. Global gradient scale
  is discarded; a per-row scale inside a square matrix is too (an orthogonal matrix's
  rows all have unit norm).
- ``measure="auto"`` with ``optimizer=`` a :class:`GroupedOptimizer`: each tensor is
  measured by the optimiser that owns it.

Ratios, not absolutes, are checked: ``realised_g = step_g / step_ref`` against
``configured_g = lr_g / lr_ref`` with ``|ln(realised / configured)| <= ln(1 + tolerance)``.
Groups are compared only with groups measured the same way (Adam-measured groups among
themselves, Muon-measured among themselves; each measure has its own reference group),
because Muon's step carries the Newton-Schulz singular-value level (~0.7-1.1, lower
for momentum of low rank) that Adam's does not.

Caveat (Muon): ``RMS(O) = 1/sqrt(max(A, B))`` assumes the momentum has full rank; a
rank-deficient gradient (e.g. a zero-initialised LoRA factor, or batch size 1) gives a
smaller realised step. Audit such groups against a group of the same shape and rank.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, cast

import torch
from torch import Tensor, nn

__all__ = [
    "DEFAULT_ADAMW_ONLY_PATTERN",
    "GroupedOptimizer",
    "build_optimizer",
]

# group names that never go to Muon (embeddings, output head), whatever their shape
DEFAULT_ADAMW_ONLY_PATTERN = r"(embed|wte|wpe|tok_emb|lm_head|output_head|unembed)"


# ----------------------------------------------------------------------------- validation


def _storage_span(t: Tensor) -> tuple[int, int, int] | None:
    """``(storage_ptr, first_byte, end_byte)`` of the bytes a tensor can address."""
    if t.device.type == "meta" or t.numel() == 0:
        return None
    storage = t.untyped_storage()
    isz = t.element_size()
    start = cast(int, t.storage_offset()) * isz
    extent = 1 + sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()))
    return storage.data_ptr(), start, start + extent * isz


def _validate_groups(named_groups: Mapping[str, Any]) -> dict[str, list[Tensor]]:
    if not isinstance(named_groups, Mapping) or not named_groups:
        raise ValueError("named_groups must be a non-empty dict {group name: [tensors]}")
    owner: dict[int, str] = {}
    spans: list[tuple[tuple[int, int, int], str, tuple[int, ...]]] = []
    out: dict[str, list[Tensor]] = {}
    for gname, members in named_groups.items():
        if not isinstance(gname, str) or not gname:
            raise ValueError(f"group names must be non-empty strings, got {gname!r}")
        if isinstance(members, Tensor):
            raise ValueError(f"group {gname!r}: pass a list of tensors, not a bare tensor")
        members = list(members)
        if not members:
            raise ValueError(f"group {gname!r} is empty: its learning rate would apply to nothing")
        checked: list[Tensor] = []
        for i, p in enumerate(members):
            if not isinstance(p, Tensor):
                raise ValueError(
                    f"group {gname!r} member {i} is {type(p).__name__}, not a tensor. A per-slice "
                    "learning rate (tensor + index/slice/mask) cannot work: Adam's per-element "
                    "normalisation cancels a constant factor and Muon's orthogonalisation discards "
                    "scale. Give the slice its own tensor (e.g. split the weight) and its own group."
                )
            if p._base is not None:
                raise ValueError(
                    f"group {gname!r} member {i} (shape {tuple(p.shape)}) is a view/slice of another "
                    "tensor: per-slice learning rates are refused. Parameters must be whole, "
                    "separate tensors."
                )
            if not p.is_leaf:
                raise ValueError(
                    f"group {gname!r} member {i} is not a leaf tensor (computed from others); "
                    "the optimiser would update nothing the model reads."
                )
            if not p.requires_grad:
                raise ValueError(
                    f"group {gname!r} member {i} (shape {tuple(p.shape)}) has requires_grad=False: "
                    "a frozen tensor in a trainable group."
                )
            if id(p) in owner:
                where = owner[id(p)]
                raise ValueError(
                    f"parameter (shape {tuple(p.shape)}) appears in group {where!r} and in group "
                    f"{gname!r}"
                    + (" twice" if where == gname else "")
                    + ": each tensor may belong to exactly one group (one learning rate)."
                )
            owner[id(p)] = gname
            span = _storage_span(p)
            if span is not None:
                for other_span, other_g, other_shape in spans:
                    if other_span[0] == span[0] and other_span[1] < span[2] and span[1] < other_span[2]:
                        raise ValueError(
                            f"group {gname!r} member {i} (shape {tuple(p.shape)}) shares memory with a "
                            f"tensor of shape {other_shape} in group {other_g!r}: overlapping storage "
                            "is a per-slice learning rate in disguise and is refused."
                        )
                spans.append((span, gname, tuple(p.shape)))
            checked.append(p)
        out[gname] = checked
    return out


# ----------------------------------------------------------------------------- optimiser


LOW_PRECISION = (torch.bfloat16, torch.float16)


class MasterWeights:
    """fp32 copies of the low-precision (bf16, fp16) trainable tensors: the optimiser steps the copies,
    and each step writes them back to the model's tensors, rounded.

    A step of Adam at a learning rate of 1e-5 moves a weight by about 1e-5, below half of bf16's spacing
    for any |w| above about 0.004: stepped in bf16 directly, most weights would never move. In fp32 the
    updates add up, and the model's bf16 tensor follows once they pass a rounding step. fp32 tensors are
    stepped as they are (no copy): an fp32 protocol trains bit for bit as without this.
    """

    def __init__(self, groups: Mapping[str, Sequence[Tensor]]):
        self.pairs: list[tuple[Tensor, Tensor]] = []  # (the model's tensor, its fp32 master)
        self.groups: dict[str, list[Tensor]] = {}
        for name, params in groups.items():
            stepped = []
            for p in params:
                if p.dtype in LOW_PRECISION:
                    master = p.detach().float().clone().requires_grad_(True)
                    self.pairs.append((p, master))
                    stepped.append(master)
                else:
                    stepped.append(p)
            self.groups[name] = stepped

    def gather_gradients(self) -> None:
        for p, master in self.pairs:
            master.grad = None if p.grad is None else p.grad.detach().float()

    def write_back(self) -> None:
        with torch.no_grad():
            for p, master in self.pairs:
                p.copy_(master)

    def zero_model_gradients(self, set_to_none: bool) -> None:
        for p, _ in self.pairs:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()


class GroupedOptimizer:
    """One object over up to two torch optimisers (Muon for hidden matrices, AdamW for
    the rest), with named groups and per-group learning rates.

    ``param_groups`` concatenates both optimisers' groups; each carries ``name``
    (the user's group), ``base_lr`` (lr * multiplier) and ``lr``.
    ``set_lr_scale(x)`` sets every group's ``lr = base_lr * x`` (schedules keep the
    configured ratios).
    """

    def __init__(
        self, optimizers: Mapping[str, torch.optim.Optimizer], kind: str, masters: MasterWeights | None = None
    ):
        self.optimizers: dict[str, torch.optim.Optimizer] = dict(optimizers)
        self.kind = kind
        self.masters = masters
        self.lr_scale = 1.0
        self._owner: dict[int, str] = {}
        for oname, opt in self.optimizers.items():
            for g in opt.param_groups:
                for p in g["params"]:
                    self._owner[id(p)] = oname
        for p, master in masters.pairs if masters is not None else ():
            self._owner[id(p)] = self._owner[id(master)]  # the model's tensor is updated by its master's

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [g for opt in self.optimizers.values() for g in opt.param_groups]

    def stepped(self) -> dict[str, list[Tensor]]:
        """The tensors the optimisers step, by group name (an fp32 master in place of a bf16 tensor)."""
        tensors: dict[str, list[Tensor]] = {}
        for opt in self.optimizers.values():
            for g in opt.param_groups:
                tensors.setdefault(g["name"], []).extend(g["params"])
        return tensors

    @property
    def group_lrs(self) -> dict[str, float]:
        """Current lr of each named group (a group split across Muon and AdamW is
        reported as ``name`` for the Muon part and ``name`` for the AdamW part with the
        same value when no ``adamw_lr`` override was given; see ``param_groups``)."""
        return {f"{g['name']}[{o}]": g["lr"] for o, opt in self.optimizers.items() for g in opt.param_groups}

    def optimizer_of(self, p: Tensor) -> str:
        """``"muon"`` or ``"adamw"``: which optimiser updates ``p``."""
        try:
            return self._owner[id(p)]
        except KeyError:
            raise KeyError("tensor is not managed by this optimiser") from None

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.masters is not None:
            self.masters.gather_gradients()
        for opt in self.optimizers.values():
            opt.step()
        if self.masters is not None:
            self.masters.write_back()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=set_to_none)
        if self.masters is not None:
            self.masters.zero_model_gradients(set_to_none)

    def set_lr_scale(self, scale: float) -> None:
        self.lr_scale = scale  # where a schedule stands (1: the configured rates)
        for g in self.param_groups:
            g["lr"] = g["base_lr"] * scale

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "groups": {o: [g["name"] for g in opt.param_groups] for o, opt in self.optimizers.items()},
            "optimizers": {o: opt.state_dict() for o, opt in self.optimizers.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        mine = {o: [g["name"] for g in opt.param_groups] for o, opt in self.optimizers.items()}
        if state.get("kind") != self.kind or state.get("groups") != mine:
            raise ValueError(
                f"state dict was saved for kind={state.get('kind')!r} groups={state.get('groups')} "
                f"but this optimiser is kind={self.kind!r} groups={mine}"
            )
        for o, opt in self.optimizers.items():
            opt.load_state_dict(state["optimizers"][o])

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{o}: {[g['name'] + '@' + format(g['lr'], 'g') for g in opt.param_groups]}"
            for o, opt in self.optimizers.items()
        )
        return f"GroupedOptimizer(kind={self.kind!r}, {parts})"


def build_optimizer(
    named_groups: Mapping[str, Sequence[nn.Parameter]],
    kind: Literal["adamw", "muon"] = "adamw",
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    group_lr_multipliers: Mapping[str, float] | None = None,
    *,
    adamw_lr: float | None = None,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    momentum: float = 0.95,
    adjust_lr_fn: str | None = None,
    adamw_only_groups: Iterable[str] = (),
    adamw_only_pattern: str | None = DEFAULT_ADAMW_ONLY_PATTERN,
    master_weights: bool = True,
    fused: bool | None = None,
) -> GroupedOptimizer:
    """Build the optimiser for named groups of whole, separate tensors.

    Group ``name`` gets ``lr * group_lr_multipliers.get(name, 1.0)``.

    ``kind="adamw"``: one ``torch.optim.AdamW`` with one param group per named group.
    ``kind="muon"``: 2-D tensors go to ``torch.optim.Muon`` (lr as above, ``momentum``,
    ``adjust_lr_fn``); 1-D/0-D tensors, and every tensor of a group listed in
    ``adamw_only_groups`` or whose name matches ``adamw_only_pattern`` (embeddings,
    lm_head), go to ``torch.optim.AdamW`` with ``(adamw_lr or lr) * multiplier``.

    Raises ``ValueError`` for: a tensor in two groups (or twice in one), a view/slice
    of a tensor, tensors sharing storage, a ``(tensor, index)``-style member, a
    non-leaf or frozen tensor, an empty group, a multiplier for an unknown group, a
    non-positive multiplier.

    ``master_weights`` (the default): bf16 and fp16 tensors are stepped through fp32 copies
    (``MasterWeights``), so that updates below their rounding step are not lost; False steps them
    in their own dtype (to measure what that loses).

    ``fused``: AdamW's one-kernel step (``fused=True``), by default wherever every tensor lives on a CUDA
    device (``fused_by_default``); the CPU keeps the multi-tensor step its records were made with.
    """
    groups = _validate_groups(named_groups)
    masters = MasterWeights(groups) if master_weights else None
    if masters is not None and masters.pairs:
        groups = masters.groups
    else:
        masters = None
    mults = dict(group_lr_multipliers or {})
    unknown = set(mults) - set(groups)
    if unknown:
        raise ValueError(f"group_lr_multipliers names unknown groups {sorted(unknown)}; groups: {list(groups)}")
    for g, m in mults.items():
        if not (isinstance(m, (int, float)) and math.isfinite(m) and m > 0):
            raise ValueError(f"multiplier for group {g!r} must be a positive finite number, got {m!r}")
    if lr <= 0:
        raise ValueError("lr must be positive")
    adamw_only = set(adamw_only_groups)
    if adamw_only - set(groups):
        raise ValueError(f"adamw_only_groups names unknown groups {sorted(adamw_only - set(groups))}")

    if kind == "adamw":
        pgs = [
            {"params": ps, "lr": lr * mults.get(g, 1.0), "base_lr": lr * mults.get(g, 1.0), "name": g}
            for g, ps in groups.items()
        ]
        opt = torch.optim.AdamW(pgs, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, **_fused(pgs, fused))
        return GroupedOptimizer({"adamw": opt}, kind, masters)
    if kind != "muon":
        raise ValueError(f"unknown optimiser kind {kind!r} (adamw | muon)")

    pattern = re.compile(adamw_only_pattern, re.IGNORECASE) if adamw_only_pattern else None
    muon_pgs, adam_pgs = [], []
    a_lr = lr if adamw_lr is None else adamw_lr
    for g, ps in groups.items():
        m = mults.get(g, 1.0)
        forced_adam = g in adamw_only or (pattern is not None and pattern.search(g) is not None)
        mats = [p for p in ps if p.ndim == 2 and not forced_adam]
        rest = [p for p in ps if not (p.ndim == 2 and not forced_adam)]
        if mats:
            muon_pgs.append({"params": mats, "lr": lr * m, "base_lr": lr * m, "name": g})
        if rest:
            adam_pgs.append({"params": rest, "lr": a_lr * m, "base_lr": a_lr * m, "name": g})
    opts: dict[str, torch.optim.Optimizer] = {}
    if muon_pgs:
        opts["muon"] = torch.optim.Muon(
            muon_pgs, lr=lr, weight_decay=weight_decay, momentum=momentum, adjust_lr_fn=adjust_lr_fn
        )
    if adam_pgs:
        opts["adamw"] = torch.optim.AdamW(
            adam_pgs, lr=a_lr, betas=betas, eps=eps, weight_decay=weight_decay, **_fused(adam_pgs, fused)
        )
    return GroupedOptimizer(opts, kind, masters)


def fused_by_default(devices: Iterable[torch.device]) -> bool:
    """AdamW's fused step where every tensor it steps is on a CUDA device: one kernel launch per step
    instead of several per tensor group, the same arithmetic up to rounding."""
    kinds = {device.type for device in devices}
    return kinds == {"cuda"}


def _fused(param_groups: list[dict], fused: bool | None) -> dict[str, bool]:
    """AdamW's ``fused`` keyword for these groups (nothing where it would be off: torch's own default)."""
    if fused is None:
        fused = fused_by_default(p.device for group in param_groups for p in group["params"])
    return {"fused": True} if fused else {}
