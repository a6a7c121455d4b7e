"""Training budgets (arms/model/budgets.py): full-block freezing, the LoRA adapter arm,
loop 1 without the adapter, unload restoring the base bit for bit, the merged copy.

Tiny random Qwen2 (6 layers, split (2, 4)), fp32, eval mode, seeded; one slow test
on the real SmolLM2-135M weights (session fixture from model_fixtures).
Tolerance merged vs unmerged: atol=rtol=1e-5 (W x + s B(A x) vs (W + s B A) x,
fp32 rounding only; observed max |diff| ~2e-7 on the tiny model).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from arms.model import accounting
from arms.model.budgets import (
    AdapterRecurrentLM,
    adapters_disabled,
    apply_adapter_budget,
    apply_full_block_budget,
    lora_layers,
    merged_block_copy,
    state_dict_sha256,
    trainable_parameter_count,
    unload_adapter,
)
from arms.model.recurrent import RecurrentLM, positions_from_mask
from arms.train.optim import build_optimizer

try:
    from model_fixtures import left_padded_batch, smollm2, tiny_qwen2
except ImportError:  # pragma: no cover
    from model_fixtures import left_padded_batch, smollm2, tiny_qwen2  # noqa: F401

pytestmark = pytest.mark.models

SPLIT = (2, 4)
LENGTHS = [7, 12, 3, 12]
MERGE_TOL = dict(atol=1e-5, rtol=1e-5)


def _base_last_logits(model, ids, mask):
    with torch.no_grad():
        return model(
            input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask), logits_to_keep=1
        ).logits[:, -1]


def _perturb(params, seed=1, scale=0.1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.add_(scale * torch.randn(p.shape, generator=g))


def _tiny_rlm(reentry="all", **kw):
    model = tiny_qwen2(**kw)
    return model, RecurrentLM.build(model, split=SPLIT, bridge="split", reentry=reentry).eval()


# ----------------------------------------------------------------------------- full block


def test_full_block_budget_freezes_all_but_block_and_bridge():
    model, rlm = _tiny_rlm()
    groups = apply_full_block_budget(rlm)
    assert list(groups) == ["block", "bridge_p", "bridge_h", "bridge_rest"]
    bridge = rlm.bridge
    assert groups["bridge_p"] == [bridge.P_p.weight]
    assert groups["bridge_h"][0] is bridge.P_h.weight and groups["bridge_h"][1] is bridge.P_h.bias
    assert {id(p) for p in groups["bridge_rest"]} == {id(bridge.norm.weight), id(bridge.norm.bias), id(bridge.g)}

    block_ids = {id(p) for i in range(*SPLIT) for p in model.model.layers[i].parameters()}
    assert {id(p) for p in groups["block"]} == block_ids
    for name, p in model.named_parameters():
        in_block = any(name.startswith(f"model.layers.{i}.") for i in range(*SPLIT))
        assert p.requires_grad == in_block, name
    # tied embeddings: lm_head is the same tensor as embed_tokens and frozen with it
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert not model.lm_head.weight.requires_grad
    assert all(p.requires_grad for p in bridge.parameters())

    # whole, distinct leaf tensors: the optimiser's validation accepts them
    all_ids = [id(p) for ps in groups.values() for p in ps]
    assert len(all_ids) == len(set(all_ids))
    build_optimizer(groups, "adamw", lr=1e-3, group_lr_multipliers={"bridge_p": 10.0})
    assert trainable_parameter_count(rlm) == accounting.full_block_budget(rlm.surgery, rlm.bridge)
    assert sum(p.numel() for ps in groups.values() for p in ps) == trainable_parameter_count(rlm)


def test_full_block_budget_untied_head_is_frozen_too():
    model, rlm = _tiny_rlm(tie_word_embeddings=False)
    assert model.lm_head.weight is not model.model.embed_tokens.weight
    apply_full_block_budget(rlm)
    assert not model.lm_head.weight.requires_grad and not model.model.embed_tokens.weight.requires_grad
    assert trainable_parameter_count(rlm) == accounting.full_block_budget(rlm.surgery, rlm.bridge)


# ----------------------------------------------------------------------------- adapter


def test_adapter_targets_exactly_the_block_projections_and_counts_match_accounting():
    model, rlm = _tiny_rlm()
    predicted = accounting.adapter_budget(rlm.surgery, rlm.bridge, r=4)  # before injection (see budgets.py)
    arlm = apply_adapter_budget(rlm, rank=4, alpha=8, seed=0)
    assert isinstance(arlm, AdapterRecurrentLM) and arlm.base is model and arlm.bridge is rlm.bridge

    adapted = {n for n, m in model.named_modules() if m in set(lora_layers(model))}
    expected = {
        f"model.layers.{i}.{p}"
        for i in range(*SPLIT)
        for p in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        )
    }
    assert adapted == expected and predicted["lora_modules"] == len(expected) == 7 * (SPLIT[1] - SPLIT[0])

    # every pretrained weight frozen; LoRA A/B and the bridge trainable; B starts at zero
    for name, p in model.named_parameters():
        assert p.requires_grad == ("lora_" in name), name
    for layer in lora_layers(model):
        assert layer.r["default"] == 4 and layer.scaling["default"] == 2.0
        assert torch.count_nonzero(layer.lora_B["default"].weight) == 0
        assert torch.count_nonzero(layer.lora_A["default"].weight) > 0
    assert all(p.requires_grad for p in rlm.bridge.parameters())
    assert trainable_parameter_count(arlm) == predicted["total"]
    groups = arlm.param_groups()
    assert sum(p.numel() for p in groups["lora"]) == predicted["lora"]
    build_optimizer(groups, "adamw", lr=1e-3)
    split = arlm.param_groups(split_lora=True)
    assert len(split["lora_A"]) == len(split["lora_B"]) == len(expected)


def test_adapter_loop1_is_base_bit_for_bit_after_training_and_later_loops_change():
    model, rlm = _tiny_rlm()
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    base = _base_last_logits(model, ids, mask)
    with torch.no_grad():
        plain = rlm(ids, mask, loops=3)  # untrained bridge, no adapter
    arlm = apply_adapter_budget(rlm, rank=4, alpha=8, seed=0)
    with torch.no_grad():
        untrained = arlm(ids, mask, loops=3)
    assert torch.equal(untrained, plain)  # B = 0: the untrained adapter is the identity

    # a few real optimiser steps on the LoRA tensors only (bridge kept at init)
    opt = torch.optim.AdamW(arlm.param_groups()["lora"], lr=1e-2)
    arlm.train()
    for _ in range(3):
        opt.zero_grad()
        out = arlm(ids, mask, loops=3)
        out[1:].logsumexp(-1).mean().backward()
        opt.step()
    arlm.eval()
    assert all(torch.count_nonzero(layer.lora_B["default"].weight) > 0 for layer in arlm.lora_layers())
    with torch.no_grad():
        trained = arlm(ids, mask, loops=3)
    assert torch.equal(trained[0], base)
    for t in (1, 2):
        assert not torch.allclose(trained[t], plain[t], atol=1e-3), t
    # the adapter is back on after loop 1 (flags restored)
    assert not any(layer.disable_adapters for layer in arlm.lora_layers())


def test_adapters_disabled_does_not_touch_requires_grad():
    _, rlm = _tiny_rlm()
    arlm = apply_adapter_budget(rlm, rank=2, alpha=2, seed=0)
    layers = arlm.lora_layers()
    layers[0].lora_A["default"].weight.requires_grad_(False)  # deliberately frozen
    before = [p.requires_grad for p in arlm.parameters()]
    with adapters_disabled(layers):
        assert all(layer.disable_adapters for layer in layers)
    assert [p.requires_grad for p in arlm.parameters()] == before


def test_unload_restores_the_base_bit_for_bit():
    model, rlm = _tiny_rlm()
    before = state_dict_sha256(model)
    structure = [(n, type(m)) for n, m in model.named_modules()]
    q_before = model.model.layers[2].self_attn.q_proj
    arlm = apply_adapter_budget(rlm, rank=4, alpha=8, seed=0)
    assert state_dict_sha256(model) != before  # LoRA keys present
    _perturb(arlm.lora_parameters())
    arlm.use_merged_block()  # merging the *copy* must not touch the base
    plain = unload_adapter(arlm)
    assert state_dict_sha256(model) == before
    assert [(n, type(m)) for n, m in model.named_modules()] == structure
    assert model.model.layers[2].self_attn.q_proj is q_before
    assert not hasattr(model, "peft_config") and not lora_layers(model)
    assert isinstance(plain, RecurrentLM) and plain.base is model


def test_state_dict_sha256_sees_one_bit():
    model = tiny_qwen2()
    h = state_dict_sha256(model)
    w = model.model.layers[3].mlp.down_proj.weight
    with torch.no_grad():
        w.view(-1).view(torch.int32)[5] ^= 1  # flip the lowest mantissa bit of one weight
    assert state_dict_sha256(model) != h


@pytest.mark.parametrize("reentry", ["all", "answer"])
def test_merged_copy_matches_unmerged_adapter_at_every_loop(reentry):
    model, rlm = _tiny_rlm(reentry)
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    base = _base_last_logits(model, ids, mask)
    arlm = apply_adapter_budget(rlm, rank=4, alpha=8, seed=0)
    assert arlm.reentry == reentry  # the adapter budget keeps the bridge's re-entry (arm E with the option)
    _perturb(arlm.lora_parameters())
    _perturb(rlm.bridge.parameters(), seed=2, scale=0.02)
    live_weight = model.model.layers[2].self_attn.q_proj.base_layer.weight.clone()
    with torch.no_grad():
        unmerged = arlm(ids, mask, loops=4)
        arlm.use_merged_block()
        merged = arlm(ids, mask, loops=4)
        copy_before = arlm._merged
        with arlm.merged_block_off():  # the unmerged loops again, the copy kept for afterwards
            assert not arlm.merged and torch.equal(arlm(ids, mask, loops=4), unmerged)
        assert arlm._merged is copy_before and torch.equal(arlm(ids, mask, loops=4), merged)
    assert torch.equal(merged[0], base) and torch.equal(unmerged[0], base)
    assert torch.allclose(merged, unmerged, **MERGE_TOL), (merged - unmerged).abs().max()
    assert not torch.allclose(merged[1], base, atol=1e-3)
    # the live block stays unmerged; the copy is plain Linears, frozen, distinct tensors
    assert torch.equal(model.model.layers[2].self_attn.q_proj.base_layer.weight, live_weight)
    assert not any(layer.merged for layer in arlm.lora_layers())
    copy = merged_block_copy(arlm)
    assert not lora_layers(copy) and not any(p.requires_grad for p in copy.parameters())
    assert not {id(p) for p in copy.parameters()} & {id(p) for p in model.parameters()}
    # loop 1 of the merged mode runs a view of the live block without PEFT wrappers: the base's own tensors,
    # nothing copied, the live block still wrapped
    view = arlm._plain
    assert not lora_layers(view) and len(lora_layers(arlm.surgery.block)) == len(arlm.lora_layers()) > 0
    view_tensors = {id(p) for p in view.parameters()}
    assert view_tensors <= {id(p) for p in model.parameters()}
    assert view_tensors == {
        id(p) for layer in arlm.surgery.block for n, p in layer.named_parameters() if "lora_" not in n
    }
    # a stale snapshot refuses to run
    with torch.no_grad():
        arlm.lora_parameters()[0].mul_(2.0)
        with pytest.raises(RuntimeError, match="changed"):
            arlm(ids, mask, loops=2)
        arlm.use_merged_block()
        arlm(ids, mask, loops=2)
    arlm.train()
    with pytest.raises(RuntimeError, match="inference"):
        arlm(ids, mask, loops=2)


def test_adapter_budget_refuses_design_m_and_double_injection():
    model = tiny_qwen2()
    m = RecurrentLM.build(model, tuple_=(2, 2, 2), bridge="concat", s0="zeros")
    with pytest.raises(ValueError, match="design S"):
        apply_adapter_budget(m, rank=2, alpha=2)
    _, rlm = _tiny_rlm()
    apply_adapter_budget(rlm, rank=2, alpha=2)
    with pytest.raises(ValueError, match="already"):
        apply_adapter_budget(rlm, rank=2, alpha=2)


# ----------------------------------------------------------------------------- real SmolLM2-135M


@pytest.mark.slow
def test_smollm2_adapter_loop1_is_base_and_unload_restores_hash(smollm2):
    """Real weights, split (8, 22), rank 16: counts, loop-1 identity with a perturbed
    adapter, unload hash. (The merged copy is checked on the tiny model only: merging a
    14-layer copy here costs ~4 s more on 2 cores.)"""
    model, tokenizer = smollm2
    model.set_attn_implementation("sdpa")
    tokenizer.padding_side = "left"
    enc = tokenizer(
        ["The capital of France is", "Start value: B\nApply f exactly 3 times.\nAnswer:"],
        return_tensors="pt",
        padding=True,
    )
    ids, mask = enc["input_ids"], enc["attention_mask"]
    grads = {n: p.requires_grad for n, p in model.named_parameters()}
    before = state_dict_sha256(model)
    base = _base_last_logits(model, ids, mask)
    rlm = RecurrentLM.build(model, split=(8, 22), bridge="split").eval()
    predicted = accounting.adapter_budget(rlm.surgery, rlm.bridge, r=16)
    arlm = apply_adapter_budget(rlm, rank=16, alpha=32, seed=0)
    try:
        assert predicted["lora_modules"] == 7 * 14 == len(arlm.lora_layers())
        assert trainable_parameter_count(arlm) == predicted["total"]
        _perturb(arlm.lora_parameters(), scale=0.02)
        with torch.no_grad():
            out = arlm(ids, mask, loops=2)
        assert torch.equal(out[0], base)
        assert not torch.allclose(out[1], base, atol=1e-2)
    finally:
        unload_adapter(arlm)
        for n, p in model.named_parameters():  # the fixture is shared by the session
            p.requires_grad_(grads[n])
    assert state_dict_sha256(model) == before


def test_adapter_param_groups_leave_out_a_frozen_bridge():
    _, rlm = _tiny_rlm()
    arlm = apply_adapter_budget(rlm, rank=2, alpha=2, seed=0)
    rlm.bridge.requires_grad_(False)
    groups = arlm.param_groups()
    assert list(groups) == ["lora"]
    assert trainable_parameter_count(arlm) == sum(p.numel() for p in groups["lora"])
