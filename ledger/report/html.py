"""``ledger report``: a self-contained HTML report (plus PNG figures) read from the store alone.

    from ledger.report.html import write_report, report_for_protocol_name
    write_report(store, (protocol_sha,), Path("report"), title="Phase A", support_depths=(1, 8))
    report_for_protocol_name(store, "phaseA", Path("report"))   # shas, support and claims by name

Everything is scoped to the given protocol (or imported release) SHA-256s: manifests by
``manifests.protocol_sha256``, evidence, checkpoints and gates by ``runs.protocol_sha256``,
claims by ``claims.protocol_sha256`` (or a ``claim_prefix + "/"`` id). Nothing comes from
memory or from files other than the ledger database. The report has

1. per-depth final accuracy of every arm on each rule-chasing evaluation manifest, with
   Wilson 95% intervals and the training support range shaded;
2. a per-loop active-label heatmap for each recurrent arm (loop <= depth cells);
3. accuracy against median latency per depth (arms that recorded latency);
4. the claims table with each claim's first recorded outcome;
5. the checkpoint lineage with status and the gate results that decided it;
6. a header with the title, protocol SHA-256s and the ledger head.

The output is deterministic: the same ledger head gives the same HTML and (with the same
matplotlib) the same PNG bytes. No wall-clock time is written anywhere. This module never
imports torch, and draws with matplotlib's Agg canvas without touching pyplot's global
backend.
"""

from __future__ import annotations

import html
import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import matplotlib
import matplotlib.style
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ledger.judge.stats import wilson_interval
from ledger.store import Store

__all__ = [
    "ArmSeries",
    "DepthPoint",
    "HeatmapGrid",
    "accuracy_series",
    "active_label_grid",
    "claim_rows",
    "lineage_nodes",
    "report_for_protocol_name",
    "resolve_protocol",
    "rule_chasing_manifests",
    "support_depths_of",
    "write_report",
]

FRONTIER_BAR = 0.71  # (1/4)^(1/4), SPEC section 5
DPI = 100
_PNG_METADATA = {"Software": None}  # no version string, no time: identical bytes on re-runs
_STYLE = "default"  # ignore a user's matplotlibrc: same inputs, same pixels
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*", "h", "p")


# ----------------------------------------------------------------------------- data


@dataclass(frozen=True)
class DepthPoint:
    depth: int
    n: int  # rows with a final reading (correct not NULL)
    correct: int
    accuracy: float
    low: float  # Wilson 95%
    high: float
    median_latency_ms: float | None
    n_latency: int  # rows at this depth with a recorded latency


@dataclass
class ArmSeries:
    """The final readings of one arm (one checkpoint) on one manifest."""

    arm: str
    checkpoint_sha256: str
    label: str
    points: list[DepthPoint] = field(default_factory=list)
    recurrent: bool = False  # any evidence at loop >= 1

    @property
    def has_latency(self) -> bool:
        return any(point.median_latency_ms is not None for point in self.points)


@dataclass
class HeatmapGrid:
    """Active-label accuracy by (depth, loop): ``values[i][j]`` for ``depths[i]``, ``loops[j]``.

    None where loop > depth (no single right answer: ``correct`` is NULL) or where nothing
    was measured. ``counts`` holds the number of cells read (0 for None).
    """

    arm: str
    checkpoint_sha256: str
    label: str
    depths: list[int]
    loops: list[int]
    values: list[list[float | None]]
    counts: list[list[int]]


def _in_clause(shas: Iterable[str], prefix: str = "p") -> tuple[str, dict[str, str]]:
    params = {f"{prefix}{i}": sha for i, sha in enumerate(shas)}
    if not params:
        raise ValueError("give at least one protocol sha256")
    return ", ".join(f":{name}" for name in params), params


def rule_chasing_manifests(store: Store, protocol_sha256s: tuple[str, ...]) -> list[dict]:
    """The scoped manifests whose rows are rule chasing and that hold evidence, registration order.

    Manifests a registered protocol declares with role ``train`` are left out.
    """
    placeholders, params = _in_clause(protocol_sha256s)
    train = _train_manifest_names(store, protocol_sha256s)
    found = store.query(
        "SELECT m.sha256, m.name, m.n_rows, m.protocol_sha256 FROM manifests m "
        f"WHERE m.protocol_sha256 IN ({placeholders}) "
        "AND EXISTS (SELECT 1 FROM rows r WHERE r.manifest_sha256 = m.sha256 AND r.task = 'rule_chasing') "
        "AND EXISTS (SELECT 1 FROM evidence e WHERE e.manifest_sha256 = m.sha256) "
        "ORDER BY m.id",
        params,
    ).records()
    return [m for m in found if (m["protocol_sha256"], m["name"]) not in train]


def _train_manifest_names(store: Store, protocol_sha256s: tuple[str, ...]) -> set[tuple[str, str]]:
    names = set()
    for sha, document in _protocol_documents(store, protocol_sha256s):
        for manifest in document.get("manifests") or []:
            if isinstance(manifest, dict) and manifest.get("role") == "train" and "id" in manifest:
                names.add((sha, manifest["id"]))
    return names


def _protocol_documents(store: Store, protocol_sha256s: tuple[str, ...]) -> list[tuple[str, dict]]:
    placeholders, params = _in_clause(protocol_sha256s)
    rows = store.query(
        f"SELECT sha256, canonical_json FROM protocols WHERE sha256 IN ({placeholders}) ORDER BY id", params
    ).records()
    documents = []
    for row in rows:
        try:
            document = json.loads(row["canonical_json"])
        except (TypeError, ValueError):
            continue
        if isinstance(document, dict):
            documents.append((row["sha256"], document))
    return documents


def _evidence(store: Store, protocol_sha256s: tuple[str, ...], manifest_sha256: str) -> list[dict]:
    placeholders, params = _in_clause(protocol_sha256s)
    return store.query(
        "SELECT e.id, e.arm, e.checkpoint_sha256, e.row_id, r.depth, e.loop, e.correct, e.latency_ms "
        "FROM evidence e "
        "JOIN rows r ON r.manifest_sha256 = e.manifest_sha256 AND r.row_id = e.row_id "
        "JOIN runs u ON u.run_id = e.run_id "
        f"WHERE e.manifest_sha256 = :manifest AND u.protocol_sha256 IN ({placeholders}) "
        "ORDER BY e.id",
        {"manifest": manifest_sha256, **params},
    ).records()


def _series_keys(records: list[dict]) -> list[tuple[str, str]]:
    """(arm, checkpoint) pairs in order of first evidence."""
    seen: dict[tuple[str, str], None] = {}
    for record in records:
        seen.setdefault((record["arm"], record["checkpoint_sha256"]), None)
    return list(seen)


def _labels(keys: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    per_arm: dict[str, int] = {}
    for arm, _ in keys:
        per_arm[arm] = per_arm.get(arm, 0) + 1
    return {(arm, sha): arm if per_arm[arm] == 1 else f"{arm} @ {sha[:8]}" for arm, sha in keys}


def _final_readings(records: list[dict]) -> dict[str, dict]:
    """row_id -> the final reading: loop = depth if recorded, else loop 0; the latest of repeats.

    Rows whose final cell has no single right answer (correct NULL) are left out.
    """
    chosen: dict[str, dict] = {}
    for record in records:  # ordered by id: a later repeat replaces an earlier one
        if record["correct"] is None:
            continue
        depth = record["depth"]
        if record["loop"] == depth:
            chosen[record["row_id"]] = record
        elif record["loop"] == 0:
            current = chosen.get(record["row_id"])
            if current is None or current["loop"] == 0:
                chosen[record["row_id"]] = record
    return chosen


def _depth_points(readings: dict[str, dict]) -> list[DepthPoint]:
    by_depth: dict[int, list[dict]] = {}
    for record in readings.values():
        by_depth.setdefault(int(record["depth"]), []).append(record)
    points = []
    for depth in sorted(by_depth):
        cells = by_depth[depth]
        n = len(cells)
        correct = sum(1 for cell in cells if cell["correct"])
        interval = wilson_interval(correct, n)
        latencies = [float(cell["latency_ms"]) for cell in cells if cell["latency_ms"] is not None]
        points.append(
            DepthPoint(
                depth=depth,
                n=n,
                correct=correct,
                accuracy=correct / n,
                low=interval.lower,
                high=interval.upper,
                median_latency_ms=statistics.median(latencies) if latencies else None,
                n_latency=len(latencies),
            )
        )
    return points


def accuracy_series(store: Store, protocol_sha256s: tuple[str, ...], manifest_sha256: str) -> list[ArmSeries]:
    """Per-depth final accuracy (Wilson 95%) and median latency of every arm on one manifest.

    One series per (arm, checkpoint); the label is the arm, with the checkpoint's first 8
    hex digits when an arm has several checkpoints on the manifest. Series without any
    final reading are kept (empty ``points``) so that a recurrent arm read only at other
    loops still gets its heatmap.
    """
    return _series(_evidence(store, protocol_sha256s, manifest_sha256))


def _series(records: list[dict]) -> list[ArmSeries]:
    keys = _series_keys(records)
    labels = _labels(keys)
    grouped: dict[tuple[str, str], list[dict]] = {key: [] for key in keys}
    for record in records:
        grouped[(record["arm"], record["checkpoint_sha256"])].append(record)
    series = []
    for key in keys:
        rows = grouped[key]
        series.append(
            ArmSeries(
                arm=key[0],
                checkpoint_sha256=key[1],
                label=labels[key],
                points=_depth_points(_final_readings(rows)),
                recurrent=any(row["loop"] >= 1 for row in rows),
            )
        )
    return series


def active_label_grid(
    store: Store,
    protocol_sha256s: tuple[str, ...],
    manifest_sha256: str,
    arm: str,
    checkpoint_sha256: str | None = None,
) -> HeatmapGrid | None:
    """Share of cells whose decoded state equals the target at each (depth, loop <= depth).

    Reads ``evidence.correct`` at every loop >= 1 (the latest repeat of a cell counts);
    cells above the diagonal (loop > depth, correct NULL) and unmeasured cells are None.
    Loops run from 1 to the deepest loop recorded. ``checkpoint_sha256`` None: the arm's
    first checkpoint on the manifest. None if the arm has no loop >= 1 evidence there.
    """
    return _grid(_evidence(store, protocol_sha256s, manifest_sha256), arm, checkpoint_sha256)


def _grid(all_records: list[dict], arm: str, checkpoint_sha256: str | None) -> HeatmapGrid | None:
    records = [
        record
        for record in all_records
        if record["arm"] == arm
        and record["loop"] >= 1
        and (checkpoint_sha256 is None or record["checkpoint_sha256"] == checkpoint_sha256)
    ]
    if not records:
        return None
    checkpoint = checkpoint_sha256 or records[0]["checkpoint_sha256"]
    records = [record for record in records if record["checkpoint_sha256"] == checkpoint]
    cells: dict[tuple[str, int], dict] = {}
    for record in records:
        cells[(record["row_id"], int(record["loop"]))] = record
    depths = sorted({int(record["depth"]) for record in records})
    loops = list(range(1, max(int(record["loop"]) for record in records) + 1))
    tallies: dict[tuple[int, int], list[int]] = {}
    for (_, loop), record in cells.items():
        depth = int(record["depth"])
        if loop > depth or record["correct"] is None:
            continue
        tally = tallies.setdefault((depth, loop), [0, 0])
        tally[0] += 1 if record["correct"] else 0
        tally[1] += 1
    values: list[list[float | None]] = []
    counts: list[list[int]] = []
    for depth in depths:
        row_values: list[float | None] = []
        row_counts: list[int] = []
        for loop in loops:
            tally = tallies.get((depth, loop))
            row_values.append(tally[0] / tally[1] if tally else None)
            row_counts.append(tally[1] if tally else 0)
        values.append(row_values)
        counts.append(row_counts)
    label = _labels(_series_keys(all_records)).get((arm, checkpoint), arm)
    return HeatmapGrid(arm, checkpoint, label, depths, loops, values, counts)


def claim_rows(
    store: Store, protocol_sha256s: tuple[str, ...], claim_prefix: str | None = None
) -> list[dict]:
    """Every claim of these protocols with its first recorded outcome (None if never evaluated).

    Each dict: claim_id, protocol_sha256, spec (dict), statement, statistic, outcome (the
    first outcome's row or None), detail (its detail_json as a dict), p_value,
    n_evaluations, latest_outcome.
    """
    wanted = set(protocol_sha256s)
    prefix = f"{claim_prefix}/" if claim_prefix else None
    claims = [
        claim
        for claim in store.query(
            "SELECT id, claim_id, protocol_sha256, spec_json FROM claims ORDER BY id"
        ).records()
        if claim["protocol_sha256"] in wanted or (prefix is not None and claim["claim_id"].startswith(prefix))
    ]
    outcomes = store.query(
        "SELECT o.id, o.claim_id, o.outcome, o.reason, o.stat_test_id, o.detail_json, t.p_value AS test_p_value "
        "FROM claim_outcomes o LEFT JOIN stat_tests t ON t.test_id = o.stat_test_id ORDER BY o.id"
    ).records()
    first: dict[str, dict] = {}
    latest: dict[str, dict] = {}
    n_evaluations: dict[str, int] = {}
    for outcome in outcomes:
        first.setdefault(outcome["claim_id"], outcome)
        latest[outcome["claim_id"]] = outcome
        n_evaluations[outcome["claim_id"]] = n_evaluations.get(outcome["claim_id"], 0) + 1
    rows = []
    for claim in claims:
        spec = _json_dict(claim["spec_json"])
        outcome = first.get(claim["claim_id"])
        detail = _json_dict(outcome["detail_json"]) if outcome else {}
        p_value = detail.get("p_value")
        if p_value is None and outcome is not None:
            p_value = outcome["test_p_value"]
        last = latest.get(claim["claim_id"])
        rows.append(
            {
                "claim_id": claim["claim_id"],
                "protocol_sha256": claim["protocol_sha256"],
                "spec": spec,
                "statement": spec.get("statement") or "",
                "statistic": spec.get("statistic") or detail.get("statistic") or "",
                "outcome": outcome,
                "detail": detail,
                "p_value": p_value,
                "n_evaluations": n_evaluations.get(claim["claim_id"], 0),
                "latest_outcome": last["outcome"] if last else None,
            }
        )
    return rows


def _json_dict(text: str | None) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def lineage_nodes(store: Store, protocol_sha256s: tuple[str, ...]) -> list[dict]:
    """Checkpoints of these protocols' runs (and the checkpoints their evidence names), with
    every ancestor, in registration order. Each dict is the checkpoint row plus ``gates``
    (its gate_results rows, by id) and ``in_scope`` (False for an ancestor from elsewhere)."""
    placeholders, params = _in_clause(protocol_sha256s)
    scoped = store.query(
        "SELECT c.sha256 FROM checkpoints c JOIN runs u ON u.run_id = c.run_id "
        f"WHERE u.protocol_sha256 IN ({placeholders}) "
        "UNION "
        "SELECT DISTINCT e.checkpoint_sha256 FROM evidence e JOIN runs u ON u.run_id = e.run_id "
        f"WHERE u.protocol_sha256 IN ({placeholders})",
        params,
    ).records()
    in_scope = {row["sha256"] for row in scoped}
    if not in_scope:
        return []
    wanted = set(in_scope)
    for sha in sorted(in_scope):
        wanted.update(row["ancestor_sha256"] for row in store.lineage(sha))
    placeholders2, params2 = _in_clause(sorted(wanted), "c")
    nodes = store.query(
        "SELECT id, sha256, path, arm, parent_sha256, status, run_id, stage, recorded_at FROM checkpoints "
        f"WHERE sha256 IN ({placeholders2}) ORDER BY id",
        params2,
    ).records()
    gates: dict[str, list[dict]] = {}
    for gate in store.query(
        "SELECT id, checkpoint_sha256, run_id, gate, metric, value, threshold, comparison, passed, action "
        f"FROM gate_results WHERE checkpoint_sha256 IN ({placeholders2}) ORDER BY id",
        params2,
    ).records():
        gates.setdefault(gate["checkpoint_sha256"], []).append(gate)
    for node in nodes:
        node["gates"] = gates.get(node["sha256"], [])
        node["in_scope"] = node["sha256"] in in_scope
    return nodes


# ----------------------------------------------------------------------------- protocol helpers


def support_depths_of(canonical: dict | str) -> tuple[int, int] | None:
    """The training support of a registered protocol: the span (min low, max high) of the
    depth ranges of every manifest a training stage uses; None if no stage trains on a
    rule-chasing manifest (e.g. an imported release)."""
    document = json.loads(canonical) if isinstance(canonical, str) else canonical
    if not isinstance(document, dict):
        return None
    manifests = {
        m["id"]: m for m in document.get("manifests") or [] if isinstance(m, dict) and "id" in m
    }
    lows, highs = [], []
    for arm in document.get("arms") or []:
        if not isinstance(arm, dict):
            continue
        for stage in arm.get("stages") or []:
            manifest = manifests.get(stage.get("manifest")) if isinstance(stage, dict) else None
            depths = manifest.get("depths") if manifest else None
            if isinstance(depths, (list, tuple)) and len(depths) == 2:
                lows.append(int(depths[0]))
                highs.append(int(depths[1]))
    return (min(lows), max(highs)) if lows else None


def resolve_protocol(store: Store, name: str) -> tuple[tuple[str, ...], tuple[int, int] | None]:
    """The registered SHA-256s of protocol or release ``name`` (every version, registration
    order) and the union of their training supports. LookupError if never registered."""
    rows = store.query(
        "SELECT sha256, canonical_json FROM protocols WHERE name = :name ORDER BY id", {"name": name}
    ).records()
    if not rows:
        raise LookupError(f"no protocol or release named {name!r} is registered in this ledger")
    supports = [s for s in (support_depths_of(row["canonical_json"]) for row in rows) if s is not None]
    support = (min(s[0] for s in supports), max(s[1] for s in supports)) if supports else None
    return tuple(row["sha256"] for row in rows), support


def report_for_protocol_name(store: Store, name: str, out_dir: str | Path, *, title: str | None = None) -> Path:
    """``write_report`` for every registered version of protocol (or release) ``name``, with
    its claims (``name/...``) and the training support read from the registered protocol."""
    shas, support = resolve_protocol(store, name)
    return write_report(
        store, shas, Path(out_dir), title=title or f"{name}: ledger report", support_depths=support, claim_prefix=name
    )


# ----------------------------------------------------------------------------- figures


def _slug(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()
    return slug[:60] or "x"


def _new_figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Figure, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=DPI, metadata=_PNG_METADATA)


def _colors(labels: list[str]) -> dict[str, tuple]:
    palette = list(matplotlib.colormaps["tab10"].colors) if len(labels) <= 10 else list(
        matplotlib.colormaps["tab20"].colors
    )
    return {label: palette[i % len(palette)] for i, label in enumerate(labels)}


def _accuracy_figure(
    path: Path, manifest: str, series: list[ArmSeries], support: tuple[int, int] | None, colors: dict[str, tuple]
) -> None:
    figure = _new_figure(9.0, 5.0)
    axes = figure.add_axes((0.08, 0.11, 0.68, 0.80))
    depths = sorted({point.depth for s in series for point in s.points})
    if support is not None:
        axes.axvspan(support[0] - 0.5, support[1] + 0.5, color="0.88", zorder=0,
                     label=f"training support {support[0]}-{support[1]}")
    axes.axhline(FRONTIER_BAR, color="0.45", linestyle="--", linewidth=1, zorder=1, label=f"frontier bar {FRONTIER_BAR}")
    for index, s in enumerate(series):
        if not s.points:
            continue
        x = np.array([p.depth for p in s.points], dtype=float)
        y = np.array([p.accuracy for p in s.points])
        error = np.array([[p.accuracy - p.low for p in s.points], [p.high - p.accuracy for p in s.points]])
        axes.errorbar(x, y, yerr=error, color=colors[s.label], marker=_MARKERS[index % len(_MARKERS)], markersize=4,
                      linewidth=1.3, capsize=2.5, elinewidth=0.9, label=s.label, zorder=3)
    axes.set_xlabel("row depth (hops)")
    axes.set_ylabel("final accuracy (Wilson 95% CI)")
    axes.set_title(f"Per-depth accuracy on manifest {manifest}")
    axes.set_ylim(-0.03, 1.03)
    if depths:
        axes.set_xlim(depths[0] - 0.7, depths[-1] + 0.7)
        axes.set_xticks(depths)
    axes.grid(True, axis="y", color="0.9", linewidth=0.6)
    axes.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8, title="arm", title_fontsize=9, frameon=False)
    _save(figure, path)


def _heatmap_figure(path: Path, manifest: str, grid: HeatmapGrid) -> None:
    n_depths, n_loops = len(grid.depths), len(grid.loops)
    width = min(12.0, 2.6 + 0.5 * n_loops)
    height = min(10.0, 1.7 + 0.42 * n_depths)
    figure = _new_figure(width, height)
    axes = figure.add_axes((0.16, 0.16, 0.64, 0.70))
    data = np.ma.masked_invalid(np.array([[np.nan if v is None else v for v in row] for row in grid.values], dtype=float))
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="0.82")
    image = axes.imshow(data, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto", origin="upper", interpolation="nearest")
    axes.set_xticks(range(n_loops), [str(loop) for loop in grid.loops])
    axes.set_yticks(range(n_depths), [str(depth) for depth in grid.depths])
    axes.set_xlabel("loop t")
    axes.set_ylabel("row depth")
    axes.set_title(f"Active-label accuracy: {grid.label} on {manifest}", fontsize=10)
    if n_loops <= 16 and n_depths <= 16:
        for i, row in enumerate(grid.values):
            for j, value in enumerate(row):
                if value is not None:
                    axes.text(j, i, f"{100 * value:.0f}", ha="center", va="center", fontsize=7,
                              color="white" if value < 0.6 else "black")
    colorbar_axes = figure.add_axes((0.84, 0.16, 0.03, 0.70))
    colorbar = figure.colorbar(image, cax=colorbar_axes)
    colorbar.set_label("share = t-th intermediate symbol")
    _save(figure, path)


def _latency_figure(path: Path, manifest: str, series: list[ArmSeries], colors: dict[str, tuple]) -> None:
    figure = _new_figure(9.0, 5.0)
    axes = figure.add_axes((0.08, 0.11, 0.68, 0.80))
    latencies = []
    for index, s in enumerate(series):
        points = [p for p in s.points if p.median_latency_ms is not None]
        if not points:
            continue
        x = [p.median_latency_ms for p in points]
        y = [p.accuracy for p in points]
        latencies.extend(x)
        axes.plot(x, y, linestyle="none", marker=_MARKERS[index % len(_MARKERS)], markersize=6,
                  color=colors[s.label], label=s.label)
        for p in points:
            axes.annotate(str(p.depth), (p.median_latency_ms, p.accuracy), textcoords="offset points",
                          xytext=(3, 3), fontsize=6, color=colors[s.label])
    if latencies and min(latencies) > 0 and max(latencies) / min(latencies) > 20:
        axes.set_xscale("log")
    axes.set_xlabel("median latency per row (ms), batch 1")
    axes.set_ylabel("final accuracy")
    axes.set_ylim(-0.03, 1.03)
    axes.set_title(f"Accuracy vs latency per depth on manifest {manifest} (labels: depth)")
    axes.grid(True, color="0.9", linewidth=0.6)
    axes.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8, title="arm", title_fontsize=9, frameon=False)
    _save(figure, path)


# ----------------------------------------------------------------------------- HTML

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1100px;
       color: #1b1b1b; line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
h3 { margin-top: 1.5em; }
code, .sha { font-family: "SFMono-Regular", Menlo, Consolas, monospace; font-size: 0.88em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.86em; }
th, td { border: 1px solid #d0d0d0; padding: 0.25em 0.5em; vertical-align: top; text-align: left; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.blank { background: #dcdcdc; }
figure { margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid #e4e4e4; }
figcaption { font-size: 0.88em; color: #444; }
.outcome-supported { color: #116611; font-weight: 600; }
.outcome-refuted { color: #aa1111; font-weight: 600; }
.outcome-unverifiable { color: #aa6600; font-weight: 600; }
.outcome-none { color: #777; font-style: italic; }
.status { padding: 0 0.35em; border-radius: 3px; font-size: 0.85em; }
.status-promoted { background: #d8f0d8; }
.status-exploratory { background: #f6ecc8; }
.status-failed { background: #f6d0d0; }
.gate-pass { color: #116611; }
.gate-fail { color: #aa1111; font-weight: 600; }
ul.lineage, ul.lineage ul { list-style: none; padding-left: 1.4em; border-left: 1px dotted #bbb; }
ul.lineage li { margin: 0.3em 0; }
.note { color: #555; font-size: 0.9em; }
details summary { cursor: pointer; color: #335; }
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
            return f"{value:.3g}"
        return f"{value:.4g}"
    return str(value)


def _fmt_p(p: Any, detail: dict) -> str:
    if p is None:
        return "—"
    if isinstance(p, (int, float)) and p == 0:
        log10 = (detail.get("figures") or {}).get("log10_p")
        return f"10^{log10:.2f}" if isinstance(log10, (int, float)) else "< 1e-308"
    return _fmt(float(p))


def _figures_html(figures: dict) -> str:
    scalars = [(k, v) for k, v in sorted(figures.items()) if not isinstance(v, (dict, list))]
    nested = [(k, v) for k, v in sorted(figures.items()) if isinstance(v, (dict, list))]
    parts = []
    if scalars:
        parts.append("<br>".join(f"{_e(k)} = {_e(_fmt(v))}" for k, v in scalars))
    for key, value in nested:
        if isinstance(value, dict):
            items = sorted(value.items(), key=lambda kv: (int(kv[0]) if str(kv[0]).isdigit() else math.inf, str(kv[0])))
            body = ", ".join(f"{_e(k)}: {_e(_fmt(v))}" for k, v in items)
        else:
            body = ", ".join(_e(_fmt(v)) for v in value)
        parts.append(f"<details><summary>{_e(key)}</summary>{body}</details>")
    return "".join(parts) or "—"


def _img(src: str, alt: str, caption: str) -> str:
    return (
        f'<figure><img src="{_e(src)}" alt="{_e(alt)}">'
        f"<figcaption>{caption}</figcaption></figure>"
    )


def _accuracy_table(manifest: str, series: list[ArmSeries]) -> str:
    depths = sorted({p.depth for s in series for p in s.points})
    head = "".join(f"<th>{d}</th>" for d in depths)
    lines = [f'<table class="depth-accuracy" data-manifest="{_e(manifest)}"><tr><th>arm</th><th>checkpoint</th>'
             f"<th>correct / n</th>{head}</tr>"]
    for s in series:
        if not s.points:
            continue
        by_depth = {p.depth: p for p in s.points}
        total_n = sum(p.n for p in s.points)
        total_correct = sum(p.correct for p in s.points)
        cells = []
        for d in depths:
            p = by_depth.get(d)
            if p is None:
                cells.append('<td class="blank"></td>')
            else:
                cells.append(
                    f'<td class="num" title="{p.correct}/{p.n}; Wilson 95% {p.low:.3f}-{p.high:.3f}">'
                    f"{100 * p.accuracy:.1f}</td>"
                )
        lines.append(
            f'<tr data-arm="{_e(s.arm)}"><td>{_e(s.label)}</td><td class="sha">{_e(s.checkpoint_sha256[:12])}</td>'
            f'<td class="num">{total_correct} / {total_n}</td>{"".join(cells)}</tr>'
        )
    lines.append("</table>")
    return "".join(lines)


def _heatmap_table(grid: HeatmapGrid) -> str:
    head = "".join(f"<th>t={loop}</th>" for loop in grid.loops)
    lines = [f'<table class="heatmap" data-arm="{_e(grid.arm)}" data-checkpoint="{_e(grid.checkpoint_sha256)}">'
             f"<tr><th>depth</th>{head}</tr>"]
    for depth, values, counts in zip(grid.depths, grid.values, grid.counts):
        cells = []
        for loop, value, count in zip(grid.loops, values, counts):
            if value is None:
                kind = "above-diagonal" if loop > depth else "unmeasured"
                cells.append(f'<td class="blank" data-loop="{loop}" data-cell="{kind}"></td>')
            else:
                cells.append(f'<td class="num" data-loop="{loop}" data-cell="active" title="n={count}">'
                             f"{100 * value:.1f}</td>")
        lines.append(f'<tr data-depth="{depth}"><th>{depth}</th>{"".join(cells)}</tr>')
    lines.append("</table>")
    return "".join(lines)


def _lineage_html(nodes: list[dict]) -> str:
    if not nodes:
        return '<p class="note">No checkpoints are recorded for these runs.</p>'
    by_sha = {node["sha256"]: node for node in nodes}
    children: dict[str | None, list[dict]] = {}
    for node in nodes:
        parent = node["parent_sha256"] if node["parent_sha256"] in by_sha else None
        children.setdefault(parent, []).append(node)

    def render(node: dict) -> str:
        status = node["status"]
        bits = [
            f'<code class="sha" title="{_e(node["sha256"])}">{_e(node["sha256"][:12])}</code>',
            f"arm <b>{_e(node['arm'])}</b>",
        ]
        if node["stage"]:
            bits.append(f"stage {_e(node['stage'])}")
        bits.append(f'<span class="status status-{_e(status)}">{_e(status)}</span>')
        if not node["in_scope"]:
            bits.append('<span class="note">(ancestor, not produced by a run of these protocols)</span>')
        if node["path"]:
            bits.append(f'<span class="note">{_e(node["path"])}</span>')
        gates = ""
        if node["gates"]:
            items = []
            for gate in node["gates"]:
                verdict = "passed" if gate["passed"] else "FAILED"
                measured = ""
                if gate["value"] is not None or gate["threshold"] is not None:
                    measured = (f": {_e(gate['metric'] or 'value')} {_e(_fmt(gate['value']))} "
                                f"{_e(gate['comparison'] or 'vs')} {_e(_fmt(gate['threshold']))}")
                items.append(
                    f'<li class="gate" data-gate="{_e(gate["gate"])}">gate <b>{_e(gate["gate"])}</b>{measured} — '
                    f'<span class="{"gate-pass" if gate["passed"] else "gate-fail"}">{verdict}</span> '
                    f"(action {_e(gate['action'])})</li>"
                )
            gates = f'<ul class="gates">{"".join(items)}</ul>'
        nested = "".join(render(child) for child in children.get(node["sha256"], []))
        nested_html = f"<ul>{nested}</ul>" if nested else ""
        return (f'<li class="checkpoint" data-sha="{_e(node["sha256"])}" data-status="{_e(status)}">'
                f'{" · ".join(bits)}{gates}{nested_html}</li>')

    roots = children.get(None, [])
    return f'<ul class="lineage">{"".join(render(node) for node in roots)}</ul>'


def _claims_html(rows: list[dict]) -> str:
    if not rows:
        return '<p class="note">No claims are registered for these protocols.</p>'
    lines = ['<table class="claims"><tr><th>claim</th><th>statement</th><th>statistic</th><th>first outcome</th>'
             "<th>reason</th><th>figures</th><th>p-value</th></tr>"]
    for row in rows:
        outcome = row["outcome"]
        if outcome is None:
            verdict = '<span class="outcome-none">not evaluated</span>'
            reason = figures = p_value = "—"
        else:
            verdict = f'<span class="outcome-{_e(outcome["outcome"])}">{_e(outcome["outcome"])}</span>'
            if row["n_evaluations"] > 1:
                verdict += f'<br><span class="note">{row["n_evaluations"]} evaluations'
                if row["latest_outcome"] != outcome["outcome"]:
                    verdict += f"; latest: {_e(row['latest_outcome'])}"
                verdict += "</span>"
            reason = _e(outcome["reason"])
            figures = _figures_html(row["detail"].get("figures") or {})
            p_value = _e(_fmt_p(row["p_value"], row["detail"]))
        lines.append(
            f'<tr class="claim" data-claim="{_e(row["claim_id"])}" data-outcome="{_e(outcome["outcome"] if outcome else "not evaluated")}">'
            f"<td><code>{_e(row['claim_id'])}</code></td><td>{_e(row['statement'])}</td><td>{_e(row['statistic'])}</td>"
            f'<td>{verdict}</td><td>{reason}</td><td>{figures}</td><td class="num">{p_value}</td></tr>'
        )
    lines.append("</table>")
    return "".join(lines)


def write_report(
    store: Store,
    protocol_sha256s: tuple[str, ...],
    out_dir: Path,
    *,
    title: str,
    support_depths: tuple[int, int] | None = None,
    claim_prefix: str | None = None,
) -> Path:
    """Write ``out_dir/report.html`` and its PNG figures under ``out_dir/figures/``; returns the HTML path.

    Existing files of the same names are overwritten; other files in ``out_dir`` are left alone.
    """
    shas = tuple(protocol_sha256s)
    out_dir = Path(out_dir)
    figures_dir = out_dir / "figures"
    figures_dir.mkdir(parents=True, exist_ok=True)
    placeholders, params = _in_clause(shas)
    protocols = store.query(
        f"SELECT sha256, name, version FROM protocols WHERE sha256 IN ({placeholders}) ORDER BY id", params
    ).records()
    known = {row["sha256"] for row in protocols}
    missing = [sha for sha in shas if sha not in known]
    if missing:
        raise LookupError(f"protocol sha256 {missing[0]} is not registered in this ledger")
    root, size = store.head()

    manifests = rule_chasing_manifests(store, shas)
    evidence = {m["sha256"]: _evidence(store, shas, m["sha256"]) for m in manifests}
    per_manifest = [(m, _series(evidence[m["sha256"]])) for m in manifests]
    labels = sorted({s.label for _, series in per_manifest for s in series})
    colors = _colors(labels)

    body: list[str] = []
    with matplotlib.style.context(_STYLE):
        # 1. accuracy per depth
        body.append('<section id="accuracy"><h2>1. Per-depth final accuracy</h2>')
        body.append(
            '<p class="note">Final reading of each row: its evidence at loop = row depth (a recurrent arm at forced '
            "depth), or at loop 0 for an arm read once; cells with no single right answer (correct NULL) are left "
            "out. Error bars: Wilson 95% intervals. "
            + (f"Shaded: training support, depth {support_depths[0]}-{support_depths[1]}. "
               if support_depths else "No training support range was given, so nothing is shaded. ")
            + f"Dashed: the {FRONTIER_BAR} frontier bar.</p>"
        )
        if not manifests:
            body.append('<p class="note">No rule-chasing evaluation manifest of these protocols holds evidence.</p>')
        for manifest, series in per_manifest:
            name = manifest["name"]
            file = f"figures/accuracy-{_slug(name)}-{manifest['sha256'][:8]}.png"
            plotted = [s for s in series if s.points]
            body.append(f'<h3 id="accuracy-{_e(_slug(name))}">Manifest <code>{_e(name)}</code> '
                        f'<span class="note sha">{_e(manifest["sha256"][:12])}, {manifest["n_rows"]} rows</span></h3>')
            if not plotted:
                body.append('<p class="note">No arm has a final reading on this manifest.</p>')
                continue
            _accuracy_figure(out_dir / file, name, plotted, support_depths, colors)
            arms = ", ".join(s.label for s in plotted)
            body.append(_img(file, f"per-depth accuracy on {name}",
                             f"Per-depth final accuracy on <code>{_e(name)}</code>, one line per arm: {_e(arms)}."))
            body.append(_accuracy_table(name, series))
        body.append("</section>")

        # 2. active-label heatmaps
        body.append('<section id="heatmaps"><h2>2. Per-loop active-label accuracy (recurrent arms)</h2>')
        body.append(
            '<p class="note">Rows: row depth; columns: loop t. Value: share of cells whose decoded state is the t-th '
            "intermediate symbol (evidence.correct at that loop), for loop t &le; depth. Grey/blank: loop above the "
            "row's depth (no single right answer) or not measured.</p>"
        )
        any_heatmap = False
        for manifest, series in per_manifest:
            for s in series:
                if not s.recurrent:
                    continue
                grid = _grid(evidence[manifest["sha256"]], s.arm, s.checkpoint_sha256)
                if grid is None:
                    continue
                any_heatmap = True
                file = (f"figures/heatmap-{_slug(manifest['name'])}-{_slug(s.arm)}-"
                        f"{s.checkpoint_sha256[:8]}.png")
                _heatmap_figure(out_dir / file, manifest["name"], grid)
                body.append(f"<h3>Arm <code>{_e(s.label)}</code> on <code>{_e(manifest['name'])}</code></h3>")
                body.append(_img(file, f"active-label heatmap of arm {s.label} on {manifest['name']}",
                                 f"Active-label accuracy (%) of arm {_e(s.label)} by depth and loop on "
                                 f"<code>{_e(manifest['name'])}</code>."))
                body.append(_heatmap_table(grid))
        if not any_heatmap:
            body.append('<p class="note">No recurrent arm (evidence at loop &ge; 1) on these manifests.</p>')
        body.append("</section>")

        # 3. accuracy vs latency
        body.append('<section id="latency"><h2>3. Accuracy vs latency per depth</h2>')
        body.append('<p class="note">x: median latency_ms of the final readings of an arm at a depth (rows with a '
                    "recorded latency only); y: final accuracy at that depth. Point labels: depth.</p>")
        for manifest, series in per_manifest:
            name = manifest["name"]
            plotted = [s for s in series if s.points]
            with_latency = [s for s in plotted if s.has_latency]
            without = [s.label for s in plotted if not s.has_latency]
            body.append(f"<h3>Manifest <code>{_e(name)}</code></h3>")
            if with_latency:
                file = f"figures/latency-{_slug(name)}-{manifest['sha256'][:8]}.png"
                _latency_figure(out_dir / file, name, with_latency, colors)
                body.append(_img(file, f"accuracy vs latency on {name}",
                                 f"Accuracy vs median latency per depth on <code>{_e(name)}</code>: "
                                 f"{_e(', '.join(s.label for s in with_latency))}."))
            if without:
                body.append(f'<p class="note latency-skipped">No latency recorded (not plotted) for: '
                            f"{_e(', '.join(without))}.</p>")
        if not per_manifest:
            body.append('<p class="note">No manifest to plot.</p>')
        body.append("</section>")

    # 4. claims
    rows = claim_rows(store, shas, claim_prefix)
    evaluated = sum(1 for row in rows if row["outcome"] is not None)
    body.append('<section id="claims"><h2>4. Claims</h2>')
    body.append(f'<p class="note">{len(rows)} claims registered for these protocols, {evaluated} evaluated. '
                "Each shows its first recorded outcome (the smallest claim_outcomes id), the figures recorded "
                "with it and its p-value.</p>")
    body.append(_claims_html(rows))
    body.append("</section>")

    # 5. lineage
    body.append('<section id="lineage"><h2>5. Checkpoint lineage</h2>')
    body.append('<p class="note">Checkpoints of these protocols\' runs and their ancestors, nested under their '
                "parents, with status and the gate results recorded with them (value, comparison, threshold, "
                "action).</p>")
    body.append(_lineage_html(lineage_nodes(store, shas)))
    body.append("</section>")

    protocol_items = "".join(
        f"<li><code>{_e(row['sha256'])}</code> — {_e(row['name'])} (version {_e(row['version'] or '—')})</li>"
        for row in protocols
    )
    header = (
        f"<header><h1>{_e(title)}</h1>"
        f'<p>Protocol / release SHA-256:</p><ul class="protocols">{protocol_items}</ul>'
        f'<p>Ledger head: root <code class="head-root">{_e(root)}</code>, size <code class="head-size">{size}</code></p>'
        '<p class="note">Generated by <code>ledger report</code> from the ledger database alone: every figure and '
        "table is computed from the stored rows (evidence, claims, claim outcomes, checkpoints, gate results) "
        "scoped to the SHA-256s above. Re-running it on a ledger with the same head yields the same report; check "
        "the head with <code>ledger head</code> / <code>ledger verify --since-head ROOT SIZE</code>.</p></header>"
    )
    document = (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>\n"
        + header + "\n" + "\n".join(body) + "\n</body></html>\n"
    )
    path = out_dir / "report.html"
    path.write_text(document, encoding="utf-8")
    return path
