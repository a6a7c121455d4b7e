"""Nothing outside the registered protocol changes a reading, and a run's own artifact store is the one it is
judged with (issue 52's first two classes, each planted fresh)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_helpers import SMOKE, digest, ledger_cli

from ledger.store import open_store

pytestmark = pytest.mark.models


def _run(folder: Path, *extra: str, env: dict | None = None):
    done = ledger_cli(
        "run", str(SMOKE), "--db", f"sqlite:///{folder / 'ledger.db'}", "--out", str(folder / "out"),
        "--no-progress", *extra, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_no_ledger_variable_changes_a_reading_and_verify_flags_the_unknown_ones(reference, tmp_path):
    # the old switch, that once marked every multiple-choice answer wrong, and one never heard of
    planted = {"LEDGER_FAULT_INJECTION": "tier1_regression:B", "LEDGER_READINGS": "all-wrong"}
    _run(tmp_path, env=planted)
    assert digest(tmp_path / "ledger.db") == digest(reference[0] / "ledger.db")  # the same evidence, bit for bit
    with open_store(f"sqlite:///{tmp_path / 'ledger.db'}") as store:
        environments = [json.loads(run["environment_json"]) for run in store.rows_of("runs")]
    assert environments and all(env["ledger_variables"].items() >= planted.items() for env in environments)
    verified = ledger_cli("verify", "claims/smoke.yaml", "--db", f"sqlite:///{tmp_path / 'ledger.db'}", "--json")
    flags = [flag for verdict in json.loads(verified.stdout)["claims"] for flag in verdict["flags"]]
    assert any("LEDGER_READINGS=all-wrong" in flag and "not a variable this ledger knows" in flag for flag in flags)
    clean = ledger_cli("verify", "claims/smoke.yaml", "--db", f"sqlite:///{reference[0] / 'ledger.db'}", "--json")
    assert not any("this ledger knows" in f for v in json.loads(clean.stdout)["claims"] for f in v["flags"])


def test_a_run_with_its_own_artifact_store_records_its_first_outcomes(tmp_path):
    artifacts = tmp_path / "team-artifacts"
    _run(tmp_path / "ledger", "--artifacts", str(artifacts))
    assert list(artifacts.rglob("*")), "the checkpoints were written to --artifacts"
    with open_store(f"sqlite:///{tmp_path / 'ledger' / 'ledger.db'}") as store:
        outcomes = store.query("SELECT claim_id, outcome FROM claim_outcomes").records()
        tests = store.query("SELECT COUNT(*) AS n FROM stat_tests").records()[0]["n"]
    assert len(outcomes) == 4 and {row["outcome"] for row in outcomes} == {"supported"}, outcomes
    assert tests > 0
