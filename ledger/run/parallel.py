"""``ledger run P --parallel N``: the protocol's arms in N processes writing into one ledger.

The parent splits the arms into N groups -- an arm that continues from another (``init_from``)
stays with it, and the groups are balanced by estimated training cost (``arm_cost``; the split
with the smallest largest group, searched exhaustively while there are few chains) -- and
starts one ``ledger run P --arms GROUP --no-judge`` per group but one at once: the heaviest group it trains
itself (``run_here``), reading the manifests and registering the protocol while the children
import the libraries (registrations take the store's lock, so the children find it registered),
and it is warm for the judging pass that follows. If this process fails, the children are
stopped (and a refused run leaves no folder behind). With GPUs, group k gets
``cuda:(k mod GPUs)``; on the CPU the cores are shared out (unless ``OMP_NUM_THREADS`` is
set: then every process uses that many). Each child's output goes to ``OUT/parallel-K.log``.
The children train and evaluate only; when every group has finished the parent judges the
claims and writes the report by resuming the whole protocol (every arm is recorded by
then, so nothing is retrained). Once its own group is done and a child still runs, the
parent reads ahead what the judging pass reads (``on_core_free``: the other groups' bases).
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

from ledger.protocol.arms import OBJECTIVES
from ledger.protocol.protocol import Protocol

# Exhaustive balancing while groups ** chains stays below this; longest-first greedy above it.
EXHAUSTIVE_LIMIT = 20_000


class ParallelFailed(Exception):
    """A child run ended with bad input (exit 2); its log says why."""


def arm_chains(protocol: Protocol, arm_ids: list[str]) -> list[list[str]]:
    """The arms as ``init_from`` chains, each in order (an arm after the one it continues from), in protocol
    order: the smallest groups that can run apart."""
    root: dict[str, str] = {}
    for arm_id in arm_ids:
        arm, chain = protocol.arm(arm_id), arm_id
        while arm.init_from is not None and arm.init_from in arm_ids:
            chain, arm = arm.init_from, protocol.arm(arm.init_from)
        root[arm_id] = chain
    chains: dict[str, list[str]] = {}
    for arm_id in arm_ids:  # protocol order keeps a source before the arm continuing from it
        chains.setdefault(root[arm_id], []).append(arm_id)
    return list(chains.values())


def arm_groups(protocol: Protocol, arm_ids: list[str], n: int) -> list[list[str]]:
    """At most ``n`` groups of arms; an ``init_from`` chain stays in one group, in order."""
    chains = arm_chains(protocol, arm_ids)
    weights = [sum(arm_cost(protocol, a) for a in chain) for chain in chains]
    places = _balanced(weights, min(n, len(chains)))
    groups: list[list[str]] = [[] for _ in range(max(places, default=-1) + 1)]
    for chain, place in zip(chains, places):
        groups[place].extend(chain)
    order = {arm_id: index for index, arm_id in enumerate(arm_ids)}
    return sorted((sorted(group, key=order.__getitem__) for group in groups if group), key=lambda g: order[g[0]])


def _balanced(weights: list[float], n: int) -> list[int]:
    """The group of each weight: the assignment whose heaviest group is lightest (exhaustive for few weights;
    else each weight, heaviest first, to the lightest group so far)."""
    if not weights or n <= 1:
        return [0] * len(weights)
    if n ** (len(weights) - 1) <= EXHAUSTIVE_LIMIT:

        def heaviest(places: Iterable[int]) -> float:
            loads = [0.0] * n
            for weight, place in zip(weights, places):
                loads[place] += weight
            return max(loads)

        # the first weight's group is fixed (groups are interchangeable); the first lightest split wins a tie
        return list(min(((0, *rest) for rest in itertools.product(range(n), repeat=len(weights) - 1)), key=heaviest))
    places = [0] * len(weights)
    loads = [0.0] * n
    for index in sorted(range(len(weights)), key=lambda i: -weights[i]):
        lightest = loads.index(min(loads))
        places[index] = lightest
        loads[lightest] += weights[index]
    return places


def arm_cost(protocol: Protocol, arm_id: str) -> float:
    """A training cost estimate for balancing the groups: each stage's steps x what the arm's kind says a step
    costs in layer passes (``ArmSpec.step_cost``) x its objective's ``step_factor`` (a scratchpad target is
    longer)."""
    arm = protocol.arm(arm_id)
    layers = protocol.bases[arm.base].num_layers or 1
    return sum(
        stage.steps * arm.step_cost(protocol, stage, layers) * OBJECTIVES[stage.objective].step_factor
        for stage in arm.stages
    )


def child_devices(choice: str | None, n: int) -> list[str | None]:
    """The device of each group: GPUs round robin under auto/cuda, else the choice as given."""
    import torch

    if choice in (None, "auto", "cuda") and torch.cuda.is_available():
        return [f"cuda:{k % torch.cuda.device_count()}" for k in range(n)]
    return [choice] * n


def run_parallel(
    protocol_path: Path,
    protocol: Protocol,
    arm_ids: list[str],
    n: int,
    *,
    db: str,
    out_dir: Path,
    device: str | None,
    artifacts: str | None,
    resume: bool,
    compile_choice: str = "auto",
    report=print,
    run_here: Callable[[list[str], str | None, int], None] | None = None,
    on_core_free: Callable[[], None] | None = None,
) -> list[int]:
    """Train every group and wait for it; the exit codes, in group order (0 for the group trained here).

    ``run_here(arms, device, threads)`` trains the heaviest group in this process while the children train the
    others (without it, every group is a child). ``on_core_free`` runs once, when a group has finished while
    others still run (read-only work the parent would do after them)."""
    groups = arm_groups(protocol, arm_ids, n)
    devices = child_devices(device, len(groups))
    # the cores shared out, unless the caller fixed the thread count (readings then match a
    # single process run with the same count byte for byte)
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // len(groups)))
    here = None
    if run_here is not None:
        loads = [sum(arm_cost(protocol, arm) for arm in group) for group in groups]
        here = loads.index(max(loads))
    made_folder = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    children: dict[int, tuple[IO[str], subprocess.Popen]] = {}
    for k, (group, child_device) in enumerate(zip(groups, devices)):
        if k == here:
            continue
        command = [sys.executable, "-m", "ledger", "run", str(protocol_path), "--arms", ",".join(group)]
        command += ["--db", db, "--out", str(out_dir), "--no-progress", "--no-judge"]
        command += ["--device", child_device] if child_device else []
        command += ["--artifacts", artifacts] if artifacts else []
        command += ["--resume"] if resume else []
        command += ["--compile", compile_choice] if compile_choice != "auto" else []
        log: IO[str] = open(out_dir / f"parallel-{k}.log", "w", encoding="utf-8")  # noqa: SIM115 - closed below
        env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        children[k] = (log, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env))
        report(f"started arms {','.join(group)} on {child_device or 'auto'} (log {out_dir / f'parallel-{k}.log'})")
    codes: list[int | None] = [None] * len(groups)
    if here is not None and run_here is not None:
        report(f"training arms {','.join(groups[here])} in this process on {devices[here] or 'auto'}")
        try:
            run_here(groups[here], devices[here], int(threads))
        except BaseException:  # the children stop too: a resumed run re-runs their unfinished stages
            for child_log, process in children.values():
                process.terminate()
                process.wait()
                child_log.close()
            if made_folder and {path.name for path in out_dir.iterdir()} <= {f"parallel-{k}.log" for k in children}:
                # this process stopped before it wrote anything (a refusal): nothing of the run is left behind
                shutil.rmtree(out_dir)
            raise
        codes[here] = 0
        report(f"arms {','.join(groups[here])}: done")
    while None in codes:
        for k, (child_log, process) in children.items():
            if codes[k] is None and process.poll() is not None:
                child_log.close()
                codes[k] = process.returncode
                report(f"arms {','.join(groups[k])}: exit {process.returncode}")
        if on_core_free is not None and codes.count(None) not in (0, len(codes)):
            _ahead(on_core_free)
            on_core_free = None
        time.sleep(0.2)
    bad = [k for k, code in enumerate(codes) if code not in (0, 3)]
    if bad:
        k = bad[0]
        last = (out_dir / f"parallel-{k}.log").read_text(encoding="utf-8").strip().splitlines()
        raise ParallelFailed(
            f"arms {','.join(groups[k])} failed (exit {codes[k]}): {last[-1] if last else 'no output'}"
        )
    return [int(code) for code in codes if code is not None]


def _ahead(work: Callable[[], None]) -> None:
    """Read-ahead work while children still run: a failure is only logged here, since the parent's own pass
    repeats the work after the children and reports it there (with the children's logs to read first)."""
    try:
        work()
    except Exception as exc:  # repeated, and reported, by the pass that follows
        logging.getLogger("ledger.run").info("reading ahead failed (the judging pass repeats it): %s", exc)
