"""A dry run: every arm built from its base and one training step per stage, nothing written.

It exercises the same code a run does (``arms.runtime``: model construction through the
registries, the stage's optimiser and schedule, its objective, the gates' readings and
verdicts, the evaluation read) on a handful of rows, so a protocol that `ledger check`
accepts but the code cannot execute fails here in seconds instead of an hour into a run.
``ledger check --dry-run`` and the property test of complete validation call it.

With ``random_weights`` no weights are needed: every base named by hub id, or by a local folder, is built
from its ``config.json`` at its exact shape with seeded random weights (``arms.bases.shapes``), so a
real-scale protocol is exercised on a machine that has never held its weights. The evaluation then reads
one row of every depth of every manifest, so that every loop the protocol reads is run once, and a dense arm
generates ``GENERATED`` tokens per row (random weights would run to its whole budget).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ledger.protocol.gates import GATE_KINDS
from ledger.protocol.protocol import Protocol
from ledger.run.reading import read_rows

ROWS = 4  # rows per training step, gate reading and evaluation read
GENERATED = 4  # with random weights, tokens a dense arm generates per row: the loop runs, its length says nothing


def sample(rows: list) -> list:
    """``ROWS`` rows spread over the manifest (rows are ordered by depth: every depth gets a say)."""
    return rows[:: max(1, len(rows) // ROWS)][:ROWS]


def one_per_depth(rows: list) -> list:
    """The first row of each depth: read at forced depth, every loop the manifest asks for runs once."""
    seen: dict[Any, Any] = {}
    for row in rows:
        seen.setdefault(getattr(row, "depth", None), row)
    return list(seen.values())


def _base_correct(model: Any, tokenizer: Any, reader: Any, rows: list) -> dict[str, bool]:
    """The base's own loop-1 reading of multiple-choice rows (a guardrail's reference)."""
    from arms.runtime import base_choice_readings

    return {r.row_id: bool(r.correct) for r in base_choice_readings(model, tokenizer, reader, rows)}


class NoBase(LookupError):
    """A base the dry run cannot build: its weights are not here, or (random weights) no config.json describes it."""


def memory_available() -> int | None:
    """Bytes this machine can still give (Linux's MemAvailable), or None where it does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _release_memory() -> None:
    """Collect what the last arm held and hand glibc's freed pages back, so that ``memory_available`` is true."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the pages stay with this process, still reusable by it
        pass


def training_state_bytes(runtime: Any) -> int:
    """What one stage's training adds to the arm's weights: a gradient per trainable tensor, an fp32 master and
    its gradient for a low-precision one (``arms.train.optim.MasterWeights``), and the optimiser's fp32 state
    (AdamW: two moments; Muon: one momentum, AdamW's two for what it leaves to AdamW: counted as two)."""
    state = 0
    for group in runtime.named_groups().values():
        for tensor in group:
            size = tensor.element_size()
            master = 8 if size < 4 else 0
            state += tensor.numel() * (size + master + 8)
    return state


def _check_bases(protocol: Protocol, protocol_dir: Path, random_weights: bool) -> None:
    """``NoBase`` before any arm is built if a base its arms need cannot be: its weights are not here, or (random
    weights) neither they nor a config.json describing it are; a real-scale dry run fails in a second, not after
    the arms before it."""
    from arms.bases.shapes import NoShape, config_folder
    from ledger.protocol.bases import base_location
    from ledger.run.bases import BaseUnavailable, check_bases_available

    for name in sorted({arm.base for arm in protocol.arms}):
        spec = protocol.bases[name]
        location = base_location(spec, protocol_dir)
        if random_weights and not location.startswith("builtin:") and spec.gguf_file is None:
            try:
                config_folder(location)
                continue
            except NoShape as exc:
                if not Path(location).expanduser().exists():
                    raise NoBase(str(exc)) from None
        try:
            check_bases_available(protocol, protocol_dir, [arm.id for arm in protocol.arms if arm.base == name])
        except BaseUnavailable as exc:
            raise NoBase(str(exc)) from None


def _load(spec: Any, protocol_dir: Path, random_weights: bool) -> tuple[Any, Any, str]:
    """(model, tokenizer, what was loaded) for a base: its weights, or with ``random_weights`` its shape."""
    from ledger.protocol.bases import base_location
    from ledger.run.bases import load_protocol_base, weights_sha256

    location = base_location(spec, protocol_dir)
    if random_weights and not location.startswith("builtin:") and spec.gguf_file is None:
        from arms.bases.shapes import NoShape, shaped_base

        try:
            shaped = shaped_base(location, spec.dtype)
        except NoShape:
            if not Path(location).expanduser().exists():  # a GGUF file or folder has its weights here: load them
                raise
        else:
            tokenizer = "the built-in word tokenizer standing in" if shaped.tokenizer_stand_in else "its own tokenizer"
            return shaped.model, shaped.tokenizer, f"random weights shaped by {shaped.config_file}, {tokenizer}"
    model, tokenizer, files = load_protocol_base(spec, protocol_dir)  # hash-checked, as the run loads it
    # hashed as the run records it: a base whose files cannot be read fails here, not after registration
    sha = weights_sha256(files)
    return model, tokenizer, f"{location}, " + (f"weights {sha[:12]}" if sha else "built-in, seeded weights")


def dry_run(protocol: Protocol, protocol_dir: Path, *, progress: Any = None, random_weights: bool = False) -> list[str]:
    """One line per arm and stage that ran; ``NoBase`` for a base it cannot build, else whatever the code raises."""
    from arms.bases.loading import BaseModelNotFound
    from arms.bases.shapes import NoShape
    from arms.runtime import build_runtime
    from ledger.judge.gates import GateInputs
    from ledger.reader.shared import Reader, row_symbols
    from ledger.rows.builder import build_manifests

    manifests = {name: list(manifest.rows) for name, manifest in build_manifests(protocol).items()}
    symbols = list(dict.fromkeys(symbol for rows in manifests.values() for row in rows for symbol in row_symbols(row)))
    _check_bases(protocol, protocol_dir, random_weights)
    bases: dict[str, tuple] = {}
    done = []
    stepped_by_kind: dict[str, str] = {}  # a kind's name -> the first arm of it whose step this machine took
    for arm in protocol.arms:
        if random_weights and arm.evaluation.max_new_tokens > GENERATED:  # random weights never stop on their own
            shorter = arm.evaluation.model_copy(update={"max_new_tokens": GENERATED})
            arm = arm.model_copy(update={"evaluation": shorter})
        if arm.base not in bases:
            spec = protocol.bases[arm.base]
            try:
                model, tokenizer, loaded = _load(spec, protocol_dir, random_weights)
            except (BaseModelNotFound, NoShape) as exc:
                raise NoBase(str(exc)) from None
            done.append(f"base {arm.base}: {loaded}")
            if progress is not None:
                progress(done[-1])
            bases[arm.base] = (model, tokenizer, Reader(symbols, tokenizer=tokenizer, chat_template=spec.chat_template))
        model, tokenizer, reader = bases[arm.base]
        runtime = build_runtime(arm, model, tokenizer, reader)
        for stage in arm.stages:
            needed, free = training_state_bytes(runtime), memory_available()
            if random_weights and free is not None and needed > 0.8 * free:
                # a real-scale arm larger than this machine: its code path is the same as a smaller arm's of its kind
                stepped = stepped_by_kind.get(arm.kind)
                same = f"arm {stepped}, of its kind {arm.kind}, took its step" if stepped else "no arm of its kind did"
                done.append(
                    f"{arm.id} {stage.id}: step not taken: its training state needs {needed / 2**30:.1f} GiB beyond "
                    f"its weights, {free / 2**30:.1f} GiB are free here ({same})"
                )
                if progress is not None:
                    progress(done[-1])
                continue
            stepped_by_kind.setdefault(arm.kind, arm.id)
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
            rows = (one_per_depth if random_weights else sample)(manifests[manifest_id])
            read_rows(runtime, arm, protocol.manifest(manifest_id), rows)
        done.append(f"{arm.id}: evaluation read")
        del runtime  # the next arm's copy and training state in its place, not beside it
        _release_memory()
    return done
