"""A learned halting head (choosing depth, docs/science.md, design S "adaptive depth"; ``ledger/protocol/depth_choice.py``).

The head reads the block state at the answer position of every loop 1..K and gives lambda_t, the probability
of halting at loop t having not halted before; lambda_K is taken as 1, so the halting distribution

    p_t = lambda_t * prod_{j<t} (1 - lambda_j)

sums to one over loops 1..K. Two objectives train it on a frozen installed mechanism (the block's states and
readouts are computed without gradient; only the head learns):

* ``halting_ponder`` (PonderNet, Banino et al. 2021): sum_t p_t * CE(readout_t, answer) + beta * KL(p || g), with
  g the geometric prior g_t = lambda_p (1 - lambda_p)^(t-1), truncated at K and renormalised;
* ``halting_supervised``: -log p_depth, the halting distribution's probability of stopping at the row's own depth.

At evaluation the arm records lambda_t with each loop's reading; the ``halting`` exit rule stops at the first
loop with lambda_t >= its threshold (0.5 by default).
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class HaltingHeadModule(nn.Module):
    """lambda_t = sigmoid(w . layer_norm(state_t) + b), per loop and row."""

    def __init__(self, hidden: int, prior: float):
        super().__init__()
        self.proj = nn.Linear(hidden, 1)
        with torch.no_grad():  # start at the prior's own rate, so an untrained head halts as the prior says
            self.proj.weight.mul_(0.1)
            self.proj.bias.fill_(float(torch.logit(torch.tensor(prior))))

    def forward(self, states: Tensor) -> Tensor:
        """[loops, batch, hidden] block states -> [loops, batch] halting probabilities lambda_t."""
        normed = F.layer_norm(states.float(), states.shape[-1:])
        return torch.sigmoid(self.proj(normed).squeeze(-1))


def halting_log_distribution(lambdas: Tensor) -> Tensor:
    """[loops, batch] lambda_t -> log p_t, with lambda at the last loop taken as 1 (computed in log space)."""
    loops = lambdas.shape[0]
    lam = lambdas.clamp(1e-6, 1 - 1e-6)
    log_halt = torch.log(lam)
    log_go_on = torch.log1p(-lam)
    # log prod_{j<t} (1 - lambda_j): an exclusive cumulative sum
    survived = torch.cat([torch.zeros_like(log_go_on[:1]), torch.cumsum(log_go_on, 0)[:-1]], 0)
    last = torch.zeros_like(log_halt[-1:])  # lambda_K = 1
    return survived + torch.cat([log_halt[: loops - 1], last], 0)


def geometric_prior(prior: float, loops: int) -> Tensor:
    """g_t = lambda_p (1 - lambda_p)^(t-1) for t = 1..loops, renormalised to sum to one."""
    t = torch.arange(loops, dtype=torch.float64)
    g = prior * (1 - prior) ** t
    return (g / g.sum()).float()


def ponder_loss(lambdas: Tensor, step_losses: Tensor, prior: float, beta: float) -> Tensor:
    """PonderNet's loss, averaged over rows: expected per-loop loss under the halting distribution plus beta
    times KL(halting distribution || truncated geometric prior). ``step_losses`` [loops, batch]."""
    log_p = halting_log_distribution(lambdas)
    p = log_p.exp()
    expected = (p * step_losses).sum(0)
    log_g = geometric_prior(prior, lambdas.shape[0]).log().to(lambdas.device).unsqueeze(1)
    kl = (p * (log_p - log_g)).sum(0)
    return (expected + beta * kl).mean()


def supervised_loss(lambdas: Tensor, depths: Tensor) -> Tensor:
    """-log p_depth, averaged over rows (``depths`` [batch], 1-based, at most the loops read)."""
    log_p = halting_log_distribution(lambdas)
    return -log_p.gather(0, (depths.long() - 1).unsqueeze(0)).mean()


# The objectives' entry points (``ledger.protocol.arms.OBJECTIVES``): the head's halting probabilities, the frozen
# readouts restricted to the reader's symbols [loops, batch, n_symbols], the batch, the head's spec.


def ponder_objective(lambdas: Tensor, symbol_logits: Tensor, batch, spec) -> Tensor:
    loops, rows = symbol_logits.shape[:2]
    answers = batch.answers.to(symbol_logits.device).unsqueeze(0).expand(loops, rows)
    step_losses = F.cross_entropy(
        symbol_logits.reshape(loops * rows, -1).float(), answers.reshape(-1), reduction="none"
    )
    return ponder_loss(lambdas, step_losses.view(loops, rows), spec.prior, spec.beta)


def supervised_objective(lambdas: Tensor, symbol_logits: Tensor, batch, spec) -> Tensor:
    return supervised_loss(lambdas, batch.depths.to(lambdas.device))


# -- the runtime's side: attaching the head, a halting stage's loss, the probabilities read at evaluation


def attach_head(model: nn.Module, spec, seed: int) -> list[nn.Parameter]:
    """Give a recurrent model its halting head (a submodule, so checkpoints carry it), seeded on its own."""
    hidden = int(cast(Any, model).base.config.hidden_size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = HaltingHeadModule(hidden, spec.prior)
    device = next(model.parameters()).device
    model.halting_head = head.to(device)
    return list(head.parameters())


def frozen_readouts(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, loops: int, symbol_ids: Tensor):
    """The block's readouts restricted to the symbols and its states at the answer position, loops 1..loops,
    computed without gradient and in eval mode (no dropout: the head learns on the states it will read)."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            readouts, states = model(input_ids, attention_mask, loops=loops, return_states=True)
    finally:
        model.train(was_training)
    return readouts.index_select(-1, symbol_ids.to(readouts.device)), states


def halting_stage_loss(runtime, rows, stage, step: int) -> Tensor:
    """A halting stage's loss for one batch: every row read to the head's max_loops, frozen; the head learns."""
    from arms.train.recurrent import make_recurrent_batch
    from ledger.protocol.arms import OBJECTIVES

    spec = runtime.arm.halting()
    loops = spec.max_loops
    batch = make_recurrent_batch(rows, runtime.reader, device=runtime.device)
    deepest = int(batch.depths.max())
    if deepest > loops:
        raise ValueError(f"a row of depth {deepest} is past the halting head's max_loops {loops}")
    symbol_logits, states = frozen_readouts(
        runtime.model, batch.input_ids, batch.attention_mask, loops, batch.symbol_token_ids
    )
    tokens = batch.attention_mask.sum(1).tolist()
    runtime.record_step(
        step,
        sum(tokens),
        loops=loops,
        grad_loops=0,
        mean=float(loops),
        flops=sum(t * runtime.flops_per_token(loops, 0) for t in tokens),
    )
    lambdas = runtime.model.halting_head(states)
    return OBJECTIVES.implementation(stage.objective)(lambdas, symbol_logits, batch, spec)
