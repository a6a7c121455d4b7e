"""The looped block under ``torch.compile`` computes what the eager block computes (``ledger run --compile``,
on by default on a CUDA GPU): readouts, gradients and a trained stage, on the CPU's inductor backend.

Compiling takes about a minute on two cores, so the equivalence tests are in the long suite; the fallback
(a compiler that fails leaves the block as it was) is checked in the default one.
"""

from __future__ import annotations

import copy

import pytest
import torch
from model_fixtures import left_padded_batch, tiny_qwen2
from test_bf16_training import ARMS, _runtime

from arms.model.recurrent import RecurrentLM
from ledger.rows.tasks import generate_rule_chasing

pytestmark = pytest.mark.models


@pytest.mark.long
def test_the_compiled_block_reads_and_trains_as_the_eager_one() -> None:
    torch.manual_seed(0)
    model = tiny_qwen2(attn="sdpa")
    eager = RecurrentLM.build(model, split=(2, 4), bridge="split")
    compiled = copy.deepcopy(eager)
    compiled.compile_block()
    layers = compiled.surgery.decoder.layers
    assert all(layers[i]._compiled_call_impl is not None for i in compiled.surgery.block_idx)
    ids, mask = left_padded_batch([5, 7, 3, 7], model.config.vocab_size)
    depths = [2, 4, 1, 3]  # rows leave as their depth passes: the batch shrinks inside the loop
    readouts = [lm(ids, mask, loops=4, depths=depths) for lm in (eager, compiled)]
    assert torch.allclose(readouts[0], readouts[1], atol=1e-5, rtol=1e-5)
    for out in readouts:
        out.logsumexp(-1).sum().backward()
    for (name, a), (_, b) in zip(eager.named_parameters(), compiled.named_parameters()):
        if a.grad is not None:
            scale = a.grad.abs().max().clamp_min(1e-6)
            assert (a.grad - b.grad).abs().max() / scale < 1e-3, name
    # another shape, fewer rows: no recompilation is needed for the answer to stay the same
    ids, mask = left_padded_batch([9, 2, 6], model.config.vocab_size, seed=1)
    with torch.no_grad():
        assert torch.allclose(eager(ids, mask, loops=3), compiled(ids, mask, loops=3), atol=1e-5, rtol=1e-5)


@pytest.mark.long
def test_a_stage_trained_compiled_follows_the_eager_losses() -> None:
    rows = generate_rule_chasing(surface="symbolic", depth_range=(1, 3), rows_per_depth=4, seed=2, split="train")
    losses = []
    for compile_it in (False, True):
        protocol, runtime = _runtime(ARMS["full_block"])
        runtime.model.float()
        if compile_it:
            assert runtime.compile_loop() == (True, "")
        trace: list[float] = []
        runtime.train_stage(
            protocol.arms[0].stages[0], rows, ("seed",), progress=lambda _, loss, t=trace: t.append(loss)
        )
        losses.append(trace)
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)


def test_a_compiler_that_fails_leaves_the_block_uncompiled(monkeypatch) -> None:
    _, runtime = _runtime(ARMS["full_block"])

    def broken(self):
        raise RuntimeError("no C++ compiler found\nmore detail")

    monkeypatch.setattr(RecurrentLM, "compile_block", broken)
    assert runtime.compile_loop() == (False, "RuntimeError: no C++ compiler found")
    layers = runtime.model.surgery.decoder.layers
    assert all(layers[i]._compiled_call_impl is None for i in runtime.model.surgery.block_idx)
    assert all(p.grad is None for p in runtime.model.parameters())
    _, dense = _runtime(ARMS["dense"])
    assert dense.compile_loop() == (False, "")  # one pass: no loop to compile
