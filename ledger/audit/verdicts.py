"""What `ledger verify` says: a verdict per claim, the report over a ledger, and its exit codes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledger.judge.claims import ClaimResult

# Exit codes of `ledger verify` (documented in its --help).
EXIT_OK = 0
EXIT_OUTCOME_CHANGED = 1  # refuted now, or differs from the first recorded outcome
EXIT_TAMPERED = 4
EXIT_UNVERIFIABLE = 5


@dataclass(frozen=True)
class FirstOutcome:
    """What recording this verdict as the claim's first outcome writes (``recording.record_outcomes``)."""

    claim_key: str
    statistic: str
    spec: dict[str, Any]
    protocol_sha256: str
    register_claim: bool  # an external audit's claim, not registered in this ledger yet
    inputs: tuple[dict[str, Any], ...]  # the evidence the statistical test consumed, one per arm and checkpoint
    result: ClaimResult
    evidence_ids: tuple[int, ...] = ()  # the exact evidence rows its statistic computed on


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
    recordable: FirstOutcome | None = None  # set when this would be the claim's first recorded outcome
    subjects: tuple[str, ...] = ()  # the arms the claim is about (what a summary names with their bridge)
    versions: str | None = None  # "supported in version 3 of 3 registered; earlier versions: ..." (N > 1)
    expected: str = "supported"  # without a recorded outcome: supported, or what an audited paper concluded

    @property
    def ok(self) -> bool:
        expected = self.first_outcome or self.expected
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
            "versions": self.versions,
            "ok": self.ok,
        }


@dataclass
class VerifyReport:
    verdicts: list[ClaimVerdict]
    chain_problems: list[str]
    head: tuple[str, int]
    since_head: str | None = None
    history: str = ""  # what was proved about the log's past: a head it extends, or internal consistency only
    errors: list[str] = field(default_factory=list)
    # how the environments the claims' runs recorded differ from the verifying one (a warning only)
    environment: list[str] = field(default_factory=list)

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
            "history": self.history,
            "errors": self.errors,
            "environment_differences": self.environment,
            "claims": [verdict.to_dict() for verdict in self.verdicts],
        }
