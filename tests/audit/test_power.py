"""Power at registration: a claim that no outcome of its rows could support is refused before anything is
written, with the rows it would need (``ledger.judge.power``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from scipy.stats import binomtest

from ledger.judge.noninferiority import tango_noninferiority
from ledger.judge.power import unwinnable_claims
from ledger.protocol.claims import ClaimFile, load_claims
from ledger.protocol.loader import load_protocol
from ledger.rows.builder import build_manifests, files_to_come
from tests.audit.test_verify import PROTOCOL, run

ROOT = Path(__file__).resolve().parents[2]

UNWINNABLE = """\
protocol: tiny-verify
correction: none
claims:
  - {id: A_noninferior, statement: A within 3 points of B., statistic: noninferiority, arms: [A, B], manifest: eval, margin: 0.03}
  - {id: A_frontier, statement: A's frontier beyond 1.25x support., statistic: frontier_ratio, arm: A, manifest: eval, support_max_depth: 8, threshold: 1.25}
  - {id: A_beats_B_deep, statement: A beats B at depth 3., statistic: paired_exact, arms: [A, B], manifest: eval, rows: {depths: [3, 3]}, direction: two-sided, alpha: 0.005}
  - {id: A_accurate, statement: A is accurate., statistic: accuracy, arm: A, manifest: eval, threshold: 0.9}
"""


def test_register_refuses_unwinnable_claims_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "protocol.yaml").write_text(PROTOCOL, encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(UNWINNABLE, encoding="utf-8")
    db = tmp_path / "ledger.db"
    assert run("register", "protocol.yaml", "--db", f"sqlite:///{db}") == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3, lines  # the accuracy claim can always be decided
    noninferior, frontier, deep = lines
    best = tango_noninferiority(0, 0, 24, 0.03).p_value
    assert "claims.0: claim A_noninferior cannot be supported" in noninferior
    assert f"p = {best:.3g} >= alpha 0.05" in noninferior and "it needs 88 rows" in noninferior
    assert "claims.1: claim A_frontier" in frontier and "at most 3/8 = 0.375 < 1.25" in frontier
    assert "it needs rows of depth 10 or more" in frontier
    # 8 rows at depth 3, two-sided: at best 2 * 0.5^8 = 0.0078 >= 0.005; 9 rows would do
    assert binomtest(8, 8, 0.5, alternative="two-sided").pvalue == pytest.approx(2 * 0.5**8)
    assert "claims.2: claim A_beats_B_deep" in deep and "p = 0.00781 >= alpha 0.005" in deep
    assert "it needs 9 rows" in deep
    assert not db.exists()  # refused before the ledger was opened or anything written


def test_the_papers_64_tier1_rows_cannot_support_its_noninferiority_claim():
    """Version 1 of protocols/phaseA.yaml (kept under tests/pins/versions/) is unwinnable; version 2 is not."""
    for protocol_file, claims_file, expected in (
        ("tests/pins/versions/phaseA.v1.yaml", "tests/pins/versions/phaseA.claims.v1.yaml", ["A_tier1_noninferior"]),
        ("protocols/phaseA.yaml", "claims/phaseA.yaml", []),
    ):
        protocol = load_protocol(ROOT / protocol_file)
        manifests = build_manifests(protocol, leave_out=files_to_come(protocol))  # ARC: the user's files
        depths = {name: [row.depth for row in manifest.rows] for name, manifest in manifests.items()}
        found = unwinnable_claims(load_claims(ROOT / claims_file), depths)
        assert [item.claim_id for item in found] == expected
    assert len(depths["tier1"]) == 256
    (message,) = [
        item.message
        for item in unwinnable_claims(
            load_claims(ROOT / "tests/pins/versions/phaseA.claims.v1.yaml"), {"tier1": [0] * 64}
        )
    ]
    assert "p = 0.0797 >= alpha 0.05" in message and "it needs 88 rows" in message


def test_a_bonferroni_family_sizes_each_member_at_alpha_over_m():
    members = [
        {
            "id": f"c{i}",
            "statement": "s",
            "statistic": "paired_exact",
            "arms": ["A", "B"],
            "manifest": "m",
            "family": "f",
        }
        for i in range(8)
    ]
    for correction, unwinnable in (("bonferroni", 8), ("holm", 0)):
        file = ClaimFile.model_validate(
            {
                "protocol": "p",
                "correction": "none",
                "families": {"f": {"correction": correction, "members": [m["id"] for m in members]}},
                "claims": members,
            }
        )
        # 7 rows one-sided: 0.5^7 = 0.0078 < 0.05 but >= 0.05 / 8 = 0.00625
        found = unwinnable_claims(file, {"m": [1] * 7})
        assert len(found) == unwinnable
        if found:
            assert (
                "alpha 0.05 / 8, Bonferroni in family 'f'" in found[0].message and "it needs 8 rows" in found[0].message
            )
