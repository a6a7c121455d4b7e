"""Cached answer-only re-entry: the same readouts and gradients as the uncached forward, for less work.

With ``reentry: answer`` loops after the first (the second for the adapter arm) run the answer
position alone against the prompt's keys and values cached by the base's own attention
(``arms.model.live_rows``). Tolerance: the cached and uncached forwards do the same arithmetic
in a different shape (one query row instead of a whole sequence; a [B, 1, H] matmul instead of
[B, S, H]), which changes BLAS blocking and reduction order, so the results differ in the last
bits of fp32: observed max |diff| ~2e-7 on the tiny model's readouts (|x| < 1) and ~3e-6 on its
states, against TOL = 1e-5 absolute and relative; SmolLM2 (30 layers, logits up to ~31) uses the
surgery tests' 1e-4. Loop 1 (the loop that fills the cache) runs the same shapes and is compared
bit for bit.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from arms.model.budgets import apply_adapter_budget
from arms.model.recurrent import RecurrentLM

try:
    from model_fixtures import ATTN_IMPLEMENTATIONS, left_padded_batch, smollm2, tiny_qwen2
except ImportError:  # pragma: no cover
    from model_fixtures import ATTN_IMPLEMENTATIONS, left_padded_batch, smollm2, tiny_qwen2  # noqa: F401

pytestmark = pytest.mark.models

LENGTHS = [7, 12, 3, 12, 9]  # rows 1 and 3 unpadded, the others left-padded
TOL = dict(atol=1e-5, rtol=1e-5)


def _perturb(tensors, seed=1, scale=0.05):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in tensors:
            p.add_(scale * torch.randn(p.shape, generator=g))


def _answer_rlm(attn="eager", adapter=False):
    model = tiny_qwen2(attn)
    rlm = RecurrentLM.build(model, split=(1, 5), bridge="split", reentry="answer")
    if adapter:
        rlm = apply_adapter_budget(rlm, rank=4, alpha=8, seed=0)
        _perturb(rlm.lora_parameters(), seed=2)
    _perturb(rlm.bridge.parameters())
    return model, rlm.eval()


def _block_query_lengths(model, rlm, run):
    """The sequence length each block pass ran on (a hook on the block's first layer)."""
    lengths = []
    layer = model.model.layers[rlm.surgery.block_idx[0]]
    handle = layer.register_forward_hook(lambda module, args, out: lengths.append(args[0].shape[1]))
    try:
        run()
    finally:
        handle.remove()
    return lengths


@pytest.mark.parametrize("attn", ATTN_IMPLEMENTATIONS)
@pytest.mark.parametrize("adapter", [False, True], ids=["full-block", "adapter"])
def test_cached_readouts_states_and_gradients_equal_the_uncached_forward(attn, adapter):
    model, rlm = _answer_rlm(attn, adapter)
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    weights = [
        model.model.layers[2].mlp.up_proj.weight,  # the block
        model.model.layers[0].self_attn.q_proj.weight,  # the prelude: reached only through the cached prompt
        rlm.bridge.P_h.weight,
        *(rlm.lora_parameters()[:1] if adapter else []),
    ]
    for w in weights:
        w.requires_grad_(True)
    plain, plain_states = rlm(ids, mask, loops=6, cache_prompt=False, return_states=True)
    cached, cached_states = rlm(ids, mask, loops=6, return_states=True)
    first = 2 if adapter else 1  # loops up to the one that fills the cache run the same shapes: bit for bit
    assert torch.equal(cached[:first], plain[:first])
    assert torch.allclose(cached, plain, **TOL), (cached - plain).abs().max()
    assert torch.allclose(cached_states, plain_states, **TOL)
    assert not torch.allclose(cached[5], cached[1], atol=1e-3)  # later loops really move
    g_plain = torch.autograd.grad(plain.logsumexp(-1).sum(), weights)
    g_cached = torch.autograd.grad(cached.logsumexp(-1).sum(), weights)
    for a, b in zip(g_plain, g_cached):
        assert b.abs().sum() > 0 and torch.allclose(a, b, atol=1e-5, rtol=1e-4), (a - b).abs().max()


def test_later_loops_run_the_answer_position_alone():
    model, rlm = _answer_rlm()
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    width = ids.shape[1]
    with torch.no_grad():
        cached = _block_query_lengths(model, rlm, lambda: rlm(ids, mask, loops=5))
        plain = _block_query_lengths(model, rlm, lambda: rlm(ids, mask, loops=5, cache_prompt=False))
    assert cached == [width, 1, 1, 1, 1]
    assert plain == [width] * 5
    _, adapter_rlm = _answer_rlm(adapter=True)
    with torch.no_grad():  # the adapter arm's loop 1 runs without the adapter: its prompt repeats from loop 2
        lengths = _block_query_lengths(adapter_rlm.base, adapter_rlm, lambda: adapter_rlm(ids, mask, loops=5))
    assert lengths == [width, width, 1, 1, 1]


def test_rows_stop_at_their_depth_under_the_cache():
    model, rlm = _answer_rlm("sdpa")
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    depths = torch.tensor([2, 4, 1, 3, 6])
    plain, plain_states = rlm(ids, mask, loops=6, depths=depths, cache_prompt=False, return_states=True)
    cached, cached_states = rlm(ids, mask, loops=6, depths=depths, return_states=True)
    inside = torch.arange(1, 7)[:, None] <= depths[None, :]
    assert torch.allclose(cached, plain, **TOL) and torch.allclose(cached_states, plain_states, **TOL)
    assert not cached[~inside].any()  # past the depth: zeros, as uncached
    w = model.model.layers[3].self_attn.v_proj.weight
    g_plain = torch.autograd.grad(plain[inside].logsumexp(-1).sum(), [w])[0]
    g_cached = torch.autograd.grad(cached[inside].logsumexp(-1).sum(), [w])[0]
    assert torch.allclose(g_plain, g_cached, atol=1e-5, rtol=1e-4)
    with torch.no_grad():  # every row done before the last loops: zeros, no error
        beyond = rlm(ids, mask, loops=8, depths=depths)
    assert not beyond[6:].any()


def test_read_at_computes_only_the_named_loops():
    model, rlm = _answer_rlm()
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    paper = RecurrentLM.build(tiny_qwen2(), split=(1, 5), bridge="split").eval()  # reentry: all
    with torch.no_grad():
        for net in (rlm, paper):
            every = net(ids, mask, loops=6)
            assert torch.allclose(net(ids, mask, loops=6, read_at=[6])[0], every[5], **TOL)
            assert torch.allclose(net(ids, mask, loops=6, read_at=(2, 5)), every[[1, 4]], **TOL)
    coda_calls = []
    handle = paper.base.model.layers[5].register_forward_hook(lambda *a: coda_calls.append(1))
    try:
        with torch.no_grad():
            paper(ids, mask, loops=6, read_at=[6])
    finally:
        handle.remove()
    assert len(coda_calls) == 1  # the paper's bridge: the coda runs once when one loop is read
    with pytest.raises(ValueError, match="read_at"):
        rlm(ids, mask, loops=3, read_at=[4])


def test_the_cache_is_used_only_where_it_applies():
    model, rlm = _answer_rlm()
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    # the same rows right-padded: the answer is not the last column
    shifts = [int(n) for n in mask.sum(1)]
    right_ids = torch.stack([row.roll(n) for row, n in zip(ids, shifts)])
    right_mask = torch.stack([row.roll(n) for row, n in zip(mask, shifts)])
    assert right_mask[:, 0].all() and not right_mask[:, -1].all()
    with torch.no_grad():
        lengths = _block_query_lengths(model, rlm, lambda: rlm(right_ids, right_mask, loops=3))
        assert lengths == [ids.shape[1]] * 3  # uncached, still correct:
        assert torch.allclose(rlm(right_ids, right_mask, loops=3), rlm(ids, mask, loops=3), **TOL)
        with pytest.raises(ValueError, match="cache_prompt needs"):
            rlm(right_ids, right_mask, loops=3, cache_prompt=True)
    readouts = rlm(ids, mask, loops=4, no_grad_loops=1)  # truncated backprop: uncached, same values
    assert torch.allclose(readouts.detach(), rlm(ids, mask, loops=4).detach(), **TOL)
    paper = RecurrentLM.build(tiny_qwen2(), split=(1, 5), bridge="split")
    with pytest.raises(ValueError, match="cache_prompt needs"):
        paper(ids, mask, loops=2, cache_prompt=True)


@pytest.mark.slow
def test_smollm2_cached_answer_reentry_equals_uncached(smollm2):
    model, tokenizer = smollm2
    model.set_attn_implementation("sdpa")
    tokenizer.padding_side = "left"
    prompts = ["Start value: B\nApply f exactly 3 times.\nAnswer:", "The capital of France is", "A -> C\nB -> A"]
    enc = tokenizer(prompts, return_tensors="pt", padding=True)
    assert (enc["attention_mask"] == 0).any()
    rlm = RecurrentLM.build(model, split=(8, 22), bridge="split", reentry="answer")
    _perturb(rlm.bridge.parameters(), scale=0.01)
    rlm.eval()
    ids, mask = enc["input_ids"], enc["attention_mask"]
    plain = rlm(ids, mask, loops=4, cache_prompt=False)
    cached = rlm(ids, mask, loops=4)
    assert torch.equal(cached[0], plain[0])
    assert torch.allclose(cached, plain, atol=1e-4, rtol=1e-4), (cached - plain).abs().max()
    w = model.model.layers[10].mlp.down_proj.weight
    g_plain = torch.autograd.grad(plain[1:].logsumexp(-1).sum(), [w])[0]
    g_cached = torch.autograd.grad(cached[1:].logsumexp(-1).sum(), [w])[0]
    assert g_cached.abs().sum() > 0
    assert torch.allclose(g_plain, g_cached, atol=1e-4, rtol=1e-3), (g_plain - g_cached).abs().max()
