"""Every committed record's tally under the current claim rules, beside the tally it recorded.

The committed records keep no ledger database (each README's command rebuilds it), so this reads what each
record kept: ``verify.json`` (every claim's outcome, reason and figures as its run judged them, under claim
rules 1), the claim file and protocol as registered (``claims/`` and ``protocols/`` for the current version,
``tests/pins/versions/`` for earlier ones, found by the claim ids), and applies ``ledger.judge.claim_rules``'
rules 2 to those outcomes, exactly as ``ledger verify`` draws its beside tally. Every rule only demotes an
outcome, so rules 2 on the outcomes rules 1 judged is rules 2 on the statistics. Two reads differ from a live
``verify``: a gate's recorded verdict is not in ``verify.json`` (a gate precondition is taken as rules 1 judged
it), and a family judged unverifiable for an unmeasured member stays so.

    .venv/bin/python docs/results/tallies_under_rules.py          # writes docs/results/tallies.md
    .venv/bin/python docs/results/tallies_under_rules.py --check  # exit 1 if tallies.md differs from a fresh run
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ledger.audit.verdicts import TalliedClaim, Tally  # noqa: E402
from ledger.judge.claim_rules import compared_arms, judge_under_rules_2, not_counted_by_declaration  # noqa: E402
from ledger.judge.claims import ClaimResult  # noqa: E402
from ledger.protocol.arms import claim_departures  # noqa: E402
from ledger.protocol.claims import ClaimFile, claim_subjects, load_claims  # noqa: E402
from ledger.protocol.loader import load_protocol  # noqa: E402
from ledger.rows.builder import build_manifests  # noqa: E402

RESULTS = ROOT / "docs" / "results"
OUT = RESULTS / "tallies.md"


def _candidates(name: str) -> list[tuple[Path, Path]]:
    """(claim file, protocol file) pairs that may be a record's registration: the current, then pinned ones."""
    pairs = [(ROOT / "claims" / f"{name}.yaml", ROOT / "protocols" / f"{name}.yaml")]
    pins = ROOT / "tests" / "pins" / "versions"
    for claims in sorted(pins.glob(f"{name}.claims.v*.yaml")):
        pairs.append((claims, pins / claims.name.replace(".claims.", ".")))
    return pairs


def _registered(record: Path, ids: set[str]) -> tuple[Path, ClaimFile, Path] | None:
    name = re.sub(r"-v[0-9]+$", "", record.name)  # an earlier version's record: docs/results/NAME-vN
    for claims_path, protocol_path in _candidates(name):
        if not claims_path.is_file():
            continue
        claim_file = load_claims(claims_path)
        if {claim.id for claim in claim_file.claims} == ids and protocol_path.is_file():
            return claims_path, claim_file, protocol_path
    return None


def _results(claim_file: ClaimFile, recorded: dict[str, dict]) -> list[ClaimResult]:
    results = []
    for claim in claim_file.claims:
        verdict = recorded[claim.id]
        figures = dict(verdict.get("figures") or {})
        p_value = figures.get("p_value")
        results.append(
            ClaimResult(
                claim.id,
                claim.statistic,
                verdict["outcome"],
                verdict.get("reason") or "",
                figures,
                float(p_value) if isinstance(p_value, (int, float)) else None,
                claim.family,
                getattr(claim, "alpha", None),
            )
        )
    return results


def tally_record(record: Path) -> dict[str, Any]:
    verify = json.loads((record / "verify.json").read_text(encoding="utf-8"))
    recorded = {claim["claim_id"]: claim for claim in verify["claims"]}
    found = _registered(record, set(recorded))
    row: dict[str, Any] = {"record": record.name, "recorded": _recorded_line(verify)}
    if found is None:
        row["problem"] = "the claim file as registered is not kept (no pin holds these claim ids)"
        return row
    claims_path, claim_file, protocol_path = found
    protocol = load_protocol(protocol_path)
    arms = {arm.id: arm.model_dump(mode="json") for arm in protocol.arms}
    gates = {gate.id: gate.model_dump(mode="json") for gate in protocol.gates}
    depths: dict[str, list[int]] = {}

    def manifest_depths(name: str) -> list[int]:
        if name not in depths:
            try:
                built = build_manifests(protocol)
            except Exception:  # a manifest that reads a file not kept here: its gate is not sized
                built = {}
            depths.update({key: [row.depth for row in value.rows] for key, value in built.items()})
        return depths.get(name, [])

    own = _results(claim_file, recorded)
    current = judge_under_rules_2(claim_file, own, gates, lambda gate, arm: True, manifest_depths)
    tallied = []
    for claim, result, now in zip(claim_file.claims, own, current):
        departures = claim_departures(claim_subjects(claim), arms)
        tallied.append(
            TalliedClaim(
                claim.id,
                result.outcome,
                claim.paper.model_dump(mode="json") if claim.paper is not None else None,
                not_counted_by_declaration(claim),
                departures,
                (now.outcome, now.not_counted, now.reason),
            )
        )
    # possibly vacuous, as verify flags it: supported, and an arm it names showed no acquisition (flagged by the
    # record's own verify, or a compared arm the file declares no acquisition for)
    vacuous = [
        claim.id
        for claim, result in zip(claim_file.claims, own)
        if result.outcome == "supported"
        and (
            recorded[claim.id].get("vacuous_risk")
            or any(arm not in claim_file.acquisition for arm in compared_arms(claim, gates))
        )
    ]
    tally = Tally.of_claims(tallied, vacuous_risk=vacuous)
    row.update(
        claim_file=str(claims_path.relative_to(ROOT)),
        protocol=str(protocol_path.relative_to(ROOT)),
        now=tally.line(),
        withdrawn=[(claim_id, why) for claim_id, why in (tally.current or (0, ()))[1]],
    )
    return row


def _recorded_line(verify: dict) -> str:
    tally = verify.get("tally")
    supported = sum(claim["outcome"] == "supported" for claim in verify["claims"])
    if not tally:
        return f"supported: {supported} of {len(verify['claims'])} (its verify.json predates the tally)"
    not_counted = len(tally.get("not_counted") or ())  # exploratory or by construction: never support
    line = f"supported: {tally['supported']} of {tally['claims'] - not_counted}"
    if not_counted:
        line += f"; not counted: {not_counted}"
    if tally.get("with_paper"):
        line += f"; replicates the paper: {tally['replicates_paper']} of {tally['with_paper']}"
    return line


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "# Every committed record under the current claim rules",
        "",
        "Written by `.venv/bin/python docs/results/tallies_under_rules.py` from each record's `verify.json` and its",
        "claim file and protocol as registered (see the script's docstring for what it reads and the two ways it",
        "differs from a live `ledger verify`). Each record verifies under the rules it was registered with (rules 1,",
        "or rules 2 for a claim file that names them); the last column is what claim rules 2",
        "(`ledger/judge/claim_rules.py`) support of the same outcomes.",
        "`replicates the paper` counts only claims on arms built with the paper's design; a variant's claims are",
        "counted on a line of their own.",
        "",
        "| record | recorded tally | tally now (its own rules, variants apart; rules 2 beside) |",
        "| --- | --- | --- |",
    ]
    for row in rows:
        now = row.get("now") or row.get("problem", "")
        lines.append(f"| `{row['record']}` | {row['recorded']} | {now} |")
    lines += ["", "## What rules 2 withdraw, and why", ""]
    for row in rows:
        for claim_id, why in row.get("withdrawn") or []:
            lines.append(f"- `{row['record']}` {claim_id}: {' '.join(why.split())[:400]}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if tallies.md differs from a fresh run")
    args = parser.parse_args()
    records = sorted(path.parent for path in RESULTS.glob("*/verify.json"))
    text = render([tally_record(record) for record in records])
    if args.check:
        return 0 if OUT.is_file() and OUT.read_text(encoding="utf-8") == text else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)} ({len(records)} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
