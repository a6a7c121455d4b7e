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
    rules: int = 1  # the claim rules its file is registered and judged under (``ledger.judge.claim_rules``)
    not_counted: str | None = None  # why its outcome is never counted as support (exploratory, by construction)
    # under the current claim rules, where its file follows older ones: (outcome, why not counted, reason)
    current: tuple[str, str | None, str] | None = None
    departures: tuple[str, ...] = ()  # where its arms depart from the paper's design (a variant: counted apart)

    @property
    def replicates(self) -> bool | None:
        """Whether the outcome is the paper's (None: no paper finding, not judged, or not counted)."""
        if self.paper is None or self.outcome not in ("supported", "refuted") or self.not_counted is not None:
            return None
        return bool(self.outcome == self.paper["outcome"])

    def counted(self) -> TalliedClaim:
        return TalliedClaim(self.claim_id, self.outcome, self.paper, self.not_counted, self.departures, self.current)

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
            **({"rules": self.rules} if self.rules != 1 else {}),
            **({"not_counted": self.not_counted} if self.not_counted else {}),
            **({"departs_from_paper_design": list(self.departures)} if self.departures else {}),
            **(
                {"under_current_rules": dict(zip(("outcome", "not_counted", "reason"), self.current))}
                if self.current is not None
                else {}
            ),
        }


@dataclass(frozen=True)
class TalliedClaim:
    """What a tally reads of one claim: its outcome (None: never judged), the paper's finding it carries, why it
    is not counted (exploratory, by construction), where its arms depart from the paper's design, and its
    (outcome, why not counted, reason) under the current claim rules where its file follows older ones."""

    claim_id: str
    outcome: str | None
    paper: dict[str, Any] | None = None
    not_counted: str | None = None
    departures: tuple[str, ...] = ()
    current: tuple[str, str | None, str] | None = None


@dataclass(frozen=True)
class Tally:
    """What a set of verdicts shows at a glance: how many are supported (exploratory claims and claims true by
    construction apart, never support); how many of the claims built with the paper's design replicate its
    findings, and, counted on their own line, how many of the variants' do; which depart; which supports may be
    vacuous; and, where files follow older claim rules, the tally under the current ones beside."""

    claims: int
    supported: int
    with_paper: int
    replicates: int
    departs: tuple[str, ...]  # judged, with a paper finding, and another outcome than the paper's
    vacuous_risk: tuple[str, ...]  # supported, though an arm that learnt nothing would support it
    not_counted: tuple[str, ...] = ()  # exploratory or true by construction: reported, never support
    variants: tuple[tuple[str, int, int], ...] = ()  # (departure, replicate, with a paper finding), counted apart
    current: tuple[int, tuple[tuple[str, str], ...]] | None = None  # (supported, ((withdrawn, why), ...))

    @classmethod
    def of(cls, verdicts: list[ClaimVerdict]) -> Tally:
        return cls.of_claims(
            [v.counted() for v in verdicts],
            vacuous_risk=[v.claim_id for v in verdicts if v.vacuous_risk and v.outcome == "supported"],
        )

    @classmethod
    def of_outcomes(
        cls, claims: list[tuple[str, str | None, dict[str, Any] | None]], vacuous_risk: Sequence[str] = ()
    ) -> Tally:
        """(claim id, outcome or None if never judged, the paper's finding or None) per claim."""
        return cls.of_claims([TalliedClaim(*claim) for claim in claims], vacuous_risk)

    @classmethod
    def of_claims(cls, claims: Sequence[TalliedClaim], vacuous_risk: Sequence[str] = ()) -> Tally:
        counted = [claim for claim in claims if claim.not_counted is None]
        paper_design = [claim for claim in counted if claim.paper is not None and not claim.departures]
        judged = [
            (claim.claim_id, claim.outcome == claim.paper["outcome"])
            for claim in paper_design
            if claim.paper is not None and claim.outcome in ("supported", "refuted")
        ]
        variants: dict[str, list[TalliedClaim]] = {}
        for claim in counted:
            if claim.paper is not None and claim.departures:
                variants.setdefault(", ".join(claim.departures), []).append(claim)
        current = None
        if any(claim.current is not None for claim in claims):
            now = [claim.current or (claim.outcome or "", claim.not_counted, "") for claim in claims]
            withdrawn = tuple(
                (claim.claim_id, state[1] or state[2])
                for claim, state in zip(claims, now)
                if claim.outcome == "supported" and claim.not_counted is None and (state[0] != "supported" or state[1])
            )
            current = (sum(state[0] == "supported" and state[1] is None for state in now), withdrawn)
        return cls(
            claims=len(claims),
            supported=sum(claim.outcome == "supported" for claim in counted),
            with_paper=len(paper_design),
            replicates=sum(same for _, same in judged),
            departs=tuple(claim_id for claim_id, same in judged if not same),
            vacuous_risk=tuple(vacuous_risk),
            not_counted=tuple(claim.claim_id for claim in claims if claim.not_counted is not None),
            variants=tuple(
                (
                    departure,
                    sum(c.outcome == (c.paper or {}).get("outcome") for c in members),
                    len(members),
                )
                for departure, members in sorted(variants.items())
            ),
            current=current,
        )

    def line(self) -> str:
        """ "supported: 5 of 9; replicates the paper: 6 of 8 (departs: X, Y); possibly vacuous: Z"."""
        parts = [f"supported: {self.supported} of {self.claims - len(self.not_counted)}"]
        if self.not_counted:
            parts.append(f"not counted (exploratory or by construction): {len(self.not_counted)}")
        if self.with_paper or self.variants:
            departs = f" (departs: {', '.join(self.departs)})" if self.departs else ""
            parts.append(f"replicates the paper: {self.replicates} of {self.with_paper}{departs}")
        for departure, same, members in self.variants:
            parts.append(f"variant ({departure}), counted apart: as the paper {same} of {members}")
        if self.vacuous_risk:
            parts.append(f"possibly vacuous (no acquisition precondition): {', '.join(self.vacuous_risk)}")
        if self.current is not None:
            supported, withdrawn = self.current
            beside = f"under the current claim rules: supported {supported}"
            if withdrawn:
                beside += f" (withdrawn: {', '.join(claim_id for claim_id, _ in withdrawn)})"
            parts.append(beside)
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "claims": self.claims,
            "supported": self.supported,
            "with_paper": self.with_paper,
            "replicates_paper": self.replicates,
            "departs_from_paper": list(self.departs),
            "vacuous_risk": list(self.vacuous_risk),
            "not_counted": list(self.not_counted),
            "variants": [
                {"departure": departure, "as_the_paper": same, "with_paper": members}
                for departure, same, members in self.variants
            ],
            **(
                {
                    "under_current_rules": {
                        "supported": self.current[0],
                        "withdrawn": [{"claim_id": c, "why": why} for c, why in self.current[1]],
                    }
                }
                if self.current is not None
                else {}
            ),
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
