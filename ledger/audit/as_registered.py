"""Claims as registered: what ``verify`` compares between the claim files it reads and the preregistration.

At registration (a protocol's, or an external claim file's on import) each claim file is recorded as a
``claim_file`` chain entry: its protocol version, path, multiplicity ``correction`` and the claims it
holds. ``verify`` then reports, per file: a registered claim missing from it (selective reporting:
``tampered``), a claim whose statistic, threshold, margin, family or any other field changed (``tampered``,
naming the fields), a changed correction (``tampered`` on every claim in a family), and a claim in the
file that was never registered (outcome ``unregistered``, never ``supported``). Ledgers registered
before ``claim_file`` entries existed are compared with every claim registered for the version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ledger.canonical import canonical_json
from ledger.protocol.claims import ClaimFile
from ledger.store import Store

ENTRY_KIND = "claim_file"


def claim_file_record(protocol_sha256: str, path: Path, claim_file: ClaimFile, keys: list[str]) -> dict[str, Any]:
    record: dict[str, Any] = {
        "protocol": claim_file.protocol,
        "protocol_sha256": protocol_sha256,
        "file": str(Path(path).resolve()),
        "correction": claim_file.correction,
        "claims": list(keys),
    }
    if claim_file.rules != 1:  # the claim rules it is judged under for good (a file before them: rules 1)
        record.update(_rules_fields(claim_file))
    if claim_file.families:  # declared families (their corrections and members) are preregistered too
        record["families"] = _families(claim_file)
    return record


def _rules_fields(claim_file: ClaimFile) -> dict[str, Any]:
    """What rules 2 read of the file itself: its rules, primary claims and declared acquisitions."""
    dumped = claim_file.model_dump(mode="json", include={"primary", "acquisition"})
    return {"rules": claim_file.rules, "primary": dumped["primary"], "acquisition": dumped["acquisition"]}


def changed_rules_fields(store: Store, protocol_sha256s: tuple[str, ...], claim_file: ClaimFile) -> list[str]:
    """``field: registered -> now`` for the file's rules, primary claims and acquisitions, where they changed since
    registration (a record from before rules 2 registered rules 1, with neither)."""
    record = _registered_record(store, protocol_sha256s, claim_file)
    if record is None:
        return []
    before = {
        "rules": record.get("rules", 1),
        "primary": record.get("primary", []),
        "acquisition": record.get("acquisition", {}),
    }
    return spec_changes(before, _rules_fields(claim_file))


def _families(claim_file: ClaimFile) -> dict[str, Any]:
    return {name: family.model_dump(mode="json") for name, family in sorted(claim_file.families.items())}


def record_claim_file(store: Store, protocol_sha256: str, path: Path, claim_file: ClaimFile, keys: list[str]) -> None:
    """Append the file's registration record, once per (version, file)."""
    record = claim_file_record(protocol_sha256, path, claim_file, keys)
    for _, data in store.entry_data(ENTRY_KIND):
        if data.get("protocol_sha256") == protocol_sha256 and data.get("file") == record["file"]:
            return
    store.append(ENTRY_KIND, record)


def registered_claim_files(store: Store, protocol_sha256s: tuple[str, ...], namespace: str) -> list[dict[str, Any]]:
    """The ``claim_file`` records of these versions for claims of ``namespace``, in chain order."""
    return [
        dict(data, seq=seq)
        for seq, data in store.entry_data(ENTRY_KIND)
        if data.get("protocol_sha256") in protocol_sha256s and data.get("protocol") == namespace
    ]


def spec_changes(registered: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``field: registered -> now`` for every field that differs."""
    changes = []
    for key in sorted(set(registered) | set(current)):
        before, after = registered.get(key), current.get(key)
        if canonical_json(before) != canonical_json(after):
            changes.append(f"{key}: {_short(before)} -> {_short(after)}")
    return changes


def _short(value: Any) -> str:
    text = "(absent)" if value is None else canonical_json(value)
    return text if len(text) <= 60 else text[:57] + "..."


def missing_claims(store: Store, protocol_sha256s: tuple[str, ...], claim_file: ClaimFile, keys: set[str]) -> list[Any]:
    """Registered claims of this file absent from it: those its registration record names (the record that
    names any of its claims), else (a ledger from before the records) every registered claim of these versions
    that no other file's record holds."""
    namespace = claim_file.protocol
    records = registered_claim_files(store, protocol_sha256s, namespace)
    own = [record for record in records if keys & set(record.get("claims") or [])]
    if own:
        expected = {key for record in own for key in record.get("claims") or []}
    else:
        others = {key for record in records for key in record.get("claims") or []}
        expected = {claim.claim_id for claim in store.claims() if claim.claim_id.startswith(f"{namespace}/")} - others
    return [
        claim
        for claim in store.claims()
        if claim.protocol_sha256 in protocol_sha256s and claim.claim_id in expected and claim.claim_id not in keys
    ]


def changed_correction(store: Store, protocol_sha256s: tuple[str, ...], claim_file: ClaimFile) -> str | None:
    """The correction registered for this file's claims, where it differs from the file's now."""
    record = _registered_record(store, protocol_sha256s, claim_file)
    if record is None:
        return None
    registered = record.get("correction")
    return registered if registered != claim_file.correction else None


def changed_families(store: Store, protocol_sha256s: tuple[str, ...], claim_file: ClaimFile) -> dict[str, str]:
    """family -> ``registered -> now`` for each declared family whose correction or members changed since
    registration (a family declared or undeclared afterwards included)."""
    record = _registered_record(store, protocol_sha256s, claim_file)
    if record is None:
        return {}
    before, now = record.get("families") or {}, _families(claim_file)
    return {
        name: f"{_short(before.get(name))} -> {_short(now.get(name))}"
        for name in sorted(set(before) | set(now))
        if canonical_json(before.get(name)) != canonical_json(now.get(name))
    }


def _registered_record(store: Store, protocol_sha256s: tuple[str, ...], claim_file: ClaimFile) -> dict | None:
    keys = {f"{claim_file.protocol}/{claim.id}" for claim in claim_file.claims}
    for record in reversed(registered_claim_files(store, protocol_sha256s, claim_file.protocol)):
        if keys & set(record.get("claims") or []):
            return record
    return None
