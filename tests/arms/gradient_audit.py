"""Finite-difference gradient audit on the ACTUAL trainable tensors.

The published code's gradient audit perturbed a tensor the forward never read (a
bypassed copy) and "passed": a central difference of exactly 0 was never compared
against autograd. :func:`gradient_audit` perturbs each named trainable tensor *in
place* - the very ``Parameter`` object the optimiser would update - evaluates the
loss at ``theta +- eps`` on a few seeded coordinates, compares the central difference
with autograd's gradient, and restores every tensor bit for bit (checked).

Per-tensor status (anything but ``ok`` fails the audit):

- ``ok`` - every probe agrees within ``rtol``;
- ``bypassed`` - autograd gives no gradient (``None``: the tensor is not in the graph)
  and every perturbation leaves the loss exactly unchanged: the tensor is named as
  trainable but the forward never uses it (the published bug);
- ``autograd_disconnected`` - autograd gives ``None`` but perturbing the tensor changes
  the loss (it is used through a detached / no-grad path);
- ``perturbation_ineffective`` - autograd says the gradient at the probes is non-zero
  but perturbing the tensor changes nothing (the forward reads a copy, not this tensor);
- ``zero_gradient`` - in the graph, but autograd's gradient is exactly 0 everywhere and
  no probe moves the loss (e.g. a gate initialised at 0 locks its branch). Fails unless
  the tensor is listed in ``allow_zero_gradient`` (legitimate at some inits: at the
  split bridge's init ``z = h`` so the gate ``g`` and the LayerNorm get exactly zero
  gradient - audit such modules after moving them off the init, or allow it by name);
- ``mismatch`` - some probe's relative error exceeds ``rtol``;
- ``frozen`` - ``requires_grad=False`` although named as trainable;
- ``non_finite`` - NaN/inf in the loss or the gradient.

Probes: the first probe of each tensor is the coordinate with the largest ``|grad|``
(strongest signal; catches ``perturbation_ineffective``), the others are uniform random
coordinates from a generator seeded by ``(seed, tensor name)``. Relative error:
``|fd - ag| / max(|fd|, |ag|, atol)``.

Use float64 (``module.double()``): with eps = 1e-3 the central difference is then
accurate to ~1e-6 relative; in float32 loosen ``rtol`` (default picks 1e-4 for float64,
5e-2 otherwise).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "AuditReport",
    "GradientAuditError",
    "Probe",
    "TensorAudit",
    "gradient_audit",
    "trainable_params",
]


class GradientAuditError(AssertionError):
    def __init__(self, message: str, report: AuditReport):
        super().__init__(message)
        self.report = report


@dataclass
class Probe:
    index: tuple[int, ...]
    fd: float
    autograd: float
    rel_error: float


@dataclass
class TensorAudit:
    name: str
    shape: tuple[int, ...]
    dtype: str
    status: str
    probes: list[Probe] = field(default_factory=list)
    max_rel_error: float = 0.0
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class AuditReport:
    tensors: dict[str, TensorAudit]
    eps: float
    rtol: float
    seed: int
    base_loss: float
    allow_zero_gradient: frozenset[str] = frozenset()

    def _ok(self, name: str) -> bool:
        t = self.tensors[name]
        return t.ok or (t.status == "zero_gradient" and name in self.allow_zero_gradient)

    @property
    def passed(self) -> bool:
        return all(self._ok(n) for n in self.tensors)

    @property
    def failures(self) -> dict[str, str]:
        return {n: t.status for n, t in self.tensors.items() if not self._ok(n)}

    def summary(self) -> str:
        lines = [
            f"gradient audit (eps {self.eps:g}, rtol {self.rtol:g}, seed {self.seed}): "
            + ("PASS" if self.passed else "FAIL")
        ]
        for n, t in self.tensors.items():
            lines.append(
                f"  {n} {list(t.shape)} {t.dtype}: {t.status}, {len(t.probes)} probes, "
                f"max rel err {t.max_rel_error:.3g}" + (f" - {t.message}" if t.message else "")
            )
        return "\n".join(lines)

    def raise_if_failed(self) -> None:
        if not self.passed:
            detail = "; ".join(f"{n}: {self.tensors[n].status} ({self.tensors[n].message})" for n in self.failures)
            raise GradientAuditError(f"gradient audit failed for {sorted(self.failures)}: {detail}", self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "eps": self.eps,
            "rtol": self.rtol,
            "seed": self.seed,
            "base_loss": self.base_loss,
            "tensors": {
                n: {
                    "shape": list(t.shape),
                    "dtype": t.dtype,
                    "status": t.status,
                    "max_rel_error": t.max_rel_error,
                    "message": t.message,
                    "probes": [vars(p).copy() for p in t.probes],
                }
                for n, t in self.tensors.items()
            },
        }


def trainable_params(module: nn.Module) -> dict[str, nn.Parameter]:
    """``{name: parameter}`` of the module's parameters with ``requires_grad``."""
    return {n: p for n, p in module.named_parameters() if p.requires_grad}


def _name_seed(seed: int, name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") & ((1 << 63) - 1)


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    idx = []
    for s in reversed(shape):
        idx.append(flat % s)
        flat //= s
    return tuple(reversed(idx))


def _bits(t: Tensor) -> Tensor:
    return t.detach().reshape(-1).contiguous().view(torch.uint8).clone()


def gradient_audit(
    loss_fn: Callable[[], Tensor],
    params: Mapping[str, Tensor],
    n_probes: int = 3,
    eps: float = 1e-3,
    seed: int = 0,
    *,
    rtol: float | None = None,
    atol: float = 1e-10,
    allow_zero_gradient: Iterable[str] = (),
    raise_on_failure: bool = False,
) -> AuditReport:
    """Audit autograd against central differences on the real trainable tensors.

    ``loss_fn()`` must recompute the scalar loss from the current parameter values
    (deterministically: no dropout, fixed inputs). ``params`` names the tensors
    claimed trainable (e.g. :func:`trainable_params`). Returns an :class:`AuditReport`
    (``raise_on_failure=True`` raises :class:`GradientAuditError` on failure). Every
    tensor is restored bit for bit and existing ``.grad`` fields are left untouched
    (gradients are taken with ``torch.autograd.grad``).
    """
    if n_probes < 1:
        raise ValueError("n_probes must be >= 1")
    if eps <= 0:
        raise ValueError("eps must be positive")
    names = list(params)
    tensors = [params[n] for n in names]
    if len({id(t) for t in tensors}) != len(tensors):
        raise ValueError("the same tensor is listed under two names")
    if rtol is None:
        rtol = 1e-4 if all(t.dtype == torch.float64 for t in tensors) else 5e-2
    originals = {n: _bits(params[n]) for n in names}
    copies = {n: params[n].detach().clone() for n in names}

    reports: dict[str, TensorAudit] = {}
    grads_of: dict[str, Tensor | None] = {}
    with torch.enable_grad():
        loss = loss_fn()
        if not isinstance(loss, Tensor) or loss.numel() != 1:
            raise ValueError("loss_fn must return a scalar tensor")
        diff = [t for n, t in zip(names, tensors) if t.requires_grad]
        got = (
            torch.autograd.grad(loss, diff, allow_unused=True) if (diff and loss.requires_grad) else [None] * len(diff)
        )
    it = iter(got)
    for n, t in zip(names, tensors):
        grads_of[n] = next(it) if t.requires_grad else None
    base_loss = float(loss.detach())

    def eval_loss() -> float:
        with torch.no_grad():
            return float(loss_fn().detach())

    try:
        for n, t in zip(names, tensors):
            shape = tuple(t.shape)
            ta = TensorAudit(name=n, shape=shape, dtype=str(t.dtype).replace("torch.", ""), status="ok")
            reports[n] = ta
            if not t.requires_grad:
                ta.status, ta.message = "frozen", "requires_grad=False but listed as trainable"
                continue
            if t.numel() == 0:
                ta.status, ta.message = "mismatch", "empty tensor"
                continue
            g = grads_of[n]
            gen = torch.Generator().manual_seed(_name_seed(seed, n))
            flat: list[int] = []
            if g is not None:
                if not bool(torch.isfinite(g).all()):
                    ta.status, ta.message = "non_finite", "autograd gradient has NaN/inf"
                    continue
                flat.append(int(g.detach().abs().reshape(-1).argmax()))
            while len(flat) < n_probes:
                flat.append(int(torch.randint(t.numel(), (1,), generator=gen)))
            for f in flat:
                idx = _unravel(f, shape)
                orig = copies[n][idx].clone()
                with torch.no_grad():
                    t[idx] = orig + eps
                    lp = eval_loss()
                    t[idx] = orig - eps
                    lm = eval_loss()
                    t[idx] = orig
                fd = (lp - lm) / (2 * eps)
                ag = 0.0 if g is None else float(g[idx])
                denom = max(abs(fd), abs(ag), atol)
                rel = abs(fd - ag) / denom
                ta.probes.append(Probe(index=idx, fd=fd, autograd=ag, rel_error=rel))
            fds = [p.fd for p in ta.probes]
            ags = [p.autograd for p in ta.probes]
            ta.max_rel_error = max(p.rel_error for p in ta.probes)
            if any(x != x or abs(x) == float("inf") for x in fds):
                ta.status, ta.message = "non_finite", "perturbed loss is NaN/inf"
            elif g is None:
                if all(x == 0.0 for x in fds):
                    ta.status = "bypassed"
                    ta.message = (
                        "autograd grad is None and perturbing the tensor never changes the loss: "
                        "named as trainable but never used by the forward"
                    )
                else:
                    ta.status = "autograd_disconnected"
                    ta.message = "autograd grad is None but perturbing the tensor changes the loss"
            elif all(x == 0.0 for x in fds) and any(a != 0.0 for a in ags):
                ta.status = "perturbation_ineffective"
                ta.message = (
                    "autograd says the gradient is non-zero but perturbing this tensor changes "
                    "nothing: the forward reads another tensor"
                )
            elif not bool(g.detach().ne(0).any()) and all(x == 0.0 for x in fds):
                ta.status = "zero_gradient"
                ta.message = "gradient is exactly zero everywhere (dead tensor)"
            elif ta.max_rel_error > rtol:
                ta.status = "mismatch"
                worst = max(ta.probes, key=lambda p: p.rel_error)
                ta.message = (
                    f"at {worst.index}: finite difference {worst.fd:.6g} vs autograd "
                    f"{worst.autograd:.6g} (rel err {worst.rel_error:.3g} > {rtol:g})"
                )
    finally:
        with torch.no_grad():
            for n in names:
                params[n].copy_(copies[n])
        for n in names:
            if not torch.equal(_bits(params[n]), originals[n]):  # pragma: no cover - defensive
                raise RuntimeError(f"gradient audit failed to restore {n!r} bit for bit")

    report = AuditReport(
        tensors=reports,
        eps=eps,
        rtol=rtol,
        seed=seed,
        base_loss=base_loss,
        allow_zero_gradient=frozenset(allow_zero_gradient),
    )
    if raise_on_failure:
        report.raise_if_failed()
    return report
