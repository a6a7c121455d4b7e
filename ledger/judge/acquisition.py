"""Acquisition at registration: no claim may be supported because nothing was learnt.

A claim that an arm which learnt nothing would support ("C falls beyond its support", "the reverse operation
stays below 90%", "E is within 5 points of A", "no checkpoint keeps both": ``ClaimSpec.holds_without_acquisition``)
must name, in ``requires``, a claim showing the skill was acquired first: an accuracy at least the manifest's
**competence floor**, or any other claim that cannot hold without learning (a frontier or persistence at least,
a paired test in favour of an arm, a gate that passed). When the precondition fails, the claim is unverifiable,
never supported (``ledger.judge.claim_files.apply_preconditions``).

A guardrail (a non-inferiority claim read against a base, ``base:NAME``) measures retention only on rows the base
answers: it must require an accuracy claim of that base on its manifest at least the competence floor. On rows
where the base sits near chance, its paired discordances are noise, and "non-inferior" says nothing.

The competence floor of a manifest is halfway from chance to perfect, ``chance + (1 - chance) / 2``, chance being
the mean over its rows of one over the row's answer symbols (0.25 on four-way multiple choice: a floor of 0.625;
1/16 on N16 tables: 0.531). ``ledger register`` refuses a claim file that breaks either rule, before anything is
written, as it refuses a claim no outcome could support (``ledger.judge.power``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ledger.protocol.claims import AccuracyClaim, ClaimFile, NonInferiorityClaim, claim_subjects


@dataclass(frozen=True)
class Unacquired:
    claim_id: str
    index: int
    message: str


def chance_of(symbol_counts: Sequence[int]) -> float | None:
    """The accuracy of a uniform guess over each row's answer symbols (None: rows with no symbols, e.g. text)."""
    counts = [count for count in symbol_counts if count > 0]
    if not counts or len(counts) != len(symbol_counts):
        return None
    return sum(1 / count for count in counts) / len(counts)


def competence_floor(chance: float) -> float:
    """Halfway from chance to perfect."""
    return chance + (1 - chance) / 2


def _floor_words(chance: float) -> str:
    return f"{competence_floor(chance):.3f}, the competence floor: halfway from chance {chance:.3f} to 1"


def _acquires(claim, chances: Mapping[str, float | None]) -> bool:
    """Whether this claim, supported, shows a skill was acquired."""
    if claim.holds_without_acquisition():
        return False
    if isinstance(claim, AccuracyClaim):
        chance = chances.get(claim.manifest)
        return chance is None or claim.threshold >= competence_floor(chance)
    return True


def unacquired_claims(claim_file: ClaimFile, chances: Mapping[str, float | None]) -> list[Unacquired]:
    """The claims of a file that could be supported by an arm that learnt nothing, or a guardrail on a base that
    answers near chance, each with what it must require. ``chances``: manifest -> chance (``chance_of``)."""
    by_id = {claim.id: claim for claim in claim_file.claims}
    found = []
    for index, claim in enumerate(claim_file.claims):
        # its own preconditions, and the acquisitions its arms declare (claim rules 2: ``acquisition``)
        declared = [
            name
            for arm in claim_subjects(claim)
            for name in claim_file.acquisition.get(arm, [])
            if isinstance(name, str) and name in by_id
        ]
        required = [by_id[name] for name in [*claim.claim_preconditions(), *declared]]
        if isinstance(claim, NonInferiorityClaim) and claim.arms[1].startswith("base:"):
            base, chance = claim.arms[1], chances.get(claim.manifest)
            if chance is not None and not any(
                isinstance(other, AccuracyClaim)
                and other.arm == base
                and other.manifest == claim.manifest
                and other.direction == "at_least"
                and other.threshold >= competence_floor(chance)
                for other in required
            ):
                found.append(
                    Unacquired(
                        claim.id,
                        index,
                        f"is a guardrail against {base} on {claim.manifest!r}: it must require (`requires`) an "
                        f"accuracy claim of {base} on {claim.manifest!r} at least {_floor_words(chance)} (on rows the "
                        "base answers near chance, non-inferiority measures noise)",
                    )
                )
            continue
        if not claim.holds_without_acquisition():
            continue
        declared_gates = [
            g for arm in claim_subjects(claim) for g in claim_file.acquisition.get(arm, []) if not isinstance(g, str)
        ]
        if claim.gate_preconditions() or declared_gates or any(_acquires(other, chances) for other in required):
            continue
        chance = chances.get(claim.manifest)
        example = f"an accuracy at least {_floor_words(chance)}" if chance is not None else "an accuracy at least"
        found.append(
            Unacquired(
                claim.id,
                index,
                "would be supported by an arm that learnt nothing: it must require (`requires`) a claim that the skill "
                f"was acquired ({example}, on its arm inside its support) or a gate that passed, so that it is "
                "unverifiable, not supported, when nothing was learnt",
            )
        )
    return found
