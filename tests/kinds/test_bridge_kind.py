"""A bridge kind defined in the tests (``gated_bridge.py`` and the spec here) is built from its spec, trains in
the groups its kind declares, is exported and loads back from the folder as a Hugging Face model that reads as
the run did at every loop, with no product file naming it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import yaml
from gated_bridge_spec import KIND

from ledger.protocol.arms import BRIDGES, BUDGETS
from ledger.protocol.protocol import Protocol
from tests.run_helpers import SMOKE

pytestmark = pytest.mark.models


@pytest.fixture
def gated():
    BRIDGES.add(KIND)
    yield
    BRIDGES.remove(KIND.name)


def _arm(budget: dict[str, Any]) -> Any:
    data = yaml.safe_load(SMOKE.read_text(encoding="utf-8"))
    arm = next(arm for arm in data["arms"] if arm.get("kind") == "recurrent")
    arm["bridge"], arm["budget"] = {"kind": "gated_residual", "gate_init": 0.0}, budget
    arm["surgery"] = {"split": [1, 3]}  # the smoke base has 4 layers; the tiny model below has 6
    protocol = Protocol.model_validate(data)
    return next(arm for arm in protocol.arms if arm.kind == "recurrent")


def test_a_bridge_defined_here_trains_exports_and_loads(gated, tmp_path, monkeypatch):
    from model_fixtures import left_padded_batch, tiny_qwen2
    from transformers import AutoModelForCausalLM

    from arms.hf.export import hf_model, ship_model_files
    from arms.model.recurrent import RecurrentLM

    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    arm = _arm({"kind": "full_block"})
    assert arm.part_problems(6) == []  # a design-S bridge: the full-block budget takes it
    base = tiny_qwen2("sdpa")
    model = RecurrentLM.from_spec(base, arm)
    assert model.bridge.kind == "gated_residual" and model.design == "S"
    ids, mask = left_padded_batch([5, 7, 3], base.config.vocab_size)
    h, p = torch.randn(2, 3, 4, base.config.hidden_size).unbind(0)
    with torch.no_grad():  # untrained, the gate is shut: the block reads its own output again
        assert torch.equal(model.bridge(h, p), h)

    model, groups = BUDGETS.implementation(arm.budget.kind)(model, arm.budget, 0)
    assert {"bridge_gate", "bridge"} <= set(groups) and groups["bridge_gate"] == [model.bridge.gate]
    optimizer = torch.optim.AdamW([p for group in groups.values() for p in group], lr=0.05)
    targets = torch.randint(0, base.config.vocab_size, (ids.shape[0],), generator=torch.Generator().manual_seed(2))
    model.train()
    for _ in range(3):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(ids, mask, loops=3)[-1], targets)
        loss.backward()
        optimizer.step()
    model.eval()
    assert float(model.bridge.gate.detach().abs()) > 0.01  # the gate opened: the bridge trained
    with torch.inference_mode():
        answers = model(ids, mask, loops=3)
    assert not torch.equal(answers[2], answers[0])

    exported = hf_model(model, num_loops=3)
    exported.save_pretrained(tmp_path / "hf")
    ship_model_files(exported.bridge, tmp_path / "hf")
    assert (tmp_path / "hf" / "gated_bridge.py").is_file()
    assert "from .gated_bridge import GatedResidual as Bridge" in (tmp_path / "hf" / "ledger_bridge.py").read_text()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    assert loaded.config.bridge == "gated_residual" and loaded.config.bridge_options == {"gate_init": 0.0}
    with torch.inference_mode():
        for t in (1, 2, 3):
            logits = loaded(input_ids=ids, attention_mask=mask, num_loops=t).logits
            torch.testing.assert_close(logits[:, -1], answers[t - 1], rtol=0, atol=1e-5)


def test_the_budgets_take_it_by_its_design(gated):
    """A budget names the designs it is defined for, not a list of bridge kinds to edit: the adapter budget (design
    S only) takes the new design-S kind and refuses design M's adapter."""
    adapter = {"kind": "adapter", "rank": 4, "alpha": 8}
    assert _arm(adapter).part_problems(6) == []
    concat = _arm(adapter).model_copy(update={"bridge": BRIDGES["concat"].spec.model_validate({"kind": "concat"})})
    assert any("design-S bridges only" in text for _, text in concat.part_problems(6))
