"""A ledger's fingerprint: what a reproduction of its runs must match, in one JSON document.

Per protocol and arm, every recorded checkpoint in the order it was recorded (its stage, SHA-256,
status and the training loss of every step that made it); per claim, its first recorded outcome and
figures; and every distinct environment the runs recorded. ``ledger fingerprint`` writes it (a
committed record folder keeps it as ``fingerprint.json``), and ``ledger compare`` reads it from a
ledger or from such a folder. Only reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ledger.environment import recorded_environments
from ledger.inputs import MAX_DATA_BYTES, InputFileError, parse_json, read_text
from ledger.store import Store

FORMAT = "ledger-fingerprint/1"
FILE_NAME = "fingerprint.json"


class FingerprintError(ValueError):
    """A fingerprint file that cannot be used (one line: where, and what is wrong)."""


def _json(text: str | None) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return {}


def fingerprint(store: Store, protocols: list[str] | None = None) -> dict[str, Any]:
    """The fingerprint of ``store`` (its protocols named in ``protocols``, or all of them)."""
    registered = [p for p in store.protocols(release=False) if protocols is None or p.name in protocols]
    names = {p.sha256: p.name for p in registered}
    runs = [run for run in store.rows_of("runs") if run["protocol_sha256"] in names]
    run_protocol = {run["run_id"]: names[run["protocol_sha256"]] for run in runs}
    document: dict[str, Any] = {"format": FORMAT, "head": list(store.head()), "protocols": {}}
    for name in dict.fromkeys(names.values()):
        document["protocols"][name] = {
            "versions": [p.sha256 for p in registered if p.name == name],
            "arms": {},
            "claims": {},
            "environments": [],
        }
    for checkpoint in store.rows_of("checkpoints"):  # in the order they were recorded
        protocol_name = run_protocol.get(checkpoint["run_id"])
        if protocol_name is None:
            continue
        meta = _json(checkpoint.get("meta_json"))
        arms = document["protocols"][protocol_name]["arms"]
        arms.setdefault(checkpoint["arm"], []).append(
            {
                "stage": checkpoint["stage"],
                "sha256": checkpoint["sha256"],
                "status": checkpoint["status"],
                "losses": meta.get("losses") if isinstance(meta, dict) else None,
            }
        )
    for outcome in store.claim_outcomes():
        protocol, _, claim_id = outcome.claim_id.partition("/")
        claims = document["protocols"].get(protocol, {}).get("claims")
        if claims is None or claim_id in claims:  # another protocol's, or not the first outcome
            continue
        detail = outcome.detail()
        claims[claim_id] = {"outcome": outcome.outcome, "figures": detail.get("figures", {})}
    for name, entry in document["protocols"].items():
        own = [run for run in runs if run_protocol[run["run_id"]] == name]
        entry["environments"] = [{"runs": ids, "environment": env} for ids, env in recorded_environments(own)]
    return document


def write_fingerprint(document: dict[str, Any], target: Path) -> Path:
    """Write ``document`` to ``target`` (a folder: its ``fingerprint.json``) whole or not at all."""
    if target.is_dir():
        target = target / FILE_NAME
    partial = target.with_name(target.name + ".partial")
    try:
        partial.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return target


def load_fingerprint(path: Path) -> dict[str, Any]:
    """A fingerprint file, or the one in a record folder; FingerprintError names what is wrong."""
    file = path / FILE_NAME if path.is_dir() else path
    if not file.is_file():
        if not path.is_dir():
            raise FingerprintError(f"{path}: no such file")
        raise FingerprintError(
            f"{path}: no {FILE_NAME} here (a run folder holds one; `ledger fingerprint --out` writes one)"
        )
    try:
        document = parse_json(read_text(file, "fingerprint", MAX_DATA_BYTES), str(file))
    except InputFileError as exc:
        raise FingerprintError(str(exc)) from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise FingerprintError(f"{file}: not a ledger fingerprint (expected format {FORMAT!r})")
    if not isinstance(document.get("protocols"), dict):
        raise FingerprintError(f"{file}: its 'protocols' is not an object")
    for name, entry in document["protocols"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("arms"), dict):
            raise FingerprintError(f"{file}: protocol {name!r} has no 'arms' object")
        for arm, checkpoints in entry["arms"].items():
            if not isinstance(checkpoints, list) or not all(
                isinstance(c, dict) and isinstance(c.get("sha256"), str) for c in checkpoints
            ):
                raise FingerprintError(
                    f"{file}: protocol {name!r} arm {arm!r}: checkpoints must be objects with a sha256"
                )
    return document
