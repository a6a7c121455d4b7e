"""Claim rules 2 (``ledger.judge.claim_rules``): each rule is shown on outcomes it changes, against the same
evidence judged under rules 1, so that each test fails without its rule."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from ledger.audit.verdicts import ClaimVerdict, Tally
from ledger.judge.claim_files import evaluate_claims, evaluate_claims_beside
from ledger.judge.claim_rules import registration_issues
from ledger.protocol.arms import design_departures
from ledger.protocol.claims import ClaimFile
from tests.judge.memory_evidence import MemoryEvidence

DEPTHS = range(1, 9)


def _rows(correct_per_depth: dict[int, int], per_depth: int = 64) -> dict[str, tuple[int, bool]]:
    return {f"d{depth}_{i}": (depth, i < correct_per_depth.get(depth, 0)) for depth in DEPTHS for i in range(per_depth)}


def _a_beats_b(**extra: Any) -> dict:
    return {
        "id": "A_beats_B",
        "statement": "A answers more rows than B.",
        "statistic": "paired_exact",
        "arms": ["A", "B"],
        "manifest": "eval",
        "direction": "greater",
        **extra,
    }


def _accuracy(claim_id: str, arm: str, threshold: float, depths: list[int] | None = None, **extra: Any) -> dict:
    return {
        "id": claim_id,
        "statement": f"{arm} answers at least {threshold}.",
        "statistic": "accuracy",
        "arm": arm,
        "manifest": "eval",
        "threshold": threshold,
        **({"rows": {"depths": depths}} if depths else {}),
        **extra,
    }


def _file(*claims: dict, **fields: Any) -> ClaimFile:
    return ClaimFile.model_validate({"protocol": "p", "correction": "holm", "claims": list(claims), **fields})


def _rules_2(*claims: dict, **fields: Any) -> ClaimFile:
    return _file(*claims, rules=2, **fields)


def _outcomes(claim_file: ClaimFile, evidence: MemoryEvidence) -> dict[str, str]:
    return {result.claim_id: result.outcome for result in evaluate_claims(claim_file, evidence)}


# B answers 11 of 64 depth-1 rows (the committed phaseA-tiny record's B) and nothing deeper; A answers most rows.
INCOMPETENT_B = MemoryEvidence(
    outcome_map={
        ("A", "eval", None): _rows(dict.fromkeys(DEPTHS, 60)),
        ("B", "eval", None): _rows({1: 11}),
    }
)
COMPETENT_B = MemoryEvidence(
    outcome_map={
        ("A", "eval", None): _rows(dict.fromkeys(DEPTHS, 60)),
        ("B", "eval", None): _rows({1: 64, 2: 30}),
    }
)
B_LEARNT = _accuracy("B_answers_depth_1", "B", 0.9, [1, 1])
A_LEARNT = _accuracy("A_answers_support", "A", 0.8)
ACQUISITION = {"A": ["A_answers_support"], "B": ["B_answers_depth_1"]}


def test_a_comparison_against_an_incompetent_comparator_is_unverifiable():
    claims = (_a_beats_b(), A_LEARNT, B_LEARNT)
    # rules 1 support A over a B that never learnt its task
    assert _outcomes(_file(*claims), INCOMPETENT_B)["A_beats_B"] == "supported"
    strict = _rules_2(*claims, primary=["A_beats_B"], acquisition=ACQUISITION)
    results = {r.claim_id: r for r in evaluate_claims(strict, INCOMPETENT_B)}
    assert results["B_answers_depth_1"].outcome == "refuted"
    beats = results["A_beats_B"]
    assert beats.outcome == "unverifiable"
    assert "comparator B did not show it learnt its own task: claim B_answers_depth_1 is refuted" in beats.reason
    assert "its own statistic: supported" in beats.reason
    assert beats.figures["preconditions_met"] is False  # a result, recorded as the first outcome
    # the same comparison against a B that learnt depth 1 is judged
    assert _outcomes(strict, COMPETENT_B)["A_beats_B"] == "supported"


def test_the_reference_arm_of_a_two_arm_gate_needs_its_acquisition_too():
    gate_claim = {
        "id": "E_within_rows",
        "statement": "E within 4 rows of A at every depth.",
        "statistic": "gate",
        "gate": "within",
        "arm": "E",
        "manifest": "eval",
    }
    evidence = MemoryEvidence(
        outcome_map={("A", "eval", None): _rows({1: 2})},
        gates={("within", "E"): True},
        protocol={"gates": {"within": {"id": "within", "kind": "within_rows", "arm": "E", "versus": "A"}}},
    )
    claims = (gate_claim, A_LEARNT)
    file = _rules_2(
        *claims,
        _a_beats_b(),
        B_LEARNT,
        primary=["A_beats_B"],
        acquisition={"A": ["A_answers_support"], "B": ["B_answers_depth_1"], "E": [{"gate": "within", "arm": "E"}]},
    )
    assert _outcomes(_file(*claims), evidence)["E_within_rows"] == "supported"
    outcome = {r.claim_id: r for r in evaluate_claims(file, evidence)}["E_within_rows"]
    assert outcome.outcome == "unverifiable" and "comparator A did not show" in outcome.reason


def test_registration_refuses_a_comparison_whose_comparators_declare_no_acquisition():
    bare = _rules_2(_a_beats_b(), A_LEARNT, primary=["A_beats_B"], acquisition={"A": ["A_answers_support"]})
    messages = [issue.message for issue in registration_issues(bare, {})]
    assert any("compares arm B, which declares no acquisition" in message for message in messages)
    declared = _rules_2(_a_beats_b(), A_LEARNT, B_LEARNT, primary=["A_beats_B"], acquisition=ACQUISITION)
    assert registration_issues(declared, {}) == []
    # rules 1 files are registered as they were
    assert registration_issues(_file(_a_beats_b()), {}) == []


def test_an_acquisition_is_shown_by_the_arm_alone_not_by_a_comparison():
    circular = _rules_2(
        _a_beats_b(), B_LEARNT, primary=["A_beats_B"], acquisition={"A": ["A_beats_B"], "B": ["B_answers_depth_1"]}
    )
    assert any("a comparison" in issue.message for issue in registration_issues(circular, {}))


def test_a_threshold_passes_only_when_its_one_sided_bound_clears_the_bar():
    # 200 of 240 = 0.833 against a bar of 0.80: the point estimate passes, the one-sided 95% lower bound (0.79) not
    rows = {f"r{i}": (1, i < 200) for i in range(240)}
    evidence = MemoryEvidence(outcome_map={("R", "eval", None): rows})
    claim = _accuracy("relay", "R", 0.80)
    assert _outcomes(_file(claim), evidence)["relay"] == "supported"
    (relay,) = evaluate_claims(_rules_2(claim), evidence)
    assert relay.outcome == "refuted"
    assert 0.78 < relay.figures["bound_95"] < 0.80
    assert "one-sided 95% lower bound" in relay.reason
    # 230 of 240 clears it; an "at most" claim is held to its upper bound
    clear = MemoryEvidence(outcome_map={("R", "eval", None): {f"r{i}": (1, i < 230) for i in range(240)}})
    assert _outcomes(_rules_2(claim), clear)["relay"] == "supported"
    at_most = _accuracy("falls", "R", 0.86, direction="at_most")
    assert _outcomes(_file(at_most), evidence)["falls"] == "supported"
    assert _outcomes(_rules_2(at_most), evidence)["falls"] == "refuted"


def _paired(claim_id: str, arm: str, helped: int, **extra: Any) -> tuple[dict, dict[str, tuple[int, bool]]]:
    claim = _a_beats_b(id=claim_id, arms=[arm, "B"], **extra)
    return claim, {f"d1_{i}": (1, i < helped) for i in range(64)}


def test_every_confirmatory_test_is_corrected_across_the_file_and_the_primary_apart():
    # three comparisons, each with exact one-sided p = 0.0156 (6 helped / 0 hurt) against alpha 0.05 and in no
    # family: rules 1 support each; rules 2 hold the primary apart and correct the other four by Holm (4 x 0.0156)
    claims, outcome_map = [], {("B", "eval", None): {f"d1_{i}": (1, False) for i in range(64)}}
    for index in range(5):
        claim, rows = _paired(f"X{index}_beats_B", f"X{index}", 6)
        claims.append(claim)
        outcome_map[(f"X{index}", "eval", None)] = rows
    evidence = MemoryEvidence(outcome_map=outcome_map)
    assert set(_outcomes(_file(*claims), evidence).values()) == {"supported"}
    acquisition = {f"X{index}": [{"gate": "installed", "arm": f"X{index}"}] for index in range(5)}
    acquisition["B"] = [{"gate": "installed", "arm": "B"}]
    gates = {("installed", arm): True for arm in [*(f"X{index}" for index in range(5)), "B"]}
    evidence = MemoryEvidence(outcome_map=outcome_map, gates=gates)
    strict = evaluate_claims(_rules_2(*claims, primary=["X0_beats_B"], acquisition=acquisition), evidence)
    by_id = {result.claim_id: result for result in strict}
    # the primary alone is corrected among the primaries (one): supported; the other four by Holm over four
    assert by_id["X0_beats_B"].outcome == "supported"
    for index in range(1, 5):
        assert by_id[f"X{index}_beats_B"].outcome == "refuted"
        assert "Holm over 4" in by_id[f"X{index}_beats_B"].reason


def test_a_rules_2_file_declares_its_primary_claim_and_no_families():
    no_primary = _rules_2(_a_beats_b(), A_LEARNT, B_LEARNT, acquisition=ACQUISITION)
    assert any(issue.field == "primary" for issue in registration_issues(no_primary, {}))
    family = _rules_2(_a_beats_b(family="f"), A_LEARNT, B_LEARNT, primary=["A_beats_B"], acquisition=ACQUISITION)
    assert any("names a family" in issue.message for issue in registration_issues(family, {}))
    not_a_test = _rules_2(A_LEARNT, _a_beats_b(), B_LEARNT, primary=["A_answers_support"], acquisition=ACQUISITION)
    assert any("must be confirmatory with a test" in issue.message for issue in registration_issues(not_a_test, {}))
    with pytest.raises(ValidationError, match="not a claim of this file"):
        _rules_2(A_LEARNT, primary=["nothing"])
    with pytest.raises(ValidationError, match="read by claim rules 2"):
        _file(A_LEARNT, primary=["A_answers_support"])


STABLE = {
    "id": "A_stable",
    "statement": "A trained without diverging.",
    "statistic": "training_stable",
    "arm": "A",
    "manifest": "eval",
}


def test_a_claim_without_a_test_or_a_bound_is_exploratory_and_never_support():
    file = _rules_2(_a_beats_b(), A_LEARNT, B_LEARNT, STABLE, primary=["A_beats_B"], acquisition=ACQUISITION)
    assert any(
        issue.claim_id == "A_stable" and "exploratory: true" in issue.message for issue in registration_issues(file, {})
    )
    marked = _rules_2(
        _a_beats_b(),
        A_LEARNT,
        B_LEARNT,
        {**STABLE, "exploratory": True, "versus": "B"},
        primary=["A_beats_B"],
        acquisition=ACQUISITION,
    )
    assert registration_issues(marked, {}) == []
    # a frontier on one training run is exploratory under rules 2, whatever it finds
    frontier = {
        "id": "A_frontier",
        "statement": "A's frontier is 1.3 times its support.",
        "statistic": "frontier_ratio",
        "arm": "A",
        "manifest": "eval",
        "support_max_depth": 4,
        "threshold": 1.3,
    }
    evidence = MemoryEvidence(
        outcome_map={("A", "eval", None): _rows(dict.fromkeys(DEPTHS, 64))},
        count_map={("A", "eval"): dict.fromkeys(DEPTHS, (64, 64))},
    )
    own, current = evaluate_claims_beside(_file(frontier), evidence)
    assert own[0].outcome == "supported" and own[0].not_counted is None
    assert current[0].outcome == "supported" and "run-level quantity on one training run" in str(current[0].not_counted)


def _verdict(claim_id: str, outcome: str, paper: str | None, **fields: Any) -> ClaimVerdict:
    verdict = ClaimVerdict("f.yaml", claim_id, outcome, "verified", "")
    verdict.paper = {"outcome": paper, "figure": "x"} if paper else None
    for name, value in fields.items():
        setattr(verdict, name, value)
    return verdict


def test_replication_is_counted_by_design_and_variants_apart():
    verdicts = [
        _verdict("paper_bridge", "refuted", "supported"),
        _verdict("answer_only_1", "supported", "supported", departures=("answer-only re-entry",)),
        _verdict("answer_only_2", "supported", "supported", departures=("answer-only re-entry",)),
        _verdict("dense", "supported", "supported"),
        _verdict("explored", "supported", "supported", not_counted="exploratory"),
    ]
    tally = Tally.of(verdicts)
    assert (tally.with_paper, tally.replicates, tally.supported) == (2, 1, 3)
    assert tally.variants == (("answer-only re-entry", 2, 2),)
    line = tally.line()
    assert "replicates the paper: 1 of 2 (departs: paper_bridge)" in line
    assert "variant (answer-only re-entry), counted apart: as the paper 2 of 2" in line
    assert "supported: 3 of 4; not counted (exploratory or by construction): 1" in line


def test_a_bridge_says_where_it_departs_from_the_paper():
    assert design_departures({"kind": "recurrent", "bridge": {"kind": "split", "reentry": "all"}}) == ()
    assert design_departures({"kind": "recurrent", "bridge": {"kind": "split", "reentry": "answer"}}) == (
        "answer-only re-entry",
    )
    assert design_departures({"kind": "dense"}) == ()


def test_a_claim_on_an_arm_written_with_seeds_departs_where_its_replicates_do():
    """The registered document holds the replicates (ID.sSEED, ``replicate.of``), never the name a claim uses: a
    variant over seeds must not count as the paper's design for want of an arm by that name."""
    from ledger.protocol.arms import claim_departures

    answer_only = {"kind": "recurrent", "bridge": {"kind": "split", "reentry": "answer"}}
    arms = {f"A.s{seed}": answer_only | {"replicate": {"of": "A", "seed": seed}} for seed in (1, 2, 3)}
    arms["B"] = {"kind": "dense"}
    assert claim_departures(["A", "B"], arms) == ("answer-only re-entry",)
    paper = {"kind": "recurrent", "bridge": {"kind": "split", "reentry": "all"}}
    assert claim_departures(["A"], {"A.s1": paper | {"replicate": {"of": "A", "seed": 1}}}) == ()


def test_the_current_rules_tally_stands_beside_an_older_files():
    claims = (_a_beats_b(), A_LEARNT, B_LEARNT)
    own, current = evaluate_claims_beside(_file(*claims), INCOMPETENT_B)
    verdicts = []
    for result, now in zip(own, current):
        verdict = _verdict(result.claim_id, result.outcome, None)
        verdict.current = (now.outcome, now.not_counted, now.reason)
        verdicts.append(verdict)
    tally = Tally.of(verdicts)
    assert tally.supported == 2  # A beats B, A answers its support
    assert tally.current is not None and tally.current[0] == 1
    assert [claim_id for claim_id, _ in tally.current[1]] == ["A_beats_B"]
    assert "declares no acquisition" in tally.current[1][0][1]
    assert "under the current claim rules: supported 1 (withdrawn: A_beats_B)" in tally.line()


def _with_paper(claim: dict, **paper: Any) -> dict:
    return {**claim, "paper": {"outcome": "supported", "figure": "the paper's figure", **paper}}


def test_a_paper_figure_is_refused_on_a_claim_of_another_statistic_or_benchmark():
    # the paper's GSM8K equal-FLOPs figure tagged on an ARC-Easy claim (as claims/designM-tinyllama.yaml had it)
    arc = _with_paper(_a_beats_b(), statistic="at_equal_flops", benchmark="gsm8k")
    messages = [issue.message for issue in registration_issues(_file(arc), {}, {}, {"eval": "arc_easy"})]
    assert any("carrying the paper's at_equal_flops figure" in message for message in messages)
    assert any("reads arc_easy rows (manifest eval) but carries the paper's figure on gsm8k" in m for m in messages)
    # the right figure passes; a benchmark unknown on either side is not judged
    right = _with_paper(_a_beats_b(), statistic="paired_exact", benchmark="arc_easy")
    assert registration_issues(_file(right), {}, {}, {"eval": "arc_easy"}) == []
    assert registration_issues(_file(_with_paper(_a_beats_b(), benchmark="gsm8k")), {}, {}, {"eval": None}) == []


def test_rules_2_need_the_paper_figures_statistic_and_benchmark():
    bare = _rules_2(_with_paper(_a_beats_b()), A_LEARNT, B_LEARNT, primary=["A_beats_B"], acquisition=ACQUISITION)
    assert any("without naming its statistic and benchmark" in i.message for i in registration_issues(bare, {}))
    named = _rules_2(
        _with_paper(_a_beats_b(), statistic="paired_exact", benchmark="rule_chasing"),
        A_LEARNT,
        B_LEARNT,
        primary=["A_beats_B"],
        acquisition=ACQUISITION,
    )
    assert registration_issues(named, {}, {}, {"eval": "rule_chasing"}) == []


def test_a_paper_finding_registered_before_the_new_fields_keeps_its_canonical_form():
    claim = ClaimFile.model_validate({"protocol": "p", "correction": "none", "claims": [_with_paper(_a_beats_b())]})
    dumped = claim.claims[0].model_dump(mode="json")
    assert dumped["paper"] == {"outcome": "supported", "figure": "the paper's figure", "where": None}
    assert "exploratory" not in dumped and "by_construction" not in dumped


def test_a_claim_true_by_construction_is_reported_and_never_tallied():
    # E's loop 1 is the base bit for bit: "E keeps ARC at loop 1" cannot fail
    keeps = _accuracy("E_keeps", "E", 0.5, by_construction="E's loop 1 is its base, bit for bit")
    evidence = MemoryEvidence(outcome_map={("E", "eval", None): {f"r{i}": (1, True) for i in range(64)}})
    own, _ = evaluate_claims_beside(_file(keeps), evidence)
    assert own[0].outcome == "supported" and own[0].not_counted.startswith("true by construction")
    verdict = _verdict("E_keeps", "supported", "supported", not_counted=own[0].not_counted)
    tally = Tally.of([verdict])
    assert (tally.supported, tally.with_paper, tally.not_counted) == (0, 0, ("E_keeps",))
    assert verdict.replicates is None


class _Losses(MemoryEvidence):
    def __init__(self, losses: dict[str, list[float]]):
        super().__init__()
        self._losses = losses

    def training_losses(self, arm: str, manifest: str) -> list[tuple[str, list[float]]]:
        return [("train", self._losses[arm])] if arm in self._losses else []


def test_a_stable_claim_names_the_arm_it_is_stable_against():
    steady, spiking = [3.0, 2.5, 2.2, 2.0, 1.9, 1.8, 1.8, 1.7, 1.7, 1.6], [3.0, 2.5, 9.0, float("nan")] + [5.0] * 6
    alone = {**STABLE, "exploratory": True}
    against = {**alone, "versus": "W"}
    file = _rules_2(_a_beats_b(), A_LEARNT, B_LEARNT, alone, primary=["A_beats_B"], acquisition=ACQUISITION)
    assert any("without the arm it is compared with" in i.message for i in registration_issues(file, {}))
    named = _rules_2(_a_beats_b(), A_LEARNT, B_LEARNT, against, primary=["A_beats_B"], acquisition=ACQUISITION)
    assert registration_issues(named, {}) == []
    # supported only where the other arm diverged: a stable arm beside another stable one says nothing
    both_steady = _Losses({"A": steady, "W": steady})
    (alone_result,) = evaluate_claims(_file(alone), both_steady)
    (against_result,) = evaluate_claims(_file(against), both_steady)
    assert (alone_result.outcome, against_result.outcome) == ("supported", "refuted")
    assert "W did not diverge either" in against_result.reason
    (where_w_spikes,) = evaluate_claims(_file(against), _Losses({"A": steady, "W": spiking}))
    assert where_w_spikes.outcome == "supported" and where_w_spikes.figures["versus_diverged"] is True
