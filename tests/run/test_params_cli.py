"""`ledger params`: the paper's parameter counts from the protocol alone (meta device, no weights)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.models


def test_phase_a_counts_match_the_paper(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["params", str(ROOT / "protocols" / "phaseA.yaml")]) == 0
    lines = {line.split("│")[1].strip(): line for line in capsys.readouterr().out.splitlines() if line.count("│") > 5}
    assert "180,556,929" in lines["A"] and "block 178,948,608 + bridge 1,608,321" in lines["A"]
    assert "6,007,425" in lines["E"] and "LoRA r=16 4,399,104 on 84 modules + bridge 1,608,321" in lines["E"]
    for arm in ("A", "E", "B", "C"):
        assert "494,032,768" in lines[arm]
    assert "2.50x" in lines["A"] and "6.50x" in lines["A"]  # (1 + T) / 2 at T = 4, 12


def test_local_config_is_read_and_unknown_hub_id_explains(tmp_path, capsys, monkeypatch):
    from arms.bases.loading import tiny_qwen2_config

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    tiny_qwen2_config().save_pretrained(tmp_path / "tiny")
    protocol = (ROOT / "protocols" / "phaseA.yaml").read_text(encoding="utf-8")
    protocol = protocol.replace(
        "source: Qwen/Qwen2.5-0.5B-Instruct\n    dtype: bfloat16\n    num_layers: 24",
        f"source: {tmp_path / 'tiny'}\n    dtype: bfloat16\n    num_layers: 6",
    )
    protocol = protocol.replace("split: [6, 18]", "split: [2, 4]").replace("claims:\n  - ../claims/phaseA.yaml\n", "")
    local = protocol.replace(
        "source: Qwen/Qwen2.5-1.5B-Instruct\n    dtype: bfloat16\n    num_layers: 28",
        f"source: {tmp_path / 'tiny'}\n    dtype: bfloat16\n    num_layers: 6",
    )
    (tmp_path / "local.yaml").write_text(local, encoding="utf-8")
    assert main(["params", str(tmp_path / "local.yaml")]) == 0
    out = capsys.readouterr().out
    import torch
    from transformers import AutoModelForCausalLM

    from arms.model.accounting import count_parameters, full_block_budget
    from arms.model.recurrent import RecurrentLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(tiny_qwen2_config())
        expected = full_block_budget(
            RecurrentLM.build(model, split=(2, 4)).surgery, RecurrentLM.build(model, split=(2, 4)).bridge
        )
    assert f"{expected:,}" in out and f"{count_parameters(model):,}" in out
    protocol = protocol.replace("source: Qwen/Qwen2.5-1.5B-Instruct", "source: nobody/no-such-model")
    (tmp_path / "p.yaml").write_text(protocol, encoding="utf-8")
    assert main(["params", str(tmp_path / "p.yaml")]) == 2
    message = capsys.readouterr().err
    assert "nobody/no-such-model" in message and "local" in message.lower()
