"""The update audit: after a step, every tensor group moved by its own learning rate and kind (AdamW or
Muon), and nothing outside its groups moved; run on the optimiser that `build_optimizer` made."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn

from arms.train.optim import GroupedOptimizer

# ----------------------------------------------------------------------------- update audit


class UpdateAuditError(AssertionError):
    """A group's realised update does not follow its configured learning-rate ratio."""

    def __init__(self, message: str, report: UpdateAuditReport):
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
        lines = [
            f"update audit (reference {self.references}, tolerance {self.tolerance:g}): "
            + ("PASS" if self.passed else "FAIL")
        ]
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
    for ms in resolved.values():
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
        gu = GroupUpdate(
            group=g, n_elements=count, configured_lr=float(expected_lr_ratio[g]), step_size=step, measure=kinds.pop()
        )
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
    for gu in report_groups.values():
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
        named,
        optimizer_step_fn,
        groups,
        expected,
        tolerance,
        measure="auto",
        optimizer=optimizer,
        adjust_lr_fn=adjust_lr_fn,
        restore=restore,
        raise_on_failure=raise_on_failure,
    )
