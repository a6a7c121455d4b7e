"""What the report shows, read from the store: per-depth series, heatmap grids, claims, lineage.

Everything is scoped to the given protocol (or imported release) SHA-256s: manifests by
``manifests.protocol_sha256``, evidence, checkpoints and gates by ``runs.protocol_sha256``,
claims by ``claims.protocol_sha256`` (or a ``claim_prefix + "/"`` id). Final readings
follow the one rule of ``ledger.store.final_reading``.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from typing import Any

from ledger.environment import recorded_environments
from ledger.judge.stats import wilson_interval
from ledger.store import Store
from ledger.store.final_reading import choose_final
from ledger.store.lookups import EvidenceReading, RecordedCheckpoint, RecordedGate, RecordedOutcome, RegisteredManifest


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


@dataclass(frozen=True)
class ClaimRow:
    """A claim of these protocols with its first recorded outcome (None if never evaluated)."""

    claim_id: str
    protocol_sha256: str | None
    spec: dict
    statement: str
    statistic: str
    outcome: RecordedOutcome | None
    detail: dict  # the first outcome's detail
    p_value: float | None
    n_evaluations: int
    latest_outcome: str | None


@dataclass(frozen=True)
class LineageNode:
    checkpoint: RecordedCheckpoint
    gates: tuple[RecordedGate, ...]
    in_scope: bool  # False for an ancestor produced by no run of these protocols


def _require_scope(protocol_sha256s: tuple[str, ...]) -> tuple[str, ...]:
    if not protocol_sha256s:
        raise ValueError("give at least one protocol sha256")
    return tuple(protocol_sha256s)


# ----------------------------------------------------------------------------- manifests and readings


def rule_chasing_manifests(store: Store, protocol_sha256s: tuple[str, ...]) -> list[RegisteredManifest]:
    """The scoped manifests whose rows are rule chasing and that hold evidence, registration order.

    Manifests a registered protocol declares with role ``train`` are left out.
    """
    shas = _require_scope(protocol_sha256s)
    train = manifest_names_of_role(store, shas, "train")
    found = store.manifests_with_evidence(shas, task="rule_chasing")
    return [m for m in found if (m.protocol_sha256, m.name) not in train]


def manifest_names_of_role(store: Store, protocol_sha256s: tuple[str, ...], role: str) -> set[tuple[str, str]]:
    """``(protocol sha256, manifest id)`` of every manifest the registered protocols declare with ``role``."""
    names = set()
    for protocol in store.protocols(sha256s=protocol_sha256s):
        for manifest in (protocol.document() or {}).get("manifests") or []:
            if isinstance(manifest, dict) and manifest.get("role") == role and "id" in manifest:
                names.add((protocol.sha256, manifest["id"]))
    return names


def scoped_readings(store: Store, protocol_sha256s: tuple[str, ...], manifest_sha256: str) -> list[EvidenceReading]:
    """Every reading of the manifest by a run of these protocols, in recording order."""
    return store.readings(manifest_sha256, protocol_sha256s=_require_scope(protocol_sha256s))


def _series_keys(readings: list[EvidenceReading]) -> list[tuple[str, str]]:
    """(arm, checkpoint) pairs in order of first evidence."""
    seen: dict[tuple[str, str], None] = {}
    for reading in readings:
        seen.setdefault((reading.arm, reading.checkpoint_sha256), None)
    return list(seen)


def _labels(keys: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    per_arm: dict[str, int] = {}
    for arm, _ in keys:
        per_arm[arm] = per_arm.get(arm, 0) + 1
    return {(arm, sha): arm if per_arm[arm] == 1 else f"{arm} @ {sha[:8]}" for arm, sha in keys}


def _depth_points(finals: list[EvidenceReading]) -> list[DepthPoint]:
    by_depth: dict[int, list[EvidenceReading]] = {}
    for reading in finals:
        by_depth.setdefault(int(reading.depth), []).append(reading)
    points = []
    for depth in sorted(by_depth):
        cells = by_depth[depth]
        n = len(cells)
        correct = sum(1 for cell in cells if cell.correct)
        interval = wilson_interval(correct, n)
        latencies = [float(cell.latency_ms) for cell in cells if cell.latency_ms is not None]
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
    return series_of(scoped_readings(store, protocol_sha256s, manifest_sha256))


def series_of(readings: list[EvidenceReading]) -> list[ArmSeries]:
    keys = _series_keys(readings)
    labels = _labels(keys)
    grouped: dict[tuple[str, str], list[EvidenceReading]] = {key: [] for key in keys}
    for reading in readings:
        grouped[(reading.arm, reading.checkpoint_sha256)].append(reading)
    series = []
    for key in keys:
        rows = grouped[key]
        series.append(
            ArmSeries(
                arm=key[0],
                checkpoint_sha256=key[1],
                label=labels[key],
                points=_depth_points(list(choose_final(rows).values())),
                recurrent=any(row.loop >= 1 for row in rows),
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
    return grid_of(scoped_readings(store, protocol_sha256s, manifest_sha256), arm, checkpoint_sha256)


def grid_of(all_readings: list[EvidenceReading], arm: str, checkpoint_sha256: str | None) -> HeatmapGrid | None:
    readings = [
        reading
        for reading in all_readings
        if reading.arm == arm
        and reading.loop >= 1
        and (checkpoint_sha256 is None or reading.checkpoint_sha256 == checkpoint_sha256)
    ]
    if not readings:
        return None
    checkpoint = checkpoint_sha256 or readings[0].checkpoint_sha256
    readings = [reading for reading in readings if reading.checkpoint_sha256 == checkpoint]
    cells: dict[tuple[str, int], EvidenceReading] = {}
    for reading in readings:
        cells[(reading.row_id, int(reading.loop))] = reading
    depths = sorted({int(reading.depth) for reading in readings})
    loops = list(range(1, max(int(reading.loop) for reading in readings) + 1))
    tallies: dict[tuple[int, int], list[int]] = {}
    for (_, loop), reading in cells.items():
        depth = int(reading.depth)
        if loop > depth or reading.correct is None:
            continue
        tally = tallies.setdefault((depth, loop), [0, 0])
        tally[0] += 1 if reading.correct else 0
        tally[1] += 1
    values: list[list[float | None]] = []
    counts: list[list[int]] = []
    for depth in depths:
        row_values: list[float | None] = []
        row_counts: list[int] = []
        for loop in loops:
            cell = tallies.get((depth, loop))
            row_values.append(cell[0] / cell[1] if cell else None)
            row_counts.append(cell[1] if cell else 0)
        values.append(row_values)
        counts.append(row_counts)
    label = _labels(_series_keys(all_readings)).get((arm, checkpoint), arm)
    return HeatmapGrid(arm, checkpoint, label, depths, loops, values, counts)


# ----------------------------------------------------------------------------- claims and lineage


def claim_rows(store: Store, protocol_sha256s: tuple[str, ...], claim_prefix: str | None = None) -> list[ClaimRow]:
    """Every claim of these protocols (or named ``claim_prefix/...``) with its first recorded outcome."""
    wanted = set(protocol_sha256s)
    prefix = f"{claim_prefix}/" if claim_prefix else None
    # a claim a later version registered again unchanged is stored under the first: its registration names it
    registered = {key for entry in store.registrations() if entry.protocol_sha256 in wanted for key in entry.claims}
    claims = [
        claim
        for claim in store.claims()
        if claim.protocol_sha256 in wanted
        or claim.claim_id in registered
        or (prefix is not None and claim.claim_id.startswith(prefix))
    ]
    first: dict[str, RecordedOutcome] = {}
    latest: dict[str, RecordedOutcome] = {}
    n_evaluations: dict[str, int] = {}
    for recorded in store.claim_outcomes():
        first.setdefault(recorded.claim_id, recorded)
        latest[recorded.claim_id] = recorded
        n_evaluations[recorded.claim_id] = n_evaluations.get(recorded.claim_id, 0) + 1
    rows = []
    for claim in claims:
        spec = claim.spec()
        outcome = first.get(claim.claim_id)
        detail = outcome.detail() if outcome else {}
        p_value = detail.get("p_value")
        if p_value is None and outcome is not None:
            p_value = outcome.test_p_value
        last = latest.get(claim.claim_id)
        rows.append(
            ClaimRow(
                claim_id=claim.claim_id,
                protocol_sha256=claim.protocol_sha256,
                spec=spec,
                statement=spec.get("statement") or "",
                statistic=spec.get("statistic") or detail.get("statistic") or "",
                outcome=outcome,
                detail=detail,
                p_value=p_value,
                n_evaluations=n_evaluations.get(claim.claim_id, 0),
                latest_outcome=last.outcome if last else None,
            )
        )
    return rows


def lineage_nodes(store: Store, protocol_sha256s: tuple[str, ...]) -> list[LineageNode]:
    """Checkpoints of these protocols' runs (and the checkpoints their evidence names), with
    every ancestor, in registration order, each with its gate results (by id)."""
    in_scope = store.checkpoints_in_scope(_require_scope(protocol_sha256s))
    if not in_scope:
        return []
    wanted = set(in_scope)
    for sha in sorted(in_scope):
        wanted.update(row["ancestor_sha256"] for row in store.lineage(sha))
    gates: dict[str, list[RecordedGate]] = {}
    for gate in store.gate_results(sorted(wanted)):
        gates.setdefault(gate.checkpoint_sha256, []).append(gate)
    return [
        LineageNode(checkpoint, tuple(gates.get(checkpoint.sha256, ())), checkpoint.sha256 in in_scope)
        for checkpoint in store.checkpoints(sorted(wanted))
    ]


# ----------------------------------------------------------------------------- protocol helpers


def support_depths_of(canonical: dict | str) -> tuple[int, int] | None:
    """The training support of a registered protocol: the span (min low, max high) of the depth ranges of every
    manifest an arm's training stages use, when every arm that trains on rule-chasing rows has that same span;
    None if none does (e.g. an imported release) or if the arms' supports differ (support scaling: no one span
    to shade)."""
    document = json.loads(canonical) if isinstance(canonical, str) else canonical
    if not isinstance(document, dict):
        return None
    manifests = {m["id"]: m for m in document.get("manifests") or [] if isinstance(m, dict) and "id" in m}
    spans = set()
    for arm in document.get("arms") or []:
        if not isinstance(arm, dict):
            continue
        lows, highs = [], []
        for stage in arm.get("stages") or []:
            manifest: Any = manifests.get(stage.get("manifest")) if isinstance(stage, dict) else None
            depths = manifest.get("depths") if manifest else None
            if isinstance(depths, (list, tuple)) and len(depths) == 2:
                lows.append(int(depths[0]))
                highs.append(int(depths[1]))
        if lows:
            spans.add((min(lows), max(highs)))
    return spans.pop() if len(spans) == 1 else None


def resolve_protocol(
    store: Store, name: str, version: str | None = None
) -> tuple[tuple[str, ...], tuple[int, int] | None]:
    """The registered SHA-256s of protocol or release ``name`` (every version, registration
    order, or only ``version``) and the union of their training supports. LookupError if never registered."""
    versions = store.protocols(name=name)
    if not versions:
        raise LookupError(f"no protocol or release named {name!r} is registered in this ledger")
    if version is not None:
        known = [str(v.version) for v in versions]
        versions = [v for v in versions if str(v.version) == str(version)]
        if not versions:
            raise LookupError(
                f"protocol {name!r} has no registered version {version!r} (registered: {', '.join(known)})"
            )
    supports = [s for s in (support_depths_of(version.canonical_json) for version in versions) if s is not None]
    support = (min(s[0] for s in supports), max(s[1] for s in supports)) if supports else None
    return tuple(version.sha256 for version in versions), support


def run_environments(store: Store, protocol_sha256s: tuple[str, ...]) -> list[tuple[list[str], dict]]:
    """``(run ids, environment)`` per distinct environment recorded by these protocols' runs."""
    shas = set(protocol_sha256s)
    return recorded_environments(run for run in store.rows_of("runs") if run["protocol_sha256"] in shas)


@dataclass(frozen=True)
class StageLosses:
    """One recorded checkpoint's span of a stage: its stage (``install`` or ``install@20``) and each step's loss."""

    stage: str
    losses: tuple[float, ...]


def training_losses(store: Store, protocol_sha256s: tuple[str, ...]) -> dict[str, list[StageLosses]]:
    """Per arm, in recording order, every checkpoint's per-step training losses (its ``meta.losses``) recorded
    by a run of these protocols; arms whose checkpoints record no step (an evaluated-only arm) are left out.
    Over several protocol versions an arm is named with its version's SHA-256 prefix (``A @ 1a2b3c4d``)."""
    shas = set(_require_scope(protocol_sha256s))
    runs = {run["run_id"]: run["protocol_sha256"] for run in store.rows_of("runs") if run["protocol_sha256"] in shas}
    arms: dict[str, list[StageLosses]] = {}
    for checkpoint in store.rows_of("checkpoints"):  # in the order they were recorded
        if checkpoint["run_id"] not in runs:
            continue
        meta = json.loads(checkpoint["meta_json"]) if checkpoint.get("meta_json") else {}
        losses = meta.get("losses") if isinstance(meta, dict) else None
        # several versions in one report: each version's arm is its own curve
        label = checkpoint["arm"] if len(shas) == 1 else f"{checkpoint['arm']} @ {runs[checkpoint['run_id']][:8]}"
        if losses:
            arms.setdefault(label, []).append(StageLosses(str(checkpoint["stage"]), tuple(float(x) for x in losses)))
    return arms
