"""How long `ledger --help`, the external audit and the smoke run take, this tree against another revision.

    .venv/bin/python bench/cli_startup.py                 # against 0fa6d87 (before the house moved)
    .venv/bin/python bench/cli_startup.py --base REV --repeats 5 --drop-caches

A script, not a test. The base revision is checked out into a temporary git worktree and
run with the same interpreter (its folder first on PYTHONPATH); the two trees alternate
within every repeat so that a change in machine load hits both alike. `--drop-caches`
(root) empties the OS page cache before every command: a cold start, as after a reboot.
The external audit runs from an empty database each time; the newer tree needs
`--import` to import the release (verify no longer writes on its own). `--with-run` adds
`ledger run protocols/smoke.yaml` (train, gate, evaluate, judge, report: about a minute),
which shows whether the store or the training path got slower.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(tree: Path, argv: list[str], drop_caches: bool) -> float:
    if drop_caches:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    env = _env(tree)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ledger", *argv], cwd=tree, env=env, capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{tree}: ledger {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return elapsed


def _env(tree: Path) -> dict[str, str]:
    """The tree first on the path; byte-code caches written as on a user's machine (some shells here set
    PYTHONDONTWRITEBYTECODE, which makes every start compile every module from source)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _audit_argv(tree: Path, db: Path) -> list[str]:
    help_text = subprocess.run(
        [sys.executable, "-m", "ledger", "verify", "--help"],
        cwd=tree,
        env=dict(os.environ, PYTHONPATH=str(tree)),
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    flags = ["--import"] if "--import" in help_text else []
    # the release lies beside this checkout (../shared), not beside the temporary worktree
    release = ROOT.parent / "shared" / "reference" / "recurrent-qwen-svgd"
    return ["verify", "claims/external/", *flags, "--root", str(release), "--db", f"sqlite:///{db}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="0fa6d87", help="the revision to compare with (default: before the move)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--drop-caches", action="store_true", help="empty the page cache before each command (root)")
    parser.add_argument("--with-run", action="store_true", help="also time `ledger run protocols/smoke.yaml`")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        base_tree = Path(scratch) / "base"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base_tree), args.base],
            check=True,
            capture_output=True,
        )
        try:
            trees = {"base": base_tree, "this": ROOT}
            for tree in trees.values():  # byte-compile both once, so neither pays for it in the timings
                _run(tree, ["--help"], False)
            times: dict[tuple[str, str], list[float]] = {}
            for repeat in range(args.repeats):
                for name, tree in trees.items():
                    times.setdefault((name, "--help"), []).append(_run(tree, ["--help"], args.drop_caches))
                    db = Path(scratch) / f"{name}-{repeat}.db"
                    argv = _audit_argv(tree, db)
                    times.setdefault((name, "audit"), []).append(_run(tree, argv, args.drop_caches))
                    if args.with_run:
                        run = [
                            "run",
                            "protocols/smoke.yaml",
                            "--no-progress",
                            "--db",
                            f"sqlite:///{db}.run",
                            "--out",
                            str(Path(scratch) / f"{name}-{repeat}-out"),
                        ]
                        times.setdefault((name, "run"), []).append(_run(tree, run, args.drop_caches))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)], check=False)
    print(f"median of {args.repeats} ({'cold: page cache dropped' if args.drop_caches else 'warm page cache'})")
    print(f"{'command':<44} {'base ' + args.base:>14} {'this tree':>10} {'ratio':>6}")
    for command, label in (("--help", "ledger --help"), ("audit", "ledger verify claims/external/ (empty db)")):
        base = statistics.median(times[("base", command)])
        this = statistics.median(times[("this", command)])
        print(f"{label:<44} {base:>13.2f}s {this:>9.2f}s {this / base:>6.2f}")


if __name__ == "__main__":
    main()
