"""Losses, recurrence schedules, curriculum and optimiser-group refusals (arms.train.objectives, arms.train.optim)."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from arms.train.objectives import (
    IGNORE_INDEX,
    anneal_loss,
    anneal_weight,
    encode_path_targets,
    intermediate_loss,
    outcome_loss,
)
from arms.train.optim import GroupedOptimizer, build_optimizer
from arms.train.recurrence import (
    ForcedSchedule,
    PoissonLognormalSampler,
    curriculum_mean,
    run_truncated_recurrence,
    split_no_grad,
    step_seed,
)

pytestmark = pytest.mark.models

BIG = 50.0  # one-hot logit margin: CE ~ (V - 1) * exp(-BIG) ~ 0


def _one_hot_logits(path_targets, depths, loops, n_cls, fill=0.0):
    """Per-loop logits that put all mass on the right symbol at every active cell."""
    B = path_targets.shape[0]
    logits = torch.full((loops, B, n_cls), fill, dtype=torch.float64)
    for b in range(B):
        for t in range(1, int(depths[b]) + 1):
            logits[t - 1, b].zero_()
            logits[t - 1, b, int(path_targets[b, t - 1])] = BIG
    return logits


@pytest.fixture
def batch():
    symbols = list("ABCDEFGHIJKLMNOP")
    paths = [list("BMEK"), list("AC"), list("PONML")]  # depths 3, 1, 4
    targets, answers, depths = encode_path_targets(paths, symbols, n_loops=5)
    return symbols, paths, targets, answers, depths


# ----------------------------------------------------------------------------- losses


def test_encode_path_targets_drops_start_and_pads(batch):
    symbols, _paths, targets, answers, depths = batch
    assert depths.tolist() == [3, 1, 4]
    assert targets.shape == (3, 5)
    assert targets[0, :3].tolist() == [symbols.index(c) for c in "MEK"]
    assert targets[0, 3:].tolist() == [IGNORE_INDEX] * 2
    assert answers.tolist() == [symbols.index(c) for c in "KCL"]


def test_perfect_one_hot_gives_zero_loss(batch):
    symbols, _, targets, answers, depths = batch
    logits = _one_hot_logits(targets, depths, loops=5, n_cls=len(symbols))
    assert intermediate_loss(logits, targets, depths).item() < 1e-15
    assert outcome_loss(logits, answers, depths).item() < 1e-15
    # a wrong loop gives a large loss
    bad = logits.clone()
    bad[0, 0] = bad[0, 0].flip(-1)
    assert intermediate_loss(bad, targets, depths).item() > 1.0


def test_intermediate_loss_masks_loops_beyond_depth(batch):
    symbols, _, targets, _, depths = batch
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 3, len(symbols), generator=gen, dtype=torch.float64, requires_grad=True)
    base = intermediate_loss(logits, targets, depths)
    changed = logits.detach().clone()
    loops = torch.arange(1, 6)[:, None]
    masked = loops > depths[None, :]  # [5, 3]
    changed[masked] = torch.randn(int(masked.sum()), len(symbols), generator=gen, dtype=torch.float64) * 100
    assert intermediate_loss(changed, targets, depths).item() == base.item()
    changed[masked] = float("nan")  # even NaN in a masked cell never reaches value or gradient
    nan_in = changed.clone().requires_grad_(True)
    val = intermediate_loss(nan_in, targets, depths)
    val.backward()
    assert val.item() == base.item() and bool(torch.isfinite(nan_in.grad).all())
    # the padded targets beyond depth are ignored too
    t2 = targets.clone()
    t2[targets == IGNORE_INDEX] = 7
    assert intermediate_loss(logits, t2, depths).item() == base.item()
    # gradient is exactly zero on masked cells, non-zero on active ones
    base.backward()
    g = logits.grad
    assert torch.all(g[masked] == 0)
    assert torch.all(g[~masked].abs().sum(-1) > 0)
    # the mean is over active cells: 3 + 1 + 4 = 8 cells
    ce = torch.nn.functional.cross_entropy
    manual = (
        sum(
            ce(logits[t - 1, b][None], targets[b, t - 1][None]).item()
            for b in range(3)
            for t in range(1, int(depths[b]) + 1)
        )
        / 8
    )
    assert base.item() == pytest.approx(manual, rel=1e-12)


def test_outcome_loss_reads_only_the_depth_loop(batch):
    symbols, _, _, answers, depths = batch
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(5, 3, len(symbols), generator=gen, dtype=torch.float64)
    base = outcome_loss(logits, answers, depths)
    changed = logits.clone()
    for b in range(3):
        for t in range(1, 6):
            if t != int(depths[b]):
                changed[t - 1, b] = torch.randn(len(symbols), generator=gen, dtype=torch.float64) * 100
    assert outcome_loss(changed, answers, depths).item() == base.item()
    manual = np.mean(
        [
            torch.nn.functional.cross_entropy(logits[int(depths[b]) - 1, b][None], answers[b][None]).item()
            for b in range(3)
        ]
    )
    assert base.item() == pytest.approx(manual, rel=1e-12)


def test_losses_refuse_depth_beyond_loops(batch):
    symbols, _, targets, answers, depths = batch
    logits = torch.zeros(3, 3, len(symbols))  # only 3 loops, a row has depth 4
    with pytest.raises(ValueError, match="loops"):
        intermediate_loss(logits, targets, depths)
    with pytest.raises(ValueError, match="loops"):
        outcome_loss(logits, answers, depths)


def test_restrict_to_vocab_columns(batch):
    symbols, _, targets, answers, depths = batch
    V = 40
    cols = torch.arange(10, 10 + len(symbols))
    small = _one_hot_logits(targets, depths, loops=5, n_cls=len(symbols))
    full = torch.full((5, 3, V), -BIG, dtype=torch.float64)
    full[..., cols] = small
    assert intermediate_loss(full, targets, depths, restrict_to=cols).item() < 1e-15
    assert outcome_loss(full, answers, depths, restrict_to=cols).item() < 1e-15


def test_anneal_weight_schedule_and_loss(batch):
    assert anneal_weight(0, 1000, 0.5) == 1.0
    assert anneal_weight(250, 1000, 0.5) == pytest.approx(0.5)
    assert anneal_weight(500, 1000, 0.5) == 0.0  # ramp end
    assert anneal_weight(999, 1000, 0.5) == 0.0
    assert anneal_weight(1000, 1000, 0.5) == 0.0  # end
    assert anneal_weight(0, 1000, 0.0) == 0.0
    ws = [anneal_weight(s, 100, 0.3) for s in range(101)]
    assert all(a >= b for a, b in zip(ws, ws[1:]))
    symbols, _, targets, answers, depths = batch
    logits = torch.randn(5, 3, len(symbols), dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    li, lo = intermediate_loss(logits, targets, depths), outcome_loss(logits, answers, depths)
    for w in (0.0, 0.25, 1.0):
        assert anneal_loss(logits, targets, answers, depths, w).item() == pytest.approx(
            w * li.item() + (1 - w) * lo.item(), rel=1e-12
        )


# ----------------------------------------------------------------------------- recurrence


def test_forced_recurrence():
    fr = ForcedSchedule()
    assert fr.loops([3, 1, 4]) == 4
    assert fr.readout_loops([3, 1, 4]).tolist() == [3, 1, 4]
    assert fr.split(4) == (0, 4)
    with pytest.raises(ValueError):
        fr.loops([0, 2])


@pytest.mark.parametrize("k,s", [(16, 8), (4, 8), (8, 8)])
def test_sampler_empirical_mean_matches_true_mean(k, s):
    sampler = PoissonLognormalSampler(k, sigma=0.5, backprop_depth=s, seed=123)
    draws = np.array([sampler.sample(i) for i in range(4000)])
    assert draws.min() >= 1
    # E[r] = max(k, s) + 1 exactly (k + 1 only when k >= s)
    assert sampler.true_mean() == max(k, s) + 1
    var = max(k, s) + max(k, s) ** 2 * (math.exp(0.25) - 1)  # Var[Poisson-LogNormal] = E[l] + Var[l]
    se = math.sqrt(var / len(draws))
    print(f"k={k} s={s}: empirical mean {draws.mean():.3f} vs true_mean {sampler.true_mean()} (se {se:.3f})")
    assert abs(draws.mean() - sampler.true_mean()) < 5 * se


def test_sampler_grad_iters_mean():
    sampler = PoissonLognormalSampler(16, backprop_depth=8, seed=7)
    draws = np.array([sampler.sample(i) for i in range(3000)])
    assert np.minimum(draws, 8).mean() == pytest.approx(sampler.true_mean_grad_iters(), abs=0.1)


def test_sampler_is_resumable_and_varies_with_step():
    a = PoissonLognormalSampler(16, seed=5)
    b = PoissonLognormalSampler(16, seed=5)
    steps = list(range(1000, 1200))
    ra = [a.sample(i) for i in steps]
    # a resumed run (new instance, steps visited in another order) draws the same r
    rb = {i: b.sample(i) for i in reversed(steps)}
    assert ra == [rb[i] for i in steps]
    assert len(set(ra)) > 5  # different across steps
    c = PoissonLognormalSampler(16, seed=6)
    assert [c.sample(i) for i in steps] != ra  # the base seed matters
    assert step_seed(5, 1) != step_seed(5, 2) and step_seed(5, 1) == step_seed(5, 1)


def test_sampler_mean_override_and_split():
    s = PoissonLognormalSampler(32, backprop_depth=8, seed=0)
    assert s.true_mean(mean=2) == 9.0
    no_grad, grad = s.sample_split(3)
    assert no_grad + grad == s.sample(3)
    assert split_no_grad(20, 8) == (12, 8)
    assert split_no_grad(3, 8) == (0, 3)
    assert split_no_grad(8, 8) == (0, 8)


def test_run_truncated_recurrence_backprops_only_last_s():
    w = torch.tensor(0.9, requires_grad=True)
    calls = []

    def step(x):
        calls.append(torch.is_grad_enabled())
        return x * w + 1.0

    out = run_truncated_recurrence(step, torch.tensor(1.0), r=5, s=2)
    assert calls == [False, False, False, True, True]
    out.backward()
    # d/dw of ((x3 * w + 1) * w + 1) with x3 detached = 2 * x3 * w + 1
    x3 = 1.0
    for _ in range(3):
        x3 = x3 * 0.9 + 1.0
    assert w.grad.item() == pytest.approx(2 * x3 * 0.9 + 1.0)


# ----------------------------------------------------------------------------- curriculum


@pytest.mark.parametrize("kind", ["linear", "one_minus_sqrt"])
def test_curriculum_endpoints_and_monotone(kind):
    total, frac = 1000, 0.25
    vals = [curriculum_mean(s, total, 2, 16, frac, kind) for s in range(total + 1)]
    assert vals[0] == 2
    assert vals[250] == 16
    assert all(v == 16 for v in vals[250:])
    assert all(a <= b for a, b in zip(vals, vals[1:]))
    assert len(set(vals[:251])) > 200  # strictly rising during the ramp


def test_curriculum_shapes():
    lin = curriculum_mean(50, 100, 0, 10, 1.0, "linear")
    oms = curriculum_mean(50, 100, 0, 10, 1.0, "one_minus_sqrt")
    assert lin == pytest.approx(5.0)
    assert oms == pytest.approx(10 * (1 - math.sqrt(0.5)))
    assert all(
        curriculum_mean(s, 100, 0, 10, 1.0, "one_minus_sqrt") <= curriculum_mean(s, 100, 0, 10, 1.0, "linear") + 1e-12
        for s in range(101)
    )
    with pytest.raises(ValueError):
        curriculum_mean(0, 100, 0, 10, 0.5, "cosine")


# ----------------------------------------------------------------------------- optimiser groups


def _params():
    torch.manual_seed(0)
    return (
        torch.nn.Parameter(torch.randn(8, 8)),
        torch.nn.Parameter(torch.randn(8, 8)),
        torch.nn.Parameter(torch.randn(8)),
        torch.nn.Parameter(torch.tensor(1.0)),
    )


def test_build_optimizer_refuses_parameter_in_two_groups():
    a, b, c, _ = _params()
    with pytest.raises(ValueError, match="exactly one group"):
        build_optimizer({"x": [a, c], "y": [b, a]}, lr=1e-3)
    with pytest.raises(ValueError, match="twice"):
        build_optimizer({"x": [a, a]}, lr=1e-3)


def test_build_optimizer_refuses_per_slice_learning_rates():
    a, b, _, _ = _params()
    with pytest.raises(ValueError, match="view/slice"):  # a view of a parameter (non-leaf)
        build_optimizer({"top": [a[:4]], "rest": [b]}, lr=1e-3)
    with pytest.raises(ValueError, match="view/slice"):  # a detached leaf view
        build_optimizer({"top": [a.detach()[:4].requires_grad_()], "all": [b]}, lr=1e-3)
    with pytest.raises(ValueError, match="per-slice"):  # (tensor, index) spec
        build_optimizer({"top": [(a, slice(0, 4))], "all": [b]}, lr=1e-3)
    # a Parameter built over part of another parameter's memory (no _base): storage overlap
    alias = torch.nn.Parameter(a.data[:, :4])
    alias2 = torch.nn.Parameter(torch.Tensor().set_(a.data.untyped_storage(), 0, (2, 8), (8, 1)))
    assert alias2._base is None
    with pytest.raises(ValueError):
        build_optimizer({"p": [alias], "all": [a]}, lr=1e-3)
    with pytest.raises(ValueError, match="shares memory"):
        build_optimizer({"p": [alias2], "all": [a]}, lr=1e-3)
    with pytest.raises(ValueError, match="bare tensor"):
        build_optimizer({"all": a}, lr=1e-3)


def test_build_optimizer_refuses_other_misconfigurations():
    a, _b, _, _ = _params()
    with pytest.raises(ValueError, match="empty"):
        build_optimizer({"x": [a], "y": []}, lr=1e-3)
    with pytest.raises(ValueError, match="unknown groups"):
        build_optimizer({"x": [a]}, lr=1e-3, group_lr_multipliers={"P_p": 0.1})
    frozen = torch.nn.Parameter(torch.randn(3), requires_grad=False)
    with pytest.raises(ValueError, match="requires_grad=False"):
        build_optimizer({"x": [a], "f": [frozen]}, lr=1e-3)
    with pytest.raises(ValueError, match="not a leaf"):
        build_optimizer({"x": [a * 2]}, lr=1e-3)
    with pytest.raises(ValueError, match="positive"):
        build_optimizer({"x": [a]}, lr=1e-3, group_lr_multipliers={"x": 0.0})


def test_build_optimizer_adamw_groups_and_state_roundtrip():
    a, b, c, g = _params()
    opt = build_optimizer(
        {"P_p": [a], "P_h": [b, c], "gate": [g]},
        kind="adamw",
        lr=1e-3,
        weight_decay=0.01,
        group_lr_multipliers={"P_p": 0.1},
    )
    assert isinstance(opt, GroupedOptimizer)
    lrs = {pg["name"]: pg["lr"] for pg in opt.param_groups}
    assert lrs == pytest.approx({"P_p": 1e-4, "P_h": 1e-3, "gate": 1e-3})
    (a.sum() + b.sum() + c.sum() + g).backward()
    opt.step()
    sd = opt.state_dict()
    opt2 = build_optimizer(
        {"P_p": [a], "P_h": [b, c], "gate": [g]},
        kind="adamw",
        lr=1e-3,
        weight_decay=0.01,
        group_lr_multipliers={"P_p": 0.1},
    )
    opt2.load_state_dict(sd)
    assert int(opt2.optimizers["adamw"].state_dict()["state"][0]["step"]) == 1
    opt.set_lr_scale(0.5)
    assert {pg["name"]: pg["lr"] for pg in opt.param_groups} == pytest.approx({"P_p": 5e-5, "P_h": 5e-4, "gate": 5e-4})
    opt.zero_grad()
    assert a.grad is None


def test_build_optimizer_muon_routes_matrices():
    a, b, c, g = _params()
    emb = torch.nn.Parameter(torch.randn(20, 8))
    opt = build_optimizer(
        {"block": [a, c], "bridge": [b, g], "embed_tokens": [emb]},
        kind="muon",
        lr=1e-3,
        weight_decay=0.0,
        group_lr_multipliers={"bridge": 2.0},
        adamw_lr=1e-4,
    )
    assert opt.optimizer_of(a) == "muon" and opt.optimizer_of(b) == "muon"
    assert opt.optimizer_of(c) == "adamw" and opt.optimizer_of(g) == "adamw"
    assert opt.optimizer_of(emb) == "adamw"  # embeddings never go to Muon
    muon_lrs = {pg["name"]: pg["lr"] for pg in opt.optimizers["muon"].param_groups}
    adam_lrs = {pg["name"]: pg["lr"] for pg in opt.optimizers["adamw"].param_groups}
    assert muon_lrs == pytest.approx({"block": 1e-3, "bridge": 2e-3})
    assert adam_lrs == pytest.approx({"block": 1e-4, "bridge": 2e-4, "embed_tokens": 1e-4})
    loss = (a.sum() + b.sum()) ** 2 + (c.sum() + g + emb.sum()) ** 2
    loss.backward()
    before = a.detach().clone()
    opt.step()
    assert not torch.equal(before, a.detach())
    sd = opt.state_dict()
    assert set(sd["optimizers"]) == {"muon", "adamw"}
    opt.load_state_dict(sd)
    with pytest.raises(ValueError, match="saved for"):
        build_optimizer({"x": [a, b, c, g, emb]}, kind="muon", lr=1e-3).load_state_dict(sd)


# ----------------------------------------------------------------------------- properties

from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=200, deadline=None)
@given(r=st.integers(0, 200), s=st.integers(0, 64))
def test_split_no_grad_properties(r, s):
    no_grad, grad = split_no_grad(r, s)
    assert no_grad + grad == r and 0 <= grad <= s and no_grad >= 0


@settings(max_examples=200, deadline=None)
@given(
    step=st.integers(0, 2000),
    total=st.integers(1, 2000),
    start=st.floats(0.5, 8),
    end=st.floats(8, 64),
    fraction=st.floats(0, 1),
    kind=st.sampled_from(["linear", "one_minus_sqrt"]),
)
def test_curriculum_stays_between_endpoints(step, total, start, end, fraction, kind):
    v = curriculum_mean(step, total, start, end, fraction, kind)
    assert start - 1e-9 <= v <= end + 1e-9
    assert v <= curriculum_mean(step + 1, total, start, end, fraction, kind) + 1e-12
