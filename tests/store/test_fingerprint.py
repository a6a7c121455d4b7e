"""A ledger's fingerprint on both backends (`ledger/audit/fingerprint.py`), read through the command as a
reviewer would: `ledger fingerprint` and `ledger compare` of the ledger with itself and with its own file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ledger.audit.fingerprint import FORMAT, fingerprint

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ledger", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_the_fingerprint_holds_each_arms_checkpoints_and_the_runs_environment(example):
    store, _keys, _url = example
    document = fingerprint(store)
    assert document["format"] == FORMAT and document["head"] == list(store.head())
    example_protocol = document["protocols"]["example"]
    assert len(example_protocol["versions"]) == 2  # both registered versions of the name
    assert example_protocol["arms"] == {
        "loop": [{"stage": "phase-a", "sha256": "c" * 64, "status": "promoted", "losses": None}]
    }  # the base's checkpoint belongs to no run of the protocol
    assert example_protocol["environments"] == [{"runs": ["run-example"], "environment": {"python": "3.11"}}]
    assert fingerprint(store, ["nothing"])["protocols"] == {}


def test_the_command_writes_it_and_compares_the_ledger_with_its_own_file(example, tmp_path):
    _store, _keys, url = example
    written = _cli("fingerprint", "--db", url, "--out", str(tmp_path))
    assert written.returncode == 0, written.stderr
    on_file = json.loads((tmp_path / "fingerprint.json").read_text(encoding="utf-8"))
    printed = _cli("fingerprint", "--db", url, "--protocol", "example")
    assert json.loads(printed.stdout) == on_file
    same = _cli("compare", url, str(tmp_path))
    assert same.returncode == 0 and "identical evidence: 1 of 1 arms" in same.stdout, same.stdout + same.stderr
