"""The acquisition-retention boundary on known readings: the retention floor's lowest per-depth accuracy, and
keeps_all over every checkpoint of an arm."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ledger.judge.checkpoint_claims import keeps_all
from ledger.judge.claims import Unverifiable
from ledger.judge.gates import retention_floor
from ledger.protocol.checkpoint_claims import KeepsAllClaim


def readings(correct_by_depth: dict[int, list[bool]]):
    rows, reads = [], []
    for depth, results in correct_by_depth.items():
        for i, right in enumerate(results):
            row_id = f"d{depth}_{i}"
            rows.append(SimpleNamespace(row_id=row_id, depth=depth))
            reads.append(SimpleNamespace(row_id=row_id, loop=depth, correct=right, prediction="A"))
    return rows, reads


def test_the_floor_reads_the_worst_depth_or_every_row() -> None:
    rows, reads = readings({1: [True] * 4, 2: [True, True, True, False], 3: [True, False, False, False]})
    worst = retention_floor(rows, reads, 0.5, None, "min_per_depth")
    assert (worst["value"], worst["passed"]) == (0.25, False)
    assert "at depth 3" in worst["detail"]["summary"] and worst["metric"] == "min_per_depth_accuracy"
    overall = retention_floor(rows, reads, 0.5, None)
    assert (overall["value"], overall["passed"]) == (8 / 12, True)
    assert retention_floor(rows, reads, 0.75, (1, 2), "min_per_depth")["passed"]


class Evidence:
    def __init__(self, by_manifest):
        self.by_manifest = by_manifest

    def checkpoint_outcomes(self, arm, manifest):
        return self.by_manifest.get(manifest, {})


def outcomes(right: int, n: int, depth: int = 1) -> dict:
    return {f"r{i}": (depth, i < right) for i in range(n)}


def claim(expect: str = "none") -> KeepsAllClaim:
    return KeepsAllClaim.model_validate(
        {
            "id": "c",
            "statement": "s",
            "statistic": "keeps_all",
            "arm": "R",
            "manifest": "new",
            "expect": expect,
            "conditions": [
                {"manifest": "new", "at_least": 0.9},
                {"manifest": "old", "measure": "min_per_depth", "at_least": 0.93},
            ],
        }
    )


def test_no_checkpoint_keeps_both_operations() -> None:
    evidence = Evidence(
        {
            # stage 1 learns the new operation and loses the old; stage 2 keeps the old, not the new
            "new": {"c1": ("learn", outcomes(10, 10)), "c2": ("rehearse", outcomes(5, 10))},
            "old": {
                "c1": ("learn", {**outcomes(10, 10, 1), **{f"x{i}": (2, i < 8) for i in range(10)}}),
                "c2": ("rehearse", outcomes(10, 10)),
            },
        }
    )
    result = keeps_all(claim(), evidence)
    assert result.outcome == "supported" and result.figures["keeping"] == 0 and result.figures["checkpoints"] == 2
    assert [row["values"] for row in result.figures["table"]] == [[1.0, 0.8], [0.5, 1.0]]
    assert keeps_all(claim("some"), evidence).outcome == "refuted"
    evidence.by_manifest["old"]["c1"] = ("learn", outcomes(10, 10))
    kept = keeps_all(claim(), evidence)
    assert kept.outcome == "refuted" and "learn (c1)" in kept.reason


def test_checkpoints_that_did_not_read_every_manifest_decide_nothing() -> None:
    with pytest.raises(Unverifiable, match="no checkpoint of arm 'R' read every condition"):
        keeps_all(claim(), Evidence({"new": {"c1": ("learn", outcomes(1, 1))}, "old": {"c2": ("x", outcomes(1, 1))}}))
    with pytest.raises(ValueError, match="first condition"):
        KeepsAllClaim.model_validate({**claim().model_dump(), "manifest": "old"})
