"""`ledger verify` on a ledger of many evidence rows: the time and peak memory of the whole command.

    .venv/bin/python bench/verify_scale.py                       # 100k and 1M evidence rows, side by side
    .venv/bin/python bench/verify_scale.py --rows 20000 200000   # any sizes
    .venv/bin/python bench/verify_scale.py --keep runs/bench-verify   # keep (and reuse) the ledgers built
    .venv/bin/python bench/verify_scale.py --small               # 2k and 4k rows of a 100-row manifest (the suite's)

A script, not a test. For each size it builds (once; `--keep` reuses them) a ledger as a long
project leaves it: one registered protocol with a 1,000-row evaluation manifest, arms A and B
evaluated at loops 1-10 by many checkpoints each (every one a run of its own, its file on disk),
so that most rows are history no claim reads; the claims (two paired exact tests in a Holm family, and
two accuracy claims) read the final checkpoints. Then, each in a fresh process:

* `ledger verify claims.yaml` (chain, schema, heads, claims, the claims' checkpoint lineage);
* `ledger verify claims.yaml --all` (plus every recorded file re-hashed: what re-hashing adds);
* `ledger verify claims.yaml --since-head ROOT:SIZE` (plus the consistency proof).

Printed: wall seconds and peak resident memory (the child's ru_maxrss) per size, and the ratio
of the largest size to the smallest (time should grow with the rows, memory should not).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROTOCOL = """\
name: bench-verify
version: 1
description: A ledger for the verify benchmark; its evidence is written by bench/verify_scale.py.
seed: 3
bases:
  tiny: {{source: ./weights/tiny, dtype: float32, num_layers: 4}}
manifests:
  - {{id: train, role: train, generator: rule_chasing, alphabet: N16, depths: [1, 2], rows_per_depth: 4, seed: 3, split: train}}
  - {{id: eval, role: eval, generator: rule_chasing, alphabet: N16, depths: [1, 10], rows_per_depth: {per_depth}, seed: 3, split: test}}
arms:
  - {{id: A, kind: recurrent, base: tiny, surgery: {{split: [1, 3]}}, bridge: {{kind: split}}, budget: {{kind: full_block}}, evaluation: {{manifests: [eval]}}}}
  - {{id: B, kind: dense, base: tiny, evaluation: {{manifests: [eval]}}}}
claims: [claims.yaml]
"""

CLAIMS = """\
protocol: bench-verify
correction: holm
claims:
  - {id: A_beats_B, statement: A beats B., statistic: paired_exact, arms: [A, B], manifest: eval, direction: greater, alpha: 0.05, family: main}
  - {id: A_beats_B_deep, statement: A beats B at depths 6-10., statistic: paired_exact, arms: [A, B], manifest: eval, rows: {depths: [6, 10]}, direction: greater, alpha: 0.05, family: main}
  - {id: A_accurate, statement: A is accurate., statistic: accuracy, arm: A, manifest: eval, threshold: 0.5}
  - {id: B_deep, statement: B fails at depth 10., statistic: accuracy, arm: B, manifest: eval, rows: {depths: [10, 10]}, threshold: 0.5, direction: at_most, requires: [A_beats_B_deep]}
"""

LOOPS = 10
EVAL_ROWS = 1000  # 100 per depth, depths 1-10 (--small: 100)
ENTRY_ROWS = 10_000  # evidence rows per chain entry: one checkpoint's evaluation


def build(folder: Path, n_rows: int, eval_rows: int = EVAL_ROWS) -> str:
    """A ledger in ``folder`` with ``n_rows`` evidence rows (rounded to whole checkpoint evaluations)."""
    from ledger.cli.main import main
    from ledger.protocol.loader import load_protocol
    from ledger.rows.builder import build_manifests
    from ledger.store import open_store

    db = f"sqlite:///{folder / 'ledger.db'}"
    if (folder / "built").is_file():
        return db
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "protocol.yaml").write_text(PROTOCOL.format(per_depth=eval_rows // 10), encoding="utf-8")
    (folder / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    previous = Path.cwd()
    os.chdir(folder)
    try:
        if main(["register", "protocol.yaml", "--db", db]) != 0:
            raise SystemExit("bench: registering the protocol failed")
    finally:
        os.chdir(previous)
    protocol = load_protocol(folder / "protocol.yaml")
    manifest = build_manifests(protocol)["eval"]
    manifest_sha256 = manifest.sha256  # computed on every access
    per_arm = max(1, n_rows // (2 * LOOPS * len(manifest.rows)))
    started = time.perf_counter()
    with open_store(db) as store:
        for arm in ("A", "B"):
            parent = None
            for index in range(per_arm):
                path = folder / f"{arm}-{index}.safetensors"
                path.write_bytes(f"weights of {arm} at stage {index}".encode() * 256)
                run_id = store.add_run(run_id=f"{arm}-{index}", protocol_sha256=protocol.sha256, arm=arm)
                parent = store.add_checkpoint(
                    path=str(path), arm=arm, status="promoted", run_id=run_id, parent_sha256=parent
                )
                store.add_evidence(
                    [
                        {
                            "run_id": run_id,
                            "manifest_sha256": manifest_sha256,
                            "row_id": row.row_id,
                            "arm": arm,
                            "checkpoint_sha256": parent,
                            "loop": loop,
                            "prediction": row.answer,
                            "correct": loop >= row.depth if arm == "A" else (row.depth <= 2 + index % 3),
                            "score_margin": 0.25 * loop,
                        }
                        for loop in range(1, LOOPS + 1)
                        for row in manifest.rows
                    ],
                    batch_size=ENTRY_ROWS,
                )
            print(f"  built {arm}: {per_arm} checkpoints", flush=True)
    (folder / "built").write_text(f"{2 * per_arm * LOOPS * len(manifest.rows)}\n", encoding="utf-8")
    print(f"  {n_rows:,} rows built in {time.perf_counter() - started:.0f} s", flush=True)
    return db


def _env() -> dict[str, str]:
    """This tree first on the path; byte-code cached as on a user's machine (PYTHONDONTWRITEBYTECODE, set in
    some shells here, would make every start compile every module from source: seconds, not rows)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def timed(folder: Path, argv: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit code) of `ledger ARGV` in a fresh process."""
    started = time.perf_counter()
    with (folder / "verify.out").open("w") as output:
        child = subprocess.Popen(
            [sys.executable, "-m", "ledger", *argv],
            cwd=folder,
            env=_env(),
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        tail = (folder / "verify.out").read_text(encoding="utf-8").strip().splitlines()[-3:]
        print(f"  `ledger {' '.join(argv[:2])}` exited {child.returncode}: " + " / ".join(tail), flush=True)
    return elapsed, usage.ru_maxrss / 1024, child.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--keep", type=Path, help="build the ledgers here and reuse them on the next run")
    parser.add_argument("--small", action="store_true", help="2,000 and 4,000 rows of a 100-row manifest (seconds)")
    args = parser.parse_args()
    eval_rows = EVAL_ROWS
    if args.small:
        args.rows, eval_rows = [2_000, 4_000], 100
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-verify-"))
    results: dict[int, dict[str, tuple[float, float, int]]] = {}
    for n_rows in args.rows:
        folder = base / f"rows-{n_rows}"
        print(f"ledger of {n_rows:,} evidence rows in {folder}", flush=True)
        db = build(folder, n_rows, eval_rows)
        from ledger.store import open_store

        with open_store(db, read_only=True) as store:
            root, size = store.head()
        runs = {
            "verify": ["verify", "claims.yaml", "--db", db],
            "verify --all": ["verify", "claims.yaml", "--all", "--db", db],
            "verify --since-head": ["verify", "claims.yaml", "--since-head", f"{root}:{size}", "--db", db],
        }
        results[n_rows] = {name: timed(folder, argv) for name, argv in runs.items()}
    print()
    print(f"{'command':<22}" + "".join(f"{n:>12,} rows" for n in args.rows) + "   time ratio   memory ratio")
    for name in next(iter(results.values())):
        cells = [results[n][name] for n in args.rows]
        line = f"{name:<22}" + "".join(f"  {s:6.1f} s {m:5.0f} MiB" for s, m, _ in cells)
        first, last = cells[0], cells[-1]
        line += f"   {last[0] / first[0]:10.2f}   {last[1] / first[1]:12.2f}"
        if any(code not in (0,) for _, _, code in cells):
            line += "   exit codes " + ", ".join(str(code) for _, _, code in cells)
        print(line)
    print(
        f"(peak memory of this process, which built the ledgers: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB)"
    )
    failed = any(code != 0 for sizes in results.values() for _, _, code in sizes.values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
