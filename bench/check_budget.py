"""How long `ledger check` takes on the largest protocol its budgets admit, beside the smoke protocol, and how
quickly it refuses one past them (a 50 MB description once hung it for minutes).

    .venv/bin/python bench/check_budget.py              # the full figures (bench/README.md)
    .venv/bin/python bench/check_budget.py --small      # what the suite runs: one repeat

The maximal protocol is protocols/smoke.yaml with a description and as many hypotheses as fit under the
document budget (ledger/inputs.py), every string at the per-string budget. Each command runs in its own process,
the cases alternating within every repeat; the ratio is the maximal protocol's median over the smoke
protocol's.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ledger.inputs import MAX_DOCUMENT_BYTES, MAX_STRING_CHARS  # noqa: E402


def _smoke() -> dict:
    document = yaml.safe_load((ROOT / "protocols" / "smoke.yaml").read_text(encoding="utf-8"))
    document["claims"] = [str(ROOT / "protocols" / claim) for claim in document.get("claims", [])]
    return document


def _maximal(folder: Path) -> Path:
    """smoke.yaml with the description and as many hypotheses as fit, every one at the string budget."""
    document = _smoke()
    long = "x" * (MAX_STRING_CHARS - 16)
    document["description"] = long
    document["hypotheses"] = []
    path = folder / "maximal.yaml"
    while True:
        document["hypotheses"].append({"id": f"H{len(document['hypotheses'])}", "statement": long})
        text = yaml.safe_dump(document, sort_keys=False, width=1 << 30)
        if len(text.encode()) > MAX_DOCUMENT_BYTES:
            document["hypotheses"].pop()
            break
    path.write_text(yaml.safe_dump(document, sort_keys=False, width=1 << 30), encoding="utf-8")
    return path


def _past_budget(folder: Path) -> Path:
    document = _smoke()
    document["description"] = "x" * (50 << 20)
    path = folder / "huge.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False, width=1 << 30), encoding="utf-8")
    return path


def _time(argv: list[str], expect: int) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ledger", *argv], cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != expect:
        raise SystemExit(f"ledger {' '.join(argv)}: exit {done.returncode}, expected {expect}: {done.stderr[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="one repeat (the suite's check that it runs)")
    args = parser.parse_args()
    repeats = 1 if args.small else args.repeats
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        maximal, huge = _maximal(folder), _past_budget(folder)
        cases = {
            "check smoke.yaml": (["check", str(ROOT / "protocols" / "smoke.yaml")], 0),
            f"check maximal ({maximal.stat().st_size:,} bytes)": (["check", str(maximal)], 0),
            f"check past the budget ({huge.stat().st_size:,} bytes)": (["check", str(huge)], 2),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(repeats):
            for name, (argv, expect) in cases.items():
                times[name].append(_time(argv, expect))
    smoke = statistics.median(next(iter(times.values())))
    print(f"{'command':<48} {'median':>8}  ratio to smoke")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<48} {median:>7.2f}s  {median / smoke:.2f}")


if __name__ == "__main__":
    main()
