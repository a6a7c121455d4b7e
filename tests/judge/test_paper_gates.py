"""The paper's gates exactly: the adapter within 8 rows of the full block at every depth, the installation gate
per depth beside the pooled one, and the frontier's sensitivity bars with their censored bounds."""

from __future__ import annotations

from types import SimpleNamespace

from ledger.judge.claims import _sensitivity
from ledger.judge.gates import installation, within_rows


def _outcomes(correct_by_depth: dict[int, int], rows: int = 64) -> dict[str, tuple[int, bool]]:
    return {f"d{depth}_{i}": (depth, i < right) for depth, right in correct_by_depth.items() for i in range(rows)}


def test_within_rows_holds_the_arm_to_k_rows_of_the_other_at_every_depth():
    full_block = _outcomes({1: 64, 2: 63, 3: 63, 4: 59})
    # the paper's adapter at 4,000 steps (64, 64, 60, 53): 6 rows behind at depth 4, within 8 everywhere
    adapter = _outcomes({1: 64, 2: 64, 3: 60, 4: 53})
    verdict = within_rows(adapter, full_block, 8)
    assert verdict["passed"] and verdict["value"] == 6.0
    assert verdict["detail"]["per_depth"]["4"] == {"arm": 53, "versus": 59, "rows": 64}
    # one depth 9 rows behind fails the gate and is named; leading by any number passes
    behind = _outcomes({1: 64, 2: 63, 3: 54, 4: 59})
    failed = within_rows(behind, full_block, 8)
    assert not failed["passed"] and "more than 8 behind at depth 3" in failed["detail"]["summary"]
    assert within_rows(full_block, _outcomes({1: 10, 2: 10, 3: 10, 4: 10}), 8)["passed"]
    assert not within_rows({}, full_block, 8)["passed"]


def _installation_readings(wrong_cells: dict[int, int]):
    """Depth 1-4, 4 rows each, every active cell read; ``wrong_cells[d]`` rows of depth d have loop 1 wrong."""
    rows, readings = [], []
    for depth in range(1, 5):
        for i in range(4):
            row_id = f"d{depth}_{i}"
            rows.append(SimpleNamespace(row_id=row_id, depth=depth))
            for loop in range(1, depth + 1):
                correct = not (loop == 1 and i < wrong_cells.get(depth, 0))
                readings.append(SimpleNamespace(row_id=row_id, loop=loop, correct=correct))
    return rows, readings


def test_the_installation_gate_counts_each_depth_beside_the_pool():
    rows, readings = _installation_readings({4: 2})
    pooled = installation(rows, readings, (1, 4), 0.9)
    # 40 active cells, 2 wrong: pooled 0.95 passes; depth 4 alone is 14/16 of its cells and 2/4 of its rows
    assert pooled["passed"] and pooled["value"] == 38 / 40
    assert pooled["detail"]["per_depth"]["4"] == {
        "cells": 16,
        "correct": 14,
        "accuracy": 14 / 16,
        "rows": 4,
        "rows_all_correct": 2,
    }
    # the summary shows what per_depth_threshold judges (each depth's cells) beside the rows wholly right
    assert "1: 1.000 (4/4), 2: 1.000 (4/4), 3: 1.000 (4/4), 4: 0.875 (2/4)" in pooled["detail"]["summary"]
    assert pooled["detail"]["lowest_per_depth"] == 14 / 16
    # the same readings held to 0.9 at every depth: depth 4 fails it
    every = installation(rows, readings, (1, 4), 0.9, per_depth_threshold=0.9)
    assert not every["passed"] and "each depth >= 0.9" in every["detail"]["summary"]
    assert installation(rows, readings, (1, 4), 0.9, per_depth_threshold=0.85)["passed"]


def test_the_installation_gate_may_hold_each_depth_to_its_rows_as_the_paper_counts_them():
    rows, readings = _installation_readings({4: 1})
    # depth 4: one wrong cell in 16 (0.9375 of its cells) but one row in 4 not wholly right (0.75 of its rows)
    cells = installation(rows, readings, (1, 4), 0.9, per_depth_threshold=0.9)
    by_rows = installation(rows, readings, (1, 4), 0.9, per_depth_threshold=0.9, per_depth_measure="rows")
    assert cells["passed"] and not by_rows["passed"]
    assert by_rows["detail"]["per_depth"]["4"]["row_accuracy"] == 3 / 4
    assert by_rows["detail"]["lowest_per_depth"] == 3 / 4 and cells["detail"]["lowest_per_depth"] == 15 / 16
    assert "each depth >= 0.9 of its rows" in by_rows["detail"]["summary"]
    assert installation(rows, readings, (1, 4), 0.9, per_depth_threshold=0.75, per_depth_measure="rows")["passed"]


def test_sensitivity_bars_give_their_censored_bounds():
    # never below 0.60 through depth 14: at least 14; below 0.80 from the first depth: at most 1
    curve = {1: 0.75, 2: 0.74, 14: 0.7}
    figures = _sensitivity(curve)
    assert figures["frontier_at_0.6"] is None and figures["frontier_at_0.6_at_least"] == 14
    assert figures["frontier_at_0.8"] is None and figures["frontier_at_0.8_at_most"] == 1
    crossed = _sensitivity({1: 1.0, 2: 0.5})
    assert crossed["frontier_at_0.6"] is not None and "frontier_at_0.6_at_least" not in crossed
