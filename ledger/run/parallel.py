"""``ledger run P --parallel N``: the protocol's arms in N processes writing into one ledger.

The parent registers the protocol once (so no two children race to), splits the arms into
N groups -- an arm that continues from another (``init_from``) stays with it, and groups
are balanced by estimated training cost (``arm_cost``) -- and starts one ``ledger run P --arms GROUP`` per group.
With GPUs, child k gets ``cuda:(k mod GPUs)``; on the CPU the cores are shared out
(unless ``OMP_NUM_THREADS`` is set: then every child uses that many). Each
child's output goes to ``OUT/parallel-K.log``. The children train and evaluate only
(``--no-judge``); when all have finished the parent judges the claims and writes the report by
resuming the whole protocol (every arm is recorded by then, so nothing is retrained). The
parent reads its inputs ahead (imports, manifests, bases: ``Runner.warm``) as soon as the first
child has finished and a core is free.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ledger.spec.protocol import Protocol


class ParallelFailed(Exception):
    """A child run ended with bad input (exit 2); its log says why."""


def arm_groups(protocol: Protocol, arm_ids: list[str], n: int) -> list[list[str]]:
    """At most ``n`` groups of arms; an ``init_from`` chain stays in one group, in order."""
    root: dict[str, str] = {}
    for arm_id in arm_ids:
        arm, chain = protocol.arm(arm_id), arm_id
        while arm.init_from is not None and arm.init_from in arm_ids:
            chain, arm = arm.init_from, protocol.arm(arm.init_from)
        root[arm_id] = chain
    chains: dict[str, list[str]] = {}
    for arm_id in arm_ids:  # protocol order keeps a source before the arm continuing from it
        chains.setdefault(root[arm_id], []).append(arm_id)
    weight = {key: sum(arm_cost(protocol, a) for a in members) for key, members in chains.items()}
    groups: list[list[str]] = [[] for _ in range(min(n, len(chains)))]
    loads = [0.0] * len(groups)
    for key in sorted(chains, key=lambda k: -weight[k]):
        lightest = loads.index(min(loads))
        groups[lightest].extend(chains[key])
        loads[lightest] += weight[key]
    order = {arm_id: index for index, arm_id in enumerate(arm_ids)}
    return [sorted(group, key=order.__getitem__) for group in groups if group]


def arm_cost(protocol: Protocol, arm_id: str) -> float:
    """A training cost estimate for balancing the groups: steps x the base's layers, and for the paper's bridge
    (every position re-enters, so no loop reuses the prompt) x the mean share of the layers a forced-depth step
    runs over the whole sequence; a cached answer-only loop or a dense step runs the whole sequence once."""
    arm = protocol.arm(arm_id)
    layers = protocol.bases[arm.base].num_layers or 1
    cost = 0.0
    for stage in arm.stages:
        factor = 1.0
        split = getattr(getattr(arm, "surgery", None), "split", None)
        if split and getattr(getattr(arm, "bridge", None), "reentry", None) == "all" and stage.manifest:
            depths = getattr(protocol.manifest(stage.manifest), "depths", None)
            if depths:  # prelude and coda once, the block at every loop of the mean forced depth
                block = split[1] - split[0]
                factor = (layers - block + block * (depths[0] + depths[1]) / 2) / layers
        cost += stage.steps * layers * factor
    return cost


def child_devices(choice: str | None, n: int) -> list[str | None]:
    """The device of each child: GPUs round robin under auto/cuda, else the choice as given."""
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
    report=print,
    on_core_free: Callable[[], None] | None = None,
) -> list[int]:
    """Start the children and wait for them; their exit codes, in group order. ``on_core_free`` runs once, when
    the first child has finished while others still run (read-only work the parent would do after them)."""
    groups = arm_groups(protocol, arm_ids, n)
    devices = child_devices(device, len(groups))
    # the cores shared out, unless the caller fixed the thread count (readings then match a
    # single process run with the same count byte for byte)
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // len(groups)))
    out_dir.mkdir(parents=True, exist_ok=True)
    children = []
    for k, (group, child_device) in enumerate(zip(groups, devices)):
        command = [sys.executable, "-m", "ledger", "run", str(protocol_path), "--arms", ",".join(group)]
        command += ["--db", db, "--out", str(out_dir), "--no-progress", "--no-judge"]
        command += ["--device", child_device] if child_device else []
        command += ["--artifacts", artifacts] if artifacts else []
        command += ["--resume"] if resume else []
        log = open(out_dir / f"parallel-{k}.log", "w", encoding="utf-8")  # noqa: SIM115 - closed below
        env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        children.append((group, log, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)))
        report(f"started arms {','.join(group)} on {child_device or 'auto'} (log {out_dir / f'parallel-{k}.log'})")
    codes: list[int | None] = [None] * len(children)
    while None in codes:
        for k, (group, log, process) in enumerate(children):
            if codes[k] is None and process.poll() is not None:
                log.close()
                codes[k] = process.returncode
                report(f"arms {','.join(group)}: exit {process.returncode}")
        if on_core_free is not None and codes.count(None) not in (0, len(children)):
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
