"""``ledger verify``: recompute every claim from the rows and check everything it rests on.

For each claim file: import its release if it names one (an external audit), find the
registered protocol, and for each claim check that it was preregistered unchanged and
before its evidence, re-hash the manifests and rows it reads and the checkpoint files
that produced its evidence, recompute the claim from row-level evidence, and compare the
outcome with the one the ledger recorded when the claim was first evaluated (recording
it now if it never was). The chain is walked once; a broken chain taints every claim.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger.canonical import canonical_json, sha256_file, sha256_hex
from ledger.judge.claims import ClaimResult, evaluate_claims
from ledger.spec.claims import ClaimFile, load_claims
from ledger.store.evidence import StoreEvidence
from ledger.audit.importer import import_release, registered_release, release_document
from ledger.rows.builder import build_manifests
from ledger.audit.preregistration import claim_depends_on, claim_key, deviated_items, registered_versions
from ledger.spec.loader import ProtocolError, load_protocol
from ledger.audit.release import ReleaseError, load_release
from ledger.store import Store

# Exit codes of `ledger verify` (documented in its --help).
EXIT_OK = 0
EXIT_OUTCOME_CHANGED = 1  # refuted now, or differs from the first recorded outcome
EXIT_TAMPERED = 4
EXIT_UNVERIFIABLE = 5


@dataclass
class ClaimVerdict:
    file: str
    claim_id: str
    outcome: str
    integrity: str  # verified | tampered | unverifiable
    reason: str
    figures: dict[str, Any] = field(default_factory=dict)
    first_outcome: str | None = None
    problems: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        expected = self.first_outcome or "supported"
        return self.integrity == "verified" and self.outcome == expected

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "claim_id": self.claim_id,
            "outcome": self.outcome,
            "integrity": self.integrity,
            "first_outcome": self.first_outcome,
            "reason": self.reason,
            "figures": self.figures,
            "problems": self.problems,
            "flags": self.flags,
            "ok": self.ok,
        }


@dataclass
class VerifyReport:
    verdicts: list[ClaimVerdict]
    chain_problems: list[str]
    head: tuple[str, int]
    since_head: str | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.chain_problems or any(v.integrity == "tampered" for v in self.verdicts):
            return EXIT_TAMPERED
        if self.errors or any(v.integrity == "unverifiable" for v in self.verdicts):
            return EXIT_UNVERIFIABLE
        if not all(v.ok for v in self.verdicts):
            return EXIT_OUTCOME_CHANGED
        return EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "head": {"root": self.head[0], "size": self.head[1]},
            "chain_problems": self.chain_problems,
            "since_head": self.since_head,
            "errors": self.errors,
            "claims": [verdict.to_dict() for verdict in self.verdicts],
        }


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


class _Integrity:
    """Re-hashing shared by the claims of one file (each item is checked once)."""

    def __init__(self, store: Store):
        self.store = store
        self.manifest_cache: dict[str, list[str]] = {}
        self.checkpoint_cache: dict[str, tuple[str, str] | None] = {}

    def manifest_problems(self, manifest_sha: str) -> list[str]:
        if manifest_sha not in self.manifest_cache:
            problems = []
            record = self.store.get("manifests", sha256=manifest_sha)
            rows = self.store.query(
                "SELECT row_id, sha256, canonical_json FROM rows WHERE manifest_sha256 = :sha ORDER BY position",
                {"sha": manifest_sha},
            ).records()
            for row in rows:
                if sha256_hex(row["canonical_json"]) != row["sha256"]:
                    problems.append(f"manifest {record['name']} row {row['row_id']}: content does not match its hash")
            recomputed = sha256_hex("".join(row["canonical_json"] + "\n" for row in rows))
            if recomputed != manifest_sha:
                problems.append(f"manifest {record['name']}: rows hash to {recomputed[:12]}, registered {manifest_sha[:12]}")
            if len(rows) != record["n_rows"]:
                problems.append(f"manifest {record['name']}: {len(rows)} rows, registered {record['n_rows']}")
            self.manifest_cache[manifest_sha] = problems
        return self.manifest_cache[manifest_sha]

    def checkpoint_status(self, sha: str) -> tuple[str, str] | None:
        """None if the file re-hashes to its sha; else (integrity, message)."""
        if sha not in self.checkpoint_cache:
            record = self.store.get("checkpoints", sha256=sha)
            result: tuple[str, str] | None
            if record is None:
                result = ("tampered", f"checkpoint {sha[:12]} is not in the ledger")
            elif not record["path"]:
                result = ("unverifiable", f"checkpoint {sha[:12]} ({record['arm']}) has no file to re-hash")
            elif not Path(record["path"]).is_file():
                result = ("unverifiable", f"checkpoint file {record['path']} not found")
            else:
                actual = sha256_file(record["path"])
                result = None if actual == sha else (
                    "tampered", f"checkpoint file {record['path']} hashes to {actual[:12]}, registered {sha[:12]}"
                )
            self.checkpoint_cache[sha] = result
        return self.checkpoint_cache[sha]


def verify(
    store: Store,
    paths: list[str | Path],
    *,
    root: str | Path | None = None,
    since_head: tuple[str, int] | None = None,
    record: bool = True,
) -> VerifyReport:
    chain = store.verify_chain()
    report = VerifyReport([], [str(problem) for problem in chain.messages] if not chain.ok else [], store.head())
    if since_head is not None:
        consistency = store.verify_since_head(*since_head)
        report.since_head = consistency.message
        if not consistency.ok:
            report.chain_problems.append(f"log is not an extension of head {since_head[0][:12]}:{since_head[1]}: {consistency.message}")
    integrity = _Integrity(store)
    for path in claim_files_under(paths):
        try:
            claim_file = load_claims(path)
        except ProtocolError as exc:
            if _is_release_mapping(path):
                continue  # a release mapping kept beside its claims
            report.errors.extend(str(issue) for issue in exc.issues)
            continue
        try:
            report.verdicts.extend(_verify_file(store, path, claim_file, integrity, root=root, record=record))
        except (ReleaseError, ProtocolError, FileNotFoundError) as exc:
            report.errors.append(f"{path}: {exc}")
    if report.chain_problems:
        for verdict in report.verdicts:
            verdict.integrity = "tampered"
            verdict.problems.append("the ledger's hash chain does not verify (see chain problems)")
    report.head = store.head()
    return report


def _is_release_mapping(path: Path) -> bool:
    try:
        import yaml

        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except Exception:
        return False
    return isinstance(data, dict) and "release" in data and "claims" not in data


def _verify_file(store, path: Path, claim_file: ClaimFile, integrity: _Integrity, *, root, record) -> list[ClaimVerdict]:
    file_problems: list[tuple[str, str]] = []  # (integrity, message) applying to every claim of the file
    deviations: list[dict] = []
    if claim_file.release is not None:
        mapping_path = (path.parent / claim_file.release).resolve()
        loaded = load_release(mapping_path, root)
        current_sha = sha256_hex(canonical_json(release_document(loaded)))
        imported = registered_release(store, loaded.mapping.release)
        if imported is None:
            protocol_shas = (import_release(store, mapping_path, root, loaded=loaded).protocol_sha256,)
        else:
            protocol_shas = (sha256_hex(canonical_json(imported)),)
            if protocol_shas[0] != current_sha:
                changed = sorted(
                    file for file, sha in loaded.file_hashes.items() if imported["file_sha256"].get(file) != sha
                )
                file_problems.append(
                    ("tampered", f"release files changed since import: {', '.join(changed) or 'the mapping'}")
                )
        namespace = claim_file.protocol
        for claim in claim_file.claims:
            store.add_claim(claim_key(namespace, claim.id), claim.model_dump(mode="json", by_alias=True),
                            protocol_sha256=protocol_shas[0])
    else:
        versions = registered_versions(store, claim_file.protocol)
        if not versions:
            return [
                ClaimVerdict(str(path), claim.id, "unverifiable", "unverifiable",
                             f"protocol {claim_file.protocol!r} was never registered in this ledger")
                for claim in claim_file.claims
            ]
        protocol_shas = tuple(version["sha256"] for version in versions)
        file_problems.extend(_protocol_file_problems(store, claim_file.protocol, protocol_shas))
        for version in versions:
            deviations.extend(deviated_items(store, version["sha256"]))
        namespace = claim_file.protocol
    evidence = StoreEvidence(store, protocol_shas)
    results = evaluate_claims(claim_file, evidence)
    verdicts = []
    for claim, result in zip(claim_file.claims, results):
        verdicts.append(
            _verdict(store, path, claim, result, evidence, integrity, namespace, file_problems, deviations, record)
        )
    return verdicts


def _protocol_file_problems(store: Store, name: str, protocol_shas: tuple[str, ...]) -> list[tuple[str, str]]:
    """The registered protocol's own bytes, its canonical hash, and its file on disk."""
    problems = []
    for sha in protocol_shas:
        row = store.get("protocols", sha256=sha)
        if sha256_hex(row["canonical_json"]) != sha:
            problems.append(("tampered", f"registered protocol {name} {sha[:12]}: content does not match its hash"))
    registrations = [
        json.loads(entry["payload"])["data"]
        for entry in store.query("SELECT payload FROM chain_entries WHERE kind = 'registration' ORDER BY seq").records()
    ]
    registrations = [r for r in registrations if r["protocol"] == name]
    if registrations:
        latest = registrations[-1]
        file = Path(latest["file"])
        if not file.is_file():
            problems.append(("unverifiable", f"protocol file {file} not found: cannot check it against the registration"))
        else:
            try:
                protocol = load_protocol(file)
            except ProtocolError as exc:
                problems.append(("tampered", f"protocol file {file} no longer validates: {exc.issues[0]}"))
            else:
                if protocol.sha256 not in protocol_shas:
                    problems.append(
                        ("tampered", f"protocol file {file} was edited after registration without a recorded deviation "
                                     f"(file {protocol.sha256[:12]}, registered {', '.join(s[:12] for s in protocol_shas)})")
                    )
                else:
                    registered = {r["name"]: r["sha256"] for r in store.rows_of("manifests", protocol_sha256=protocol.sha256)}
                    for name_, manifest in build_manifests(protocol, check=False).items():
                        if registered.get(name_) not in (None, manifest.sha256):
                            problems.append(("tampered", f"manifest {name_}: rebuilt from the protocol it hashes to "
                                                         f"{manifest.sha256[:12]}, registered {registered[name_][:12]}"))
    return problems


def _verdict(store, path, claim, result: ClaimResult, evidence: StoreEvidence, integrity: _Integrity, namespace,
             file_problems, deviations, record) -> ClaimVerdict:
    key = claim_key(namespace, claim.id)
    verdict = ClaimVerdict(str(path), claim.id, result.outcome, "verified", result.reason, result.figures)
    problems: list[tuple[str, str]] = list(file_problems)
    registered = store.get("claims", claim_id=key)
    spec = claim.model_dump(mode="json", by_alias=True)
    if registered is None:
        problems.append(("unverifiable", f"claim {claim.id} was never preregistered"))
    elif registered["spec_sha256"] != sha256_hex(canonical_json(spec)):
        problems.append(("tampered", f"claim {claim.id} in {path} differs from its preregistered spec"))
    manifest_sha = evidence.manifest_sha256(claim.manifest)
    if manifest_sha is not None:
        problems.extend(("tampered", message) for message in integrity.manifest_problems(manifest_sha))
    arms = list(getattr(claim, "arms", ()) or ()) + ([claim.arm] if getattr(claim, "arm", None) else [])
    first_evidence_seq = None
    for arm in arms:
        for record_ in evidence.records(arm, claim.manifest):
            seq = record_["entry_seq"]
            first_evidence_seq = seq if first_evidence_seq is None else min(first_evidence_seq, seq)
        for sha in sorted(evidence.checkpoints_used(arm, claim.manifest)):
            status = integrity.checkpoint_status(sha)
            if status is not None:
                problems.append(status)
    if registered is not None and first_evidence_seq is not None and registered["entry_seq"] > first_evidence_seq \
            and store.get("protocols", sha256=registered["protocol_sha256"])["version"] != "release":
        problems.append(("unverifiable", f"claim {claim.id} was registered after its evidence (entry "
                                         f"{registered['entry_seq']} > {first_evidence_seq})"))
    for deviation in deviations:
        if claim_depends_on(claim, deviation["item"]):
            verdict.flags.append(f"depends on deviated item {deviation['item']} ({deviation['timing']}: {deviation['reason']})")
    for kind in ("tampered", "unverifiable"):
        if any(level == kind for level, _ in problems):
            verdict.integrity = kind
            break
    verdict.problems = [message for _, message in problems]
    first = store.first_outcome(key) if registered is not None else None
    verdict.first_outcome = first["outcome"] if first else None
    # An outcome is a result only once the claim's evidence is all there: a partial run (`ledger run --arms A`
    # before B has run) must not fix "unverifiable" as the first outcome that every later verify is held to.
    if record and registered is not None and first is None and verdict.integrity == "verified" \
            and result.outcome != "unverifiable":
        inputs = [
            {"role": f"arm{index}:{sha[:12]}", "arm": arm, "checkpoint_sha256": sha, "manifest_sha256": manifest_sha}
            for index, arm in enumerate(arms)
            for sha in sorted(evidence.checkpoints_used(arm, claim.manifest))
        ]
        test_id = None
        if inputs:
            figures = result.figures
            test_id = store.add_stat_test(
                statistic=claim.statistic,
                inputs=inputs,
                claim_id=key,
                method=str(figures.get("alternative") or claim.statistic),
                n=figures.get("n"),
                estimate=_first_number(figures, ("difference", "accuracy", "net", "frontier")),
                ci_low=_first_number(figures, ("ci_low", "wilson_low")),
                ci_high=_first_number(figures, ("ci_high", "wilson_high")),
                p_value=result.p_value if result.p_value is None or result.p_value > 0 else None,
                params=claim.model_dump(mode="json", by_alias=True),
                result=result.to_dict(),
            )
        store.add_claim_outcome(key, result.outcome, result.reason, stat_test_id=test_id, detail=result.to_dict())
    return verdict


def _first_number(figures: dict, keys: tuple[str, ...]) -> float | None:
    for key in keys:
        value = figures.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None
