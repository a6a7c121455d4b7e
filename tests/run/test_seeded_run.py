"""A protocol with an arm replicated over three training seeds, run end to end: each replicate trains as its own
lineage with its own draws, and a claim on the arm is judged over the three seeds with its interval."""

from __future__ import annotations

import json

from tests.run_helpers import SMOKE, ledger_cli

SEEDED = (
    SMOKE.read_text(encoding="utf-8")
    .replace("name: smoke\n", "name: smoke-seeded\n")
    .replace(
        "  - id: B\n    kind: dense\n    base: tiny\n",
        "  - id: B\n    kind: dense\n    base: tiny\n    seeds: [1, 2, 3]\n",
    )
    .replace(
        "  - {id: fisher_A_vs_B, kind: depth_gate, manifest: eval, arm: A, versus: B, test: fisher_counts, alpha: 0.05, consecutive: 2, action: flag}\n",
        "",
    )
    .replace(
        "  - {id: paired_A_vs_B, kind: depth_gate, manifest: eval, arm: A, versus: B, test: paired_exact, alpha: 0.05, consecutive: 2, action: flag}\n",
        "",
    )
    .replace("../claims/smoke.yaml", "claims.yaml")
)
CLAIMS = """\
protocol: smoke-seeded
correction: holm
claims:
  - {id: B_accuracy_defined, statement: B's accuracy over its three seeds is defined (>= 0)., statistic: accuracy, arm: B, manifest: eval, threshold: 0.0}
  - {id: A_vs_B_pooled, statement: A against B pooled over B's seeds (two-sided)., statistic: paired_exact, arms: [A, B], manifest: eval, direction: two-sided, seeds: pooled}
"""


def test_an_arm_over_three_seeds_runs_as_three_lineages_and_is_judged_over_them(tmp_path):
    (tmp_path / "protocol.yaml").write_text(SEEDED, encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    ran = ledger_cli(
        "run", str(tmp_path / "protocol.yaml"), "--db", db, "--out", str(tmp_path / "run"), "--arms", "A,B"
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    summary = " ".join(ran.stdout.split())
    assert "B over 3 training seeds on eval: accuracy seed 1" in summary and "between-seed spread" in summary
    verified = ledger_cli("verify", str(tmp_path / "claims.yaml"), "--db", db, "--json")
    report = json.loads(verified.stdout)
    claims = {claim["claim_id"]: claim for claim in report["claims"]}
    accuracy = claims["B_accuracy_defined"]
    assert accuracy["outcome"] == "supported" and accuracy["integrity"] == "verified", accuracy
    figures = accuracy["figures"]
    assert sorted(figures["per_seed"]) == ["B.s1", "B.s2", "B.s3"] and figures["seeds"] == 3
    assert figures["ci_low"] <= figures["mean"] <= figures["ci_high"]
    assert figures["spread"] == [min(figures["per_seed"].values()), max(figures["per_seed"].values())]
    pooled = claims["A_vs_B_pooled"]
    assert pooled["integrity"] == "verified" and pooled["figures"]["combine"] == "pooled"
    assert sorted(pooled["figures"]["per_seed"]) == ["A vs B.s1", "A vs B.s2", "A vs B.s3"]
    # each replicate is its own lineage: three checkpoints of B, one per seed, with different weights
    import sqlite3

    with sqlite3.connect(tmp_path / "ledger.db") as connection:
        rows = connection.execute("SELECT arm, sha256 FROM checkpoints WHERE arm LIKE 'B.s%'").fetchall()
    assert {arm for arm, _ in rows} == {"B.s1", "B.s2", "B.s3"}
    assert len({sha for _, sha in rows}) == len(rows)
