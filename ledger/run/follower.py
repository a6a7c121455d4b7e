"""A data-parallel rank other than 0: it trains alongside rank 0 and records nothing.

Rank 0 (``Runner``) owns the ledger: it decides, per arm, which stages are already recorded
(and loads their checkpoints) and which to train, and it gates and evaluates. It tells the
other ranks each decision by broadcast (``arms.train.distributed.World.tell``); a follower builds
the same arm from the same base and does exactly that, so that its weights stay equal to
rank 0's and every training step has all ranks in it. It never opens the database.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ledger.run.bases import RunRefused, load_protocol_base


def follow(runner: Any) -> None:
    from arms.device import numerics, place
    from arms.runtime import TrainingDiverged, build_runtime
    from ledger.reader.shared import Reader
    from ledger.rows.builder import build_manifests
    from ledger.run.reading import reader_symbols

    protocol, world = runner.protocol, runner.world
    runner.manifests = build_manifests(protocol)
    symbols = reader_symbols(runner.manifests.values())
    bases: dict[str, tuple] = {}
    for arm_id in runner.arm_ids:
        arm = protocol.arm(arm_id)
        spec = protocol.bases[arm.base]
        if arm.base not in bases:
            model, tokenizer, _ = load_protocol_base(spec, runner.protocol_dir)
            bases[arm.base] = (place(model, runner.device, spec.autocast), tokenizer)
        model, tokenizer = bases[arm.base]
        reader = Reader(symbols, tokenizer=tokenizer, chat_template=spec.chat_template)
        runtime = build_runtime(arm, model, tokenizer, reader, autocast=spec.autocast)
        with numerics(runner.device, spec.autocast):  # as rank 0 trains it
            while True:
                message = world.hear()
                kind = message[0]
                if kind == "load":
                    runtime.load(Path(message[1]))
                elif kind == "train":
                    stage = next(stage for stage in arm.stages if stage.id == message[1])
                    rows, seed_parts = runner.training.stage_inputs(arm, stage)
                    try:
                        runtime.train_stage(stage, rows, seed_parts, world=world)
                    except TrainingDiverged:
                        pass  # every rank saw the same mean loss: rank 0 records the failed stage
                elif kind == "arm_done":
                    break
                elif kind == "abort":
                    raise RunRefused(f"rank 0 stopped: {message[1]}")
                else:  # pragma: no cover - rank 0 sends only the kinds above
                    raise RuntimeError(f"unexpected message from rank 0: {message!r}")
    message = world.hear()
    if message[0] == "abort":
        raise RunRefused(f"rank 0 stopped: {message[1]}")
