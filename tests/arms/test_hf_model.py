"""The Hugging Face model of `ledger export --format hf` computes what `RecurrentLM` computes: for each design
(the split bridge with every position or the answer alone re-entering, the concat adapter with a seeded random
initial state and the block norms), saved, loaded back through `trust_remote_code`, at every loop."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_fixtures import left_padded_batch, tiny_qwen2

from arms.hf.export import hf_model, ship_model_files
from arms.model.recurrent import RecurrentLM

pytestmark = pytest.mark.models

DESIGNS = {
    "split, every position": {"bridge": "split"},
    "split, the answer alone": {"bridge": "split", "reentry": "answer"},
    "split, state norm": {"bridge": "split", "state_norm": True},
    "concat, random s0, block norms": {"bridge": "concat", "block_norms": True, "s0": "random", "s0_seed": 7},
    "concat, zeros": {"bridge": "concat", "s0": "zeros"},
}


def _tiny(family: str):
    """A random 6-layer decoder of each family the surgery cuts (Qwen2, Gemma 2: tied head; Llama, OLMo-2: untied;
    Gemma 2 soft-caps its logits, which the exported model does through its family's entry too)."""
    if family == "qwen2":
        return tiny_qwen2("sdpa")
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    shape = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=6, num_attention_heads=4)
    config = AutoConfig.for_model(family, vocab_size=96, num_key_value_heads=2, **shape)
    config._attn_implementation = "eager" if family == "gemma2" else "sdpa"  # Gemma 2 has no SDPA path
    return AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize(
    "family,design",
    [("qwen2", design) for design in DESIGNS]
    + [("llama", "split, every position"), ("olmo2", "concat, zeros"), ("gemma2", "split, every position")],
)
def test_the_loaded_folder_reads_as_the_recurrent_model_at_every_loop(tmp_path, monkeypatch, family, design):
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    base = _tiny(family)
    torch.manual_seed(1)
    model = RecurrentLM.build(base, split=(2, 4), **DESIGNS[design]).eval()
    with torch.no_grad():  # a bridge away from its identity init, so that the loops differ
        for p in model.bridge.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ids, mask = left_padded_batch([5, 7, 3], model.base.config.vocab_size)
    with torch.inference_mode():
        answers = model(ids, mask, loops=3)  # [loops, batch, vocab] at each row's last position
        sequences = model.sequence_logits(ids, mask, loops=3, read_at=(1, 2, 3))

    exported = hf_model(model, num_loops=2)
    exported.save_pretrained(tmp_path / "hf")
    ship_model_files(exported.bridge, tmp_path / "hf")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    assert loaded.config.num_loops == 2
    tied = loaded.base.lm_head.weight.data_ptr() == loaded.base.model.embed_tokens.weight.data_ptr()
    assert tied == bool(base.config.tie_word_embeddings)  # a tied head stays tied through save and load
    with torch.inference_mode():
        for t in (1, 2, 3):
            logits = loaded(input_ids=ids, attention_mask=mask, num_loops=t).logits
            torch.testing.assert_close(logits[:, -1], answers[t - 1], rtol=0, atol=1e-5)
            real = mask.bool()  # padding positions read nothing
            torch.testing.assert_close(logits[real], sequences[t][real], rtol=0, atol=1e-5)
        default = loaded(input_ids=ids, attention_mask=mask).logits[:, -1]
    torch.testing.assert_close(default, answers[1], rtol=0, atol=1e-5)  # num_loops from the config


def test_a_bad_loop_count_is_refused_where_it_is_given():
    from arms.hf.modeling_ledger_recurrent import LedgerRecurrentConfig

    with pytest.raises(ValueError, match="num_loops"):
        LedgerRecurrentConfig(base={"model_type": "qwen2"}, num_loops=0)
    with pytest.raises(ValueError, match="reentry"):
        LedgerRecurrentConfig(base={"model_type": "qwen2"}, reentry="zigzag")


@pytest.mark.parametrize("name", ["modeling_ledger_recurrent", "ledger_loop", "bridge_split", "bridge_concat"])
def test_a_shipped_file_needs_torch_and_transformers_only(name):
    """What an export ships runs where the ledger is not installed: the standard library, torch, transformers and
    the folder's own files (relative imports)."""
    import ast
    import sys

    import arms.hf

    path = Path(arms.hf.__file__).parent / f"{name}.py"
    allowed = set(sys.stdlib_module_names) | {"torch", "transformers", "__future__"}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            assert {alias.name.split(".")[0] for alias in node.names} <= allowed, (path.name, node.lineno)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            assert str(node.module).split(".")[0] in allowed, (path.name, node.lineno)
