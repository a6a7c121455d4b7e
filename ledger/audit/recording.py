"""The writes an audit may make, each one asked for explicitly.

* ``import_external(store, paths)`` -- import the releases that claim files name and
  register those claims (``ledger verify --import``; ``ledger import MAPPING`` imports a
  release alone);
* ``record_outcomes(store, report)`` -- record each claim's first outcome (with its
  statistical test) from a ``verify`` report (``ledger run``, ``ledger verify --record``).

``ledger.audit.verify`` itself only reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger.audit.as_registered import record_claim_file
from ledger.audit.importer import import_release, registered_release
from ledger.audit.preregistration import claim_key
from ledger.audit.release import LoadedRelease, load_release
from ledger.audit.verify import VerifyReport, claim_files
from ledger.canonical import canonical_json, sha256_hex
from ledger.store import Store


@dataclass
class ExternalImport:
    releases: list[str] = field(default_factory=list)  # releases imported now
    claims: list[str] = field(default_factory=list)  # claims registered now (or already)
    loaded: dict[Path, LoadedRelease] = field(default_factory=dict)  # the files read, by mapping path


def import_external(store: Store, paths: list[str | Path], root: str | Path | None = None) -> ExternalImport:
    """Import every release a claim file under ``paths`` names (once) and register its claims.

    A release already imported is left as it is: ``verify`` then compares its files with
    the recorded hashes, so a changed release is reported, never silently re-imported.
    """
    done = ExternalImport()
    loaded_files, _ = claim_files(paths)
    for path, claim_file in loaded_files:
        if claim_file.release is None:
            continue
        mapping_path = (path.parent / claim_file.release).resolve()
        loaded = load_release(mapping_path, root)
        done.loaded[mapping_path] = loaded
        imported = registered_release(store, loaded.mapping.release)
        if imported is None:
            protocol_sha = import_release(store, mapping_path, root, loaded=loaded).protocol_sha256
            done.releases.append(loaded.mapping.release)
        else:
            protocol_sha = sha256_hex(canonical_json(imported))
        keys = []
        for claim in claim_file.claims:
            key = claim_key(claim_file.protocol, claim.id)
            store.add_claim(key, claim.model_dump(mode="json", by_alias=True), protocol_sha256=protocol_sha)
            keys.append(key)
        record_claim_file(store, protocol_sha, path, claim_file, keys)
        done.claims.extend(keys)
    return done


def record_outcomes(store: Store, report: VerifyReport) -> list[str]:
    """Record the first outcome of every claim in ``report`` that has none yet; returns their claim keys.

    Only verified claims with an outcome other than ``unverifiable`` are recorded (an arm
    not run yet is no result), and never over an earlier first outcome.
    """
    recorded = []
    for verdict in report.verdicts:
        pending = verdict.recordable
        if pending is None or store.first_outcome(pending.claim_key) is not None:
            continue
        if pending.register_claim:
            store.add_claim(pending.claim_key, pending.spec, protocol_sha256=pending.protocol_sha256)
        result = pending.result
        test_id = None
        if pending.inputs:
            figures = result.figures
            test_id = store.add_stat_test(
                statistic=pending.statistic,
                inputs=list(pending.inputs),
                claim_id=pending.claim_key,
                method=str(figures.get("alternative") or pending.statistic),
                n=figures.get("n"),
                estimate=_first_number(figures, ("difference", "accuracy", "rate", "net", "frontier")),
                ci_low=_first_number(figures, ("ci_low", "wilson_low")),
                ci_high=_first_number(figures, ("ci_high", "wilson_high")),
                p_value=result.p_value if result.p_value is None or result.p_value > 0 else None,
                params=pending.spec,
                result=result.to_dict(),
                evidence_ids=pending.evidence_ids,
            )
        store.add_claim_outcome(
            pending.claim_key, result.outcome, result.reason, stat_test_id=test_id, detail=result.to_dict()
        )
        recorded.append(pending.claim_key)
    return recorded


def _first_number(figures: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        value = figures.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None
