"""`ContinuationScorer.score_at`: a test-recurrence sweep's log-likelihoods read in one forward to the deepest
loop give, bit for bit, what one forward per loop gives, in fewer passes through the block."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from model_fixtures import tiny_qwen2

from arms.model.recurrent import RecurrentLM
from arms.model.scoring import ContinuationScorer

pytestmark = pytest.mark.models

TOKENIZER = SimpleNamespace(pad_token_id=0, bos_token_id=1, eos_token_id=2)
LOOPS = (1, 2, 4)


def _pairs(vocab: int) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(3)
    draw = lambda n: torch.randint(3, vocab, (n,), generator=g).tolist()
    return [(draw(5 + i % 3), draw(1 + i % 4)) for i in range(7)]


def _block_passes(model: RecurrentLM) -> list[int]:
    """A counter of calls to the block's first layer."""
    calls = [0]
    first = model.surgery.block[0]
    first.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


@pytest.mark.parametrize(
    "options,one_pass",
    [({"bridge": "concat", "s0": "random"}, False), ({"bridge": "split"}, True)],
    ids=["design M, random s0: a row per token", "design S: one pass"],
)
def test_a_sweep_in_one_forward_reads_each_loop_as_its_own_forward_does(options, one_pass):
    torch.manual_seed(0)
    model = RecurrentLM.build(tiny_qwen2("sdpa"), split=(2, 4), **options).eval()
    with torch.no_grad():
        for p in model.bridge.parameters():
            p.add_(0.05 * torch.randn_like(p))
    pairs = _pairs(model.base.config.vocab_size)
    calls = _block_passes(model)
    alone = {loop: ContinuationScorer(model, TOKENIZER, loops=loop, batch_size=4).score(pairs) for loop in LOOPS}
    passes_alone, calls[0] = calls[0], 0
    scorer = ContinuationScorer(model, TOKENIZER, loops=max(LOOPS), batch_size=4)
    assert scorer.one_pass is one_pass
    together = scorer.score_at(pairs, LOOPS)
    assert together == alone  # the same floats, bit for bit, and the same greedy flags
    if one_pass:  # every position's readout: a forward per loop, as before
        assert calls[0] == passes_alone
    else:  # a forward per batch to loop 4 instead of one to each of 1, 2 and 4
        assert calls[0] * sum(LOOPS) == passes_alone * max(LOOPS)


def test_loops_a_model_cannot_read_are_refused():
    model = tiny_qwen2("sdpa")
    scorer = ContinuationScorer(model, TOKENIZER, loops=1)
    with pytest.raises(ValueError, match="loop 1 alone"):
        scorer.score_at(_pairs(model.config.vocab_size), (1, 2))
