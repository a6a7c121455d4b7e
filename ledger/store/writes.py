"""Typed writers: each domain write is one ``append`` of the rows it records.

Identity writes are idempotent (the same protocol, manifest, checkpoint or claim again
writes nothing) and refuse a different content under the same identity (``ConflictError``).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ledger.canonical import canonical_json, sha256_file, sha256_hex
from ledger.store.append import AppendLog
from ledger.store.base import Database
from ledger.store.models import CHECKPOINT_STATUSES, DEVIATION_TIMINGS
from ledger.store.records import json_or_none, to_plain
from ledger.store.rules import ConflictError, StoreRules, gate_action


class DomainWrites:
    """Protocols, deviations, manifests, runs, checkpoints, gates and evidence (claims: ``ClaimWrites``)."""

    def __init__(self, db: Database, log: AppendLog, rules: StoreRules):
        self.db = db
        self.log = log
        self.rules = rules

    def add_protocol(
        self,
        protocol: Mapping[str, Any] | Any,
        *,
        name: str | None = None,
        version: str | None = None,
    ) -> str:
        """Register a protocol (dict or Pydantic model); returns its canonical SHA-256.

        Idempotent: registering the same canonical protocol again writes nothing.
        """
        data = to_plain(protocol)
        if isinstance(data, str):
            data = json.loads(data)
        canonical = canonical_json(data)
        sha = sha256_hex(canonical)
        if not isinstance(data, Mapping):
            raise TypeError("a protocol is a mapping (or a Pydantic model, or its JSON text)")
        name = name or str(data.get("name") or "")
        version = version or str(data.get("version") or "")
        if not name:
            raise ValueError("a protocol needs a name (in the document or as name=)")
        with self.db.write() as conn:
            if self.db.exists(conn, "protocols", sha256=sha):
                return sha
            self.log.append_in(
                conn,
                "protocol",
                {"sha256": sha},
                {"protocols": [{"sha256": sha, "name": name, "version": version or "", "canonical_json": canonical}]},
            )
        return sha

    def add_deviation(
        self,
        protocol_sha256: str,
        *,
        item: str,
        planned: Any,
        actual: Any,
        reason: str,
        timing: str,
        new_protocol_sha256: str | None = None,
    ) -> int:
        """Record a deviation from a registered protocol; returns the deviation id."""
        if timing not in DEVIATION_TIMINGS:
            raise ValueError(f"timing must be one of {DEVIATION_TIMINGS}, got {timing!r}")
        record = {
            "protocol_sha256": protocol_sha256,
            "item": item,
            "planned": planned if isinstance(planned, str) else canonical_json(planned),
            "actual": actual if isinstance(actual, str) else canonical_json(actual),
            "reason": reason,
            "timing": timing,
            "new_protocol_sha256": new_protocol_sha256,
        }
        with self.db.write() as conn:
            self.db.require(conn, "protocols", "protocol", sha256=protocol_sha256)
            result = self.log.append_in(conn, "deviation", {}, {"deviations": [record]})
        return result.ids["deviations"][0]

    def add_manifest(self, manifest, *, protocol_sha256: str | None = None) -> str:
        """Register a ``ledger.rows.manifest.Manifest`` and all its rows in one chain entry.

        Idempotent on the manifest SHA-256.
        """
        sha = manifest.sha256
        rows = [
            {
                "manifest_sha256": sha,
                "position": position,
                "row_id": row.row_id,
                "sha256": row.sha256,
                "task": row.task,
                "surface": row.surface,
                "depth": row.depth,
                "canonical_json": row.canonical(),
            }
            for position, row in enumerate(manifest.rows)
        ]
        with self.db.write() as conn:
            if self.db.exists(conn, "manifests", sha256=sha):
                return sha
            self.log.append_in(
                conn,
                "manifest",
                {"sha256": sha},
                {
                    "manifests": [
                        {"sha256": sha, "name": manifest.name, "n_rows": len(rows), "protocol_sha256": protocol_sha256}
                    ],
                    "rows": rows,
                },
            )
        return sha

    def add_run(
        self,
        *,
        run_id: str | None = None,
        kind: str = "eval",
        protocol_sha256: str | None = None,
        arm: str | None = None,
        config: Any = None,
        environment: Any = None,
        rng: Any = None,
        note: str | None = None,
    ) -> str:
        """Record a run (training, evaluation, import...); returns its run id (uuid4 hex if not given)."""
        run_id = run_id or uuid.uuid4().hex
        record = {
            "run_id": run_id,
            "kind": kind,
            "protocol_sha256": protocol_sha256,
            "arm": arm,
            "config_json": canonical_json(to_plain(config) if config is not None else {}),
            "environment_json": canonical_json(to_plain(environment) if environment is not None else {}),
            "rng_json": canonical_json(to_plain(rng) if rng is not None else {}),
            "note": note,
        }
        with self.db.write() as conn:
            if self.db.exists(conn, "runs", run_id=run_id):
                raise ConflictError(f"run {run_id!r} is already recorded")
            self.log.append_in(conn, "run", {}, {"runs": [record]})
        return run_id

    def add_checkpoint(
        self,
        *,
        arm: str,
        status: str,
        sha256: str | None = None,
        path: str | None = None,
        parent_sha256: str | None = None,
        run_id: str | None = None,
        stage: str | None = None,
        gate_results: Sequence[Mapping[str, Any]] | None = None,
        meta: Any = None,
    ) -> str:
        """Record a checkpoint (hash of the file bytes, computed from ``path`` if not given).

        ``gate_results`` (dicts with gate, passed, and optionally value, threshold,
        comparison, metric, detail) are written to ``gate_results`` in the same entry and
        summarised in ``checkpoints.gate_results_json``. A parent must be recorded and
        ``promoted``, and its whole ancestry clean (see ``_check_continuation``). The rule is
        the store's own: no caller flag can switch it off.
        """
        if status not in CHECKPOINT_STATUSES:
            raise ValueError(f"status must be one of {CHECKPOINT_STATUSES}, got {status!r}")
        if sha256 is None:
            if path is None:
                raise ValueError("give sha256= or a path= to hash")
            sha256 = sha256_file(path)
        gates = [dict(g) for g in (gate_results or [])]
        gate_rows = []
        for gate in gates:
            detail = gate.pop("detail", None)
            gate_rows.append(
                {
                    "checkpoint_sha256": sha256,
                    "run_id": gate.pop("run_id", run_id),
                    "gate": gate.pop("gate"),
                    "passed": gate.pop("passed"),
                    "metric": gate.pop("metric", None),
                    "value": gate.pop("value", None),
                    "threshold": gate.pop("threshold", None),
                    "comparison": gate.pop("comparison", None),
                    "action": gate_action(gate.pop("action", "stop")),
                    "detail_json": json_or_none(detail),
                }
            )
            if gate:
                raise ValueError(f"unknown gate result field(s) {sorted(gate)}")
        record = {
            "sha256": sha256,
            "path": str(path) if path is not None else None,
            "arm": arm,
            "parent_sha256": parent_sha256,
            "status": status,
            "run_id": run_id,
            "stage": stage,
            "gate_results_json": canonical_json(
                [{k: v for k, v in g.items() if k != "checkpoint_sha256"} for g in gate_rows]
            )
            if gate_results is not None
            else None,
            "meta_json": json_or_none(to_plain(meta)),
        }
        with self.db.write() as conn:
            existing = self.db.fetch_one(conn, "checkpoints", sha256=sha256)
            if existing is not None:
                if existing["status"] != status or existing["arm"] != arm:
                    raise ConflictError(
                        f"checkpoint {sha256} is already recorded as {existing['arm']}/{existing['status']}"
                    )
                return sha256
            if parent_sha256 is not None:
                self.rules.check_continuation_in(conn, parent_sha256, child_status=status)
            records: dict[str, list] = {"checkpoints": [record]}
            if gate_rows:
                records["gate_results"] = gate_rows
            self.log.append_in(conn, "checkpoint", {"sha256": sha256}, records)
        return sha256

    def add_gate_result(
        self,
        checkpoint_sha256: str,
        gate: str,
        passed: bool,
        *,
        value: float | None = None,
        threshold: float | None = None,
        comparison: str | None = None,
        metric: str | None = None,
        run_id: str | None = None,
        detail: Any = None,
        action: str = "stop",
    ) -> int:
        """Record a gate result on a recorded checkpoint.

        A failed ``stop`` gate fails the checkpoint's lineage from then on: nothing may
        continue from it or its descendants (the record is appended; nothing is updated).
        """
        record = {
            "checkpoint_sha256": checkpoint_sha256,
            "run_id": run_id,
            "gate": gate,
            "passed": passed,
            "metric": metric,
            "value": value,
            "threshold": threshold,
            "comparison": comparison,
            "action": gate_action(action),
            "detail_json": json_or_none(detail),
        }
        with self.db.write() as conn:
            result = self.log.append_in(conn, "gate_result", {}, {"gate_results": [record]})
        return result.ids["gate_results"][0]

    _EVIDENCE_FIELDS = (
        "run_id",
        "manifest_sha256",
        "row_id",
        "arm",
        "checkpoint_sha256",
        "loop",
        "prediction",
        "correct",
        "score_margin",
        "latency_ms",
        "tokens_generated",
    )

    def add_evidence(
        self,
        records: Iterable[Mapping[str, Any]] | Any,
        *,
        run_id: str | None = None,
        batch_size: int | None = None,
        once: bool = False,
    ) -> int:
        """Insert row-level evidence; one chain entry per call (or per ``batch_size`` rows).

        ``once``: write nothing (return 0) where the run already holds evidence of the first record's manifest and
        checkpoint, checked inside the write's lock: processes that share a reading (a base's guardrail reference,
        read by every arm's job) record it once, whichever comes first.

        Each record: run_id (or the ``run_id`` argument), manifest_sha256, row_id, arm,
        checkpoint_sha256, loop, prediction, correct, and optionally score_margin,
        latency_ms, tokens_generated, detail (any JSON; or detail_json). A pandas
        DataFrame is accepted; NaN counts as missing. Returns the number of rows written.
        """
        if hasattr(records, "to_dict") and hasattr(records, "columns"):
            records = records.to_dict("records")
        rows = []
        for values in records:
            values = dict(values)
            detail = values.pop("detail", None)
            if detail is not None and not (isinstance(detail, float) and math.isnan(detail)):
                values["detail_json"] = json_or_none(detail)
            if values.get("detail_json") is not None and isinstance(values["detail_json"], float):
                values["detail_json"] = None
            if run_id is not None:
                values.setdefault("run_id", run_id)
            rows.append(values)
        if not rows:
            return 0
        if once:
            first = rows[0]
            key = {name: first.get(name) for name in ("run_id", "manifest_sha256", "checkpoint_sha256")}
            with self.db.write() as conn:
                if self.db.exists(conn, "evidence", **key):
                    return 0
                for run in {values.get("run_id") for values in rows}:
                    self.rules.require_registered_run(conn, run)
                self.log.append_in(conn, "evidence", {"n": len(rows)}, {"evidence": rows}, nan_as_null=True)
            return len(rows)
        size = batch_size or len(rows)
        for start in range(0, len(rows), size):
            batch = rows[start : start + size]
            with self.db.write() as conn:
                for run in {values.get("run_id") for values in batch}:
                    self.rules.require_registered_run(conn, run)
                self.log.append_in(conn, "evidence", {"n": len(batch)}, {"evidence": batch}, nan_as_null=True)
        return len(rows)
