"""A claim reads only its registered protocol's evidence, and no result may have peeked at its rows.

One ledger (a copy of the smoke reference run) then receives, under the same arm names, the same seed
and the same training, development and Tier-1 manifests: an exploratory run, a foreign confirmatory
protocol and a second confirmatory one, each training arm A differently. `ledger verify
claims/smoke.yaml` must give every claim the same outcome and figures as before them
(``ledger/store/evidence.py`` states the rule). The peeking rules (``ledger/audit/peeking.py``) are
exercised on the way: reading frozen evaluation problems is refused whoever reads them, in any surface.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from run_helpers import SMOKE, ledger_cli

from ledger.audit.signed_head import generate_key, open_signed_tree_head
from ledger.store import open_store

EVAL = "{id: eval, role: eval, generator: rule_chasing, alphabet: N16, depths: [1, 5], rows_per_depth: 4, seed: 11, split: test}"
A_INSTALL_STEPS = (
    "{id: install, objective: intermediate, manifest: train, steps: 6, batch_size: 8, optimizer: {kind: adamw"
)


def variant(folder: Path, name: str, *, purpose: str = "confirmatory", role: str = "eval", split: str = "test",
            surface: str | None = None, a_steps: int = 6) -> Path:  # fmt: skip
    """The smoke protocol renamed, without claims, its evaluation manifest moved, arm A trained for other steps."""
    text = SMOKE.read_text(encoding="utf-8")
    assert EVAL in text and A_INSTALL_STEPS in text
    text = text.replace("name: smoke\n", f"name: {name}\npurpose: {purpose}\n", 1)
    moved = EVAL.replace("role: eval", f"role: {role}").replace("split: test", f"split: {split}")
    if surface is not None:
        moved = moved.replace("alphabet: N16", f"alphabet: N16, surface: {surface}")
    text = text.replace(EVAL, moved, 1)
    text = text.replace(A_INSTALL_STEPS, A_INSTALL_STEPS.replace("steps: 6", f"steps: {a_steps}"), 1)
    text = re.sub(r"\nclaims:\n(  - .*\n)+", "\n", text)
    path = folder / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def verified(db: str) -> dict[str, tuple]:
    result = ledger_cli("verify", "claims/smoke.yaml", "--db", db, "--json")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)
    return {
        c["claim_id"]: (c["outcome"], c["integrity"], c["reason"], json.dumps(c["figures"], sort_keys=True))
        for c in report["claims"]
    }


def head(db: str) -> tuple[str, int]:
    with open_store(db) as store:
        return store.head()


def run(path: Path, db: str, out: Path, *arms: str):
    return ledger_cli(
        "run", str(path), "--db", db, "--out", str(out), "--no-progress", *(("--arms", ",".join(arms)) if arms else ())
    )


@pytest.mark.long  # a run of minutes: the long call runs it beside the real-shape dry runs
def test_each_claim_reads_only_its_protocols_evidence_and_nothing_peeks(reference, tmp_path):
    folder = tmp_path / "ledger"
    shutil.copytree(reference[0], folder)
    db = f"sqlite:///{folder / 'ledger.db'}"
    before = verified(db)
    assert len(before) == 4 and all(outcome == "supported" for outcome, *_ in before.values())

    # 1. A tuning run on smoke's frozen evaluation rows (as development rows) is refused, writing nothing.
    start = head(db)
    peek = run(variant(tmp_path, "smoke-peek", purpose="exploratory", role="dev"), db, tmp_path / "o1", "B")
    assert peek.returncode == 3 and "frozen evaluation problems" in peek.stderr and "smoke/eval" in peek.stderr
    assert "Traceback" not in peek.stderr and head(db) == start

    # 2. A tuning run on fresh development rows, arm A trained for 3 steps: allowed, exploratory.
    tuning = variant(tmp_path, "smoke-tuning", purpose="exploratory", role="dev", split="tune", a_steps=3)
    ran = run(tuning, db, tmp_path / "o2", "A")
    assert ran.returncode == 0, ran.stderr[-2000:]

    # 3. A foreign confirmatory protocol (fresh evaluation rows; arms A and E, A trained for 2 steps).
    ran = run(variant(tmp_path, "smoke-foreign", split="foreign", a_steps=2), db, tmp_path / "o3", "A", "E")
    assert ran.returncode == 0, ran.stderr[-2000:]

    # 4. A second confirmatory protocol whose evaluation rows pose the problems the tuning run read, rendered
    # in another surface: refused (problems, not bytes). Then with smoke's own evaluation rows, which a
    # confirmatory run read: refused too, whatever that run called itself.
    start = head(db)
    relay = ledger_cli("register", str(variant(tmp_path, "smoke-relay", split="tune", surface="relay")), "--db", db)
    assert (
        relay.returncode == 3 and "not fresh" in relay.stderr and "exploratory protocol 'smoke-tuning'" in relay.stderr
    )
    again = ledger_cli("register", str(variant(tmp_path, "smoke-again")), "--db", db)
    assert again.returncode == 3 and "confirmatory protocol 'smoke'" in again.stderr, again.stderr
    assert head(db) == start

    # 5. A second confirmatory protocol on fresh rows runs arm A (4 steps) into the same ledger, with a signing
    # key configured: the run ends by writing the ledger's head, signed, into its folder.
    key = generate_key("example.org/scope")
    (tmp_path / "scope.key").write_text(key.text() + "\n", encoding="utf-8")
    second = variant(tmp_path, "smoke-second", split="second", a_steps=4)
    ran = ledger_cli(
        "run", str(second), "--db", db, "--out", str(tmp_path / "o4"), "--no-progress", "--arms", "A",
        env={"LEDGER_SIGNING_KEY": str(tmp_path / "scope.key")},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    signed = open_signed_tree_head((tmp_path / "o4" / "head.signed").read_text(encoding="utf-8"), key.verifier())
    assert (signed.root_hex, signed.size) == head(db) and "signed by example.org/scope" in ran.stdout
    assert (tmp_path / "o4" / "head.txt").read_text(encoding="utf-8") == f"{signed.root_hex}:{signed.size}\n"

    with open_store(db) as store:  # the ledger really holds other arms A on smoke's shared manifests
        checkpoints = {row["sha256"] for row in store.rows_of("checkpoints", arm="A")}
        statuses = {row["status"] for row in store.rows_of("checkpoints", arm="A")}
    assert len(checkpoints) >= 6 and "exploratory" in statuses
    assert verified(db) == before
