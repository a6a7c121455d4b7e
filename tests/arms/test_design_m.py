"""Design M's training path: the sampler, truncated backprop, the concat options, FLOPs by the seed's rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from arms.bases.builtin import tiny_random_base
from arms.model.accounting import count_parameters
from arms.model.flops import recurrent_counts
from arms.model.recurrent import RecurrentLM
from arms.train.language import encode_documents, next_token_loss, token_nats
from arms.train.recurrence import PoissonLognormalSampler, split_no_grad, stage_recurrence, step_seed
from ledger.protocol.training import PoissonLognormalRecurrence

BASE = "builtin:tiny-qwen2?hidden=16&layers=6&heads=2&kv_heads=1&intermediate=32"


def seed_sampler(k: float, s: int, sigma: float, seed: int, step: int) -> int:
    """The seed's sampler written out from SPEC section 2, independently of arms/train/recurrence.py."""
    t = max(k - s, 0)
    mu = math.log(t + s) - sigma**2 / 2
    rng = np.random.Generator(np.random.PCG64(step_seed(seed, step)))
    return int(rng.poisson(rng.lognormal(mu, sigma))) + 1


@pytest.mark.parametrize(("k", "s"), [(16, 8), (32, 8), (4, 8), (6, 4)])
def test_published_sampler_matches_an_independent_implementation_and_its_mean(k, s):
    sampler = PoissonLognormalSampler(k, 0.5, s, seed=7)
    draws = [sampler.sample(step) for step in range(6000)]
    assert draws == [seed_sampler(k, s, 0.5, 7, step) for step in range(6000)]
    mean, se = float(np.mean(draws)), float(np.std(draws)) / math.sqrt(len(draws))
    assert sampler.true_mean() == max(k, s) + 1  # the offset: E[r] = k + 1, and s + 1 below s
    assert abs(mean - sampler.true_mean()) < 4 * se
    grad = [split_no_grad(r, s)[1] for r in draws]
    assert abs(np.mean(grad) - sampler.true_mean_grad_iters()) < 4 * np.std(grad) / math.sqrt(len(grad)) + 1e-9
    assert all(a + b == r and b == min(s, r) for r in draws for a, b in [split_no_grad(r, s)])


@pytest.mark.parametrize("k", [1.0, 2.5, 4.0, 12.0])
def test_corrected_sampler_has_mean_k(k):
    sampler = PoissonLognormalSampler(k, 0.5, 8, seed=3, offset="corrected")
    draws = [sampler.sample(step) for step in range(6000)]
    assert sampler.true_mean() == pytest.approx(k)
    assert abs(np.mean(draws) - k) < 4 * (np.std(draws) + 1e-9) / math.sqrt(len(draws)) + 1e-9
    assert min(draws) >= 1


def test_stage_draws_follow_the_curriculum_and_are_reproducible():
    spec = PoissonLognormalRecurrence(
        kind="poisson_lognormal",
        mean=8,
        backprop_depth=4,
        offset="corrected",
        curriculum="linear",
        curriculum_start=1,
        curriculum_fraction=0.5,
        backprop_curriculum="linear",
        backprop_start=1,
    )
    draws = [stage_recurrence(spec, step, 100, seed=11) for step in range(100)]
    assert draws == [stage_recurrence(spec, step, 100, seed=11) for step in range(100)]  # a resume draws the same
    assert draws[0].mean == 1 and draws[25].mean == pytest.approx(4.5) and draws[99].mean == 8
    assert all(d.grad_loops <= d.loops and d.grad_loops <= 4 for d in draws)
    assert draws[0].grad_loops == 1  # the backprop depth ramps too
    early, late = np.mean([d.loops for d in draws[:20]]), np.mean([d.loops for d in draws[60:]])
    assert early < late


def test_a_published_curriculum_below_the_backprop_depth_is_refused():
    with pytest.raises(ValueError, match="max\\(k, s\\) \\+ 1"):
        PoissonLognormalRecurrence(
            kind="poisson_lognormal", mean=16, backprop_depth=8, curriculum="linear", curriculum_start=2,
            curriculum_fraction=0.5,
        )  # fmt: skip


def _design_m(dtype=torch.float32, **options) -> RecurrentLM:
    model, tokenizer = tiny_random_base(BASE)
    model = model.to(dtype)
    recurrent = RecurrentLM.build(model, tuple_=(2, 2, 1), bridge="concat", **options)
    recurrent._tokenizer = tokenizer
    return recurrent


def _batch(recurrent):
    texts = ["What is the value of 3 + 4 ?", "Amy has 5 points and 2 points"]
    return encode_documents(texts, recurrent._tokenizer, 32, torch.device("cpu"))


def test_truncated_iterations_carry_no_gradient_and_the_rest_match_finite_differences():
    torch.manual_seed(0)
    model = _design_m(torch.float64, init="default", s0="zeros")
    ids, mask = _batch(model)
    weight = model.surgery.block[0].mlp.down_proj.weight
    r, n = 5, 3  # 3 iterations without gradient, 2 with

    # the iterations run without gradient leave no trace: the state entering iteration n + 1 is a constant
    prefix = {}

    def capture(module, inputs, output):
        prefix.setdefault("calls", []).append(inputs[0])

    hook = model.bridge.register_forward_hook(capture)
    loss = next_token_loss(model, ids, mask, loops=r, no_grad_loops=n)
    hook.remove()
    entering = prefix["calls"][n]  # the adapter's state input of iteration n + 1
    assert not entering.requires_grad
    assert all(not state.requires_grad for state in prefix["calls"][: n + 1])
    (grad,) = torch.autograd.grad(loss, [weight])

    # the truncated gradient is the derivative of the last r - n iterations from that fixed state
    def last_iterations(w: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            saved = weight.detach().clone()
            weight.copy_(w)
        try:
            embeds = model.surgery.embed_tokens(ids)
            from arms.model.recurrent import positions_from_mask

            ctx = model._context(embeds, mask, positions_from_mask(mask))
            e = model._run(model.surgery.prelude_idx, embeds, ctx)
            state = entering
            for t in range(n + 1, r + 1):
                state = model._step(t, state, e, ctx)
            hidden = model._run(model.surgery.coda_idx, state, ctx)
            nats, tokens = token_nats(model.surgery.lm_head(model.surgery.norm(hidden)), ids, mask)
            return nats.sum() / tokens.sum()
        finally:
            with torch.no_grad():
                weight.copy_(saved)

    direction = torch.randn_like(weight)
    eps = 1e-3  # the base's RMSNorm computes in fp32 even on fp64 inputs: a larger step, central differences
    with torch.no_grad():
        numeric = (last_iterations(weight + eps * direction) - last_iterations(weight - eps * direction)) / (2 * eps)
    assert float((grad * direction).sum()) == pytest.approx(float(numeric), rel=1e-3, abs=1e-7)

    # and it differs from full backprop through all r iterations, which the same call gives with no_grad_loops=0
    (full,) = torch.autograd.grad(next_token_loss(model, ids, mask, loops=r), [weight])
    assert not torch.equal(full, grad)

    def whole(w):  # full backprop against finite differences of the whole loss
        with torch.no_grad():
            saved = weight.detach().clone()
            weight.copy_(w)
            value = next_token_loss(model, ids, mask, loops=r)
            weight.copy_(saved)
        return value

    with torch.no_grad():
        numeric_full = (whole(weight + eps * direction) - whole(weight - eps * direction)) / (2 * eps)
    assert float((full * direction).sum()) == pytest.approx(float(numeric_full), rel=1e-3, abs=1e-7)


def test_the_initial_state_gets_gradient_only_without_truncation():
    torch.manual_seed(0)
    model = _design_m(init="default", s0="zeros")
    ids, mask = _batch(model)
    seen: dict = {}

    def leaf_s0(module, args):
        if "s0" in seen:
            return None
        seen["s0"] = args[0].detach().clone().requires_grad_(True)  # s0 as a leaf we can ask about
        return (seen["s0"], *args[1:])

    hook = model.bridge.register_forward_pre_hook(leaf_s0)
    next_token_loss(model, ids, mask, loops=3, no_grad_loops=0).backward()
    assert seen["s0"].grad is not None and float(seen["s0"].grad.abs().sum()) > 0
    seen.clear()
    next_token_loss(model, ids, mask, loops=3, no_grad_loops=1).backward()
    hook.remove()
    assert seen["s0"].grad is None  # iteration 1 ran without gradient: nothing flows back to s0


def test_concat_options_reach_the_model():
    default = _design_m(init="default", s0="zeros", s0_sigma=0.25)
    identity = _design_m(init="identity", s0="random", s0_sigma=0.25, block_norms=True)
    hidden = identity.surgery.config.hidden_size
    w = identity.bridge.proj.weight
    assert torch.equal(w[:, :hidden], torch.zeros(hidden, hidden)) and torch.equal(w[:, hidden:], torch.eye(hidden))
    assert not torch.equal(default.bridge.proj.weight[:, hidden:], torch.eye(hidden))
    assert (default.s0, default.s0_sigma, identity.s0) == ("zeros", 0.25, "random")
    assert default.bridge.entry_norm is None and default.bridge.exit_norm is None
    assert type(identity.bridge.entry_norm) is type(identity.surgery.norm)  # the base's own RMSNorm class
    e = torch.randn(1, 3, hidden)
    s0 = identity._initial_state(e, None)
    assert float(s0.std()) == pytest.approx(0.25, rel=0.5) and float(s0.abs().max()) <= 0.75 + 1e-6
    assert torch.equal(s0, identity._initial_state(e, None))  # seeded: evaluation is deterministic
    assert count_parameters(identity.bridge) == count_parameters(default.bridge) + 2 * hidden


def test_flops_follow_the_rule_from_the_layer_shapes():
    model = _design_m(block_norms=True)
    counts = recurrent_counts(model.surgery, model.bridge)
    layer = count_parameters(model.surgery.block[0])  # every layer of the base has the same shape
    hidden = model.surgery.config.hidden_size
    assert counts.once == 3 * layer + hidden  # prelude 2 + coda 1 layers, and the final norm
    assert counts.per_iteration == 2 * layer + 2 * hidden * hidden + 2 * hidden  # block 2, adapter, its norms
    for r, s in [(1, 8), (5, 2), (12, 8)]:
        n, g = max(r - s, 0), min(r, s)
        assert (
            counts.flops_per_token(r, s) == 6 * (counts.once + g * counts.per_iteration) + 2 * n * counts.per_iteration
        )


def test_the_seeds_learning_rates_are_the_defaults():
    from ledger.protocol.training import Optimizer

    assert (Optimizer(kind="muon").lr, Optimizer(kind="adamw").lr, Optimizer(kind="adamw", lr=0.01).lr) == (
        1e-3,
        5e-5,
        0.01,
    )
    assert "lr" in Optimizer(kind="muon").model_dump()  # the canonical form states the rate it ran at


def test_a_mixture_draws_each_example_by_weight_and_by_step():
    from arms.runtime import Mixture, draw_batch

    mixture = Mixture((["a"] * 10, ["b"] * 10), (0.8, 0.2))
    drawn = [row for step in range(200) for row in draw_batch(mixture, 10, "seed", step)]
    assert drawn == [row for step in range(200) for row in draw_batch(mixture, 10, "seed", step)]
    assert 0.75 < drawn.count("a") / len(drawn) < 0.85
