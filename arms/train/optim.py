"""Optimiser groups with per-group learning rates on SEPARATE tensors, and the update audit.

The published pitfall (SPEC section 1): scaling the learning rate of a *slice* of one
tensor does nothing - Adam's per-element normalisation cancels a constant gradient
factor (realised difference 1.3e-9) and Muon's orthogonalisation discards global
scale. Here

- :func:`build_optimizer` only accepts whole leaf tensors as group members and refuses
  (``ValueError``) a parameter in two groups, a view/slice of a tensor, two tensors that
  share storage, a frozen or non-leaf tensor, a ``(tensor, index)`` pair or any other
  attempt to express a per-slice learning rate;
- :func:`update_audit` measures, after one real optimiser step, how far each group
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

import copy
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import torch
from torch import Tensor, nn

__all__ = [
    "GroupedOptimizer",
    "build_optimizer",
    "UpdateAuditError",
    "GroupUpdate",
    "UpdateAuditReport",
    "update_audit",
    "update_audit_from_optimizer",
    "muon_step_scale",
    "DEFAULT_ADAMW_ONLY_PATTERN",
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
            raise ValueError(
                f"group {gname!r}: pass a list of tensors, not a bare tensor"
            )
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
                    f"{gname!r}" + (" twice" if where == gname else "")
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


class GroupedOptimizer:
    """One object over up to two torch optimisers (Muon for hidden matrices, AdamW for
    the rest), with named groups and per-group learning rates.

    ``param_groups`` concatenates both optimisers' groups; each carries ``name``
    (the user's group), ``base_lr`` (lr * multiplier) and ``lr``.
    ``set_lr_scale(x)`` sets every group's ``lr = base_lr * x`` (schedules keep the
    configured ratios).
    """

    def __init__(self, optimizers: Mapping[str, torch.optim.Optimizer], kind: str):
        self.optimizers: dict[str, torch.optim.Optimizer] = dict(optimizers)
        self.kind = kind
        self._owner: dict[int, str] = {}
        for oname, opt in self.optimizers.items():
            for g in opt.param_groups:
                for p in g["params"]:
                    self._owner[id(p)] = oname

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [g for opt in self.optimizers.values() for g in opt.param_groups]

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
        for opt in self.optimizers.values():
            opt.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=set_to_none)

    def set_lr_scale(self, scale: float) -> None:
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
        parts = ", ".join(f"{o}: {[g['name'] + '@' + format(g['lr'], 'g') for g in opt.param_groups]}"
                          for o, opt in self.optimizers.items())
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
    """
    groups = _validate_groups(named_groups)
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
        opt = torch.optim.AdamW(pgs, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        return GroupedOptimizer({"adamw": opt}, kind)
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
        opts["adamw"] = torch.optim.AdamW(adam_pgs, lr=a_lr, betas=betas, eps=eps, weight_decay=weight_decay)
    return GroupedOptimizer(opts, kind)


# ----------------------------------------------------------------------------- update audit


class UpdateAuditError(AssertionError):
    """A group's realised update does not follow its configured learning-rate ratio."""

    def __init__(self, message: str, report: "UpdateAuditReport"):
        super().__init__(message)
        self.report = report


@dataclass
class GroupUpdate:
    group: str
    n_elements: int
    configured_lr: float
    step_size: float  # realised step size in lr units (see module docstring)
    measure: str = "adam"
    reference: str = ""
    configured_ratio: float = float("nan")
    realised_ratio: float = float("nan")
    ok: bool = False
    note: str = ""


@dataclass
class UpdateAuditReport:
    references: dict[str, str]  # measure ("adam" | "muon") -> reference group
    tolerance: float
    groups: dict[str, GroupUpdate] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(g.ok for g in self.groups.values())

    @property
    def failures(self) -> list[str]:
        return [n for n, g in self.groups.items() if not g.ok]

    def summary(self) -> str:
        lines = [f"update audit (reference {self.references}, tolerance {self.tolerance:g}): "
                 + ("PASS" if self.passed else "FAIL")]
        for n, g in self.groups.items():
            lines.append(
                f"  {n} [{g.measure}]: step {g.step_size:.6g} realised ratio {g.realised_ratio:.6g} vs configured "
                f"{g.configured_ratio:.6g} {'ok' if g.ok else 'FAIL'}{' (' + g.note + ')' if g.note else ''}"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "references": dict(self.references),
            "tolerance": self.tolerance,
            "passed": self.passed,
            "groups": {n: vars(g).copy() for n, g in self.groups.items()},
        }


def muon_step_scale(shape: Sequence[int], adjust_lr_fn: str | None = None) -> float:
    """Expected ``RMS(delta) / lr`` of a Muon step on a matrix of ``shape`` (NS singular
    values taken as 1): ``1/sqrt(shape[1])`` for the ``"original"`` adjustment,
    ``0.2`` for ``"match_rms_adamw"``."""
    if len(shape) != 2:
        raise ValueError("Muon updates 2-D matrices only")
    if adjust_lr_fn == "match_rms_adamw":
        return 0.2
    if adjust_lr_fn not in (None, "original"):
        raise ValueError(f"unknown adjust_lr_fn {adjust_lr_fn!r}")
    return 1.0 / math.sqrt(shape[1])


def _named(model_or_named_params: nn.Module | Mapping[str, Tensor]) -> dict[str, Tensor]:
    if isinstance(model_or_named_params, nn.Module):
        return dict(model_or_named_params.named_parameters())
    return dict(model_or_named_params)


def _resolve_member(member: Any, named: dict[str, Tensor], by_id: dict[int, str]) -> tuple[str, Any]:
    index = None
    if isinstance(member, tuple) and len(member) == 2 and isinstance(member[0], (str, Tensor)):
        member, index = member
    if isinstance(member, str):
        if member not in named:
            raise ValueError(f"unknown parameter name {member!r}")
        return member, index
    if isinstance(member, Tensor):
        if id(member) not in by_id:
            raise ValueError(f"tensor of shape {tuple(member.shape)} is not among the named parameters")
        return by_id[id(member)], index
    raise ValueError(f"group member {member!r}: expected a name, a tensor, or (name|tensor, index)")


def update_audit(
    model_or_named_params: nn.Module | Mapping[str, Tensor],
    optimizer_step_fn: Callable[[], Any],
    groups: Mapping[str, Sequence[Any]],
    expected_lr_ratio: Mapping[str, float],
    tolerance: float = 0.25,
    *,
    measure: Literal["adam", "muon", "auto"] = "auto",
    optimizer: GroupedOptimizer | torch.optim.Optimizer | None = None,
    adjust_lr_fn: str | None = None,
    reference: str | None = None,
    restore: bool = False,
    raise_on_failure: bool = True,
) -> UpdateAuditReport:
    """The UPDATE AUDIT: did each group move by its configured learning rate?

    ``optimizer_step_fn()`` must perform exactly one optimiser update (typically
    forward, backward, ``opt.step()``; or only ``opt.step()`` if gradients are set).
    ``groups`` maps a group name to members: a parameter name, a parameter tensor, or
    ``(name | tensor, index)`` for a slice of a tensor (that is how a *claimed*
    per-slice lr is audited). ``expected_lr_ratio`` maps each group to its configured
    lr (or multiplier; only ratios matter). ``measure``: see the module docstring;
    ``"auto"`` uses the owning optimiser of each tensor when ``optimizer`` is a
    :class:`GroupedOptimizer`, else ``"adam"``.

    Within each measure the reference group is ``reference`` (if measured that way) or
    the group with the largest configured lr.
    A group fails when ``|ln(realised_ratio / configured_ratio)| > ln(1 + tolerance)``,
    when it did not move at all, or when its update is not finite. On failure raises
    :class:`UpdateAuditError` (message names the groups and the realised vs configured
    ratios) unless ``raise_on_failure=False``. ``restore=True`` puts the parameters
    (and, if ``optimizer`` is given, the optimiser state) back afterwards.
    """
    named = _named(model_or_named_params)
    by_id = {id(t): n for n, t in named.items()}
    if set(groups) != set(expected_lr_ratio):
        raise ValueError(
            f"groups {sorted(groups)} and expected_lr_ratio {sorted(expected_lr_ratio)} name different groups"
        )
    if not groups:
        raise ValueError("no groups to audit")
    for g, v in expected_lr_ratio.items():
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"configured lr of group {g!r} must be positive, got {v}")
    if tolerance <= 0:
        raise ValueError("tolerance must be positive")

    resolved = {g: [_resolve_member(m, named, by_id) for m in ms] for g, ms in groups.items()}
    # refuse overlapping members (the same element audited in two groups)
    masks: dict[str, Tensor] = {}
    for g, ms in resolved.items():
        for name, index in ms:
            mask = torch.zeros(named[name].shape, dtype=torch.bool)
            if index is None:
                mask[...] = True
            else:
                mask[index] = True
            prev = masks.get(name)
            if prev is not None and bool((prev & mask).any()):
                raise ValueError(f"parameter {name!r}: overlapping elements in two audited groups")
            masks[name] = mask if prev is None else (prev | mask)

    def kind_of(name: str) -> str:
        if measure in ("adam", "muon"):
            return measure
        if measure != "auto":
            raise ValueError(f"unknown measure {measure!r}")
        if isinstance(optimizer, GroupedOptimizer):
            try:
                return "muon" if optimizer.optimizer_of(named[name]) == "muon" else "adam"
            except KeyError:  # not in the optimiser at all: it will not move, audit flags it
                return "adam"
        if isinstance(optimizer, torch.optim.Muon):
            return "muon"
        return "adam"

    used = {name for ms in resolved.values() for name, _ in ms}
    before = {n: named[n].detach().clone() for n in used}
    opt_state = copy.deepcopy(optimizer.state_dict()) if (restore and optimizer is not None) else None

    optimizer_step_fn()

    deltas = {n: (named[n].detach() - before[n]).double() for n in used}

    report_groups: dict[str, GroupUpdate] = {}
    for g, ms in resolved.items():
        num, count, finite = 0.0, 0, True
        for name, index in ms:
            d = deltas[name] if index is None else deltas[name][index]
            d = d.reshape(-1)
            if not bool(torch.isfinite(d).all()):
                finite = False
            k = kind_of(name)
            if k == "adam":
                num += float(d.abs().sum())
            else:  # muon: mean over elements of (delta / scale)^2, rooted below
                scale = muon_step_scale(named[name].shape, adjust_lr_fn)
                num += float((d / scale).pow(2).sum())
            count += d.numel()
        if count == 0:
            raise ValueError(f"group {g!r} selects no elements")
        kinds = {kind_of(n) for n, _ in ms}
        if len(kinds) > 1:
            raise ValueError(f"group {g!r} mixes Muon- and Adam-updated tensors; audit them as separate groups")
        step = num / count if kinds == {"adam"} else math.sqrt(num / count)
        gu = GroupUpdate(group=g, n_elements=count, configured_lr=float(expected_lr_ratio[g]), step_size=step,
                         measure=kinds.pop())
        if not finite:
            gu.note = "non-finite update"
            gu.step_size = float("nan")
        report_groups[g] = gu

    if reference is not None and reference not in report_groups:
        raise ValueError(f"reference group {reference!r} is not audited")
    references: dict[str, str] = {}
    for kind in sorted({gu.measure for gu in report_groups.values()}):
        members = [g for g, gu in report_groups.items() if gu.measure == kind]
        if reference in members:
            references[kind] = reference
        else:
            references[kind] = max(members, key=lambda k: report_groups[k].configured_lr)
    bound = math.log1p(tolerance)
    for g, gu in report_groups.items():
        ref = references[gu.measure]
        gu.reference = ref
        ref_step = report_groups[ref].step_size
        gu.configured_ratio = gu.configured_lr / report_groups[ref].configured_lr
        if not math.isfinite(gu.step_size):
            gu.ok = False
            continue
        if gu.step_size == 0.0:
            gu.realised_ratio = 0.0 if ref_step else float("nan")
            gu.ok = False
            gu.note = "did not move"
            continue
        if not (math.isfinite(ref_step) and ref_step > 0):
            gu.realised_ratio = float("nan")
            gu.ok = False
            gu.note = gu.note or "reference group did not move"
            continue
        gu.realised_ratio = gu.step_size / ref_step
        gu.ok = abs(math.log(gu.realised_ratio / gu.configured_ratio)) <= bound

    report = UpdateAuditReport(references=references, tolerance=tolerance, groups=report_groups)

    if restore:
        with torch.no_grad():
            for n in used:
                named[n].copy_(before[n])
        if optimizer is not None and opt_state is not None:
            optimizer.load_state_dict(opt_state)

    if raise_on_failure and not report.passed:
        bad = ", ".join(
            f"{n}: realised ratio (vs {report.groups[n].reference!r}) {report.groups[n].realised_ratio:.4g} vs configured "
            f"{report.groups[n].configured_ratio:.4g}"
            + (f" ({report.groups[n].note})" if report.groups[n].note else "")
            for n in report.failures
        )
        raise UpdateAuditError(
            f"update audit failed (reference groups {references}, tolerance {tolerance:g}): {bad}. "
            "A learning rate that is not realised usually means a per-slice lr (Adam cancels a "
            "constant gradient factor; Muon discards scale) or a group whose tensors the step "
            "does not touch.",
            report,
        )
    return report


def update_audit_from_optimizer(
    optimizer: GroupedOptimizer,
    optimizer_step_fn: Callable[[], Any],
    tolerance: float = 0.25,
    *,
    adjust_lr_fn: str | None = None,
    restore: bool = False,
    raise_on_failure: bool = True,
) -> UpdateAuditReport:
    """:func:`update_audit` over every param group of a :class:`GroupedOptimizer`.

    Audit group ``"<name>[<muon|adamw>]"`` holds that param group's tensors and is
    expected to move in proportion to its current ``lr``. Run it on the first step of a
    stage (fresh optimiser state); ``restore=True`` undoes the step (parameters and
    optimiser state).
    """
    named: dict[str, Tensor] = {}
    groups: dict[str, list[str]] = {}
    expected: dict[str, float] = {}
    for oname, opt in optimizer.optimizers.items():
        for pg in opt.param_groups:
            gname = f"{pg['name']}[{oname}]"
            groups[gname] = []
            expected[gname] = float(pg["lr"])
            for i, p in enumerate(pg["params"]):
                key = f"{gname}/{i}"
                named[key] = p
                groups[gname].append(key)
    return update_audit(
        named, optimizer_step_fn, groups, expected, tolerance, measure="auto", optimizer=optimizer,
        adjust_lr_fn=adjust_lr_fn, restore=restore, raise_on_failure=raise_on_failure,
    )
