"""The bf16-autocast twin beside its float32 twin, from the two records' committed files (the figures its README
quotes): each stage's losses, each claim's outcome and figures, and the per-depth counts.

    python docs/results/phaseA-smollm2-bf16/twins.py

The float32 twin is protocols/phaseA-smollm2.yaml version 1 (docs/results/phaseA-smollm2/: its claims are version
1's); the autocast twin copies version 2's claims, so a claim is matched by its id without the version suffix.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
FP32 = HERE.parent / "phaseA-smollm2"
TWINS = {"fp32": (FP32, "phaseA-smollm2"), "bf16": (HERE, "phaseA-smollm2-bf16")}


def stem(claim_id: str) -> str:
    return re.sub(r"_(v\d+|bf16)$", "", claim_id)


def figures(claim: dict) -> str:
    shown = ("correct_A", "correct_B", "helped", "hurt", "p_value", "passed", "count", "n", "rate", "accuracy")
    found = claim.get("figures", {})
    return ", ".join(
        f"{key} {found[key]:.3g}" if isinstance(found[key], float) else f"{key} {found[key]}"
        for key in shown
        if key in found
    )


def main() -> None:
    prints = {name: json.loads((folder / "fingerprint.json").read_text())["protocols"][protocol]
              for name, (folder, protocol) in TWINS.items()}  # fmt: skip
    print("## losses: first step, mean of the last five, last step")
    print(f"{'arm':9} {'stage':8} {'fp32':>26}   {'bf16 autocast':>26}")
    for arm in sorted(prints["fp32"]["arms"]):
        for fp32, bf16 in zip(prints["fp32"]["arms"][arm], prints["bf16"]["arms"].get(arm, [])):
            cells = []
            for record in (fp32, bf16):
                losses = record["losses"]
                cells.append(f"{losses[0]:7.3f} {sum(losses[-5:]) / 5:8.4f} {losses[-1]:8.4f}")
            print(f"{arm:9} {fp32['stage']:8} {cells[0]:>26}   {cells[1]:>26}")
    verified = {name: {stem(c["claim_id"]): c for c in json.loads((folder / "verify.json").read_text())["claims"]}
                for name, (folder, _) in TWINS.items()}  # fmt: skip
    print("\n## claims: outcome (figures)")
    for claim in sorted(set(verified["fp32"]) | set(verified["bf16"])):
        row = []
        for name in TWINS:
            found = verified[name].get(claim)
            row.append("-" if found is None else f"{found['outcome']} ({figures(found)})")
        print(f"{claim}\n  fp32: {row[0]}\n  bf16: {row[1]}")
    print("\n## per-depth correct counts on phaseA_eval, depth 1-14 (each record's report.html)")
    for name, (folder, _) in TWINS.items():
        for arm, counts in per_depth(folder / "report.html", "phaseA_eval").items():
            print(f"{name:5} {arm:9} {' '.join(counts):40} {sum(int(c) for c in counts)}/{16 * len(counts)}")


def per_depth(report: Path, manifest: str) -> dict[str, list[str]]:
    """{arm: correct count per depth} from the report's per-depth table (each cell's title: "k/n; Wilson ...")."""
    html = report.read_text(encoding="utf-8")
    table = html.split(f'class="depth-accuracy" data-manifest="{manifest}">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r'<tr data-arm="([^"]+)">(.*?)</tr>', table, re.S)
    return {arm: re.findall(r'title="(\d+)/\d+;', cells) for arm, cells in rows}


if __name__ == "__main__":
    main()
