"""Gate verdicts: pure functions from an arm's readings (and a reference) to pass / fail.

Each verdict carries what a ledger row needs: ``passed``, ``metric``, ``value``,
``threshold``, ``comparison`` and a ``detail`` dict with a one-line ``summary``. The
runner records them with the checkpoint they decide; the readings themselves are
written as evidence, so every verdict can be recomputed from the ledger.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledger.judge import stats
from ledger.store.final_reading import choose_final


def installation(
    rows: Sequence[Any],
    readings: Sequence[Any],
    depths: tuple[int, int],
    threshold: float,
    per_depth_threshold: float | None = None,
    per_depth_measure: str = "cells",
) -> dict:
    """Active-label accuracy: the decoded state at loop t equals the t-th intermediate symbol, t <= depth; pooled
    over the depths and per depth (each depth's cells, and its rows whose every active cell is right). A
    ``per_depth_threshold`` holds each depth's cells (``cells``) or its rows wholly right (``rows``) to it."""
    low, high = depths
    depth_of = {row.row_id: row.depth for row in rows}
    cells = [r for r in readings if low <= depth_of[r.row_id] <= high and 1 <= r.loop <= depth_of[r.row_id]]
    correct = sum(1 for r in cells if r.correct)
    value = correct / len(cells) if cells else 0.0
    per_depth: dict[int, dict[str, Any]] = {}
    for depth in range(low, high + 1):
        at_depth = [r for r in cells if depth_of[r.row_id] == depth]
        row_ok: dict[str, bool] = {}
        for r in at_depth:
            row_ok[r.row_id] = row_ok.get(r.row_id, True) and bool(r.correct)
        right = sum(1 for r in at_depth if r.correct)
        per_depth[depth] = {
            "cells": len(at_depth),
            "correct": right,
            "accuracy": right / len(at_depth) if at_depth else None,
            "rows": len(row_ok),
            "rows_all_correct": sum(row_ok.values()),
        }
        if per_depth_measure == "rows":
            per_depth[depth]["row_accuracy"] = sum(row_ok.values()) / len(row_ok) if row_ok else None
    judged = "row_accuracy" if per_depth_measure == "rows" else "accuracy"
    lowest = min((d[judged] for d in per_depth.values() if d[judged] is not None), default=None)
    passed = bool(cells) and value >= threshold
    if per_depth_threshold is not None:
        passed = passed and all(d[judged] is not None and d[judged] >= per_depth_threshold for d in per_depth.values())
    each = ", ".join(
        f"{depth}: {d['accuracy']:.3f} ({d['rows_all_correct']}/{d['rows']})"
        for depth, d in per_depth.items()
        if d["rows"]
    )
    unit = " of its rows" if per_depth_measure == "rows" else " of its cells"
    needs = f"needs >= {threshold}" + (
        f", each depth >= {per_depth_threshold}{unit}" if per_depth_threshold is not None else ""
    )
    return {
        "passed": passed,
        "metric": "active_label_accuracy",
        "value": value,
        "threshold": threshold,
        "comparison": ">=",
        "detail": {
            "summary": f"active-label accuracy {correct}/{len(cells)} = {value:.3f} at depth {low}-{high} "
            f"(per depth, active cells right and rows with every active cell right: {each}; {needs})",
            "cells": len(cells),
            "correct": correct,
            "per_depth": {str(depth): d for depth, d in per_depth.items()},
            "lowest_per_depth": lowest,
        },
    }


def guardrail(base_correct: Mapping[str, bool], readings: Sequence[Any], max_drop: float) -> dict:
    """General ability at loop 1 against the base on the same rows: the drop may not exceed ``max_drop``."""
    arm = {r.row_id: bool(r.correct) for r in readings}
    shared = sorted(set(arm) & set(base_correct))
    if not shared:
        return {
            "passed": False,
            "metric": "accuracy_drop",
            "value": None,
            "threshold": max_drop,
            "comparison": "<=",
            "detail": {"summary": "no rows in common with the base reference"},
        }
    base_accuracy = sum(base_correct[r] for r in shared) / len(shared)
    arm_accuracy = sum(arm[r] for r in shared) / len(shared)
    drop = base_accuracy - arm_accuracy
    counts = stats.paired_counts([arm[r] for r in shared], [base_correct[r] for r in shared])
    passed = drop <= max_drop + 1e-12
    return {
        "passed": passed,
        "metric": "accuracy_drop",
        "value": drop,
        "threshold": max_drop,
        "comparison": "<=",
        "detail": {
            "summary": f"loop-1 accuracy {arm_accuracy:.3f} vs base {base_accuracy:.3f}: drop "
            f"{100 * drop:+.1f} points (max {100 * max_drop:.1f}); helped {counts.helped} / hurt {counts.hurt}",
            "arm_accuracy": arm_accuracy,
            "base_accuracy": base_accuracy,
            "n": len(shared),
        },
    }


def retention_floor(
    rows: Sequence[Any],
    readings: Sequence[Any],
    floor: float,
    depths: tuple[int, int] | None,
    measure: str = "accuracy",
) -> dict:
    """Final-reading accuracy (``ledger.store.final_reading``) must stay at or above ``floor``: over every row,
    or (``min_per_depth``) at the depth where it is lowest."""
    depth_of = {row.row_id: row.depth for row in rows}
    final = list(choose_final(readings, depth_of).values())
    if depths is not None:
        final = [r for r in final if depths[0] <= depth_of[r.row_id] <= depths[1]]
    if measure == "min_per_depth":
        from ledger.judge.claims import depth_tally

        tally = depth_tally({r.row_id: (depth_of[r.row_id], bool(r.correct)) for r in final})
        per_depth = {depth: right / n for depth, (right, n) in sorted(tally.items())}
        worst = min(per_depth, key=lambda d: (per_depth[d], d)) if per_depth else None
        value = per_depth[worst] if worst is not None else 0.0
        shown = ", ".join(f"d{depth} {tally[depth][0]}/{tally[depth][1]}" for depth in per_depth)
        summary = f"lowest per-depth accuracy {value:.3f} at depth {worst} ({shown}; floor {floor})"
        detail: dict[str, Any] = {"summary": summary, "per_depth": {str(d): a for d, a in per_depth.items()}}
    else:
        correct = sum(1 for r in final if r.correct)
        value = correct / len(final) if final else 0.0
        detail = {"summary": f"accuracy {correct}/{len(final)} = {value:.3f} (floor {floor})"}
    return {
        "passed": bool(final) and value >= floor,
        "metric": "accuracy" if measure == "accuracy" else "min_per_depth_accuracy",
        "value": value,
        "threshold": floor,
        "comparison": ">=",
        "detail": detail,
    }


def depth_gate(
    a: Mapping[str, tuple[int, bool]], b: Mapping[str, tuple[int, bool]], test: str, alpha: float, consecutive: int
) -> dict:
    """Per-depth A > B on k consecutive depths: the paper's count-based Fisher gate or the paired exact one."""
    shared = sorted(set(a) & set(b))
    depths = sorted({a[r][0] for r in shared})
    if test == "fisher_counts":
        counts = {}
        for depth in depths:
            ids = [r for r in shared if a[r][0] == depth]
            counts[depth] = (sum(a[r][1] for r in ids), len(ids), sum(b[r][1] for r in ids), len(ids))
        result = stats.fisher_depth_gate(counts, alpha, consecutive)
    else:
        pairs = {}
        for depth in depths:
            ids = [r for r in shared if a[r][0] == depth]
            pairs[depth] = ([a[r][1] for r in ids], [b[r][1] for r in ids])
        result = stats.paired_depth_gate(pairs, alpha, consecutive)
    run = result.passing_run
    return {
        "passed": result.passed,
        "metric": f"{test}_depth_gate",
        "value": float(len(run or ())),
        "threshold": float(consecutive),
        "comparison": ">=",
        "detail": {
            "summary": f"{test}: passing depths {list(run) if run else 'none'} (needs {consecutive} consecutive, "
            f"alpha {alpha})",
            "per_depth": result.to_dict()["per_depth"],
        },
    }


def within_rows(a: Mapping[str, tuple[int, bool]], b: Mapping[str, tuple[int, bool]], rows: int) -> dict:
    """Per depth, ``a``'s correct rows at most ``rows`` fewer than ``b``'s on the rows both answered."""
    shared = sorted(set(a) & set(b))
    per_depth: dict[int, tuple[int, int, int]] = {}
    for row in shared:
        depth = a[row][0]
        ca, cb, n = per_depth.get(depth, (0, 0, 0))
        per_depth[depth] = (ca + int(a[row][1]), cb + int(b[row][1]), n + 1)
    gaps = {depth: cb - ca for depth, (ca, cb, _) in sorted(per_depth.items())}
    widest = max(gaps.values(), default=None)
    passed = bool(gaps) and widest is not None and widest <= rows
    trailing = [depth for depth, gap in gaps.items() if gap > rows]
    summary = (
        f"behind by at most {widest} rows at any depth (needs <= {rows})"
        if gaps
        else "no rows in common between the two arms"
    )
    if trailing:
        summary += f"; more than {rows} behind at depth {', '.join(map(str, trailing))}"
    return {
        "passed": passed,
        "metric": "largest_per_depth_shortfall",
        "value": None if widest is None else float(widest),
        "threshold": float(rows),
        "comparison": "<=",
        "detail": {
            "summary": summary,
            "per_depth": {
                str(depth): {"arm": ca, "versus": cb, "rows": n} for depth, (ca, cb, n) in sorted(per_depth.items())
            },
        },
    }


# ----------------------------------------------------------------------------- the gate kinds' entry points


@dataclass
class GateInputs:
    """What a gate can be judged on; the runner fills in what it has (the reference is fetched on demand)."""

    rows: Sequence[Any] = ()
    readings: Sequence[Any] = ()
    base_correct: Callable[[], Mapping[str, bool]] | None = None  # the base's loop-1 reading on the same rows
    arm_outcomes: Mapping[str, tuple[int, bool]] = field(default_factory=dict)  # depth gates: the gate's arm
    versus_outcomes: Mapping[str, tuple[int, bool]] = field(default_factory=dict)  # ... and the arm it compares to


def judge_installation(gate: Any, inputs: GateInputs) -> dict:
    every = gate.per_depth_threshold
    measure = getattr(gate, "per_depth_measure", "cells")
    return installation(inputs.rows, inputs.readings, tuple(gate.depths), gate.threshold, every, measure)


def judge_guardrail(gate: Any, inputs: GateInputs) -> dict:
    if inputs.base_correct is None:
        raise ValueError(f"gate {gate.id}: a guardrail needs the base's reading of its rows")
    return guardrail(inputs.base_correct(), inputs.readings, gate.max_drop)


def judge_retention_floor(gate: Any, inputs: GateInputs) -> dict:
    depths = tuple(gate.depths) if gate.depths else None
    return retention_floor(inputs.rows, inputs.readings, gate.floor, depths, getattr(gate, "measure", "accuracy"))


def judge_depth_gate(gate: Any, inputs: GateInputs) -> dict:
    return depth_gate(inputs.arm_outcomes, inputs.versus_outcomes, gate.test, gate.alpha, gate.consecutive)


def judge_within_rows(gate: Any, inputs: GateInputs) -> dict:
    return within_rows(inputs.arm_outcomes, inputs.versus_outcomes, gate.rows)
