"""``ledger verify``: recompute every claim from the rows and check everything it rests on. Read-only.

For each claim file: find the registered protocol (or the imported release it names),
and for each claim check that it was preregistered unchanged and before its evidence,
re-hash the manifests and rows it reads and the checkpoint files that produced its
evidence, recompute the claim from row-level evidence, and compare the outcome with the
first one the ledger recorded. The chain is walked once; a broken chain taints every claim.

``verify`` writes nothing: recording first outcomes (``ledger run``, ``ledger verify
--record``) and importing releases (``ledger verify --import``, ``ledger import``) are
the separate, explicit steps of ``ledger.audit.recording``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger.audit.as_registered import (
    changed_correction,
    changed_families,
    changed_rules_fields,
    missing_claims,
    spec_changes,
)
from ledger.audit.history import note_versions
from ledger.audit.importer import registered_release, release_document
from ledger.audit.integrity import Finding, Integrity, protocol_file_problems
from ledger.audit.preregistration import claim_depends_on, claim_key, deviated_items, registered_versions
from ledger.audit.release import LoadedRelease, ReleaseError, load_release
from ledger.audit.verdicts import (
    EXIT_OK,
    EXIT_OUTCOME_CHANGED,
    EXIT_TAMPERED,
    EXIT_UNVERIFIABLE,
    ClaimVerdict,
    FirstOutcome,
    VerifyReport,
)
from ledger.canonical import canonical_json, sha256_hex
from ledger.environment import environment_differences, recorded_environments
from ledger.inputs import read_text
from ledger.judge.claim_files import evaluate_claims_beside
from ledger.judge.claim_rules import CURRENT as CURRENT_RULES
from ledger.judge.claim_rules import compared_arms
from ledger.judge.claims import ClaimResult
from ledger.judge.seeds import replicates_by_arm
from ledger.protocol.arms import claim_departures
from ledger.protocol.claims import ClaimFile, claim_manifests, claim_subjects, load_claims, manifest_of
from ledger.protocol.loader import ProtocolError, bounded_yaml
from ledger.store import Store
from ledger.store.evidence import StoreEvidence
from ledger.store.lookups import RecordedDeviation
from ledger.variables import unknown_variables

__all__ = [
    "EXIT_OK",
    "EXIT_OUTCOME_CHANGED",
    "EXIT_TAMPERED",
    "EXIT_UNVERIFIABLE",
    "ClaimVerdict",
    "FirstOutcome",
    "VerifyReport",
    "claim_files",
    "verify",
]


def claim_files_under(paths: list[str | Path]) -> list[Path]:
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            candidates = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml"))
        else:
            candidates = [path]
        for candidate in candidates:
            if not candidate.exists():
                raise FileNotFoundError(f"{candidate}: not found")
            found.append(candidate)
    return found


def is_release_mapping(path: Path) -> bool:
    try:
        data = bounded_yaml(read_text(path, "claim"), str(path))  # an alias bomb is not expanded to peek
    except Exception:
        return False
    return isinstance(data, dict) and "release" in data and "claims" not in data


def claim_files(paths: list[str | Path]) -> tuple[list[tuple[Path, ClaimFile]], list[str]]:
    """(path, claim file) for every claim file under ``paths``, and the errors of those that do not load."""
    loaded: list[tuple[Path, ClaimFile]] = []
    errors: list[str] = []
    for path in claim_files_under(paths):
        try:
            loaded.append((path, load_claims(path)))
        except ProtocolError as exc:
            if not is_release_mapping(path):  # a release mapping kept beside its claims is not a claim file
                errors.extend(str(issue) for issue in exc.issues)
    return loaded, errors


def verify(
    store: Store,
    paths: list[str | Path],
    *,
    root: str | Path | None = None,
    since_head: tuple[str, int] | None = None,
    releases: Mapping[Path, LoadedRelease] | None = None,
    artifacts: Sequence[str | Path] | None = None,
    every_file: bool = False,
    environment: Mapping[str, Any] | None = None,
) -> VerifyReport:
    """The claims under ``paths`` recomputed from this ledger, and everything they rest on checked.

    ``releases``: release files this process has just read (``verify --import``), by mapping path, so
    that they are not read twice; every other release is read from its files here. ``artifacts``:
    folders to look for checkpoint files in before the ledger's own artifact root. ``environment``:
    this process's environment record, which every environment the claims' runs recorded is compared
    with (``report.environment``: one line per difference, a warning that changes no exit code)."""
    # the chain walk (most of the time on a long ledger) runs on another core while the claims are recomputed
    chain_check = store.start_chain_check(since_head)
    report = VerifyReport([], [], store.head())
    report.chain_problems.extend(store.schema_problems())  # triggers, tables, views, revision as migrated
    report.history = (
        "checked for internal consistency only: without a trusted head (`ledger head --sign`, then "
        "`verify --trusted-head FILE --key PUB`, or --since-head ROOT:SIZE) a rewritten, truncated or "
        "reordered history that re-hashes consistently is not detected"
    )
    integrity = Integrity(store, artifacts)
    if every_file:  # `verify --all`: every recorded checkpoint file, not only the lineages claims read
        for level, message in integrity.every_file_problems():
            (report.chain_problems if level == "tampered" else report.errors).append(f"file: {message}")
    loaded, file_errors = claim_files(paths)
    report.errors.extend(file_errors)
    for path, claim_file in loaded:
        try:
            verdicts = _verify_file(store, path, claim_file, integrity, root=root, releases=releases)
        except (ReleaseError, ProtocolError, FileNotFoundError) as exc:
            report.errors.append(f"{path}: {exc}")
            continue
        note_versions(store, claim_file.protocol, claim_file.release is None, verdicts)
        for flag in unknown_variable_flags(store, claim_file.protocol):
            for verdict in verdicts:
                verdict.flags.append(flag)
        report.verdicts.extend(verdicts)
    if environment is not None:
        report.environment = recorded_environment_differences(
            store, [claim_file.protocol for _, claim_file in loaded], environment
        )
    chain, consistency = chain_check.result()
    report.chain_problems[:0] = [str(problem) for problem in chain.problems]
    if since_head is not None and consistency is not None:
        report.since_head = consistency.message
        report.history = (
            f"extends the head {since_head[0]}:{since_head[1]}"
            if consistency.ok
            else f"does NOT extend the head {since_head[0]}:{since_head[1]}"
        )
        if not consistency.ok:
            report.chain_problems.append(
                f"log is not an extension of head {since_head[0][:12]}:{since_head[1]}: {consistency.message}"
            )
    if report.chain_problems:
        for verdict in report.verdicts:
            verdict.integrity = "tampered"
            verdict.problems.append("the ledger's hash chain does not verify (see chain problems)")
            verdict.recordable = None
    return report


def recorded_environment_differences(store: Store, protocol_names: list[str], current: Mapping[str, Any]) -> list[str]:
    """How the environments recorded by these protocols' runs differ from ``current``: each distinct
    difference once, whichever runs share it. Not the verifying process's own threads (their counts and
    the variables that set them): verify computes nothing with torch, and a rerun's threads are what
    `ledger run` sets (`--parallel N`: the cores shared out). Another CPU kernel set still shows, as
    torch's CPU capability."""
    shas = {p.sha256 for name in dict.fromkeys(protocol_names) for p in store.protocols(name=name)}
    lines: list[str] = []
    runs = [run for run in store.rows_of("runs") if run["protocol_sha256"] in shas]
    for _, recorded in recorded_environments(runs):
        for line in environment_differences(recorded, current, ignore=("threads", "interop_threads", "thread_env")):
            if line not in lines:
                lines.append(line)
    return lines


def unknown_variable_flags(store: Store, protocol_name: str) -> list[str]:
    """One flag per run of this protocol made with a ``LEDGER_*`` variable this ledger does not know: nothing
    outside the protocol may change a reading, and an unknown switch is what an auditor must be told of."""
    shas = {p.sha256 for p in store.protocols(name=protocol_name)}
    runs = [run for run in store.rows_of("runs") if run["protocol_sha256"] in shas]
    flags = []
    for run_ids, environment in recorded_environments(runs):  # each distinct record parsed once
        recorded = environment.get("ledger_variables")
        if not isinstance(recorded, dict):
            continue  # a record made before the variables were kept
        unknown = unknown_variables(recorded)
        if unknown:
            shown = ", ".join(f"{name}={recorded[name]}" for name in unknown)
            flags += [f"run {run_id} was made with {shown}: not a variable this ledger knows" for run_id in run_ids]
    return flags


@dataclass
class _Scope:
    """Where a claim file's claims live in this ledger, and what applies to all of them."""

    protocol_shas: tuple[str, ...]
    external: bool
    problems: list[Finding] = field(default_factory=list)
    deviations: list[RecordedDeviation] = field(default_factory=list)
    claim_keys: tuple[str, ...] = ()  # the file's claims, as the ledger keys them
    _tested: set[str] | None = None
    _recorded: dict[str, int] = field(default_factory=dict)  # claim -> chain entry of its first outcome

    def missing_first_outcome(self, store: Store, key: str, evidence_seq: int) -> str | None:
        """Why a judgeable claim without a first outcome looks like a chain that ends early (None: it may simply
        not have been judged yet). ``evidence_seq``: the chain entry of the last checkpoint the claim reads. Only
        a trusted head proves a truncation; this is what the ledger itself knows."""
        if self._tested is None:
            keys = set(self.claim_keys)
            self._tested = {str(row["claim_id"]) for row in store.rows_of("stat_tests") if row["claim_id"] in keys}
            self._recorded = {}
            for other in keys:
                first = store.first_outcome(other)
                if first is not None:
                    self._recorded[other] = int(first["entry_seq"])
        check = "the chain may have been truncated (`verify --trusted-head` against a published head tells)"
        if key in self._tested:
            return f"first outcome missing: its statistical test is recorded, and the outcome is written right after it: {check}"
        # a run records every claim whose evidence is in at once: an outcome of this file recorded after this
        # claim's evidence was all in says this one was judged too (one recorded before it: a partial run)
        later = [other for other, seq in self._recorded.items() if seq > evidence_seq]
        if later:
            return (
                f"first outcome missing: {len(later)} other claim(s) of this file have theirs, recorded after this "
                f"one's evidence was in, and a run records them together: {check}"
            )
        return None


def _verify_file(
    store: Store, path: Path, claim_file: ClaimFile, integrity: Integrity, *, root, releases=None
) -> list[ClaimVerdict]:
    if claim_file.release is not None:
        scope = _release_scope(store, path, claim_file, root, releases or {})
    else:
        scope = _protocol_scope(store, claim_file)
    if isinstance(scope, str):  # nothing of this file is in the ledger: the reason, for every claim
        return [ClaimVerdict(str(path), claim.id, "unverifiable", "unverifiable", scope) for claim in claim_file.claims]
    scope.claim_keys = tuple(claim_key(claim_file.protocol, claim.id) for claim in claim_file.claims)
    evidence = StoreEvidence(store, scope.protocol_shas)
    results, current = evaluate_claims_beside(claim_file, evidence)
    arms = evidence.protocol_part("arms")
    replicates = replicates_by_arm(evidence)
    verdicts = []
    for claim, result, now in zip(claim_file.claims, results, current):
        verdict = _verdict(store, path, claim, result, evidence, integrity, claim_file.protocol, scope, replicates)
        verdict.rules, verdict.not_counted = claim_file.rules, result.not_counted
        if claim_file.rules < CURRENT_RULES:
            verdict.current = (now.outcome, now.not_counted, now.reason)
        subjects = [r for arm in claim_subjects(claim) for r in replicates.get(arm) or [arm]]
        verdict.departures = claim_departures(subjects, arms)
        verdicts.append(verdict)
    _flag_unacquired(store, claim_file, evidence, verdicts)
    return verdicts + _as_registered(store, path, claim_file, scope, verdicts)


def _flag_unacquired(
    store: Store, claim_file: ClaimFile, evidence: StoreEvidence, verdicts: list[ClaimVerdict]
) -> None:
    """A claim registered before acquisition was a rule (``ledger.judge.acquisition``) that an arm which learnt
    nothing would support: its support may be vacuous, and verify says so beside the outcome."""
    from ledger.judge.acquisition import chance_of, unacquired_claims

    chances: dict[str, float | None] = {}
    for claim in claim_file.claims:
        for manifest in claim_manifests(claim):
            sha = evidence.manifest_sha256(manifest)
            if manifest not in chances and sha is not None:
                rows = [json.loads(row.canonical_json) for row in store.manifest_rows(sha)]
                chances[manifest] = chance_of([len(row.get("symbols") or ()) for row in rows])
    by_id = {verdict.claim_id: verdict for verdict in verdicts}
    for found in unacquired_claims(claim_file, chances):
        verdict = by_id[found.claim_id]
        verdict.vacuous_risk = True
        verdict.flags.append(f"no acquisition precondition: {found.claim_id} {found.message}")
    # every arm a claim compares, not only the arm under test: a comparison against a control that never showed
    # it learnt its task may be won against nothing (claim rules 2 make such a comparison unverifiable)
    gates = evidence.protocol_part("gates")
    for claim in claim_file.claims:
        undeclared = [arm for arm in compared_arms(claim, gates) if arm not in claim_file.acquisition]
        if undeclared:
            verdict = by_id[claim.id]
            verdict.vacuous_risk = True
            verdict.flags.append(
                f"no acquisition of {', '.join(undeclared)}: {claim.id} compares arm(s) that never show they learnt "
                "their own task (`acquisition`, claim rules 2)"
            )


def _as_registered(
    store: Store, path: Path, claim_file: ClaimFile, scope: _Scope, verdicts: list[ClaimVerdict]
) -> list[ClaimVerdict]:
    """The file against its registration: a changed correction marks its family members tampered; each
    registered claim the file leaves out is a tampered verdict of its own (``ledger/audit/as_registered.py``)."""
    registered = changed_correction(store, scope.protocol_shas, claim_file)
    if registered is not None:
        families = {claim.id for claim in claim_file.claims if claim.family}
        for verdict in verdicts:
            if verdict.claim_id in families:
                verdict.integrity = "tampered"
                verdict.problems.append(
                    f"the file's correction is {claim_file.correction!r}, registered as {registered!r}: a family's "
                    "correction is part of the preregistration"
                )
    rules_changes = changed_rules_fields(store, scope.protocol_shas, claim_file)
    if rules_changes:
        for verdict in verdicts:
            verdict.integrity = "tampered"
            verdict.problems.append(
                f"the file's claim rules changed since registration ({'; '.join(rules_changes)}): the rules a file "
                "is judged under, its primary claims and acquisitions are part of the preregistration"
            )
    for family, change in changed_families(store, scope.protocol_shas, claim_file).items():
        for verdict in verdicts:
            if any(claim.id == verdict.claim_id and claim.family == family for claim in claim_file.claims):
                verdict.integrity = "tampered"
                verdict.problems.append(f"family {family!r} changed since registration ({change})")
    keys = {claim_key(claim_file.protocol, claim.id) for claim in claim_file.claims}
    return [
        ClaimVerdict(
            str(path),
            missing.claim_id.split("/", 1)[1],
            "unverifiable",
            "tampered",
            f"preregistered (entry {missing.entry_seq}) and missing from this claim file",
            problems=[
                f"claim {missing.claim_id} was preregistered and is left out of {path}: a registered claim is "
                "reported whatever its outcome (a withdrawn claim is a recorded deviation)"
            ],
        )
        for missing in missing_claims(store, scope.protocol_shas, claim_file, keys)
    ]


def _release_scope(
    store: Store, path: Path, claim_file: ClaimFile, root, releases: Mapping[Path, LoadedRelease]
) -> _Scope | str:
    """An external audit: the release must already be imported, and its files unchanged since."""
    assert claim_file.release is not None  # only claim files that name a release are scoped here
    mapping_path = (path.parent / claim_file.release).resolve()
    loaded = releases.get(mapping_path) or load_release(mapping_path, root)
    imported = registered_release(store, loaded.mapping.release)
    if imported is None:
        return (
            f"release {loaded.mapping.release!r} is not imported into this ledger: pass --import to "
            f"`ledger verify`, or run `ledger import {mapping_path}` first"
        )
    scope = _Scope((sha256_hex(canonical_json(imported)),), external=True)
    if scope.protocol_shas[0] != sha256_hex(canonical_json(release_document(loaded))):
        changed = sorted(file for file, sha in loaded.file_hashes.items() if imported["file_sha256"].get(file) != sha)
        changed_text = ", ".join(changed) or "the mapping"
        scope.problems.append(("tampered", f"release files changed since import: {changed_text}"))
    return scope


def _protocol_scope(store: Store, claim_file: ClaimFile) -> _Scope | str:
    versions = registered_versions(store, claim_file.protocol)
    if not versions:
        return f"protocol {claim_file.protocol!r} was never registered in this ledger"
    # The versions that preregistered this file's claims: a claim of version 1 is judged on version 1's runs
    # even after version 2 (with other claims) has run under the same arm names (all versions if none did).
    keys = {claim_key(claim_file.protocol, claim.id) for claim in claim_file.claims}
    registering = {
        entry.protocol_sha256 for entry in store.registrations(claim_file.protocol) if keys & set(entry.claims)
    }
    every_version = tuple(version.sha256 for version in versions)
    versions = [version for version in versions if version.sha256 in registering] or versions
    scope = _Scope(tuple(version.sha256 for version in versions), external=False)
    # the file on disk is checked against every registered version: it may be a later one than these claims'
    scope.problems.extend(protocol_file_problems(store, claim_file.protocol, every_version))
    for version in versions:
        scope.deviations.extend(deviated_items(store, version.sha256))
    return scope


def _verdict(
    store: Store,
    path: Path,
    claim,
    result: ClaimResult,
    evidence: StoreEvidence,
    integrity: Integrity,
    namespace: str,
    scope: _Scope,
    replicates: Mapping[str, list[str]] | None = None,
) -> ClaimVerdict:
    key = claim_key(namespace, claim.id)
    verdict = ClaimVerdict(str(path), claim.id, result.outcome, "verified", result.reason, result.figures)
    verdict.subjects = claim_subjects(claim)
    verdict.expected = claim.audited_outcome
    verdict.paper = claim.paper.model_dump(mode="json") if claim.paper is not None else None
    if claim.audited_outcome != "supported":
        verdict.flags.append(f"the audited paper concluded: {claim.audited_outcome}")
    spec = claim.model_dump(mode="json", by_alias=True)
    registered = store.claim(key)
    problems: list[Finding] = list(scope.problems)
    if registered is None and scope.external:
        verdict.flags.append("not registered in this ledger yet (`ledger verify --import` or `--record` registers it)")
    elif registered is None:
        problems.append(("unverifiable", f"claim {claim.id} was never preregistered"))
        verdict.outcome = "unregistered"  # whatever its figures say, an unregistered claim is never supported
    elif registered.spec_sha256 != sha256_hex(canonical_json(spec)):
        changed = "; ".join(spec_changes(registered.spec(), spec))
        problems.append(("tampered", f"claim {claim.id} in {path} differs from its preregistered spec ({changed})"))
    for manifest in claim_manifests(claim):
        manifest_sha = evidence.manifest_sha256(manifest)
        if manifest_sha is not None:
            problems.extend(("tampered", message) for message in integrity.manifest_problems(manifest_sha))
    arms = list(getattr(claim, "arms", ()) or ()) + ([claim.arm] if getattr(claim, "arm", None) else [])
    arms = [replicate for arm in arms for replicate in (replicates or {}).get(arm) or [arm]]  # seeds: each one
    problems.extend(_evidence_problems(store, claim, arms, registered, evidence, integrity))
    for deviation in scope.deviations:
        if claim_depends_on(claim, deviation.item):
            verdict.flags.append(f"depends on deviated item {deviation.item} ({deviation.timing}: {deviation.reason})")
    for kind in ("tampered", "unverifiable"):
        if any(level == kind for level, _ in problems):
            verdict.integrity = kind
            break
    verdict.problems = [message for _, message in problems]
    first = store.first_outcome(key) if registered is not None else None
    verdict.first_outcome = first["outcome"] if first else None
    # An outcome is a result only once the claim's evidence is all there: a partial run (`ledger run --arms A`
    # before B has run) must not fix "unverifiable" as the first outcome that every later verify is held to. A
    # precondition judged and not met is such a result (its own evidence and the precondition's are there).
    settled = result.outcome != "unverifiable" or result.figures.get("preconditions_met") is False
    used = {arm: sorted(evidence.checkpoints_used(arm, manifest_of(claim, arm))) for arm in arms}  # read once
    if registered is not None and first is None and settled and verdict.integrity == "verified":
        shas = {sha for checkpoints in used.values() for sha in checkpoints}
        seqs = [int(row["entry_seq"]) for sha in shas if (row := store.get_checkpoint(sha)) is not None]
        missing = scope.missing_first_outcome(store, key, max(seqs, default=0))
        if missing:
            verdict.first_outcome_missing = True
            verdict.flags.append(missing)
    recordable = (registered is not None or scope.external) and first is None and verdict.integrity == "verified"
    # a flagged missing first outcome is never re-recorded: `--record` would write over the trace of the cut
    if recordable and settled and not verdict.first_outcome_missing:
        inputs = tuple(
            {
                "role": f"arm{index}:{sha[:12]}",
                "arm": arm,
                "checkpoint_sha256": sha,
                "manifest_sha256": evidence.manifest_sha256(manifest_of(claim, arm)),
            }
            for index, arm in enumerate(arms)
            for sha in used[arm]
        )
        verdict.recordable = FirstOutcome(
            key,
            claim.statistic,
            spec,
            scope.protocol_shas[0],
            registered is None,
            inputs,
            result,
            tuple(evidence.evidence_ids(result.rows_used)),
        )
    return verdict


def _evidence_problems(
    store: Store, claim, arms: list[str], registered, evidence: StoreEvidence, integrity: Integrity
) -> list[Finding]:
    """The checkpoint files behind the claim's evidence, and its registration before that evidence."""
    problems: list[Finding] = []
    first_evidence_seq = None
    for arm in arms:
        seqs = [reading.entry_seq for reading in evidence.records(arm, manifest_of(claim, arm))]
        if seqs:
            first_evidence_seq = min(seqs) if first_evidence_seq is None else min(first_evidence_seq, *seqs)
        for sha in sorted(evidence.checkpoints_used(arm, manifest_of(claim, arm))):
            status = integrity.checkpoint_status(sha)
            if status is not None:
                problems.append(status)
            problems.extend(integrity.lineage_problems(sha))
    if registered is not None and first_evidence_seq is not None and registered.entry_seq > first_evidence_seq:
        protocol = store.protocol(registered.protocol_sha256) if registered.protocol_sha256 else None
        if protocol is None or not protocol.is_release:  # an audit's claims follow the release by design
            problems.append(
                (
                    "unverifiable",
                    f"claim {claim.id} was registered after its evidence (entry "
                    f"{registered.entry_seq} > {first_evidence_seq})",
                )
            )
    return problems
