"""`ledger compare` on fingerprints: where two arms' checkpoints part, claims side by side, exit codes,
and bad input as one line (`ledger/audit/compare.py`, `ledger/cli/compare_commands.py`)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

from ledger.audit.compare import compare, where_they_part
from ledger.audit.fingerprint import FORMAT

ROOT = Path(__file__).resolve().parents[2]


def _checkpoint(stage: str, sha: str, losses: list[float]) -> dict:
    return {"stage": stage, "sha256": sha * 64 if len(sha) == 1 else sha, "status": "promoted", "losses": losses}


def _fingerprint() -> dict:
    return {
        "format": FORMAT,
        "head": ["0" * 64, 10],
        "protocols": {
            "p": {
                "versions": ["1" * 64],
                "arms": {
                    "A": [_checkpoint("install", "a", [1.5, 1.25, 1.0]), _checkpoint("extend", "b", [0.5, 0.25])],
                    "B": [_checkpoint("sft", "c", [2.0, 1.0])],
                },
                "claims": {"A_beats_B": {"outcome": "supported", "figures": {"helped": 10, "hurt": 1}}},
                "environments": [{"runs": ["x:A"], "environment": {"threads": 1, "distributions": {"numpy": "2.4.6"}}}],
            }
        },
    }


def test_identical_fingerprints_are_identical_evidence():
    result = compare(_fingerprint(), _fingerprint())
    assert result.identical and result.exit_code == 0
    assert [arm.detail for arm in result.arms] == [
        f"identical: 2 checkpoints (last {'b' * 12})",
        f"identical: 1 checkpoint (last {'c' * 12})",
    ]


def test_the_first_differing_step_of_the_first_differing_stage_is_named():
    other = _fingerprint()
    extend = other["protocols"]["p"]["arms"]["A"][1]
    extend.update(sha256="d" * 64, losses=[0.5, 0.2500001])
    result = compare(_fingerprint(), other)
    assert not result.identical and result.exit_code == 1
    a_arm = result.arms[0]
    assert not a_arm.identical
    assert a_arm.detail.startswith("part at stage extend, step 2: loss 0.25 (A) against 0.2500001 (B)")
    assert result.arms[1].identical  # B is untouched


def test_identical_losses_with_another_file_and_a_longer_side_are_said_so():
    same_losses = [_checkpoint("sft", "c", [2.0, 1.0])]
    other_file = [_checkpoint("sft", "e", [2.0, 1.0])]
    identical, detail = where_they_part(same_losses, other_file)
    assert not identical and "the same loss at all 2 steps, yet the checkpoint files differ" in detail
    longer = same_losses + [_checkpoint("anneal", "f", [0.1])]
    identical, detail = where_they_part(same_losses, longer)
    assert not identical and detail == f"after 1 identical checkpoint, only B recorded more: anneal {'f' * 12}"


def test_claims_are_compared_outcome_and_figures_and_environments_only_explain():
    other = _fingerprint()
    other["protocols"]["p"]["claims"]["A_beats_B"]["figures"]["hurt"] = 2
    other["protocols"]["p"]["environments"][0]["environment"] = {"threads": 2, "distributions": {"numpy": "2.4.5"}}
    result = compare(_fingerprint(), other)
    assert all(arm.identical for arm in result.arms) and not result.identical
    (claim,) = result.claims
    assert not claim.identical and claim.differing_figures() == ["hurt"]
    assert result.environment == ["threads: 1 in A, 2 in B", "numpy: 2.4.6 in A, 2.4.5 in B"]
    only_environment = _fingerprint()
    only_environment["protocols"]["p"]["environments"] = other["protocols"]["p"]["environments"]
    moved = compare(_fingerprint(), only_environment)
    assert moved.identical and moved.environment  # identical evidence from two machines is identical evidence


def test_an_arm_or_protocol_on_one_side_only_differs():
    other = _fingerprint()
    del other["protocols"]["p"]["arms"]["B"]
    other["protocols"]["q"] = copy.deepcopy(other["protocols"]["p"])
    result = compare(_fingerprint(), other)
    assert result.exit_code == 1
    assert [arm.detail for arm in result.arms if not arm.identical] == ["only A ran it"]
    assert result.only == ["q: only in B"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ledger", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def _write(folder: Path, document: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fingerprint.json").write_text(json.dumps(document), encoding="utf-8")
    return folder


def test_the_command_exits_0_for_identical_folders_and_1_naming_the_step(tmp_path):
    a = _write(tmp_path / "a", _fingerprint())
    b = _write(tmp_path / "b", _fingerprint())
    same = _cli("compare", str(a), str(b))
    assert same.returncode == 0, same.stderr
    assert "identical evidence: 2 of 2 arms and 1 of 1 claims identical" in same.stdout
    moved = _fingerprint()
    moved["protocols"]["p"]["arms"]["B"][0].update(sha256="9" * 64, losses=[2.0, 1.5])
    _write(b, moved)
    differs = _cli("compare", str(a), str(b / "fingerprint.json"), "--json")
    assert differs.returncode == 1, differs.stderr
    report = json.loads(differs.stdout)
    assert not report["identical"]
    (arm,) = [arm for arm in report["arms"] if not arm["identical"]]
    assert arm["arm"] == "B" and arm["detail"].startswith("part at stage sft, step 2: loss 1.0 (A) against 1.5 (B)")


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "fingerprint.json").write_text("{not json", encoding="utf-8")
    other = _write(tmp_path / "other", {**_fingerprint(), "protocols": {"elsewhere": _fingerprint()["protocols"]["p"]}})
    good = _write(tmp_path / "good", _fingerprint())
    cases = {
        "no such": [str(tmp_path / "missing.db"), str(good)],
        "no fingerprint.json here": [str(tmp_path / "empty"), str(good)],
        "fingerprint.json: not valid JSON": [str(tmp_path / "broken"), str(good)],
        "hold no protocol of the same name": [str(other), str(good)],
        "neither side holds": [str(good), str(good), "--protocol", "nothing"],
    }
    for message, args in cases.items():
        result = _cli("compare", *args)
        assert result.returncode == 2, (message, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (message, result.stderr)
        assert "Traceback" not in result.stderr
