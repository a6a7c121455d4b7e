"""Errors never quote file contents they were not asked to show: a file that is not what a command expects (a
stranger's config, a note, a file with secrets in it) is named and refused, and nothing of what it holds reaches
the terminal. Each case plants a secret where the file's own text would otherwise be quoted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.audit.proofs import PROOF_FORMAT
from ledger.cli.main import main

SECRET = "hunter2-TOKEN-9f3a"


def _said(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


CASES = {
    "a config with secrets, checked as a protocol": (
        "config.yaml",
        f"api_token: {SECRET}\n{SECRET}_user: admin\n",
        lambda file, tmp: ["check", str(file)],
    ),
    "an undefined alias": ("alias.yaml", f"name: x\nseed: *{SECRET}\n", lambda file, tmp: ["check", str(file)]),
    "an unknown tag": ("tag.yaml", f"name: !{SECRET} x\n", lambda file, tmp: ["check", str(file)]),
    "a bad escape": ("escape.yaml", f'name: "{SECRET}\\q"\n', lambda file, tmp: ["check", str(file)]),
    "a config with secrets, verified as a claim file": (
        "claims.yaml",
        f"password: {SECRET}\n",
        lambda file, tmp: ["verify", str(file), "--db", f"sqlite:///{tmp / 'ledger.db'}"],
    ),
    "a proof whose index is text": (
        "proof.json",
        json.dumps({"format": PROOF_FORMAT, "leaf_index": SECRET, "tree_size": SECRET, "root": "00", "payload": "{}"}),
        lambda file, tmp: ["verify-proof", str(file)],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_file_that_is_not_what_the_command_expects_is_named_never_shown(case, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name, text, command = CASES[case]
    file = tmp_path / name
    file.write_text(text, encoding="utf-8")
    code, said = _said(command(file, tmp_path), capsys)
    assert code in (2, 4), said  # bad input; a proof that does not verify is 4
    assert str(file) in said or name in said, said
    assert SECRET not in said and "hunter2" not in said, said


def test_a_file_that_is_a_protocol_still_gets_its_located_field_errors(tmp_path, capsys):
    """The refusal of a foreign file is not a blanket: a protocol with one wrong field is told which."""
    source = (Path(__file__).resolve().parents[1] / "protocols" / "smoke.yaml").read_text(encoding="utf-8")
    file = tmp_path / "p.yaml"
    file.write_text(source.replace("name: smoke", "name: smoke\nnmae: typo", 1), encoding="utf-8")
    code, said = _said(["check", str(file)], capsys)
    assert code == 2 and "nmae" in said, said


def test_a_release_data_file_that_is_not_what_its_mapping_says_is_named_never_shown(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(
        "release: planted\nsource: a data file holding what it should not\nroot: data\nmanifests:\n"
        "  - {id: rows, file: rows.jsonl, task: rule_chasing, surface: symbolic,\n"
        "     fields: {row_id: id, prompt: question, answer: target, depth: depth}}\n"
        "predictions:\n  - {arm: A, manifest: rows, file: arm_A.jsonl, prediction: prediction}\n",
        encoding="utf-8",
    )
    row = {"id": "r1", "question": "q", "target": "a", "depth": SECRET, SECRET: SECRET}
    (tmp_path / "data" / "rows.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    (tmp_path / "data" / "arm_A.jsonl").write_text(json.dumps({"id": "r1", "prediction": "a"}) + "\n")
    code, said = _said(["import", str(mapping), "--db", f"sqlite:///{tmp_path / 'ledger.db'}"], capsys)
    assert code == 2 and "rows.jsonl" in said and "depth" in said, said
    assert SECRET not in said, said
