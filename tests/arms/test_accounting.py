"""Parameter and FLOP accounting reproduces the paper's numbers from real module shapes.

The Qwen2.5-0.5B-Instruct-shaped model is built on the meta device: real module
structure and shapes, no 2 GB allocation.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hypothesis import given
from hypothesis import strategies as st

from arms.bases.loading import qwen25_05b_config
from arms.hf.bridge_split import SplitBridge
from arms.model import accounting as acc
from arms.model.recurrent import RecurrentLM
from arms.model.surgery import split_surgery, tuple_surgery

try:  # tests/ is on sys.path under pytest's default import mode
    from model_fixtures import tiny_qwen2
except ImportError:  # pragma: no cover
    from model_fixtures import tiny_qwen2

pytestmark = pytest.mark.models


def _qwen25_on_meta():
    from transformers import Qwen2ForCausalLM

    with torch.device("meta"):
        model = Qwen2ForCausalLM(qwen25_05b_config())
        bridge = SplitBridge(896)
    return model, bridge


@pytest.fixture(scope="module")
def qwen25():
    model, bridge = _qwen25_on_meta()
    return model, split_surgery(model, 6, 18), bridge


def test_base_has_494m_unique_parameters_with_tied_embeddings(qwen25):
    model, _, _ = qwen25
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert acc.count_parameters(model) == 494_032_768
    assert round(acc.count_parameters(model) / 1e6, 1) == 494.0
    # tied: the 151936 x 896 table is counted once, and excluding embeddings drops it once
    assert acc.count_parameters(model, exclude_embeddings=True) == 494_032_768 - 151_936 * 896
    # naive counting through named tensors would double it
    naive = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    assert naive == 494_032_768 + 151_936 * 896


def test_full_block_budget_trains_180_556_929(qwen25):
    model, surgery, bridge = qwen25
    assert acc.count_parameters(bridge) == 1_608_321
    assert acc.count_parameters(surgery.block) == 178_948_608  # "178.9M"
    assert acc.full_block_budget(surgery, bridge) == 180_556_929

    # the same figure from requires_grad flags on base + bridge, as a trainer would set them
    model.requires_grad_(False)
    for layer in surgery.block:
        layer.requires_grad_(True)
    counts = acc.trainable_counts([model, bridge])
    assert counts["trainable"] == 180_556_929
    assert counts["total"] == 494_032_768 + 1_608_321
    assert counts["frozen"] == counts["total"] - counts["trainable"]
    model.requires_grad_(True)


def test_adapter_budget_is_84_lora_modules_and_6_007_425(qwen25):
    _, surgery, bridge = qwen25
    targets = acc.lora_target_modules(surgery)
    assert len(targets) == 84 and {n.split(".")[2] for n, _ in targets} == {str(i) for i in range(6, 18)}
    assert acc.lora_param_count([m for _, m in targets], r=16) == 4_399_104
    budget = acc.adapter_budget(surgery, bridge, r=16)
    assert budget == {"lora_modules": 84, "lora": 4_399_104, "bridge": 1_608_321, "total": 6_007_425}
    assert round(100 * budget["total"] / acc.full_block_budget(surgery, bridge), 1) == 3.3


def test_peft_creates_exactly_the_lora_modules_accounting_predicts():
    peft = pytest.importorskip("peft")
    model, bridge = _qwen25_on_meta()
    surgery = split_surgery(model, 6, 18)
    predicted = {name for name, _ in acc.lora_target_modules(surgery)}
    config = peft.LoraConfig(r=16, target_modules=list(acc.LORA_TARGETS), layers_to_transform=list(surgery.block_idx))
    wrapped = peft.get_peft_model(model, config)
    lora_layers = {
        name.removeprefix("base_model.model."): module
        for name, module in wrapped.named_modules()
        if isinstance(module, peft.tuners.lora.LoraLayer)
    }
    assert set(lora_layers) == predicted and len(lora_layers) == 84
    lora_params = sum(p.numel() for n, p in wrapped.named_parameters() if "lora_" in n)
    assert lora_params == 4_399_104
    trainable = acc.trainable_counts(wrapped)["trainable"]  # peft freezes everything else
    assert trainable == 4_399_104 and trainable + acc.count_parameters(bridge) == 6_007_425


def test_unique_counting_of_shared_modules_and_storage():
    model = tiny_qwen2()
    base = acc.count_parameters(model)
    rlm = RecurrentLM.build(model, split=(2, 4), bridge="split")
    bridge = acc.count_parameters(rlm.bridge)
    # the retrofit references the base: base + bridge, whichever way it is reached
    assert acc.count_parameters(rlm) == base + bridge
    assert acc.count_parameters([rlm, model, rlm.surgery.block[0]]) == base + bridge
    # two Parameter objects over the same memory count once
    w = torch.nn.Parameter(torch.zeros(4, 4))
    a, b = torch.nn.Linear(4, 4, bias=False), torch.nn.Linear(4, 4, bias=False)
    a.weight, b.weight = w, torch.nn.Parameter(w.data)
    assert acc.count_parameters([a, b]) == 16
    # a design-M cut runs fewer layers than it references
    s = tuple_surgery(model, 1, 2, 1)
    per_layer = acc.count_parameters(model.model.layers[0])
    assert acc.count_parameters(s.used_modules()) == base - 2 * per_layer


def test_trainable_counts_follow_requires_grad():
    model = tiny_qwen2()
    total = acc.count_parameters(model)
    model.requires_grad_(False)
    model.model.layers[3].requires_grad_(True)
    counts = acc.trainable_counts(model)
    assert counts == {
        "trainable": acc.count_parameters(model.model.layers[3]),
        "frozen": total - acc.count_parameters(model.model.layers[3]),
        "total": total,
    }


# ----------------------------------------------------------------------------- FLOPs


def test_inference_cost_of_the_split_is_one_plus_t_over_two(qwen25):
    _, surgery, _ = qwen25
    assert [acc.surgery_cost_ratio(surgery, t) for t in (1, 4, 8, 12)] == [1.0, 2.5, 4.5, 6.5]


def test_inference_cost_of_a_tuple_cut_counts_only_layers_it_runs():
    model = tiny_qwen2()
    s = tuple_surgery(model, 1, 2, 1)  # 6 layers, runs 0, 3-4 (T times), 5
    assert acc.surgery_cost_ratio(s, 1) == pytest.approx(4 / 6)
    assert acc.surgery_cost_ratio(s, 3) == pytest.approx(8 / 6)
    # TinyLlama (4, 8, 4) on 22 layers
    assert acc.inference_cost_ratio(22, 8, 16, n_once=8) == pytest.approx((8 + 16 * 8) / 22)


@given(half=st.integers(1, 64), loops=st.integers(1, 64))
def test_half_model_block_costs_one_plus_t_over_two(half, loops):
    assert acc.inference_cost_ratio(2 * half, half, loops) == pytest.approx((1 + loops) / 2)
