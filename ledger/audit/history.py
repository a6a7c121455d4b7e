"""The garden of forking paths: every registered version of a protocol, side by side.

A protocol re-registered after a deviation is a new version; its claims are judged again on its
own runs. A reader who sees only the last version's outcomes cannot tell a result found once from
one found on the third try. ``protocol_history`` puts each version next to the others: what
changed on the way to it (its recorded deviations), the rows its runs read, each preregistered
claim's outcome re-derived from that version's evidence alone, and the tuning (exploratory protocols) registered in
this ledger before it. ``ledger history``, the report and ``verify`` all read it from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ledger.audit.as_registered import registered_claim_files
from ledger.audit.preregistration import claim_key
from ledger.judge.claim_files import evaluate_claims
from ledger.protocol.claims import ClaimFile
from ledger.store.evidence import StoreEvidence
from ledger.store.lookups.protocols import RecordedDeviation, RegisteredProtocol

if TYPE_CHECKING:
    from ledger.store import Store

NOT_JUDGED = "not judged"
NOT_REGISTERED = "not registered"


@dataclass
class VersionHistory:
    number: int  # 1, 2, ... in registration order
    protocol: RegisteredProtocol
    registered_seq: int | None  # the chain entry of its (first) registration
    deviations: list[RecordedDeviation]
    claims: tuple[str, ...]  # claim keys (``protocol/id``) this version preregistered
    readings: list[tuple[str, int, int]]  # (manifest, readings, distinct rows) its runs recorded
    outcomes: dict[str, str]  # claim key -> its outcome re-derived from this version's evidence alone
    tuning: list[RegisteredProtocol] = field(default_factory=list)  # exploratory protocols registered just before

    def outcome_of(self, claim: str) -> str:
        if claim not in self.claims:
            return NOT_REGISTERED
        return self.outcomes.get(claim, NOT_JUDGED)

    def supported(self) -> int:
        return sum(1 for claim in self.claims if self.outcomes.get(claim) == "supported")

    def to_dict(self) -> dict:
        return {
            "version": self.number,
            "label": self.protocol.version,
            "sha256": self.protocol.sha256,
            "registered_seq": self.registered_seq,
            "deviations": [
                {"item": d.item, "timing": d.timing, "planned": d.planned, "actual": d.actual, "reason": d.reason}
                for d in self.deviations
            ],
            "readings": [{"manifest": m, "readings": n, "rows": r} for m, n, r in self.readings],
            "claims": {claim: self.outcome_of(claim) for claim in self.claims},
            "tuning": [{"name": p.name, "version": p.version, "sha256": p.sha256} for p in self.tuning],
        }


@dataclass
class ProtocolHistory:
    name: str
    versions: list[VersionHistory]

    def claims(self) -> list[str]:
        """Every claim key any version preregistered, in the order they first appear."""
        seen: dict[str, None] = {}
        for version in self.versions:
            seen.update(dict.fromkeys(version.claims))
        return list(seen)

    def claim_note(self, claim: str, outcome_now: str | None = None) -> str | None:
        """'supported in version 3 of 3 registered; earlier versions: v1 refuted, v2 not judged' (N > 1);
        ``outcome_now`` (what verify just found) stands for the latest version's recorded outcome."""
        if len(self.versions) < 2:
            return None
        own = [version for version in self.versions if claim in version.claims]
        if not own:
            return None
        latest = own[-1]
        earlier = ", ".join(f"v{v.number} {v.outcome_of(claim)}" for v in self.versions if v.number < latest.number)
        note = (
            f"{outcome_now or latest.outcome_of(claim)} in version {latest.number} of {len(self.versions)} registered"
        )
        return note + (f"; earlier versions: {earlier}" if earlier else "")

    def to_dict(self) -> dict:
        return {"protocol": self.name, "versions": [version.to_dict() for version in self.versions]}


def protocol_history(store: Store, name: str) -> ProtocolHistory:
    """Every registered version of protocol ``name`` (LookupError if none) with what it changed, read and found."""
    versions = store.protocols(name=name, release=False)
    if not versions:
        known = sorted({p.name for p in store.protocols(release=False)})
        raise LookupError(
            f"no protocol {name!r} is registered in this ledger (registered: {', '.join(known) or 'none'})"
        )
    registrations = store.registrations()
    first_seq: dict[str, int] = {}
    claims_of: dict[str, list[str]] = {}
    for entry in registrations:
        first_seq.setdefault(entry.protocol_sha256, entry.seq)
        claims_of.setdefault(entry.protocol_sha256, [])
        claims_of[entry.protocol_sha256].extend(c for c in entry.claims if c not in claims_of[entry.protocol_sha256])
    shas = [version.sha256 for version in versions]
    manifest_names = {m.sha256: m.name for m in store.manifests_of(shas)}
    readings: dict[str, list[tuple[str, int, int]]] = {sha: [] for sha in shas}
    for found in store.readings_by_version(shas):
        if found.protocol_sha256 in readings:
            name_of = manifest_names.get(found.manifest_sha256, found.manifest_sha256[:12])
            readings[found.protocol_sha256].append((name_of, found.readings, found.rows))
    outcomes = {
        sha: outcomes_on_version(store, name, sha, claims_of.get(sha, [])) if readings[sha] else {} for sha in shas
    }
    history = ProtocolHistory(
        name,
        [
            VersionHistory(
                number,
                version,
                first_seq.get(version.sha256),
                store.deviations_to(version.sha256),
                tuple(claims_of.get(version.sha256, ())),
                readings[version.sha256],
                outcomes[version.sha256],
            )
            for number, version in enumerate(versions, start=1)
        ],
    )
    _attach_tuning(store, history, first_seq)
    return history


def outcomes_on_version(store: Store, name: str, sha256: str, keys: list[str]) -> dict[str, str]:
    """claim key -> outcome of the claims version ``sha256`` preregistered, recomputed (as ``verify`` does)
    from the evidence of that version's runs alone, each claim file with its registered correction.

    Recomputed, not read back: a claim's recorded outcome is its first, and a claim a later version
    preregisters again keeps the key (and the first outcome) of the earlier one."""
    files = registered_claim_files(store, (sha256,), name) or [{"correction": "holm", "claims": keys}]
    evidence = StoreEvidence(store, (sha256,))
    outcomes: dict[str, str] = {}
    for record in files:
        specs = [claim.spec() for claim in (store.claim(key) for key in record.get("claims") or []) if claim]
        try:
            claim_file = ClaimFile.model_validate(
                {"protocol": name, "correction": record.get("correction", "holm"), "claims": specs}
            )
        except ValidationError:  # a registration this version of the code cannot read back: say so
            outcomes.update(dict.fromkeys(record.get("claims") or [], "unreadable"))
            continue
        for result in evaluate_claims(claim_file, evidence):
            outcomes[claim_key(name, result.claim_id)] = result.outcome
    return outcomes


def _attach_tuning(store: Store, history: ProtocolHistory, first_seq: dict[str, int]) -> None:
    """Each exploratory protocol registered in this ledger goes with the first version registered after it."""
    exploratory = [
        p
        for p in store.protocols(release=False)
        if p.name != history.name and (p.document() or {}).get("purpose") == "exploratory" and p.sha256 in first_seq
    ]
    previous = -1
    for version in history.versions:
        seq = version.registered_seq if version.registered_seq is not None else previous
        version.tuning = [p for p in exploratory if previous < first_seq[p.sha256] < seq]
        previous = seq


def note_versions(store: Store, protocol: str, is_protocol: bool, verdicts: list[Any]) -> None:
    """Where a protocol has more than one registered version, each of ``verify``'s verdicts on its claims says
    which version it is and what the earlier ones found (``verdict.versions``)."""
    if not is_protocol or len(store.protocols(name=protocol, release=False)) < 2:
        return
    history = protocol_history(store, protocol)
    for verdict in verdicts:
        verdict.versions = history.claim_note(claim_key(protocol, verdict.claim_id), verdict.outcome)


def version_story(store: Store, name: str, sha256: str) -> list[str]:
    """How this version came to be, for a summary or a report's lead: "NAME: version 3 of 3 registered in this
    ledger" (and the file's own version where it differs: earlier versions registered elsewhere), then
    each recorded deviation on the way to it, oldest first, with the reason its author recorded (what outcome
    led to it) and how many items it changed. A single version: the first line alone."""
    versions = store.protocols(name=name, release=False)
    numbers = {version.sha256: index for index, version in enumerate(versions, 1)}
    if sha256 not in numbers:
        return []
    label = versions[numbers[sha256] - 1].version
    lines = [
        f"{name}: version {numbers[sha256]} of {len(versions)} registered in this ledger"
        + (f" (its file's version {label})" if label and str(label) != str(numbers[sha256]) else "")
    ]
    chain: list[str] = []
    for version in versions[: numbers[sha256]]:
        grouped: dict[tuple[str, str, str], int] = {}
        for deviation in store.deviations_to(version.sha256):
            key = (deviation.protocol_sha256, deviation.timing, deviation.reason)
            grouped[key] = grouped.get(key, 0) + 1
        for (before, timing, reason), items in grouped.items():
            chain.append(
                f"version {numbers.get(before, '?')} -> {numbers[version.sha256]} ({timing}, {items} item(s)): {reason}"
            )
    return lines + chain
