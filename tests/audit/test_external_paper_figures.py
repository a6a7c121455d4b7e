"""The external audit re-derives the paper's ARC guardrail family, the N24 frontiers at both steps and
three bars, and persistence (active / advance / stay), each checked here against the paper's figure or an independent computation straight from the
released files (json, scipy's exact binomial test, a hand-written interpolation), never from the ledger."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest
from scipy.stats import binomtest

from ledger.cli.main import main
from tests.audit.test_verify import REFERENCE, by_id, require_reference

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    """One external audit from an empty database (``ledger verify claims/external/ --import --json``)."""
    require_reference()
    db = f"sqlite:///{tmp_path_factory.mktemp('external') / 'external.db'}"
    printed = io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(printed):
            code = main(["verify", "claims/external/", "--import", "--db", db, "--json"])
    finally:
        os.chdir(cwd)
    return code, json.loads(printed.getvalue())


def _hits(path: Path) -> dict[str, bool]:
    with path.open(encoding="utf-8") as lines:
        return {row["id"]: bool(row["hit"]) for row in map(json.loads, lines)}


@pytest.mark.parametrize("benchmark", ["arc_easy", "arc_challenge"])
@pytest.mark.parametrize("checkpoint", [1, 2, 3, 4])
def test_the_arc_family_of_eight_matches_an_independent_computation(audit, benchmark, checkpoint):
    code, report = audit
    assert code == 0, [claim["claim_id"] for claim in report["claims"] if not claim["ok"]]
    claims = by_id(report)
    folder = REFERENCE / "arc" / f"checkpoint_{checkpoint}"
    recurrent, base = _hits(folder / f"{benchmark}_recurrent.jsonl"), _hits(folder / f"{benchmark}_base.jsonl")
    assert set(recurrent) == set(base)
    helped = sum(recurrent[row] and not base[row] for row in base)
    hurt = sum(base[row] and not recurrent[row] for row in base)
    p = binomtest(helped, helped + hurt, 0.5, alternative="two-sided").pvalue

    differs = claims[f"{benchmark}_ck{checkpoint}_differs"]
    figures = differs["figures"]
    assert (figures["helped"], figures["hurt"], figures["n"]) == (helped, hurt, len(base))
    assert figures[f"correct_ck{checkpoint}"] == sum(recurrent.values())
    assert figures["correct_base"] == sum(base.values())
    assert figures["p_value"] == pytest.approx(p, rel=1e-9)
    assert figures["p_adjusted"] == pytest.approx(min(1.0, 8 * p), rel=1e-9)
    assert figures["correction"] == "bonferroni over 8 in family 'arc_guardrail'"
    assert differs["outcome"] == "refuted"  # no checkpoint differs after Bonferroni over 8, as the paper found

    noninferior = claims[f"{benchmark}_ck{checkpoint}_noninferior"]
    assert noninferior["outcome"] == "supported"  # the paper: all 8 pass the 3-point margin
    ni = noninferior["figures"]
    assert (ni["helped"], ni["hurt"], ni["n"]) == (helped, hurt, len(base))
    assert ni["difference"] == pytest.approx((helped - hurt) / len(base))
    assert ni["ci_low"] > -0.03 and ni["p_value"] < 0.05 and ni["score_statistic"] > 1.645
    assert f"Tango z = {ni['score_statistic']:.3f}" in noninferior["reason"]


def test_the_one_nominal_drop_is_the_papers(audit):
    _, report = audit
    figures = by_id(report)["arc_easy_ck4_differs"]["figures"]
    assert (figures["correct_ck4"], figures["correct_base"]) == (3962, 3976)
    assert f"{figures['p_value']:.3g}" == "0.0385" and f"{figures['p_adjusted']:.3g}" == "0.308"
    assert figures["reported_agrees"] is True


def _frontier(accuracy: dict[int, float], bar: float) -> float:
    depths = sorted(accuracy)
    for above, below in zip(depths, depths[1:]):
        if accuracy[above] >= bar > accuracy[below]:
            return above + (accuracy[above] - bar) / (accuracy[above] - accuracy[below]) * (below - above)
    raise AssertionError("the curve does not cross the bar")


@pytest.mark.parametrize(
    "claim_id,index,bar",
    [
        ("n24_support12_frontier", 1, 0.71),
        ("n24_support12_frontier_step2000", 0, 0.71),
        ("n24_support12_frontier_bar060", 1, 0.60),
        ("n24_support12_frontier_bar080", 1, 0.80),
    ],
)
def test_the_n24_frontiers_at_both_steps_and_three_bars(audit, claim_id, index, bar):
    _, report = audit
    summary = json.loads((REFERENCE / "n24" / "support12_rung_summary.json").read_text(encoding="utf-8"))
    evaluation = summary["checkpoint_evals"][index]
    assert evaluation["step"] == (2000, 6000)[index]
    counts = evaluation["score"]["diagonal_counts"]
    accuracy = {int(depth): cell["correct"] / cell["total"] for depth, cell in counts.items()}
    claim = by_id(report)[claim_id]
    assert claim["figures"]["frontier"] == pytest.approx(_frontier(accuracy, bar), rel=1e-12)
    assert claim["figures"]["ratio"] == pytest.approx(_frontier(accuracy, bar) / 12, rel=1e-12)
    if claim_id == "n24_support12_frontier":
        assert round(claim["figures"]["frontier"], 2) == 17.93  # the paper's figure


@pytest.mark.parametrize("cells,label", [("active", None), ("advance", "iterate"), ("stay", "hold")])
def test_persistence_active_advance_stay(audit, cells, label):
    """Active cells re-derived from prediction and per-cell target; above the diagonal, the release's labels."""
    _, report = audit
    with (REFERENCE / "persistence" / "anneal_heldout_active_rows.jsonl").open(encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines]
    if cells == "active":
        counted = [row for row in rows if row["forced_loop_count"] <= row["depth"]]
        hits = [row for row in counted if row["prediction"] == row["target"]]
    else:
        counted = [row for row in rows if row["forced_loop_count"] > row["depth"]]
        hits = [row for row in counted if row["above_diagonal_behavior"] == label]
    figures = by_id(report)[f"persistence_{cells}"]["figures"]
    assert (figures["count"], figures["n"]) == (len(hits), len(counted))
    # the paper's figures (SPEC section 8): 625/640 active, 357/384 advance, 1/384 stay
    assert (figures["count"], figures["n"]) == {"active": (625, 640), "advance": (357, 384), "stay": (1, 384)}[cells]
    assert figures["reported_agrees"] is True
