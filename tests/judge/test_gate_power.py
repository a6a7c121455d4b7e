"""Power for "within" gates: the chance two identical arms fail them, checked against a simulation, and claim
rules 2 refusing a claim on a gate that measures noise (an older file's failed gate: unverifiable, not refuted)."""

from __future__ import annotations

import numpy
import pytest

from ledger.judge.claim_files import evaluate_claims_beside
from ledger.judge.claim_rules import registration_issues
from ledger.judge.gate_power import gate_power
from ledger.protocol.claims import ClaimFile
from tests.judge.memory_evidence import MemoryEvidence

DEPTHS_64 = [depth for depth in range(1, 15) for _ in range(64)]  # phaseA-tiny's evaluation rows
WITHIN_4 = {"id": "within", "kind": "within_rows", "manifest": "eval", "arm": "E", "versus": "A", "rows": 4}


def test_the_chance_matches_a_simulation_of_identical_arms():
    power = gate_power(WITHIN_4, DEPTHS_64)
    assert power is not None and not power.pooled and power.rows == (64,) * 14
    # at p = 0.5 (the worst accuracy) two identical arms with independent errors, simulated
    rng = numpy.random.default_rng(20261207)
    arm, reference = rng.binomial(64, 0.5, size=(2, 200_000, 14))
    simulated_fail = 1 - ((reference - arm) <= 4).all(axis=1).mean()
    assert power.fail == pytest.approx(simulated_fail, abs=0.003)
    assert power.fail > 0.95  # the gate the committed phaseA-tiny record judged E by
    # and the rows that would meet a 20% level, checked the same way
    needed = power.rows_for(0.2)
    assert (
        ((reference - arm) <= needed).all(axis=1).mean() >= 0.8 > ((reference - arm) <= needed - 1).all(axis=1).mean()
    )


def test_a_pooled_guardrail_is_sized_on_its_rows():
    power = gate_power({"kind": "guardrail", "max_drop": 0.03}, [1] * 256)
    assert power is not None and power.pooled and power.allowed == 7
    rng = numpy.random.default_rng(7)
    arm, base = rng.binomial(256, 0.5, size=(2, 200_000))
    assert power.fail == pytest.approx(((base - arm) > 7).mean(), abs=0.004)
    assert gate_power({"kind": "installation", "threshold": 0.9}, [1] * 16) is None


CLAIMS = {
    "protocol": "p",
    "correction": "holm",
    "claims": [
        {
            "id": "E_within",
            "statement": "E within 4 rows of A.",
            "statistic": "gate",
            "gate": "within",
            "arm": "E",
            "manifest": "eval",
        },
    ],
}


def test_rules_2_refuse_a_claim_on_a_gate_identical_arms_would_fail():
    strict = ClaimFile.model_validate(
        {
            **CLAIMS,
            "rules": 2,
            "primary": [],
            "acquisition": {"A": [{"gate": "g", "arm": "A"}], "E": [{"gate": "g", "arm": "E"}]},
        }
    )
    gates = {"within": WITHIN_4}
    messages = [issue.message for issue in registration_issues(strict, gates, {"eval": DEPTHS_64})]
    noisy = [message for message in messages if "two identical arms" in message]
    assert noisy and "97% of the time, more than 20%" in noisy[0] and "allow 12 rows per depth" in noisy[0]
    rescaled = {"within": {**WITHIN_4, "rows": 12}}
    assert not [
        m for m in (i.message for i in registration_issues(strict, rescaled, {"eval": DEPTHS_64})) if "identical" in m
    ]
    # rules 1 register it as before
    assert registration_issues(ClaimFile.model_validate(CLAIMS), gates, {"eval": DEPTHS_64}) == []


class _Rows(MemoryEvidence):
    def manifest_depths(self, manifest: str) -> list[int]:
        return DEPTHS_64 if manifest == "eval" else []


def test_an_older_files_failed_noisy_gate_is_unverifiable_beside():
    evidence = _Rows(gates={("within", "E"): False}, protocol={"gates": {"within": WITHIN_4}})
    own, current = evaluate_claims_beside(ClaimFile.model_validate(CLAIMS), evidence)
    assert own[0].outcome == "refuted"
    assert current[0].outcome == "unverifiable" and "the gate's fail is not evidence" in current[0].reason
