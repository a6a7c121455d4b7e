"""Preregistration and deviations: the plan is in the ledger before any result.

``register`` writes the canonical protocol, its manifests (rows and hashes) and the
claims it preregisters, plus a ``registration`` entry naming the protocol file and the
SHA-256 of its bytes. A changed protocol file is refused (``registration_of``) unless
``deviate`` has recorded every changed item (planned, actual, reason, timing) and
registered the new version. Claims that depend on a deviated item are flagged by verify.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.audit.refusals import RegistrationRefused
from ledger.canonical import sha256_file
from ledger.protocol.check import CheckedProtocol, check_protocol_file
from ledger.protocol.claims import ClaimFile, check_claims_against, claim_manifests, load_claims
from ledger.protocol.loader import ProtocolError, ProtocolIssue
from ledger.protocol.protocol import Protocol
from ledger.rows.builder import build_manifests
from ledger.store import Store
from ledger.store.lookups import RecordedDeviation, RegisteredProtocol

TIMINGS = ("before_data", "after_data", "after_analysis")


@dataclass
class Registration:
    protocol: Protocol
    sha256: str
    manifests: dict[str, str]  # id -> sha256
    claims: list[str]  # namespaced claim ids
    already: bool


def claim_key(protocol_name: str, claim_id: str) -> str:
    """Claim ids are unique per protocol; the ledger namespaces them."""
    return f"{protocol_name}/{claim_id}"


def claim_files_of(protocol_path: Path, protocol: Protocol) -> list[tuple[Path, ClaimFile]]:
    found = []
    for relative in protocol.claims:
        path = (protocol_path.parent / relative).resolve()
        if not path.is_file():
            raise RegistrationRefused(f"{protocol_path}: claim file {relative!r} not found (looked at {path})")
        claim_file = load_claims(path)
        issues = check_claims_against(claim_file, protocol, str(path))
        if issues:
            raise ProtocolError(issues)
        found.append((path, claim_file))
    return found


def registered_versions(store: Store, name: str) -> list[RegisteredProtocol]:
    """Every registered version of protocol ``name`` (releases excluded), in registration order."""
    return store.protocols(name=name, release=False)


def registration_of(store: Store, protocol: Protocol) -> str:
    """The registered SHA-256 of this protocol, or refuse with what to run."""
    sha = protocol.sha256
    versions = registered_versions(store, protocol.name)
    if not versions:
        raise RegistrationRefused(
            f"protocol {protocol.name!r} is not registered: run `ledger register PROTOCOL` before any result"
        )
    if any(version.sha256 == sha for version in versions):
        return sha
    raise RegistrationRefused(
        f"protocol {protocol.name!r} changed since it was registered (registered {versions[-1].sha256[:12]}, "
        f"file is {sha[:12]}): record the change with `ledger deviate PROTOCOL --reason ... --timing ...`"
    )


def _refuse_peeking(store: Store, path: Path, protocol: Protocol, manifests: dict, also: tuple = ()) -> None:
    """``ledger.audit.peeking``'s rules, before anything of a registration is written (``also``: other ledgers,
    e.g. a team's tuning ledgers, consulted too)."""
    from ledger.audit.peeking import refuse_exploratory_peek, refuse_read_evaluation  # it builds on this module

    claims = [
        claim.model_dump(mode="json", by_alias=True)
        for _, claim_file in claim_files_of(path, protocol)
        for claim in claim_file.claims
    ]
    refuse_read_evaluation(store, protocol, manifests, claims, also)
    refuse_exploratory_peek(store, protocol, manifests, also)


def _refuse_claims(claim_files: list[tuple[Path, ClaimFile]], found_in: Callable[[ClaimFile], list]) -> None:
    """Every claim a registration rule finds (each with ``index``, ``claim_id`` and ``message``), located in its
    claim file: bad input, raised before anything is written."""
    issues = [
        ProtocolIssue(str(claim_path), None, f"claims.{found.index}", f"claim {found.claim_id} {found.message}")
        if found.index is not None
        else ProtocolIssue(str(claim_path), None, found.field, found.message)
        for claim_path, claim_file in claim_files
        for found in found_in(claim_file)
    ]
    if issues:
        raise ProtocolError(issues)


def refuse_unwinnable(claim_files: list[tuple[Path, ClaimFile]], manifests: dict) -> None:
    """Power at registration (``ledger.judge.power``): a claim no outcome of its rows could support."""
    from ledger.judge.power import unwinnable_claims

    depths = {name: [row.depth for row in manifest.rows] for name, manifest in manifests.items()}
    _refuse_claims(claim_files, lambda claim_file: unwinnable_claims(claim_file, depths))


def refuse_unacquired(claim_files: list[tuple[Path, ClaimFile]], manifests: dict) -> None:
    """Acquisition at registration (``ledger.judge.acquisition``): a claim an arm that learnt nothing would
    support, or a guardrail on rows its base answers near chance, must require that the skill was acquired."""
    from ledger.judge.acquisition import chance_of, unacquired_claims

    chances = {name: chance_of([len(row.symbols) for row in manifest.rows]) for name, manifest in manifests.items()}
    _refuse_claims(claim_files, lambda claim_file: unacquired_claims(claim_file, chances))


def refuse_against_rules(claim_files: list[tuple[Path, ClaimFile]], protocol: Protocol, manifests: dict) -> None:
    """The claim rules each file follows (``ledger.judge.claim_rules``): rules 2's declarations and bounds, and a
    paper's figure on a claim of another statistic or benchmark (any rules)."""
    from ledger.judge.claim_rules import registration_issues

    gates = {gate.id: gate.model_dump(mode="json") for gate in protocol.gates}
    depths = {name: [row.depth for row in manifest.rows] for name, manifest in manifests.items()}
    benchmarks = {spec.id: spec.benchmark() for spec in protocol.manifests}
    replicated = {arm.replicate.of for arm in protocol.arms if arm.replicate is not None}
    _refuse_claims(
        claim_files, lambda claim_file: registration_issues(claim_file, gates, depths, benchmarks, replicated)
    )


def _write(
    store: Store,
    path: Path,
    protocol: Protocol,
    built: dict | None = None,
    *,
    power: bool = True,
    acquisition: bool = True,
) -> Registration:
    """``power`` or ``acquisition`` False: write a version as code before that rule did (tests replaying old
    registrations)."""
    manifests = built if built is not None else build_manifests(protocol)
    claim_files = claim_files_of(path, protocol)
    if power:
        refuse_unwinnable(claim_files, manifests)
    if acquisition:
        refuse_unacquired(claim_files, manifests)
    if power or acquisition:
        refuse_against_rules(claim_files, protocol, manifests)
    sha = store.add_protocol(json.loads(protocol.canonical()), name=protocol.name, version=str(protocol.version))
    manifest_shas = {name: store.add_manifest(manifest, protocol_sha256=sha) for name, manifest in manifests.items()}
    from ledger.audit.as_registered import record_claim_file

    claim_ids = []
    for claim_path, claim_file in claim_files:
        keys = []
        for claim in claim_file.claims:
            key = claim_key(protocol.name, claim.id)
            store.add_claim(key, claim.model_dump(mode="json", by_alias=True), protocol_sha256=sha)
            keys.append(key)
        record_claim_file(store, sha, claim_path, claim_file, keys)  # its correction and its claims, as registered
        claim_ids.extend(keys)
    store.append(
        "registration",
        {
            "protocol": protocol.name,
            "protocol_sha256": sha,
            "file": str(path),
            "file_sha256": sha256_file(path),
            "manifests": manifest_shas,
            "claims": claim_ids,
        },
    )
    return Registration(protocol, sha, manifest_shas, claim_ids, already=False)


def register(
    store: Store,
    path: str | Path,
    checked: CheckedProtocol | None = None,
    manifests: dict | None = None,
    also: tuple = (),
    *,
    rules: bool = True,
) -> Registration:
    """Register a protocol before any result; refuses a silently changed protocol.

    ``checked``: the protocol already passed through ``check_protocol_file`` by the caller (who checks
    before opening the database), so that it is not loaded and checked twice; ``manifests``: its manifests
    as the caller already built them (``build_manifests``), so that they are not built twice; ``also``: other
    ledgers (stores) whose runs the peeking rules consult too; ``rules`` False: no power or acquisition rule
    (a dry run's throwaway ledger, on a handful of rows)."""
    path = Path(path)
    protocol = (checked or check_protocol_file(path)).protocol  # complete validation before anything is written
    # one registration at a time: a second process registering the same file waits, then finds it registered
    with store.exclusive("registration"):
        return _register_once(store, path, protocol, manifests, also, rules)


def _register_once(
    store: Store, path: Path, protocol: Protocol, manifests: dict | None, also: tuple = (), rules: bool = True
) -> Registration:
    versions = registered_versions(store, protocol.name)
    if any(version.sha256 == protocol.sha256 for version in versions):
        registered = {manifest.name: manifest.sha256 for manifest in store.manifests_of([protocol.sha256])}
        for name, manifest in (manifests or {}).items():  # a local file pinned by its rows, changed since
            if registered.get(name) not in (None, manifest.sha256):
                raise RegistrationRefused(
                    f"manifest {name} of {protocol.name!r}: its rows now hash to {manifest.sha256[:12]}, registered "
                    f"as {registered[name][:12]}: the file it reads changed since registration (put the "
                    "registered file back, or give the protocol a new version with `ledger deviate`)"
                )
        claims = [claim.claim_id for claim in store.claims() if claim.protocol_sha256 == protocol.sha256]
        return Registration(protocol, protocol.sha256, registered, claims, already=True)
    if versions:
        raise RegistrationRefused(
            f"protocol {protocol.name!r} is already registered as {versions[-1].sha256[:12]} and this file differs: "
            "a change to a registered protocol is a deviation (`ledger deviate`)"
        )
    manifests = manifests if manifests is not None else build_manifests(protocol)
    _refuse_peeking(store, path, protocol, manifests, also)
    return _write(store, path, protocol, manifests, power=rules, acquisition=rules)


def diff_items(planned: Any, actual: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """Changed leaves between two protocol documents; lists of items with ids are keyed by id."""
    if (
        isinstance(planned, list)
        and isinstance(actual, list)
        and all(isinstance(item, dict) and "id" in item for item in planned + actual)
    ):
        planned = {item["id"]: item for item in planned}
        actual = {item["id"]: item for item in actual}
    if isinstance(planned, dict) and isinstance(actual, dict):
        changes = []
        for key in sorted(set(planned) | set(actual), key=str):
            where = f"{prefix}.{key}" if prefix else str(key)
            if key not in planned:
                changes.append((where, None, actual[key]))
            elif key not in actual:
                changes.append((where, planned[key], None))
            else:
                changes.extend(diff_items(planned[key], actual[key], where))
        return changes
    return [] if planned == actual else [(prefix, planned, actual)]


def deviate(
    store: Store,
    path: str | Path,
    *,
    reason: str,
    timing: str,
    checked: CheckedProtocol | None = None,
    acquisition: bool = True,
) -> tuple[str, str, list[tuple[str, Any, Any]]]:
    """Record every change of a registered protocol as a deviation, then register the new version.
    ``acquisition`` False: replay a version registered before the acquisition rule (tests)."""
    if timing not in TIMINGS:
        raise ValueError(f"timing must be one of {', '.join(TIMINGS)}, got {timing!r}")
    path = Path(path)
    protocol = (checked or check_protocol_file(path)).protocol
    with store.exclusive("registration"):
        return _deviate_once(store, path, protocol, reason=reason, timing=timing, acquisition=acquisition)


def _deviate_once(
    store: Store, path: Path, protocol: Protocol, *, reason: str, timing: str, acquisition: bool = True
) -> tuple[str, str, list[tuple[str, Any, Any]]]:
    versions = registered_versions(store, protocol.name)
    if not versions:
        raise RegistrationRefused(f"protocol {protocol.name!r} was never registered: nothing to deviate from")
    previous = versions[-1]
    if previous.sha256 == protocol.sha256 or any(v.sha256 == protocol.sha256 for v in versions):
        raise RegistrationRefused(f"protocol {protocol.name!r} is unchanged from a registered version: no deviation")
    if timing == "before_data":
        recorded = store.evidence_count_of([version.sha256 for version in versions])
        if recorded:
            raise RegistrationRefused(
                f"protocol {protocol.name!r} already has {recorded} readings recorded by its runs: a deviation "
                "now is not before the data; record it as --timing after_data (or after_analysis)"
            )
    changes = diff_items(json.loads(previous.canonical_json), json.loads(protocol.canonical()))
    manifests = build_manifests(protocol)  # refuse a contaminated or unbuildable revision before writing anything
    _refuse_peeking(store, path, protocol, manifests)
    # The deviations point at the new version, so its canonical document goes in first;
    # its manifests, claims and registration entry follow the deviations.
    store.add_protocol(json.loads(protocol.canonical()), name=protocol.name, version=str(protocol.version))
    for item, planned, actual in changes:
        store.add_deviation(
            previous.sha256,
            item=item,
            planned=planned,
            actual=actual,
            reason=reason,
            timing=timing,
            new_protocol_sha256=protocol.sha256,
        )
    _write(store, path, protocol, manifests, acquisition=acquisition)
    return previous.sha256, protocol.sha256, changes


def deviated_items(store: Store, protocol_sha256: str) -> list[RecordedDeviation]:
    """Deviations on the path that led to ``protocol_sha256`` (walking back through versions)."""
    found, frontier, seen = [], [protocol_sha256], set()
    while frontier:
        sha = frontier.pop()
        if sha in seen:
            continue
        seen.add(sha)
        for deviation in store.deviations_to(sha):
            found.append(deviation)
            frontier.append(deviation.protocol_sha256)
    return found


def claim_depends_on(claim: Any, item: str) -> bool:
    """Whether a deviated protocol item can move this claim's result."""
    parts = item.split(".")
    head = parts[0]
    if head in ("name", "description", "hypotheses", "claims", "version"):
        return False
    if head == "bases" and parts[-1] == "num_layers":
        return False  # metadata that `ledger check` compares with the hash-pinned base: it moves nothing
    named = set(getattr(claim, "arms", ()) or ()) | {getattr(claim, "arm", None), getattr(claim, "gate", None)}
    if head == "arms":
        return len(parts) > 1 and parts[1] in named
    if head == "manifests":
        return len(parts) > 1 and parts[1] in claim_manifests(claim)
    if head == "gates":
        return len(parts) > 1 and parts[1] == getattr(claim, "gate", None)
    return True  # seed, bases, schema: everything downstream may move
