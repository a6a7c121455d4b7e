"""Peeking covers every manifest a confirmatory claim reads (a guardrail's rows too, not only role eval), and
the ledgers named with --also-db (a team's tuning ledgers)."""

from __future__ import annotations

from pathlib import Path

from ledger.cli.main import main
from ledger.protocol.loader import load_protocol
from ledger.rows.builder import build_manifests
from ledger.store import open_store
from tests.audit.test_verify import PROTOCOL

GUARD = "  - {id: guard, role: guardrail, generator: arithmetic, per_op: 4, seed: 5, split: guard}\narms:"
CONFIRMATORY = PROTOCOL.replace("arms:", GUARD, 1).replace(
    "evaluation: {manifests: [eval]}", "evaluation: {manifests: [eval, guard]}"
)
CLAIMS = """\
protocol: tiny-verify
correction: none
claims:
  - {id: A_keeps_arithmetic, statement: A keeps Tier-1 arithmetic., statistic: accuracy, arm: A, manifest: guard, threshold: 0.5}
"""
# a tuning protocol reading the same arithmetic rows as its own development set (another name, the same problems)
TUNING = (
    CONFIRMATORY.replace("name: tiny-verify", "name: tiny-tuning\npurpose: exploratory")
    .replace("role: guardrail", "role: dev")
    .replace("claims: [claims.yaml]", "claims: []")
    .replace(
        "  - {id: eval, role: eval, generator: rule_chasing, alphabet: N16, depths: [1, 3], rows_per_depth: 8, seed: 7, split: test}\n",
        "",
    )
    .replace("evaluation: {manifests: [eval, guard]}", "evaluation: {manifests: [guard]}")
)


def _tuning_reads_the_guard_rows(folder: Path, db: str) -> None:
    (folder / "tuning.yaml").write_text(TUNING, encoding="utf-8")
    assert main(["register", str(folder / "tuning.yaml"), "--db", db]) == 0
    protocol = load_protocol(folder / "tuning.yaml")
    guard = build_manifests(protocol)["guard"]
    (folder / "tuned.safetensors").write_bytes(b"tuned" * 64)
    with open_store(db) as store:
        run_id = store.add_run(run_id="tune-A", protocol_sha256=protocol.sha256, arm="A")
        checkpoint = store.add_checkpoint(
            path=str(folder / "tuned.safetensors"), arm="A", status="exploratory", run_id=run_id
        )
        store.add_evidence(
            [
                {
                    "run_id": run_id,
                    "manifest_sha256": guard.sha256,
                    "row_id": row.row_id,
                    "arm": "A",
                    "checkpoint_sha256": checkpoint,
                    "loop": 1,
                    "prediction": row.answer,
                    "correct": True,
                }
                for row in guard.rows
            ]
        )


def _project(folder: Path) -> None:
    (folder / "protocol.yaml").write_text(CONFIRMATORY, encoding="utf-8")
    (folder / "claims.yaml").write_text(CLAIMS, encoding="utf-8")


def test_a_guardrail_a_claim_reads_must_be_fresh_too(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _project(tmp_path)
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    _tuning_reads_the_guard_rows(tmp_path, db)
    capsys.readouterr()
    assert main(["register", "protocol.yaml", "--db", db]) == 3
    message = capsys.readouterr().err
    assert "manifest 'guard' of 'tiny-verify' is not fresh" in message and "'tiny-tuning'" in message


def test_also_db_consults_another_ledger(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _project(tmp_path)
    tuning_db = f"sqlite:///{tmp_path / 'tuning.db'}"
    _tuning_reads_the_guard_rows(tmp_path, tuning_db)
    main_db = f"sqlite:///{tmp_path / 'ledger.db'}"
    capsys.readouterr()
    assert main(["register", "protocol.yaml", "--db", main_db, "--also-db", tuning_db]) == 3
    assert "'guard' of 'tiny-verify' is not fresh" in capsys.readouterr().err
    # a missing --also-db is one line, exit 2, before the ledger is created
    assert main(["register", "protocol.yaml", "--db", main_db, "--also-db", f"sqlite:///{tmp_path / 'nope.db'}"]) == 2
    assert "--also-db" in capsys.readouterr().err and not (tmp_path / "nope.db").exists()
    # without it, this ledger alone has seen nothing: registered
    assert main(["register", "protocol.yaml", "--db", main_db]) == 0


def test_a_project_file_lists_tuning_ledgers_for_every_register(tmp_path, monkeypatch, capsys):
    """ledger-project.yaml above the protocol names the team's tuning ledgers: register consults them without
    any --also-db; a listed ledger that is missing is one line naming the project file, nothing created."""
    project = tmp_path / "project"
    (project / "protocols").mkdir(parents=True)
    monkeypatch.chdir(project)
    _project(project / "protocols")
    _tuning_reads_the_guard_rows(project, f"sqlite:///{project / 'runs-tuning.db'}")
    main_db = f"sqlite:///{tmp_path / 'ledger.db'}"
    (project / "ledger-project.yaml").write_text("tuning_ledgers:\n  - runs-missing.db\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["register", "protocols/protocol.yaml", "--db", main_db]) == 2
    message = capsys.readouterr().err
    assert "ledger-project.yaml" in message and "runs-missing.db" in message and "Traceback" not in message
    assert not (tmp_path / "ledger.db").exists() and not (project / "runs-missing.db").exists()
    (project / "ledger-project.yaml").write_text("tuning_ledgers: [runs-tuning.db]\n", encoding="utf-8")
    assert main(["register", "protocols/protocol.yaml", "--db", main_db]) == 3
    assert "'guard' of 'tiny-verify' is not fresh" in capsys.readouterr().err
    (project / "ledger-project.yaml").write_text("tuning_ledger: [runs-tuning.db]\n", encoding="utf-8")  # a typo
    assert main(["register", "protocols/protocol.yaml", "--db", main_db]) == 2
    assert "ledger-project.yaml:1" in capsys.readouterr().err
    (project / "ledger-project.yaml").unlink()
    assert main(["register", "protocols/protocol.yaml", "--db", main_db]) == 0
