"""What `ledger verify` says: a verdict per claim, the report over a ledger, and its exit codes."""

from __future__ import annotations

from collections.abc import Sequence
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
    # an arm that learnt nothing would support it and no precondition shows acquisition (ledger.judge.acquisition)
    vacuous_risk: bool = False
    paper: dict[str, Any] | None = None  # the paper's finding it replicates: {outcome, figure, where}
    # judgeable, no first outcome, and the ledger shows one was written (a truncated chain?): not "(new)"
    first_outcome_missing: bool = False

    @property
    def replicates(self) -> bool | None:
        """Whether the outcome is the paper's (None: no paper finding, or not judged)."""
        if self.paper is None or self.outcome not in ("supported", "refuted"):
            return None
        return bool(self.outcome == self.paper["outcome"])

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
            **({"paper": self.paper, "replicates_paper": self.replicates} if self.paper is not None else {}),
            **({"vacuous_risk": True} if self.vacuous_risk else {}),
            **({"first_outcome_missing": True} if self.first_outcome_missing else {}),
        }


@dataclass(frozen=True)
class Tally:
    """What a set of verdicts shows at a glance: how many are supported, how many replicate the paper's findings
    (of those that carry one, ``paper``), which depart from it, and which supports may be vacuous."""

    claims: int
    supported: int
    with_paper: int
    replicates: int
    departs: tuple[str, ...]  # judged, with a paper finding, and another outcome than the paper's
    vacuous_risk: tuple[str, ...]  # supported, though an arm that learnt nothing would support it

    @classmethod
    def of(cls, verdicts: list[ClaimVerdict]) -> Tally:
        return cls.of_outcomes(
            [(v.claim_id, v.outcome, v.paper) for v in verdicts],
            vacuous_risk=[v.claim_id for v in verdicts if v.vacuous_risk and v.outcome == "supported"],
        )

    @classmethod
    def of_outcomes(
        cls, claims: list[tuple[str, str | None, dict[str, Any] | None]], vacuous_risk: Sequence[str] = ()
    ) -> Tally:
        """(claim id, outcome or None if never judged, the paper's finding or None) per claim."""
        judged = [
            (claim_id, outcome == paper["outcome"])
            for claim_id, outcome, paper in claims
            if paper is not None and outcome in ("supported", "refuted")
        ]
        return cls(
            claims=len(claims),
            supported=sum(outcome == "supported" for _, outcome, _ in claims),
            with_paper=sum(paper is not None for _, _, paper in claims),
            replicates=sum(same for _, same in judged),
            departs=tuple(claim_id for claim_id, same in judged if not same),
            vacuous_risk=tuple(vacuous_risk),
        )

    def line(self) -> str:
        """ "supported: 5 of 9; replicates the paper: 6 of 8 (departs: X, Y); possibly vacuous: Z"."""
        parts = [f"supported: {self.supported} of {self.claims}"]
        if self.with_paper:
            departs = f" (departs: {', '.join(self.departs)})" if self.departs else ""
            parts.append(f"replicates the paper: {self.replicates} of {self.with_paper}{departs}")
        if self.vacuous_risk:
            parts.append(f"possibly vacuous (no acquisition precondition): {', '.join(self.vacuous_risk)}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "claims": self.claims,
            "supported": self.supported,
            "with_paper": self.with_paper,
            "replicates_paper": self.replicates,
            "departs_from_paper": list(self.departs),
            "vacuous_risk": list(self.vacuous_risk),
        }


def _unverifiable(verdict: ClaimVerdict) -> bool:
    """Its evidence cannot be checked, or it cannot be judged now where its recorded result was something else
    (or nothing was recorded yet): exit 5, whatever the first outcome. A claim recorded as unverifiable (a
    refuted precondition, judged) that is judged so again is its result, not a failure to verify."""
    return verdict.integrity == "unverifiable" or (
        verdict.outcome == "unverifiable" and verdict.first_outcome != "unverifiable"
    )


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
        if self.errors or any(_unverifiable(v) for v in self.verdicts):
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
            "tally": Tally.of(self.verdicts).to_dict(),
        }
