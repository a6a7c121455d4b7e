"""Evidence read back from the store, in the shape claims need (``EvidenceSource``).

Scoped to one registered protocol (or imported release): manifest names are resolved
among that protocol's manifests, so two protocols may both call a manifest ``eval``.
The *final reading* of a row is its evidence at loop = depth (a recurrent arm at forced
depth) or at loop 0 (an arm read once, e.g. a dense arm's generated text).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ledger.store import Store


@dataclass
class StoreEvidence:
    store: Store
    protocol_sha256s: tuple[str, ...]

    def _in(self) -> tuple[str, dict[str, Any]]:
        names = {f"p{i}": sha for i, sha in enumerate(self.protocol_sha256s)}
        return ", ".join(f":{name}" for name in names), names

    def manifest_sha256(self, manifest: str) -> str | None:
        placeholders, params = self._in()
        found = self.store.query(
            f"SELECT sha256 FROM manifests WHERE name = :name AND protocol_sha256 IN ({placeholders}) ORDER BY id DESC",
            {"name": manifest, **params},
        ).records()
        return found[0]["sha256"] if found else None

    def records(self, arm: str, manifest: str) -> list[dict]:
        """The arm's evidence on a manifest from its LATEST checkpoint that read it.

        An arm read on the same rows by several checkpoints (a gate after each stage)
        is judged by the last one; earlier readings stay in the ledger for the gates.
        """
        sha = self.manifest_sha256(manifest)
        if sha is None:
            return []
        return self.store.query(
            "SELECT e.row_id, r.depth, e.loop, e.correct, e.prediction, e.checkpoint_sha256, e.entry_seq "
            "FROM evidence e JOIN rows r ON r.manifest_sha256 = e.manifest_sha256 AND r.row_id = e.row_id "
            "WHERE e.arm = :arm AND e.manifest_sha256 = :sha AND e.checkpoint_sha256 = ("
            "  SELECT c.sha256 FROM evidence x JOIN checkpoints c ON c.sha256 = x.checkpoint_sha256"
            "  WHERE x.arm = :arm AND x.manifest_sha256 = :sha ORDER BY c.id DESC LIMIT 1) "
            "ORDER BY r.position, e.loop",
            {"arm": arm, "sha": sha},
        ).records()

    def outcomes(self, arm: str, manifest: str, loop: int | None) -> dict[str, tuple[int, bool]] | None:
        rows = self.records(arm, manifest)
        if not rows:
            return None
        found: dict[str, tuple[int, bool]] = {}
        for record in rows:
            if record["correct"] is None:
                continue
            wanted = (record["loop"] == loop) if loop is not None else record["loop"] in (record["depth"], 0)
            if wanted and (loop is not None or record["row_id"] not in found or record["loop"] == record["depth"]):
                found[record["row_id"]] = (int(record["depth"]), bool(record["correct"]))
        return found or None

    def depth_counts(self, arm: str, manifest: str) -> dict[int, tuple[int, int]] | None:
        placeholders, params = self._in()
        for entry in self.store.query(
            "SELECT payload FROM chain_entries WHERE kind = 'external_counts' ORDER BY seq DESC"
        ).records():
            data = json.loads(entry["payload"])["data"]
            if data["protocol_sha256"] in params.values() and data["id"] == manifest and data["arm"] == arm:
                return {int(depth): (int(c), int(t)) for depth, (c, t) in data["counts"].items()}
        return None

    def gate_passed(self, gate: str, arm: str) -> bool | None:
        placeholders, params = self._in()
        found = self.store.query(
            "SELECT g.passed FROM gate_results g JOIN checkpoints c ON c.sha256 = g.checkpoint_sha256 "
            "LEFT JOIN runs u ON u.run_id = c.run_id "
            f"WHERE g.gate = :gate AND c.arm = :arm AND (u.protocol_sha256 IS NULL OR u.protocol_sha256 IN ({placeholders})) "
            "ORDER BY g.id DESC",
            {"gate": gate, "arm": arm, **params},
        ).records()
        return bool(found[0]["passed"]) if found else None

    def checkpoints_used(self, arm: str, manifest: str) -> set[str]:
        return {record["checkpoint_sha256"] for record in self.records(arm, manifest)}
