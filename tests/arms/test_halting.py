"""The halting head's objectives against a reference computation written out loop by loop, and a halting stage
that trains the head alone on the frozen block."""

from __future__ import annotations

import math

import pytest
import torch
from test_runtime_mapping import runtime_of

from arms.train.halting import geometric_prior, halting_log_distribution, ponder_loss, supervised_loss
from ledger.rows.tasks import generate_rule_chasing


def reference_ponder(lambdas, losses, prior, beta):
    """PonderNet written as the paper states it, with plain floats: p_t = lambda_t prod_{j<t}(1 - lambda_j),
    lambda_K = 1; loss = sum_t p_t L_t + beta KL(p || geometric(prior) truncated at K and renormalised)."""
    loops, rows = len(lambdas), len(lambdas[0])
    total = 0.0
    for b in range(rows):
        p, survive = [], 1.0
        for t in range(loops):
            lam = 1.0 if t == loops - 1 else lambdas[t][b]
            p.append(survive * lam)
            survive *= 1 - lam
        g = [prior * (1 - prior) ** t for t in range(loops)]
        g = [x / sum(g) for x in g]
        expected = sum(p[t] * losses[t][b] for t in range(loops))
        kl = sum(p[t] * math.log(p[t] / g[t]) for t in range(loops) if p[t] > 0)
        total += expected + beta * kl
    return total / rows


def test_pondernet_loss_equals_the_reference_computation() -> None:
    generator = torch.Generator().manual_seed(7)
    lambdas = torch.rand(6, 5, generator=generator, dtype=torch.float64) * 0.9 + 0.05
    losses = torch.rand(6, 5, generator=generator, dtype=torch.float64) * 3
    for prior, beta in ((0.2, 0.01), (0.5, 1.0), (0.05, 0.0)):
        got = ponder_loss(lambdas, losses, prior, beta).item()
        assert got == pytest.approx(reference_ponder(lambdas.tolist(), losses.tolist(), prior, beta), rel=1e-5)


def test_the_halting_distribution_sums_to_one_and_the_supervised_loss_reads_the_rows_depth() -> None:
    lambdas = torch.tensor([[0.1, 0.9], [0.5, 0.5], [0.3, 0.2]], dtype=torch.float64)
    p = halting_log_distribution(lambdas).exp()
    assert p.sum(0).tolist() == pytest.approx([1.0, 1.0])
    assert p[:, 0].tolist() == pytest.approx([0.1, 0.9 * 0.5, 0.9 * 0.5 * 1.0])
    depths = torch.tensor([2, 1])
    assert supervised_loss(lambdas, depths).item() == pytest.approx(-(math.log(0.45) + math.log(0.9)) / 2)
    assert geometric_prior(0.5, 3).tolist() == pytest.approx([4 / 7, 2 / 7, 1 / 7])


def test_gradients_flow_to_lambda_as_the_reference_says() -> None:
    lambdas = torch.tensor([[0.3], [0.6], [0.5]], dtype=torch.float64, requires_grad=True)
    losses = torch.tensor([[2.0], [0.5], [1.0]], dtype=torch.float64)
    ponder_loss(lambdas, losses, 0.3, 0.1).backward()
    eps = 1e-6
    for t in range(2):  # lambda at the last loop is taken as 1: no gradient there
        up, down = lambdas.detach().clone(), lambdas.detach().clone()
        up[t, 0] += eps
        down[t, 0] -= eps
        numeric = (
            reference_ponder(up.tolist(), losses.tolist(), 0.3, 0.1)
            - reference_ponder(down.tolist(), losses.tolist(), 0.3, 0.1)
        ) / (2 * eps)
        assert lambdas.grad[t, 0].item() == pytest.approx(numeric, rel=1e-5)
    assert lambdas.grad[2, 0].item() == 0.0


@pytest.mark.parametrize("objective", ["halting_supervised", "halting_ponder"])
def test_a_halting_stage_trains_the_head_alone_and_checkpoints_carry_it(objective: str, tmp_path) -> None:
    protocol, runtime = runtime_of(
        {
            "bridge": {"kind": "split", "reentry": "answer"},
            "budget": {"kind": "full_block"},
            "halting_head": {"max_loops": 3},
            "stages": [
                {
                    "id": "halt",
                    "objective": objective,
                    "manifest": "train",
                    "steps": 3,
                    "batch_size": 4,
                    "optimizer": {"lr": 0.05},
                },
            ],
        }
    )
    rows = generate_rule_chasing(surface="symbolic", depth_range=(1, 2), rows_per_depth=4, seed=2, split="train")
    before = {name: tensor.clone() for name, tensor in runtime.trainable_state().items()}
    assert any(name.startswith("halting_head.") for name in before)
    runtime.train_stage(protocol.arms[0].stages[0], rows, ("seed",))
    after = runtime.trainable_state()
    for name in before:
        moved = not torch.equal(before[name], after[name])
        assert moved == name.startswith("halting_head."), name
    path = runtime.save(tmp_path / "ckpt.safetensors", {"arm": "X"})
    _, fresh = runtime_of(
        {
            "bridge": {"kind": "split", "reentry": "answer"},
            "budget": {"kind": "full_block"},
            "halting_head": {"max_loops": 3},
        }
    )
    fresh.load(path)
    assert all(torch.equal(fresh.trainable_state()[name], after[name]) for name in after)
