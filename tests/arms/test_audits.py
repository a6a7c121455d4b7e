"""The two audits: optimiser update audit (arms.train.optim) and finite-difference gradient audit (arms.train.audits)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from arms.train.optim import build_optimizer
from tests.arms.gradient_audit import GradientAuditError, gradient_audit, trainable_params
from tests.arms.update_audit import UpdateAuditError, update_audit, update_audit_from_optimizer

pytestmark = pytest.mark.models


# ============================================================================= update audit


def _two_matrix_problem(seed=0, n=32):
    gen = torch.Generator().manual_seed(seed)
    a = nn.Parameter(torch.randn(n, n, generator=gen) / n**0.5)
    b = nn.Parameter(torch.randn(n, n, generator=gen) / n**0.5)
    bias = nn.Parameter(torch.randn(n, generator=gen) * 0.1)
    x = torch.randn(64, n, generator=gen)
    y = torch.randn(64, n, generator=gen)

    def loss():
        return ((torch.tanh(x @ a) @ b + bias - y) ** 2).mean()

    return {"a": a, "b": b, "bias": bias}, loss


@pytest.mark.parametrize("kind", ["adamw", "muon"])
def test_update_audit_passes_separate_tensors(kind):
    params, loss = _two_matrix_problem()
    opt = build_optimizer(
        {"a": [params["a"]], "b": [params["b"]], "bias": [params["bias"]]},
        kind=kind,
        lr=1e-3,
        weight_decay=0.0,
        group_lr_multipliers={"b": 0.1},
    )

    def step():
        opt.zero_grad()
        loss().backward()
        opt.step()

    groups = {"a": ["a"], "b": ["b"]}
    report = update_audit(params, step, groups, {"a": 1e-3, "b": 1e-4}, tolerance=0.25, optimizer=opt)
    print(f"\n[{kind}] separate tensors:\n{report.summary()}")
    assert report.passed
    assert report.groups["b"].realised_ratio == pytest.approx(0.1, rel=0.25)
    if kind == "adamw":  # first Adam step: mean |delta| = lr per element (g >> eps)
        assert report.groups["a"].step_size == pytest.approx(1e-3, rel=1e-3)
        assert report.groups["b"].realised_ratio == pytest.approx(0.1, rel=1e-3)


@pytest.mark.parametrize("kind", ["adamw", "muon"])
def test_update_audit_catches_per_slice_gradient_scaling(kind):
    """The published bug: 'lr x 0.1 on half of P' implemented by scaling that half's gradient."""
    params, loss = _two_matrix_problem(seed=1)
    a = params["a"]
    half = a.shape[0] // 2

    def scale_second_half(g):
        g = g.clone()
        g[half:] *= 0.1
        return g

    handle = a.register_hook(scale_second_half)
    try:
        opt = build_optimizer({"all": [a, params["b"]], "bias": [params["bias"]]}, kind=kind, lr=1e-3, weight_decay=0.0)

        def step():
            opt.zero_grad()
            loss().backward()
            opt.step()

        groups = {"a_top": [("a", slice(0, half))], "a_bottom": [("a", slice(half, None))]}
        with pytest.raises(UpdateAuditError) as err:
            update_audit(params, step, groups, {"a_top": 1.0, "a_bottom": 0.1}, tolerance=0.25, optimizer=opt)
    finally:
        handle.remove()
    report = err.value.report
    realised = report.groups["a_bottom"].realised_ratio
    print(
        f"\n[{kind}] per-slice gradient x0.1: realised ratio {realised:.6g} (|1 - r| = {abs(1 - realised):.3g}) "
        f"vs configured 0.1\n{report.summary()}"
    )
    assert "a_bottom" in str(err.value) and "configured 0.1" in str(err.value)
    assert report.failures == ["a_bottom"]
    assert realised == pytest.approx(1.0, abs=0.1)  # the optimiser cancelled the factor


def test_update_audit_flags_group_that_did_not_move_and_restores():
    params, loss = _two_matrix_problem(seed=2)
    opt = build_optimizer({"a": [params["a"]]}, kind="adamw", lr=1e-3)  # b is not in the optimiser
    before = {n: p.detach().clone() for n, p in params.items()}

    def step():
        opt.zero_grad()
        loss().backward()
        opt.step()

    report = update_audit(
        params,
        step,
        {"a": ["a"], "b": ["b"]},
        {"a": 1.0, "b": 1.0},
        optimizer=opt,
        restore=True,
        raise_on_failure=False,
    )
    assert not report.passed and report.failures == ["b"] and report.groups["b"].note == "did not move"
    assert all(torch.equal(before[n], p.detach()) for n, p in params.items())
    assert len(opt.optimizers["adamw"].state) == 0  # optimiser state restored too


@pytest.mark.parametrize("kind", ["adamw", "muon"])
def test_update_audit_from_optimizer_checks_every_group(kind):
    params, loss = _two_matrix_problem(seed=3)
    gate = nn.Parameter(torch.tensor(1.0))
    opt = build_optimizer(
        {"P_p": [params["a"]], "P_h": [params["b"], params["bias"]], "gate": [gate]},
        kind=kind,
        lr=1e-3,
        group_lr_multipliers={"P_p": 0.1, "gate": 0.5},
    )

    def step():
        opt.zero_grad()
        (loss() * gate).backward()
        opt.step()

    before = {n: p.detach().clone() for n, p in params.items()}
    report = update_audit_from_optimizer(opt, step, restore=True)
    print(f"\n[{kind}] from optimiser:\n{report.summary()}")
    assert report.passed
    assert all(torch.equal(before[n], p.detach()) for n, p in params.items())
    expected_groups = (
        {"P_p[adamw]", "P_h[adamw]", "gate[adamw]"}
        if kind == "adamw"
        else {"P_p[muon]", "P_h[muon]", "P_h[adamw]", "gate[adamw]"}
    )
    assert set(report.groups) == expected_groups


def test_update_audit_refuses_overlapping_groups():
    params, _ = _two_matrix_problem()
    with pytest.raises(ValueError, match="overlapping"):
        update_audit(params, lambda: None, {"x": ["a"], "y": [("a", slice(0, 2))]}, {"x": 1.0, "y": 1.0})


# ============================================================================= gradient audit


class TinySplitBridge(nn.Module):
    """Local stand-in: u = h + g * (P_p(LN(p)) + P_h(h) - h), plus a bypassed extra tensor."""

    def __init__(self, d: int = 6):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.P_p = nn.Linear(d, d, bias=False)
        self.P_h = nn.Linear(d, d, bias=True)
        self.g = nn.Parameter(torch.tensor(1.0))
        self.unused = nn.Parameter(torch.randn(d))  # named trainable, never read: the published bug

    def forward(self, h, p):
        z = self.P_p(self.ln(p)) + self.P_h(h)
        return h + self.g * (z - h)


def _bridge_loss(module, d, seed=0):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(3, 4, d, generator=gen, dtype=torch.float64)
    p = torch.randn(3, 4, d, generator=gen, dtype=torch.float64)
    proj = torch.randn(d, 5, generator=gen, dtype=torch.float64)
    return lambda: ((module(h, p) @ proj) ** 2).sum()


def _snapshot(params):
    return {n: p.detach().clone() for n, p in params.items()}


def _bit_identical(a, b):
    return all(torch.equal(a[n].reshape(-1).view(torch.uint8), b[n].reshape(-1).view(torch.uint8)) for n in a)


def test_gradient_audit_passes_used_tensors_and_names_the_bypassed_one():
    d = 6
    torch.manual_seed(0)
    m = TinySplitBridge(d).double()
    with torch.no_grad():  # move off the symmetric init so every gradient is informative
        for prm in m.parameters():
            prm.add_(0.1 * torch.randn_like(prm))
    params = trainable_params(m)
    before = _snapshot(params)
    grads_before = {n: p.grad for n, p in params.items()}
    report = gradient_audit(_bridge_loss(m, d), params, n_probes=3, eps=1e-3, seed=0)
    print("\n" + report.summary())
    assert _bit_identical(before, _snapshot(params))
    assert all(p.grad is grads_before[n] for n, p in params.items())
    assert report.failures == {"unused": "bypassed"}
    for name in ("ln.weight", "ln.bias", "P_p.weight", "P_h.weight", "P_h.bias", "g"):
        t = report.tensors[name]
        assert t.status == "ok" and len(t.probes) == 3 and t.max_rel_error < 1e-6, (name, t)
    with pytest.raises(GradientAuditError, match="unused"):
        report.raise_if_failed()
    # the same audit on the used tensors alone passes
    used = {n: p for n, p in params.items() if n != "unused"}
    assert gradient_audit(_bridge_loss(m, d), used, seed=1).passed


def test_gradient_audit_at_split_bridge_init():
    """At init (P_p = 0, P_h = I, b = 0, g = 1): z = P_p LN(p) + P_h h + b = h, so
    dL/dg = dL/du . (z - h) = 0 and LN's gradient (through P_p = 0) is 0 as well. Only
    P_p, P_h and b carry gradient; the audit reports g and LN as zero_gradient (a failure
    unless allowed by name) instead of passing them silently."""
    d = 6
    m = TinySplitBridge(d).double()
    with torch.no_grad():
        m.P_p.weight.zero_()
        m.P_h.weight.copy_(torch.eye(d, dtype=torch.float64))
        m.P_h.bias.zero_()
        m.g.fill_(1.0)
    params = {n: p for n, p in trainable_params(m).items() if n != "unused"}
    report = gradient_audit(_bridge_loss(m, d, seed=3), params, seed=2)
    print("\n" + report.summary())
    for name in ("P_p.weight", "P_h.weight", "P_h.bias"):
        assert report.tensors[name].status == "ok", report.tensors[name]
    assert report.failures == {"g": "zero_gradient", "ln.weight": "zero_gradient", "ln.bias": "zero_gradient"}
    allowed = gradient_audit(
        _bridge_loss(m, d, seed=3), params, seed=2, allow_zero_gradient=["g", "ln.weight", "ln.bias"]
    )
    assert allowed.passed


def test_gradient_audit_catches_perturbing_a_copy_and_detached_use():
    d = 4
    w = nn.Parameter(torch.randn(d, d, dtype=torch.float64))
    v = nn.Parameter(torch.randn(d, dtype=torch.float64))
    frozen_copy = w.detach().clone().requires_grad_(False)
    x = torch.randn(5, d, dtype=torch.float64)

    # (1) autograd sees w, but the forward that the FD probe evaluates reads a cached copy
    calls = {"n": 0}

    def loss_copy():
        calls["n"] += 1
        weight = w if calls["n"] == 1 else frozen_copy  # a stale copy after the first call
        return ((x @ weight) ** 2).sum() + (v**2).sum()

    rep = gradient_audit(loss_copy, {"w": w, "v": v}, seed=0)
    assert rep.tensors["w"].status == "perturbation_ineffective"
    assert rep.tensors["v"].status == "ok"

    # (2) the forward uses v only through .detach(): FD moves, autograd says None
    def loss_detached():
        return ((x @ w) ** 2).sum() + (v.detach() ** 2).sum()

    rep = gradient_audit(loss_detached, {"w": w, "v": v}, seed=0)
    assert rep.failures == {"v": "autograd_disconnected"}

    # (3) a wrong hand-written backward (custom Function with a gradient off by 2x)
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t * t

        @staticmethod
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return g * t  # should be 2 * g * t

    rep = gradient_audit(lambda: Square.apply(v).sum() + ((x @ w) ** 2).sum(), {"w": w, "v": v}, seed=0)
    assert rep.failures == {"v": "mismatch"} and rep.tensors["v"].max_rel_error == pytest.approx(0.5, rel=1e-3)

    # (4) frozen tensor named as trainable
    f = nn.Parameter(torch.randn(3, dtype=torch.float64), requires_grad=False)
    rep = gradient_audit(lambda: ((x @ w) ** 2).sum() + f.sum(), {"w": w, "f": f}, seed=0)
    assert rep.failures == {"f": "frozen"}


def test_gradient_audit_is_seeded_and_restores_float32_bits():
    torch.manual_seed(1)
    m = TinySplitBridge(5)  # float32: looser default rtol
    with torch.no_grad():
        for prm in m.parameters():
            prm.add_(0.1 * torch.randn_like(prm))
    params = {n: p for n, p in trainable_params(m).items() if n != "unused"}
    before = _snapshot(params)
    gen = torch.Generator().manual_seed(0)
    h, p = torch.randn(2, 5, generator=gen), torch.randn(2, 5, generator=gen)
    r1 = gradient_audit(lambda: (m(h, p) ** 2).sum(), params, seed=4, eps=1e-2)
    r2 = gradient_audit(lambda: (m(h, p) ** 2).sum(), params, seed=4, eps=1e-2)
    assert _bit_identical(before, _snapshot(params))
    assert [pr.index for t in r1.tensors.values() for pr in t.probes] == [
        pr.index for t in r2.tensors.values() for pr in t.probes
    ]
    assert r1.passed, r1.summary()


# ============================================================================= the real split bridge


@pytest.fixture
def real_bridge():
    from arms.hf.bridge_split import SplitBridge

    return SplitBridge(8).double()


def _real_bridge_loss(bridge, seed=0, d=8):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(2, 3, d, generator=gen, dtype=torch.float64)
    p = torch.randn(2, 3, d, generator=gen, dtype=torch.float64)
    proj = torch.randn(d, 4, generator=gen, dtype=torch.float64)
    return lambda: ((bridge(h, p) @ proj) ** 2).sum()


def test_gradient_audit_on_real_split_bridge_at_init(real_bridge):
    params = trainable_params(real_bridge)
    before = _snapshot(params)
    report = gradient_audit(_real_bridge_loss(real_bridge), params, seed=0)
    print("\n[real SplitBridge, init]\n" + report.summary())
    assert _bit_identical(before, _snapshot(params))
    for name in ("P_p.weight", "P_h.weight", "P_h.bias"):
        assert report.tensors[name].status == "ok" and report.tensors[name].max_rel_error < 1e-6
    # at init z = h, so g and the LayerNorm receive exactly zero gradient
    zero = {n for n, st in report.failures.items() if st == "zero_gradient"}
    assert set(report.failures) == zero and zero <= {"g", "norm.weight", "norm.bias"}
    assert gradient_audit(_real_bridge_loss(real_bridge), params, seed=0, allow_zero_gradient=zero).passed


def test_gradient_audit_on_real_split_bridge_off_init_and_bypassed_tensor(real_bridge):
    torch.manual_seed(3)
    with torch.no_grad():
        for prm in real_bridge.parameters():
            prm.add_(0.1 * torch.randn_like(prm))
    real_bridge.extra = nn.Parameter(torch.randn(8, dtype=torch.float64))  # registered, never read
    params = trainable_params(real_bridge)
    before = _snapshot(params)
    report = gradient_audit(_real_bridge_loss(real_bridge, seed=1), params, n_probes=3, seed=5)
    print("\n[real SplitBridge, off init]\n" + report.summary())
    assert _bit_identical(before, _snapshot(params))
    assert report.failures == {"extra": "bypassed"}
    assert all(t.max_rel_error < 1e-6 for n, t in report.tensors.items() if n != "extra")


@pytest.mark.parametrize("kind", ["adamw", "muon"])
def test_update_audit_on_real_split_bridge_groups(real_bridge, kind):
    b = real_bridge
    opt = build_optimizer(
        {"P_p": [b.P_p.weight], "P_h": [b.P_h.weight, b.P_h.bias], "rest": [b.g, *b.norm.parameters()]},
        kind=kind,
        lr=1e-3,
        group_lr_multipliers={"P_p": 0.1},
    )
    loss = _real_bridge_loss(b, seed=2)

    def step():
        opt.zero_grad()
        loss().backward()
        opt.step()

    report = update_audit(
        dict(b.named_parameters()),
        step,
        {"P_p": ["P_p.weight"], "P_h": ["P_h.weight"]},
        {"P_p": 1e-4, "P_h": 1e-3},
        optimizer=opt,
    )
    print(f"\n[real SplitBridge, {kind}]\n{report.summary()}")
    assert report.passed
