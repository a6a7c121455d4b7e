"""Threads under ``ledger run --parallel``: the thread count each process gets, against the other choices, side by side.

    python bench/threads.py                 # two of the first command's arms, 60 steps each (~3 min on 2 cores)
    python bench/threads.py --steps 3       # every path, in seconds (a test runs it)

``--parallel N`` gives each of its N processes ``cores // N`` threads (``ledger.run.parallel``: OMP_NUM_THREADS and
MKL_NUM_THREADS), unless the user fixed OMP_NUM_THREADS. This bench trains the same two arms of
``protocols/phaseA-tiny.yaml`` (A_paper and B by default: one of each process's chain in the first command) on
their own stages and rows, the way ``ledger run`` trains them (``build_runtime``, ``ArmRuntime.train_stage``),
three ways:

- ``one process, C threads``: the two arms one after the other in one process at every core (no ``--parallel``);
- ``N processes, C/N threads``: one arm per process, at once, each at its share (what ``--parallel`` chooses);
- ``N processes, C threads``: one arm per process, at once, each at every core (oversubscribed).

Each process loads its arm first and then waits for a common start, so that loading is not timed; a
configuration's time is from that start until its last arm has trained. Its ratio is to the ``--parallel``
choice's time, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PROTOCOL = ROOT / "protocols" / "phaseA-tiny.yaml"


def worker(arms: list[str], steps: int, start_at: float) -> None:
    """Train ``arms`` one after the other from ``start_at`` (wall clock); print the end time as JSON."""
    import torch
    from mfu import Loaded  # bench/mfu.py: a protocol's base, reader and rows, loaded once

    from arms.runtime import build_runtime

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    loaded = Loaded(PROTOCOL)
    prepared = []
    for arm_id in arms:
        arm = loaded.protocol.arm(arm_id)
        model, tokenizer, reader = loaded.bases[arm.base]
        stage = arm.stages[0]
        runtime = build_runtime(arm, model, tokenizer, reader)
        prepared.append((runtime, stage.model_copy(update={"steps": steps}), loaded.manifests[stage.manifest].rows))
    time.sleep(max(0.0, start_at - time.time()))
    for runtime, stage, rows in prepared:
        runtime.train_stage(stage, rows, ("threads", "bench"))
    print(json.dumps({"end": time.time(), "threads": torch.get_num_threads()}))


def configuration(groups: list[list[str]], threads: int, steps: int, lead: float) -> tuple[float, list[int]]:
    """Run one process per group at once with ``threads`` each; (seconds from the common start, threads seen)."""
    start_at = time.time() + lead
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    processes = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", ",".join(group), "--steps", str(steps), "--start-at", str(start_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for group in groups
    ]
    ends, seen = [], []
    for process in processes:
        out, err = process.communicate()
        if process.returncode != 0:
            raise SystemExit(
                f"bench/threads.py: a worker failed: {err.strip().splitlines()[-1] if err.strip() else ''}"
            )
        result = json.loads(out.strip().splitlines()[-1])
        ends.append(result["end"])
        seen.append(result["threads"])
    if min(ends) < start_at:
        raise SystemExit("bench/threads.py: a worker finished before the common start: raise --lead")
    return max(ends) - start_at, seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", default="A_paper,B", help="the arms of phaseA-tiny, one per process (A_paper,B)")
    parser.add_argument("--steps", type=int, default=60, help="training steps of each arm (default 60)")
    parser.add_argument("--lead", type=float, default=25.0, help="seconds for every process to load before the start")
    parser.add_argument("--json", type=Path, help="also write the table as JSON here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker.split(","), args.steps, args.start_at)
        return 0

    arms = [arm.strip() for arm in args.arms.split(",") if arm.strip()]
    cores = os.cpu_count() or 1
    n = len(arms)
    share = max(1, cores // n)  # what ledger.run.parallel gives each process
    print(f"# bench/threads.py  {cores} cores; arms {', '.join(arms)} of phaseA-tiny, {args.steps} steps each")
    rows = [
        (f"{n} processes, {share} thread(s) each (--parallel {n})", [[arm] for arm in arms], share),
        (f"one process, {cores} threads (no --parallel)", [arms], cores),
        (f"{n} processes, {cores} threads each (oversubscribed)", [[arm] for arm in arms], cores),
    ]
    results = []
    for label, groups, threads in rows:
        seconds, seen = configuration(groups, threads, args.steps, args.lead)
        results.append({"configuration": label, "seconds": seconds, "threads_seen": seen})
    chosen = results[0]["seconds"]
    print(f"{'configuration':55} {'seconds':>8} {'vs --parallel':>13}")
    for result in results:
        print(f"{result['configuration']:55} {result['seconds']:8.1f} {result['seconds'] / chosen:12.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"cores": cores, "steps": args.steps, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
