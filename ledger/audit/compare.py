"""Two fingerprints compared: did a reproduction give the same evidence, and where did the two part?

Per protocol and arm: identical checkpoints, or the first stage and step whose training loss
differs (bit for bit: the losses are the floats the steps computed), or the first checkpoint whose
file differs after identical losses. Per claim: both outcomes and figures. The environments are
compared too, but only to explain: identical evidence from two machines is identical evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledger.environment import environment_differences


@dataclass
class ArmComparison:
    protocol: str
    arm: str
    identical: bool
    detail: str


@dataclass
class ClaimComparison:
    protocol: str
    claim_id: str
    a: dict[str, Any] | None
    b: dict[str, Any] | None

    @property
    def identical(self) -> bool:
        return self.a == self.b

    def differing_figures(self) -> list[str]:
        figures_a = (self.a or {}).get("figures") or {}
        figures_b = (self.b or {}).get("figures") or {}
        return [key for key in sorted(set(figures_a) | set(figures_b)) if figures_a.get(key) != figures_b.get(key)]


@dataclass
class Comparison:
    labels: tuple[str, str]
    arms: list[ArmComparison] = field(default_factory=list)
    claims: list[ClaimComparison] = field(default_factory=list)
    only: list[str] = field(default_factory=list)  # protocols one side lacks
    environment: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.only and all(a.identical for a in self.arms) and all(c.identical for c in self.claims)

    @property
    def exit_code(self) -> int:
        return 0 if self.identical else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.labels[0],
            "b": self.labels[1],
            "identical": self.identical,
            "protocols_on_one_side": self.only,
            "arms": [vars(arm) for arm in self.arms],
            "claims": [
                {"protocol": c.protocol, "claim_id": c.claim_id, "identical": c.identical, "a": c.a, "b": c.b}
                for c in self.claims
            ],
            "environment_differences": self.environment,
        }


def _short(sha: str) -> str:
    return sha[:12]


def where_they_part(a: list[dict], b: list[dict]) -> tuple[bool, str]:
    """(identical, what to say) for one arm's checkpoints on each side, in recording order."""
    for index in range(max(len(a), len(b))):
        if index >= len(a) or index >= len(b):
            longer, which = (b, "B") if index >= len(a) else (a, "A")
            return False, (
                f"after {index} identical checkpoint{'' if index == 1 else 's'}, only {which} recorded more: "
                + ", ".join(f"{c.get('stage')} {_short(c['sha256'])}" for c in longer[index:])
            )
        left, right = a[index], b[index]
        if left["sha256"] == right["sha256"]:
            continue
        stage = (
            left.get("stage")
            if left.get("stage") == right.get("stage")
            else f"{left.get('stage')}/{right.get('stage')}"
        )
        losses_a, losses_b = left.get("losses") or [], right.get("losses") or []
        for step, (loss_a, loss_b) in enumerate(zip(losses_a, losses_b), start=1):
            if loss_a != loss_b:
                return False, (
                    f"part at stage {stage}, step {step}: loss {loss_a!r} (A) against {loss_b!r} (B); "
                    f"checkpoints {_short(left['sha256'])} / {_short(right['sha256'])}"
                )
        if len(losses_a) != len(losses_b):
            return False, f"stage {stage}: {len(losses_a)} steps (A) against {len(losses_b)} (B)"
        steps = f"the same loss at all {len(losses_a)} steps" if losses_a else "no step losses recorded"
        return False, (
            f"part at stage {stage}: {steps}, yet the checkpoint files differ "
            f"({_short(left['sha256'])} / {_short(right['sha256'])})"
        )
    last = a[-1] if a else None
    return True, f"identical: {len(a)} checkpoint{'' if len(a) == 1 else 's'}" + (
        f" (last {_short(last['sha256'])})" if last else ""
    )


def compare(a: dict[str, Any], b: dict[str, Any], labels: tuple[str, str] = ("A", "B")) -> Comparison:
    """Compare fingerprint ``a`` with ``b`` (``ledger/audit/fingerprint.py``)."""
    result = Comparison(labels=labels)
    protocols_a, protocols_b = a["protocols"], b["protocols"]
    for name in sorted(set(protocols_a) ^ set(protocols_b)):
        result.only.append(f"{name}: only in {'A' if name in protocols_a else 'B'}")
    for name in sorted(set(protocols_a) & set(protocols_b)):
        left, right = protocols_a[name], protocols_b[name]
        for arm in sorted(set(left["arms"]) | set(right["arms"])):
            if arm not in left["arms"] or arm not in right["arms"]:
                which = "A" if arm in left["arms"] else "B"
                result.arms.append(ArmComparison(name, arm, False, f"only {which} ran it"))
                continue
            identical, detail = where_they_part(left["arms"][arm], right["arms"][arm])
            result.arms.append(ArmComparison(name, arm, identical, detail))
        claims_a, claims_b = left.get("claims") or {}, right.get("claims") or {}
        for claim_id in sorted(set(claims_a) | set(claims_b)):
            result.claims.append(ClaimComparison(name, claim_id, claims_a.get(claim_id), claims_b.get(claim_id)))
        environments_a = [e.get("environment") or {} for e in left.get("environments") or []]
        environments_b = [e.get("environment") or {} for e in right.get("environments") or []]
        if environments_a and environments_b:
            for line in environment_differences(environments_a[0], environments_b[0], labels=("in A", "in B")):
                if line not in result.environment:
                    result.environment.append(line)
    return result
