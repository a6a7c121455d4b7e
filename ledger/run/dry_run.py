"""A dry run: every arm built from its base and one training step per stage, nothing written.

It exercises the same code a run does (``arms.runtime``: model construction through the
registries, the stage's optimiser and schedule, its objective, the gates' readings and
verdicts, the evaluation read) on a handful of rows, so a protocol that `ledger check`
accepts but the code cannot execute fails here in seconds instead of an hour into a run.
``ledger check --dry-run`` and the property test of complete validation call it.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ledger.protocol.gates import GATE_KINDS
from ledger.protocol.protocol import Protocol
from ledger.run.reading import read_rows

ROWS = 4  # rows per training step, gate reading and evaluation read


def sample(rows: list) -> list:
    """``ROWS`` rows spread over the manifest (rows are ordered by depth: every depth gets a say)."""
    return rows[:: max(1, len(rows) // ROWS)][:ROWS]


def _base_correct(model: Any, tokenizer: Any, reader: Any, rows: list) -> dict[str, bool]:
    """The base's own loop-1 reading of multiple-choice rows (a guardrail's reference)."""
    from arms.runtime import base_choice_readings

    return {r.row_id: bool(r.correct) for r in base_choice_readings(model, tokenizer, reader, rows)}


def dry_run(protocol: Protocol, protocol_dir: Path, *, progress: Any = None) -> list[str]:
    """One line per arm and stage that ran; raises whatever the code raises."""
    from arms.runtime import build_runtime
    from ledger.judge.gates import GateInputs
    from ledger.protocol.bases import base_location
    from ledger.reader.shared import Reader, row_symbols
    from ledger.rows.builder import build_manifests
    from ledger.run.bases import load_protocol_base, weights_sha256

    manifests = {name: list(manifest.rows) for name, manifest in build_manifests(protocol).items()}
    symbols = list(dict.fromkeys(symbol for rows in manifests.values() for row in rows for symbol in row_symbols(row)))
    bases: dict[str, tuple] = {}
    done = []
    for arm in protocol.arms:
        if arm.base not in bases:
            spec = protocol.bases[arm.base]
            model, tokenizer, files = load_protocol_base(spec, protocol_dir)  # hash-checked, as the run loads it
            # hashed as the run records it: a base whose files cannot be read fails here, not after registration
            sha = weights_sha256(files)
            done.append(
                f"base {arm.base}: {base_location(spec, protocol_dir)}, "
                + (f"weights {sha[:12]}" if sha else "built-in, seeded weights")
            )
            if progress is not None:
                progress(done[-1])
            bases[arm.base] = (model, tokenizer, Reader(symbols, tokenizer=tokenizer, chat_template=spec.chat_template))
        model, tokenizer, reader = bases[arm.base]
        runtime = build_runtime(arm, model, tokenizer, reader)
        for stage in arm.stages:
            schedule = stage.optimizer.schedule
            one_step = stage.model_copy(update={"steps": 1 + (schedule.warmup_steps if schedule else 0)})
            rows = [row for name in stage.manifests() for row in sample(manifests[name])]
            runtime.train_stage(one_step, rows, (protocol.seed, arm.id, stage.id, "dry"))
            for gate_id in stage.gates:
                gate = next(gate for gate in protocol.gates if gate.id == gate_id)
                rows = sample(manifests[gate.manifest])
                readings = read_rows(runtime, arm, protocol.manifest(gate.manifest), rows)
                base = functools.partial(_base_correct, model, tokenizer, reader, rows)  # read if the gate asks
                GATE_KINDS.implementation(gate.kind)(gate, GateInputs(rows, readings, base))
            done.append(f"{arm.id} {stage.id}: {stage.objective}, one step; {runtime.first_update.summary()}")
            if progress is not None:
                progress(done[-1])
        for manifest_id in arm.evaluation.manifests:
            read_rows(runtime, arm, protocol.manifest(manifest_id), sample(manifests[manifest_id]))
        done.append(f"{arm.id}: evaluation read")
    return done
