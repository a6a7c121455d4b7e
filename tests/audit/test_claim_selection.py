"""A recorded claim names exactly the evidence rows its statistic computed on (view ``v_claim_evidence``).

The arms of the tiny protocol are read at more loops than any claim uses (A at two loops besides loop =
depth; B at one that is never a final reading), so a view that joined every reading of the
arms a claim names returns more rows than the claim used; the recorded selection returns those rows only,
and the claim's figures are re-derived from them alone.
"""

from __future__ import annotations

from collections import Counter

from ledger.protocol.loader import load_protocol
from ledger.rows.builder import build_manifests
from ledger.store import open_store
from tests.audit.test_verify import CLAIMS, PROTOCOL, by_id, run, verify_json, write_evidence


def _extra_readings(folder, db) -> None:
    """Readings no claim should use (all wrong): A at loop 0 and at a loop other than the row's depth, B at a
    loop other than the row's depth (never a final reading of a dense arm read at loop 0)."""
    manifest = build_manifests(load_protocol(folder / "protocol.yaml"))["eval"]
    with open_store(db) as store:
        checkpoints = {
            row["arm"]: (row["run_id"], row["checkpoint_sha256"])
            for row in store.query("SELECT DISTINCT arm, run_id, checkpoint_sha256 FROM evidence").records()
        }
        extra = []
        for row in manifest.rows:
            other = row.depth % 3 + 1
            for arm, loop in (("A", 0), ("A", other), ("B", other)):
                run_id, checkpoint = checkpoints[arm]
                extra.append(
                    {
                        "run_id": run_id,
                        "manifest_sha256": manifest.sha256,
                        "row_id": row.row_id,
                        "arm": arm,
                        "checkpoint_sha256": checkpoint,
                        "loop": loop,
                        "prediction": "?",
                        "correct": False,
                    }
                )
        store.add_evidence(extra)


def test_the_view_returns_exactly_the_rows_each_claim_used(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "protocol.yaml").write_text(PROTOCOL, encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert run("register", "protocol.yaml", "--db", db) == 0
    write_evidence(tmp_path, db)
    _extra_readings(tmp_path, db)
    code, report = verify_json(db, "claims.yaml", "--record", capsys=capsys)
    assert code == 0, report
    figures = {key: claim["figures"] for key, claim in by_id(report).items()}

    with open_store(db, read_only=True) as store:
        readings = Counter(row["arm"] for row in store.query("SELECT arm FROM evidence").records())
        assert readings == {"A": 72, "B": 48}  # 24 rows (depths 1-3) each, A at three loops, B at two
        rows = store.query(
            "SELECT claim_id, role, arm, evidence_id, row_id, depth, loop, correct FROM v_claim_evidence"
        ).records()
    by_claim: dict[str, list[dict]] = {}
    for row in rows:
        by_claim.setdefault(row["claim_id"].split("/")[-1], []).append(row)

    paired = by_claim["A_beats_B"]
    assert Counter(row["arm"] for row in paired) == {"A": 24, "B": 24}
    assert all(row["loop"] == (row["depth"] if row["arm"] == "A" else 0) for row in paired)
    assert all(row["role"] is not None for row in paired)  # each row names the test input it belongs to
    a = {row["row_id"]: bool(row["correct"]) for row in paired if row["arm"] == "A"}
    b = {row["row_id"]: bool(row["correct"]) for row in paired if row["arm"] == "B"}
    assert set(a) == set(b)
    assert sum(a[r] and not b[r] for r in a) == figures["A_beats_B"]["helped"]
    assert sum(b[r] and not a[r] for r in a) == figures["A_beats_B"]["hurt"]

    accurate = by_claim["A_accurate"]
    assert len(accurate) == figures["A_accurate"]["n"] == 24
    assert sum(bool(row["correct"]) for row in accurate) == figures["A_accurate"]["correct"]

    deep = by_claim["B_deep"]  # rows: {depths: [3, 3]}: only the depth-3 rows
    assert len(deep) == figures["B_deep"]["n"] == 8
    assert {row["depth"] for row in deep} == {3} and {row["loop"] for row in deep} == {0}
    assert sum(bool(row["correct"]) for row in deep) == figures["B_deep"]["correct"]
