"""Host syncs per training step and per loop of the recurrent forward, counted on the CPU.

    .venv/bin/python bench/host_syncs.py [--json FILE]

A host sync is a call that, on a GPU, makes the host wait for the device (``arms.host_syncs``). Counted
side by side in one run, as differences, so that one-off costs (the first update's check, building the
optimiser) cancel:

- per loop of ``RecurrentLM.forward``: (syncs of a forward at 8 loops - at 1 loop) / 7, on a batch of mixed
  depths (rows leave as their depth passes), with gradients, as training runs it;
- per training step: (syncs of a 12-step stage - a 4-step stage) / 8, through ``ArmRuntime.train_stage``
  (the path ``ledger run`` trains with), for each arm kind and objective family;
- per evaluated batch: syncs of one ``evaluate`` over 16 rows of depths 1-4, per batch.

The goal is 0 per loop and a constant (not growing with the loops) per step.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import yaml

from arms.bases.builtin import tiny_random_base
from arms.host_syncs import HostSyncs
from arms.runtime import build_runtime
from ledger.protocol.loader import parse_protocol
from ledger.reader.shared import Reader
from ledger.rows.tasks import generate_rule_chasing
from ledger.rows.tasks.alphabets import resolve_alphabet

BASE = "builtin:tiny-qwen2?hidden=32&layers=4&heads=2&kv_heads=1&intermediate=64"
SPLIT = {"kind": "recurrent", "surgery": {"split": [1, 3]}, "bridge": {"kind": "split"}}
ARMS: dict[str, dict[str, Any]] = {
    "split, full block, intermediate": {**SPLIT, "budget": {"kind": "full_block"}, "objective": "intermediate"},
    "split, full block, anneal": {**SPLIT, "budget": {"kind": "full_block"}, "objective": "anneal"},
    "split, adapter, outcome": {**SPLIT, "budget": {"kind": "adapter", "rank": 2, "alpha": 4}, "objective": "outcome"},
    "split, answer re-entry": {
        "kind": "recurrent",
        "surgery": {"split": [1, 3]},
        "bridge": {"kind": "split", "reentry": "answer"},
        "budget": {"kind": "full_block"},
        "objective": "intermediate",
    },
    "dense, sft": {"kind": "dense", "objective": "sft_direct"},
}


def runtime_for(arm: dict[str, Any], steps: int):
    arm = dict(arm)
    objective = arm.pop("objective")
    stage: dict[str, Any] = {
        "id": "s",
        "objective": objective,
        "manifest": "train",
        "steps": steps,
        "batch_size": 8,
        "optimizer": {"lr": 1e-3},
    }
    if objective == "anneal":
        stage["anneal_fraction"] = 0.5
    document = {
        "name": "syncs",
        "version": 1,
        "description": "host syncs",
        "seed": 1,
        "bases": {"tiny": {"source": BASE, "dtype": "float32"}},
        "manifests": [
            {
                "id": role,
                "role": role,
                "generator": "rule_chasing",
                "depths": [1, 4],
                "rows_per_depth": 8,
                "seed": 1,
                "split": split,
            }
            for role, split in (("train", "train"), ("eval", "test"))
        ],
        "arms": [
            {"id": "X", "base": "tiny", "stages": [stage], "evaluation": {"manifests": ["eval"]}, **arm},
        ],
    }
    protocol = parse_protocol(yaml.safe_dump(document))
    model, tokenizer = tiny_random_base(BASE)
    reader = Reader(list(resolve_alphabet("N16")), tokenizer=tokenizer)
    return protocol, build_runtime(protocol.arms[0], model, tokenizer, reader)


def rows(split: str):
    return generate_rule_chasing(surface="symbolic", depth_range=(1, 4), rows_per_depth=8, seed=3, split=split)


def stage_syncs(arm: dict[str, Any], steps: int) -> HostSyncs:
    protocol, runtime = runtime_for(arm, steps)
    with HostSyncs(runtime.model) as syncs:
        runtime.train_stage(protocol.arms[0].stages[0], rows("train"), ("bench",))
    return syncs


def per_step(arm: dict[str, Any]) -> tuple[float, dict[str, int]]:
    short, long = stage_syncs(arm, 4), stage_syncs(arm, 12)
    extra = long.by_site - short.by_site
    return (long.count - short.count) / 8, dict(extra)


def per_loop() -> tuple[float, dict[str, int]]:
    from arms.train.recurrent import make_recurrent_batch

    _, runtime = runtime_for(ARMS["split, full block, intermediate"], 1)
    batch = make_recurrent_batch(rows("train")[::4], runtime.reader)  # depths 1, 1, 2, 2, 3, 3, 4, 4
    depths = batch.depths.tolist()
    counted = []
    for loops in (1, 8):
        with HostSyncs(runtime.model) as syncs:
            runtime.model(batch.input_ids, batch.attention_mask, loops=loops, depths=[min(d, loops) for d in depths])
        counted.append(syncs)
    return (counted[1].count - counted[0].count) / 7, dict(counted[1].by_site - counted[0].by_site)


def per_evaluated_batch() -> tuple[float, dict[str, int]]:
    protocol, runtime = runtime_for(ARMS["split, full block, intermediate"], 1)
    evaluation = protocol.arms[0].evaluation
    evaluated = rows("test")[::2]  # 16 rows, 4 of each depth 1-4
    batches = len({row.depth for row in evaluated})  # one forward per depth group of up to batch_size rows
    with HostSyncs(runtime.model) as syncs:
        runtime.evaluate(evaluated, evaluation)
    return syncs.count / batches, dict(syncs.by_site)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--json", metavar="FILE", help="also write the counts (and the sites) as JSON")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    results: dict[str, Any] = {}
    loop, sites = per_loop()
    results["forward, per loop"] = {"syncs": loop, "sites": sites}
    for name, arm in ARMS.items():
        step, sites = per_step(arm)
        results[f"train step: {name}"] = {"syncs": step, "sites": sites}
    evaluated, sites = per_evaluated_batch()
    results["evaluate, per batch"] = {"syncs": evaluated, "sites": sites}
    width = max(len(name) for name in results)
    print(f"{'where':<{width}}  host syncs")
    for name, result in results.items():
        print(f"{name:<{width}}  {result['syncs']:g}")
        for site, n in sorted(result["sites"].items(), key=lambda item: -item[1])[:6]:
            print(f"{'':<{width}}    {n:>4}  {site}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
