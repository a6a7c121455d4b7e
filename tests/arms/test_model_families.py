"""A model family is one entry (``arms.model.families``, ``ledger.protocol.families``): what its base's forward
does around the layers, done by the loop too. Gemma 2 soft-caps its final logits: with its entry, loop 1 of a
random-init tiny Gemma 2 is its own forward bit for bit; with the Llama family's head it is not. A family the
surgery does not support is refused, by the model and by `ledger check` before anything loads."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from model_fixtures import left_padded_batch
from run_helpers import ROOT, ledger_cli

from arms.model.families import FAMILIES, Family, SoftCappedHead, family_of
from arms.model.recurrent import RecurrentLM, positions_from_mask
from ledger.protocol.families import SUPPORTED_FAMILIES, UnsupportedFamily

pytestmark = pytest.mark.models
LENGTHS = [7, 12, 3, 12, 9]  # rows 1 and 3 are unpadded, the others left-padded


def tiny_gemma2(seed: int = 0):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(seed)
    config = Gemma2Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=8, final_logit_softcapping=30.0,
        attn_logit_softcapping=50.0, max_position_embeddings=128,
    )  # fmt: skip
    config._attn_implementation = "eager"
    return Gemma2ForCausalLM(config).eval()


def _base_last_logits(model, ids, mask):
    with torch.no_grad():
        return model(
            input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask), logits_to_keep=1
        ).logits[:, -1]


def test_gemma2_loop_1_is_its_own_forward_bit_for_bit():
    model = tiny_gemma2()
    assert model.config.layer_types[:2] == ["sliding_attention", "full_attention"]  # both masks are read
    rlm = RecurrentLM.build(model, split=(1, 3), bridge="split").eval()
    assert isinstance(rlm.family, SoftCappedHead)
    ids, mask = left_padded_batch(LENGTHS, model.config.vocab_size)
    with torch.no_grad():
        readouts = rlm(ids, mask, loops=2)
    base = _base_last_logits(model, ids, mask)
    assert torch.equal(readouts[0], base)
    assert not torch.equal(readouts[1], readouts[0])
    rlm.family = Family()  # the Llama family's head: the soft-cap left out
    with torch.no_grad():
        uncapped = rlm(ids, mask, loops=1)[0]
    assert not torch.equal(uncapped, base) and torch.equal(torch.tanh(uncapped / 30.0) * 30.0, base)


def test_every_supported_family_has_its_entry_and_another_is_refused():
    from transformers import GemmaConfig, GemmaForCausalLM

    assert set(FAMILIES) == set(SUPPORTED_FAMILIES)
    gemma = GemmaForCausalLM(GemmaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1, head_dim=16))  # fmt: skip
    with pytest.raises(UnsupportedFamily, match=r"model family 'gemma' is not one the surgery supports \(supported: "):
        family_of(gemma)


def test_check_refuses_a_base_of_an_unsupported_family_in_one_line(tmp_path):
    base = tmp_path / "bases" / "tiny-base"
    shutil.copytree(ROOT / "bases" / "tiny-base", base)
    config = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps({**config, "model_type": "gemma3_text"}))
    protocol = (ROOT / "protocols" / "phaseA-tiny.yaml").read_text(encoding="utf-8")
    protocol = protocol.replace("../bases/tiny-base-skills", str(base)).replace(
        "claims:\n  - ../claims/phaseA-tiny.yaml\n", ""
    )
    (tmp_path / "protocols").mkdir()
    path = tmp_path / "protocols" / "phaseA-tiny.yaml"
    path.write_text(protocol, encoding="utf-8")
    checked = ledger_cli("check", str(path))
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "model family 'gemma3_text' is not one the surgery supports" in checked.stderr
    assert "bases.tiny.source" in checked.stderr and "Traceback" not in checked.stderr
