"""Tuning without peeking: no confirmatory evaluation problem may have been read before it counts.

Problems, not bytes: two rows pose the same problem when they share a contamination key
(``ledger.rows.contamination``: a rule-chasing row's table and start, whatever its surface, id or
depth, since the answer at every depth follows from them; an arithmetic question's operation and operands,
whatever its options; a multiple-choice question's stem and its options as a set; the prompt text otherwise).
So the same tables and starts rendered in another surface, the same question with its options reshuffled, or
rows re-generated into a manifest of other bytes, are the same problems.

The rules, checked at every registration and at the start of every run:

The frozen rows of a confirmatory protocol: every manifest of role ``eval``, and every other manifest (a
guardrail's, e.g. Tier-1) that one of its claims reads, except training data and a gate claim's
development rows. Other ledgers (``also``: a team's tuning ledgers, ``--also-db``) are consulted as well.

1. **A confirmatory protocol registers only fresh evaluation rows**: no run of any other protocol
   (whatever its ``purpose`` says; an imported release included) and no run of an exploratory
   version of the same protocol has evidence on one of their problems, and no such protocol registered them
   as its training or development rows (it may train or tune on them without leaving evidence). Earlier confirmatory versions
   of the same protocol are its own history (their deviations are recorded and shown with it).
2. **An exploratory protocol reads no registered confirmatory protocol's evaluation problem**: refused
   at its registration, and again when it runs (a confirmatory protocol may have registered in between).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ledger.audit.refusals import RegistrationRefused
from ledger.canonical import canonical_json, sha256_hex
from ledger.protocol.protocol import Protocol
from ledger.rows.contamination import contamination_key
from ledger.rows.manifest import Manifest, Row
from ledger.store import Store
from ledger.store.lookups import RegisteredProtocol


class PeekingRefused(RegistrationRefused):
    """A registration or an exploratory run would let a result see a frozen evaluation problem."""


def problem_key(row: Row) -> str:
    """The content key of the problem a row poses (its contamination key, hashed)."""
    return sha256_hex(canonical_json(list(contamination_key(row))))


@dataclass(frozen=True)
class ReadProblem:
    """A problem some run has evidence on: which protocol read it, and as which row."""

    protocol_name: str
    purpose: str
    row_id: str
    how: str = "already read"  # or "trains or tunes on": a registered training or development row


def _purpose(protocol: RegisteredProtocol) -> str:
    if protocol.is_release:
        return "release"
    return str((protocol.document() or {}).get("purpose", "confirmatory"))


class _ManifestKeys:
    """Problem keys of stored manifests' rows, each manifest parsed once."""

    def __init__(self, store: Store):
        self.store = store
        self._keys: dict[str, dict[str, str]] = {}

    def of(self, manifest_sha256: str) -> dict[str, str]:
        """row id -> problem key."""
        if manifest_sha256 not in self._keys:
            self._keys[manifest_sha256] = {
                row.row_id: problem_key(Row.model_validate_json(row.canonical_json))
                for row in self.store.manifest_rows(manifest_sha256)
            }
        return self._keys[manifest_sha256]


def problems_read(store: Store, *, skip: Iterable[str] = ()) -> dict[str, ReadProblem]:
    """problem key -> the first run reading of it, over every protocol version not in ``skip``."""
    protocols = {p.sha256: p for p in store.protocols()}
    skipped = set(skip)
    keys = _ManifestKeys(store)
    found: dict[str, ReadProblem] = {}
    for read in store.rows_read():
        if read.protocol_sha256 is None or read.protocol_sha256 in skipped:
            continue
        protocol = protocols.get(read.protocol_sha256)
        if protocol is None:
            continue
        key = keys.of(read.manifest_sha256).get(read.row_id)
        if key is not None and key not in found:
            found[key] = ReadProblem(protocol.name, _purpose(protocol), read.row_id)
    return found


def problems_trained(store: Store, *, skip: Iterable[str] = ()) -> dict[str, ReadProblem]:
    """problem key -> the first registered training or development row posing it, over every protocol version not
    in ``skip``: a protocol trains or tunes on those rows whether or not a run records evidence on them."""
    skipped = set(skip)
    keys = _ManifestKeys(store)
    found: dict[str, ReadProblem] = {}
    for protocol in store.protocols(release=False):
        if protocol.sha256 in skipped:
            continue
        roles = {spec.get("id"): spec.get("role") for spec in (protocol.document() or {}).get("manifests") or []}
        for manifest in store.manifests_of([protocol.sha256]):
            if roles.get(manifest.name) not in ("train", "dev"):
                continue
            for row_id, key in keys.of(manifest.sha256).items():
                found.setdefault(key, ReadProblem(protocol.name, _purpose(protocol), row_id, "trains or tunes on"))
    return found


def _own_history(store: Store, protocol: Protocol) -> set[str]:
    """This confirmatory protocol and its earlier confirmatory versions: their runs are its own record."""
    versions = store.protocols(name=protocol.name, release=False)
    return {version.sha256 for version in versions if _purpose(version) == "confirmatory"} | {protocol.sha256}


def frozen_manifest_ids(manifest_roles: Mapping[str, str], claims: Iterable[Any]) -> list[str]:
    """The manifests whose rows are frozen: role eval, and any other its (non-gate) claims read, training excepted."""
    claimed = {
        name
        for claim in claims
        if claim.get("statistic") != "gate"
        for name in (claim["manifest"], *(claim.get("manifests") or {}).values())
    }
    return [name for name, role in manifest_roles.items() if role == "eval" or (name in claimed and role != "train")]


def refuse_read_evaluation(
    store: Store,
    protocol: Protocol,
    manifests: Mapping[str, Manifest],
    claims: Iterable[Any] = (),
    also: Iterable[Store] = (),
) -> None:
    """Rule 1: a confirmatory protocol's frozen rows (``claims``: its claim specs, as dicts) pose no problem
    another run has read, in this ledger or in ``also``."""
    if protocol.purpose != "confirmatory":
        return
    frozen = frozen_manifest_ids({spec.id: spec.role for spec in protocol.manifests}, claims)
    if not frozen:
        return
    read: dict[str, ReadProblem] = {}
    for ledger in (*also, store):
        own = _own_history(ledger, protocol)
        read.update(problems_read(ledger, skip=own))
        for key, trained in problems_trained(ledger, skip=own).items():
            read.setdefault(key, trained)
    for manifest_id in frozen:
        hits = [(row, key) for row in manifests[manifest_id].rows if (key := problem_key(row)) in read]
        if hits:
            row, key = hits[0]
            first = read[key]
            problems = len({key for _, key in hits})
            raise PeekingRefused(
                f"evaluation manifest {manifest_id!r} of {protocol.name!r} is not fresh: {len(hits)} of its rows pose "
                f"{problems} problem{'s' * (problems != 1)} that {first.purpose} protocol {first.protocol_name!r} "
                f"{first.how} (e.g. {row.row_id} as {first.row_id}: same table and start, same question, or same "
                "prompt); choose a new seed or split for the frozen evaluation"
            )


def confirmatory_evaluation_problems(store: Store) -> dict[str, str]:
    """problem key -> 'protocol/manifest' of every registered confirmatory protocol's frozen rows."""
    keys = _ManifestKeys(store)
    found: dict[str, str] = {}
    claims_of: dict[str | None, list[Any]] = {}
    for claim in store.claims():
        claims_of.setdefault(claim.protocol_sha256, []).append(claim.spec())
    for protocol in store.protocols(release=False):
        document = protocol.document() or {}
        if document.get("purpose", "confirmatory") != "confirmatory":
            continue
        roles = {spec.get("id"): spec.get("role") for spec in document.get("manifests") or []}
        for manifest_id in frozen_manifest_ids(roles, claims_of.get(protocol.sha256, [])):
            for manifest in store.manifests_of([protocol.sha256], name=manifest_id):
                for key in keys.of(manifest.sha256).values():
                    found.setdefault(key, f"{protocol.name}/{manifest_id}")
    return found


def refuse_exploratory_peek(
    store: Store, protocol: Protocol, manifests: Mapping[str, Manifest], also: Iterable[Store] = ()
) -> None:
    """Rule 2: an exploratory protocol's rows pose no problem of a registered confirmatory protocol's frozen
    rows, in this ledger or in ``also``."""
    if protocol.purpose != "exploratory":
        return
    frozen: dict[str, str] = {}
    for ledger in (*also, store):
        frozen.update(confirmatory_evaluation_problems(ledger))
    if not frozen:
        return
    for manifest_id, manifest in manifests.items():
        hits = [(row, frozen[key]) for row in manifest.rows if (key := problem_key(row)) in frozen]
        if hits:
            row, where = hits[0]
            raise PeekingRefused(
                f"exploratory protocol {protocol.name!r} would read frozen evaluation problems: {len(hits)} rows of "
                f"its manifest {manifest_id!r} (e.g. {row.row_id}) pose problems of {where}, registered as "
                "confirmatory; tune on development rows (another seed or split)"
            )
