"""A dry run: the protocol run end to end on a handful of rows, in a throwaway ledger that is deleted after.

``ledger run`` itself runs (``ledger.run.runner``: registration, the bases and the reader's calibration, every
arm built through the registries, each stage's optimiser, schedule and objective, its gates, the checkpoints and
their lineage, the evaluation reads at every loop, the judging of every claim, the report) on the protocol's
*miniature*: every manifest at its fewest rows that still hold each depth, operation and part
(``fewest_rows``), every stage one step at a batch of at most ``ROWS`` (``SHAPED_ROWS`` with random weights; two
steps where it warms up: its warm-up shortened to one step), every gate recorded rather than stopping. A protocol
that `ledger check` accepts but the code cannot execute fails here in minutes instead of an hour into a run; a
claim the run's evidence cannot judge fails it too. ``ledger check --dry-run`` and the property test of complete
validation call it.

With ``random_weights`` no weights are needed: every base named by hub id, or by a local folder, is built
from its ``config.json`` at its exact shape with seeded random weights (``arms.bases.shapes``), a dense arm
generates ``GENERATED`` tokens per row (random weights would run to its whole budget), the test recurrences and
a sampled training recurrence's mean run by rank (1, 2, 4, ..., 32 as 1, 2, 3, ..., 6), no latency is timed, and a
stage whose training state this machine cannot hold steps only a part of its tensors (``narrow_to_fit``, said in
the output): its loss, backward, optimiser and schedule run at the real shapes all the same.

Registration's power and acquisition rules are off in the throwaway ledger (no claim can be won on one row per
depth); the outcomes it prints say that the claims can be judged, not what they will be.
"""

from __future__ import annotations

import copy
import math
import os
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from ledger.protocol.protocol import Protocol

ROWS = 4  # at most this many rows per training batch
SHAPED_ROWS = 2  # with random weights, at a real model's shapes: two micro-batches of one row still accumulate
STAND_IN_QUESTIONS = 2  # questions of a benchmark file not here yet: one batch of options, each read at every loop
SHAPED_CHECKPOINTS = 2  # with random weights, a checkpointing stage's checkpoints in the miniature
TOKENS = 64  # tokens a next-token stage keeps per document (a packed corpus's 1,025 would only cost time)
GENERATED = 4  # with random weights, tokens a dense arm generates per row: the loop runs, its length says nothing
PART_BYTES = 2**30  # the training state a stage too large for the machine steps at most: every path, little time


class NoBase(LookupError):
    """A base the dry run cannot build: its weights are not here, or (random weights) no config.json describes it."""


class DryRunFailed(RuntimeError):
    """The miniature ran, but the run could not do what the protocol asks (a claim it cannot judge)."""


@dataclass
class DryRun:
    """What the dry run did: a line per base, arm stage and arm, and each claim's outcome on its handful of rows."""

    lines: list[str] = field(default_factory=list)
    claims: dict[str, str] = field(default_factory=dict)  # claim id -> outcome in the throwaway ledger


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


def tensor_state_bytes(tensor: Any) -> int:
    """What stepping one tensor adds to the arm's weights: its gradient, an fp32 master and the master's gradient
    for a low-precision one (``arms.train.optim.MasterWeights``), and the optimiser's fp32 state (AdamW: two
    moments; Muon: one momentum, AdamW's two for what it leaves to AdamW: counted as two)."""
    size = tensor.element_size()
    master = 8 if size < 4 else 0
    return int(tensor.numel()) * (size + master + 8)


def training_state_bytes(runtime: Any) -> int:
    """What one stage's training adds to the arm's weights: ``tensor_state_bytes`` of every trainable tensor."""
    return sum(tensor_state_bytes(tensor) for group in runtime.named_groups().values() for tensor in group)


def part_that_fits(groups: dict[str, list[Any]], budget: float) -> list[Any]:
    """The trainable tensors a step too large for the machine steps: in each group its smallest tensor of each
    rank (a matrix takes Muon's path, a vector AdamW's), then the smallest of the rest while their state fits
    ``budget`` bytes."""
    kept: list[Any] = []
    for group in groups.values():
        by_size = sorted(group, key=lambda tensor: int(tensor.numel()))
        for rank in sorted({tensor.dim() for tensor in by_size}):
            kept.append(next(tensor for tensor in by_size if tensor.dim() == rank))
    spent = sum(tensor_state_bytes(tensor) for tensor in kept)
    chosen = {id(tensor) for tensor in kept}
    rest = sorted((t for group in groups.values() for t in group if id(t) not in chosen), key=lambda t: int(t.numel()))
    for tensor in rest:
        cost = tensor_state_bytes(tensor)
        if spent + cost > budget:
            break
        kept.append(tensor)
        spent += cost
    return kept


def resident_bytes() -> int:
    """What this process holds in memory now (Linux's /proc/self/statm), 0 where the system does not say."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


ROW_TOKENS = 256  # the tokens a miniature's row is taken to hold, for the logits a training step keeps


def activation_bytes(runtime: Any) -> int:
    """The largest activations of a step at the miniature's batch: the fp32 logits over the vocabulary, kept
    three times (logits, their log-softmax, its gradient), which at real vocabularies outweigh the rest."""
    vocabulary = int(getattr(getattr(runtime.model, "config", None), "vocab_size", 0) or 0)
    return ROWS * ROW_TOKENS * vocabulary * 4 * 3


def memory_limit_bytes(limit_gib: float | None) -> float | None:
    """The ceiling a dry run keeps to: ``limit_gib`` where given, else 0.8 of what this process holds plus what
    the machine has free (None where the machine does not say)."""
    if limit_gib is not None:
        return limit_gib * 2**30
    free = memory_available()
    return None if free is None else 0.8 * (free + resident_bytes())


def narrow_to_fit(runtime: Any, limit_gib: float | None = None) -> str | None:
    """Where this arm's training step would take the process past its memory ceiling (``memory_limit_bytes``),
    counting what it holds now, the training state and the step's activations: let its stage step only the
    ``part_that_fits`` the room left, at most ``PART_BYTES`` (a step of each optimiser's path at the real shapes,
    not of every matrix: Muon's orthogonalisation of a 1B model's matrices takes minutes on a CPU), and say so; else let it step every trainable tensor and return None."""
    _release_memory()
    limit = memory_limit_bytes(limit_gib)
    held, activations = resident_bytes(), activation_bytes(runtime)
    needed = training_state_bytes(runtime) + activations
    if limit is None or held + needed <= limit:
        runtime.step_only(None)
        return None
    groups = runtime.named_groups()
    part = part_that_fits(groups, min(limit - held - activations, PART_BYTES))
    total = sum(len(group) for group in groups.values())
    state = sum(tensor_state_bytes(tensor) for tensor in part)
    runtime.step_only(part)
    return (
        f"steps {len(part)} of its {total} trainable tensors ({state / 2**30:.2f} GiB of training state): all of "
        f"them with the step's activations need {needed / 2**30:.1f} GiB beside the {held / 2**30:.1f} GiB held, "
        f"past the {limit / 2**30:.1f} GiB ceiling"
    )


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


def _shaped_bases(protocol: Protocol, protocol_dir: Path) -> tuple[dict[str, tuple[Any, Any]], list[str]]:
    """The bases built at their shape with random weights (base name -> (model, tokenizer)), and a line each; a
    base whose weights are here but whose shape is not (a GGUF file) is left to the run, which loads it."""
    from arms.bases.shapes import NoShape, shaped_base
    from ledger.protocol.bases import base_location

    bases, lines = {}, []
    for name in sorted({arm.base for arm in protocol.arms}):
        spec = protocol.bases[name]
        location = base_location(spec, protocol_dir)
        if location.startswith("builtin:") or spec.gguf_file is not None:
            continue
        try:
            shaped = shaped_base(location, spec.dtype)
        except NoShape:
            continue  # _check_bases found its weights here
        tokenizer = "the built-in word tokenizer standing in" if shaped.tokenizer_stand_in else "its own tokenizer"
        bases[name] = (shaped.model, shaped.tokenizer)
        lines.append(f"base {name}: random weights shaped by {shaped.config_file}, {tokenizer}")
    return bases, lines


def _mini_steps(stage: Any, most_checkpoints: int | None = None) -> int:
    """A stage's steps in the miniature: one per checkpoint it records (``checkpoint_every``; at most
    ``most_checkpoints`` of them, where given), else one, or two where it warms up (a warm-up step, then one at
    the full rate); a warmup-stable-decay schedule has a step of each of its parts."""
    schedule = stage.optimizer.schedule
    warmed = bool(schedule and schedule.warmup_steps)
    least = 1 + warmed + 1 if schedule and schedule.kind == "wsd" else 1  # a warm-up, a stable and a decay step
    if stage.checkpoint_every:
        checkpoints = math.ceil(stage.steps / stage.checkpoint_every)
        return max(2, least, min(checkpoints, most_checkpoints or checkpoints))
    if stage.until is not None:  # a step, its gate read, a step more
        return max(least, 2)
    return max(least, 2 if warmed else 1)


def _mini_step(protocol: Protocol, claim: dict, step: int, most_checkpoints: int | None = None) -> int:
    """A claim's ``at_step`` in the miniature: the same checkpoint (a stage's last step, or its n-th
    ``checkpoint_every`` checkpoint, the last one kept where there are fewer) of the first arm it names."""
    arm_id = (claim.get("arms") or [claim.get("arm")])[0]
    for stage in protocol.arm(arm_id).stages if not str(arm_id).startswith("base:") else []:
        if stage.steps == step:
            return _mini_steps(stage, most_checkpoints)
        if stage.checkpoint_every and step % stage.checkpoint_every == 0 and step < stage.steps:
            return min(step // stage.checkpoint_every, _mini_steps(stage, most_checkpoints))
    return step


def _loop_ranks(protocol: Protocol) -> dict[int, int]:
    """Each test recurrence the protocol reads -> its rank among them (1, 2, 4, ..., 32 -> 1, 2, 3, ..., 6): at a
    real model's shapes a sweep to 32 costs minutes a reading on this CPU; the ranks keep every sweep's order, its
    length and every claim's pairs of loops (an identity for loops that run 1, 2, ..., K already)."""
    sweeps = [getattr(arm.evaluation, "loops", None) for arm in protocol.arms]
    sweeps += [getattr(spec, "loops", None) for spec in protocol.manifests]
    read = {loop for sweep in sweeps if isinstance(sweep, list) for loop in sweep}  # "forced" reads each depth
    return {loop: rank for rank, loop in enumerate(sorted(read), start=1)}


def _on_rank_scale(ranks: dict[int, int], value: float) -> float:
    """``value`` (a training recurrence's mean or depth) on the scale of ``_loop_ranks``: a read loop is its rank,
    a value between two read loops lies as far between their ranks, one past the last scales with it; order kept,
    and an identity where the loops read run 1, 2, ..., K."""
    loops = sorted(ranks)
    if not loops or value <= loops[0]:
        return value / loops[0] if loops else value
    for low, high in zip(loops, loops[1:]):
        if value <= high:
            return ranks[low] + (value - low) / (high - low)
    return ranks[loops[-1]] * value / loops[-1]


def _ranked_recurrence(raw: dict, spec: Any, ranks: dict[int, int]) -> dict:
    """A sampled recurrence (``poisson_lognormal``) with its means and depths on the rank scale of the test
    recurrences: at a real model's shapes a step that draws 32 loops costs minutes on this CPU; a draw around
    the mean's rank still runs the sampler, its curriculum, the loops without gradient and the truncated backprop."""
    if getattr(spec, "kind", None) != "poisson_lognormal" or not ranks:
        return raw
    ranked = dict(raw)  # a YAML alias is shared between stages
    for key in ("mean", "curriculum_start"):
        ranked[key] = round(_on_rank_scale(ranks, float(getattr(spec, key))), 6)
    for key in ("backprop_depth", "backprop_start"):  # floored: a depth stays at or below a mean it was below
        ranked[key] = max(1, math.floor(_on_rank_scale(ranks, float(getattr(spec, key)))))
    return ranked


def _stand_in_questions(folder: Path, spec: Any) -> Path:
    """For a benchmark file the user has not put in place: ``STAND_IN_QUESTIONS`` questions in its schema under the
    benchmark's first ids, so that the dry run reads the manifest as the run will (their answers mean nothing)."""
    import json

    from ledger.rows.tasks.benchmarks import benchmark_ids

    file = folder / "stand-in" / f"{spec.id}.jsonl"
    file.parent.mkdir(exist_ok=True)
    lines = []
    for number, row_id in enumerate(list(benchmark_ids(spec.ids))[:STAND_IN_QUESTIONS]):
        options = {"text": ["one", "two", "three", "four"], "label": ["A", "B", "C", "D"]}
        question = f"Stand-in question {number + 1} of {spec.ids} (its file is not here yet): which?"
        lines.append(json.dumps({"id": row_id, "question": question, "choices": options, "answerKey": "B"}))
    file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return file


def _stand_in_corpus(folder: Path, spec: Any) -> Path:
    """For a token corpus the user has not put in place: one parquet shard of ``ROWS`` sequences of the manifest's
    length, of token ids below 256 (every shipped tokenizer has them), so that the dry run trains as the run will."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shard = folder / "stand-in" / spec.id / "stand-in-0.parquet"
    shard.parent.mkdir(parents=True, exist_ok=True)
    sequences = [[(7 * row + 3 * position) % 256 for position in range(spec.sequence_length)] for row in range(ROWS)]
    pq.write_table(pa.table({spec.column: pa.array(sequences, type=pa.list_(pa.int32()))}), shard)
    return shard.parent


def miniature(path: Path, protocol: Protocol, folder: Path, random_weights: bool) -> Path:
    """The protocol as the dry run runs it, written into ``folder`` with copies of its claim files: the fewest
    rows per manifest, one step per stage, documents of at most ``TOKENS`` tokens, every gate recorded (with random
    weights: at most ``SHAPED_CHECKPOINTS`` checkpoints a stage, test and sampled training recurrences by rank,
    ``_loop_ranks``, ``_ranked_recurrence``); relative
    paths made absolute, a benchmark file or token corpus not in place yet replaced by a stand-in
    (``_stand_in_questions``, ``_stand_in_corpus``). Returns its path."""
    from ledger.protocol.arms import ARM_KINDS, OBJECTIVES
    from ledger.protocol.bases import base_location
    from ledger.protocol.manifests import GENERATORS
    from ledger.rows.builder import files_to_come

    # at a real model's shapes every checkpoint reads every evaluated manifest at every loop: two show the curve
    most_checkpoints = SHAPED_CHECKPOINTS if random_weights else None
    protocol_dir = path.resolve().parent
    document = copy.deepcopy(yaml.safe_load(path.read_text(encoding="utf-8")))
    for name, base in document["bases"].items():
        if str(base["source"]).startswith(("./", "../")):
            base["source"] = base_location(protocol.bases[name], protocol_dir)
    to_come = files_to_come(protocol)
    ranks = _loop_ranks(protocol) if random_weights else {}
    for raw, spec in zip(document["manifests"], protocol.manifests, strict=True):
        raw.update(spec.fewest_rows())
        if isinstance(raw.get("loops"), list):
            raw["loops"] = [ranks.get(loop, loop) for loop in raw["loops"]]
        if spec.id in to_come:
            stand_in = _stand_in_corpus if spec.generator == "token_corpus" else _stand_in_questions
            raw["path"] = str(stand_in(folder, spec))
        elif GENERATORS[spec.generator].reads_files:
            raw["path"] = str((protocol_dir / raw["path"]).resolve())
    for raw_arm in document["arms"]:
        # an arm written with seeds is one entry here and one arm per seed in the protocol: its first replicate
        # stands for it (the replicates differ only in their seed)
        arm = (protocol.replicates_of(raw_arm["id"]) or [protocol.arm(raw_arm["id"])])[0]
        for raw_stage, stage in zip(raw_arm.get("stages") or [], arm.stages, strict=True):
            schedule = stage.optimizer.schedule
            warmed = bool(schedule and schedule.warmup_steps)
            if warmed:  # one warm-up step, then one at the full rate (the step whose first update is measured)
                raw_stage["optimizer"] = {**raw_stage["optimizer"], "schedule": {**raw_stage["optimizer"]["schedule"]}}
                raw_stage["optimizer"]["schedule"]["warmup_steps"] = 1
            raw_stage["steps"] = _mini_steps(stage, most_checkpoints)
            if isinstance(raw_stage.get("recurrence"), dict):  # training recurrences by rank, as the loops read
                raw_stage["recurrence"] = _ranked_recurrence(raw_stage["recurrence"], stage.recurrence, ranks)
            if schedule is not None and schedule.kind == "wsd":  # its decay: the last step
                raw_stage["optimizer"] = {**raw_stage["optimizer"], "schedule": {**raw_stage["optimizer"]["schedule"]}}
                raw_stage["optimizer"]["schedule"]["decay_fraction"] = 1 / raw_stage["steps"]
            raw_stage["batch_size"] = min(stage.batch_size, SHAPED_ROWS if random_weights else ROWS)
            if stage.micro_batch_size is not None:  # two micro-batches: the accumulation runs
                raw_stage["micro_batch_size"] = min(stage.micro_batch_size, raw_stage["batch_size"] // 2 or 1)
            if OBJECTIVES[stage.objective].reads_text:  # the documents cut short: every path, not the real length
                raw_stage["max_tokens"] = min(stage.max_tokens, TOKENS)
            if stage.checkpoint_every:
                raw_stage["checkpoint_every"] = 1  # each of the stage's checkpoints, one step apart
            if stage.until is not None:  # its gate read after the first step, the stage going on where it fails
                raw_stage["until"] = {**raw_stage["until"], "every": 1}
        evaluation = raw_arm["evaluation"] = dict(raw_arm.get("evaluation") or {})  # a YAML alias is shared
        if isinstance(evaluation.get("loops"), list):  # not "forced"
            evaluation["loops"] = [ranks.get(loop, loop) for loop in evaluation["loops"]]
        if random_weights and "max_new_tokens" in ARM_KINDS[arm.kind].evaluation_options:
            evaluation["max_new_tokens"] = min(arm.evaluation.max_new_tokens, GENERATED)
        # one row a depth timed; none with random weights (three batch-1 calls a depth at a real model's shapes,
        # which the reading's own batch costs a third of, timing weights that mean nothing)
        timed = 0 if random_weights else 1
        evaluation["latency_sample_per_depth"] = min(arm.evaluation.latency_sample_per_depth, timed)
        if "max_tokens" in evaluation:
            evaluation["max_tokens"] = min(arm.evaluation.max_tokens, TOKENS)
    for gate in document.get("gates") or []:
        gate["action"] = "flag"  # random weights fail every gate: each is read and recorded, none stops an arm
    (folder / "protocols").mkdir()
    (folder / "claims").mkdir()
    claims: list[str] = []
    for relative in protocol.claims:
        source = (protocol_dir / relative).resolve()
        copy_name = f"{len(claims)}-{source.name}"
        claim_file = yaml.safe_load(source.read_text(encoding="utf-8"))
        for claim in claim_file.get("claims") or []:
            if claim.get("at_step") is not None:
                claim["at_step"] = _mini_step(protocol, claim, int(claim["at_step"]), most_checkpoints)
            if random_weights and claim.get("statistic") == "at_equal_flops":
                # two steps a stage seldom meet at one FLOPs budget (a flat mean of 32 against a curriculum from 1):
                # the claim is read without a tolerance, alone, so that its family is judged without it
                claim.pop("flops_tolerance", None)
                declared = (claim_file.get("families") or {}).get(claim.pop("family", None))
                if declared and claim["id"] in declared.get("members", []):
                    declared["members"].remove(claim["id"])
            if "loop" in claim:
                claim["loop"] = ranks.get(claim["loop"], claim["loop"])
            if isinstance(claim.get("loops"), list):
                claim["loops"] = [ranks.get(loop, loop) for loop in claim["loops"]]
        (folder / "claims" / copy_name).write_text(yaml.safe_dump(claim_file, sort_keys=False), encoding="utf-8")
        claims.append(f"../claims/{copy_name}")
    document["claims"] = claims
    small = folder / "protocols" / path.name
    small.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return small


def dry_run(
    path: Path, *, progress: Any = None, random_weights: bool = False, memory_limit_gib: float | None = None
) -> DryRun:
    """The protocol at ``path`` run on its miniature in a throwaway ledger; ``NoBase`` for a base it cannot build,
    ``DryRunFailed`` for a claim the run cannot judge, else whatever the code raises. With random weights, an
    arm's stage steps only a part of its tensors where all would pass ``memory_limit_gib`` (``narrow_to_fit``)."""
    from ledger.protocol.check import check_protocol_file
    from ledger.run.rehearsal import Rehearsal
    from ledger.run.runner import Runner

    path = Path(path)
    protocol = check_protocol_file(path).protocol
    _check_bases(protocol, path.resolve().parent, random_weights)
    done = DryRun()
    bases: dict[str, tuple[Any, Any]] = {}
    if random_weights:
        bases, done.lines = _shaped_bases(protocol, path.resolve().parent)
    shaped = set(bases)
    from ledger.rows.builder import files_to_come

    for name, file in files_to_come(protocol).items():
        corpus = protocol.manifest(name).generator == "token_corpus"
        stand_in = (
            f"{ROWS} stand-in sequences" if corpus else f"{STAND_IN_QUESTIONS} stand-in questions under its first ids"
        )
        done.lines.append(f"manifest {name}: {file} is not here yet: {stand_in}")
    with tempfile.TemporaryDirectory(prefix="ledger-dry-run-") as scratch:
        folder = Path(scratch)
        small = miniature(path, protocol, folder, random_weights)
        narrow = partial(narrow_to_fit, limit_gib=memory_limit_gib) if random_weights else None
        rehearsal = Rehearsal(bases, registration_rules=False, narrow=narrow, progress=progress)
        runner = Runner(
            small,
            db=f"sqlite:///{folder / 'ledger.db'}",
            out=folder / "run",
            resume=False,
            arms=None,
            progress=False,
            rehearsal=rehearsal,
        )
        try:
            result = runner.run()
        finally:
            bases.clear()
            _release_memory()
        assert result is not None  # one process: the run is its own main rank
        log = (folder / "run" / "run.log").read_text(encoding="utf-8") if (folder / "run" / "run.log").is_file() else ""
    from ledger.protocol.bases import base_location
    from ledger.run.bases import weights_sha256

    for name, (_, _, files) in runner.loaded.items():  # the bases the run loaded itself: where from, hashed as recorded
        if name not in shaped:
            sha = weights_sha256(files)
            where = base_location(protocol.bases[name], path.resolve().parent)
            done.lines.insert(
                0, f"base {name}: {where}, " + (f"weights {sha[:12]}" if sha else "built-in, seeded weights")
            )
    said = ("steps a part:", "first update:")  # what each stage's step did, as the run logged it
    done.lines += [line.split(" INFO ", 1)[-1] for line in log.splitlines() if any(what in line for what in said)]
    for outcome in result.arms:
        stages = ", ".join(f"{gate['gate']} {'passed' if gate['passed'] else 'failed'}" for gate in outcome.gates)
        done.lines.append(f"{outcome.arm}: {outcome.status}" + (f" (gates: {stages})" if stages else ""))
    unjudged = []
    for verdict in result.claims:
        done.claims[verdict.claim_id] = verdict.outcome
        if random_weights and (verdict.figures.get("flops_curves_apart") or verdict.figures.get("no_flops_curve")):
            done.lines.append(f"{verdict.claim_id}: not at equal FLOPs in the miniature ({verdict.reason})")
        elif verdict.outcome == "unverifiable" and verdict.figures.get("preconditions_met") is not False:
            unjudged.append(f"{verdict.claim_id}: {verdict.reason}")
    if result.claims_waiting_for or unjudged:
        waiting = f"arm(s) {', '.join(result.claims_waiting_for)} did not finish" if result.claims_waiting_for else ""
        raise DryRunFailed(f"the run cannot judge claim {unjudged[0]}" if unjudged else waiting)
    return done
