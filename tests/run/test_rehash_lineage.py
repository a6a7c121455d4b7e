"""`ledger verify` re-hashes every file in the lineage of the evidence a claim reads, the base model file
at its root included; `verify --all` re-hashes every recorded file. Measured before: a flipped byte in an
earlier stage of A, in arm B's checkpoint or in the base file passed verify with exit 0."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from run_helpers import ledger_cli

from ledger.store import open_store


def _verify(db: str, *extra: str) -> tuple[int, dict]:
    result = ledger_cli("verify", "claims/smoke.yaml", "--db", db, "--json", *extra)
    return result.returncode, json.loads(result.stdout)


def _flipped(path: Path):
    """Flip one byte in the middle of a file; returns a function that puts it back."""
    data = path.read_bytes()
    middle = len(data) // 2
    path.chmod(0o644)
    path.write_bytes(data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1 :])
    return lambda: path.write_bytes(data)


def test_a_flipped_byte_anywhere_in_a_claims_lineage_is_tampered(reference, tmp_path):
    folder = tmp_path / "ledger"
    shutil.copytree(reference[0], folder)
    db = f"sqlite:///{folder / 'ledger.db'}"
    with open_store(db) as store:
        checkpoints = store.rows_of("checkpoints")
    file_of = {row["sha256"]: folder / row["path"] for row in checkpoints if row["path"]}
    install_a = next(row["sha256"] for row in checkpoints if row["arm"] == "A" and row["stage"] == "install")
    base = next(row["sha256"] for row in checkpoints if row["stage"] == "base")
    arm_b = next(row["sha256"] for row in checkpoints if row["arm"] == "B" and row["stage"] == "sft")
    assert _verify(db)[0] == 0

    # arm B's checkpoint: no smoke claim reads B, so only --all re-hashes it
    restore = _flipped(file_of[arm_b])
    assert _verify(db)[0] == 0
    code, report = _verify(db, "--all")
    assert code == 4 and any(arm_b[:12] in problem for problem in report["chain_problems"]), report["chain_problems"]
    restore()

    # an earlier stage of A, and the base file at the root of every lineage: the claims on A are tampered
    for sha in (install_a, base):
        restore = _flipped(file_of[sha])
        code, report = _verify(db)
        assert code == 4
        a_claims = [c for c in report["claims"] if c["claim_id"] in ("A_accuracy_defined", "A_gate_recorded")]
        assert a_claims and all(c["integrity"] == "tampered" for c in a_claims)
        assert all(any("in the lineage of" in p and sha[:12] in p for p in c["problems"]) for c in a_claims)
        restore()
    assert _verify(db, "--all")[0] == 0
