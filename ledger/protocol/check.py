"""Complete validation: refuse every protocol the code cannot execute exactly as written.

The schema (``load_protocol``) already refuses what is malformed. This adds what only the
registries and the bases know: kinds declared but not runnable yet, combinations a kind
does not support (an adapter budget on a concat bridge), options that nothing reads,
base metadata that disagrees with the base itself, surgery outside the base's layers,
gates that cannot judge what they are attached to, and claims whose statistic cannot be
computed from the evidence the protocol will produce. ``ledger check``, ``register`` and
``run`` call it before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.protocol.arms import ARM_KINDS, OBJECTIVES, RECURRENCES
from ledger.protocol.bases import actual_family, actual_layers
from ledger.protocol.check_lineage import (
    at_step_problems,
    checkpoint_claim_problems,
    exit_claim_problems,
    exit_rule_problems,
)
from ledger.protocol.claims import STATISTICS, ClaimFile, check_claims_against, load_claims, manifest_of
from ledger.protocol.common import Problem
from ledger.protocol.families import UnsupportedFamily, refuse_unsupported
from ledger.protocol.gates import GATE_KINDS
from ledger.protocol.loader import ProtocolError, ProtocolIssue, load_protocol, locate
from ledger.protocol.manifests import GENERATORS
from ledger.protocol.protocol import Protocol
from ledger.protocol.size_budget import size_problems
from ledger.protocol.training import PoissonLognormalRecurrence

EVALUATION_COMMON = {"manifests", "batch_size", "latency_sample_per_depth", "max_tokens"}


@dataclass(frozen=True)
class CheckedProtocol:
    """A protocol that can be executed as written, with its claim files."""

    protocol: Protocol
    path: Path
    claim_files: list[tuple[Path, ClaimFile]]


def check_protocol_file(path: str | Path) -> CheckedProtocol:
    """Load, validate and check a protocol and its claim files; raise ``ProtocolError`` with every issue."""
    path = Path(path)
    protocol = load_protocol(path)
    oversized = size_problems(protocol)
    if oversized:  # before anything is built: a protocol past the budget is refused in well under a second
        raise ProtocolError(locate(path, oversized))
    issues = locate(path, runnable_problems(protocol, path.resolve().parent))
    claim_files: list[tuple[Path, ClaimFile]] = []
    for index, relative in enumerate(protocol.claims):
        claim_path = (path.parent / relative).resolve()
        if not claim_path.is_file():
            issues += locate(path, [(("claims", index), f"claim file {relative!r} not found (looked at {claim_path})")])
            continue
        try:
            claim_file = load_claims(claim_path)
        except ProtocolError as exc:
            issues += exc.issues
            continue
        found = check_claims_against(claim_file, protocol, str(claim_path))
        if not found:
            found = locate(claim_path, claim_problems(claim_file, protocol))
        issues += found
        claim_files.append((claim_path, claim_file))
    if issues:
        raise ProtocolError(issues)
    return CheckedProtocol(protocol, path, claim_files)


# ----------------------------------------------------------------------------- the protocol


def runnable_problems(protocol: Protocol, protocol_dir: Path) -> list[Problem]:
    problems: list[Problem] = []
    layers = _bases(protocol, protocol_dir, problems)
    for a, arm in enumerate(protocol.arms):
        at = ("arms", a)
        kind = ARM_KINDS[arm.kind]
        _runnable(kind, (*at, "kind"), problems)
        problems += [((*at, *where), message) for where, message in arm.part_problems(layers.get(arm.base))]
        _continuation(protocol, arm, at, problems)
        for s, stage in enumerate(arm.stages):
            _stage(protocol, arm, kind, stage, (*at, "stages", s), problems)
        formats = {OBJECTIVES[stage.objective].target_format for stage in arm.stages}
        if len(formats) > 1:
            problems.append(
                (
                    (*at, "stages"),
                    f"arm {arm.id} mixes SFT formats {sorted(map(str, formats))}: it is "
                    "read in one format, so every stage must train that one",
                )
            )
        problems += arm.evaluation_problems(protocol, at)
        problems += exit_rule_problems(protocol, arm, at)
        unread = (arm.evaluation.model_fields_set - EVALUATION_COMMON) - set(kind.evaluation_options)
        problems += [((*at, "evaluation", name), f"{arm.kind} arms do not read evaluation.{name}") for name in unread]
    _gates(protocol, problems)
    return problems


def _bases(protocol: Protocol, protocol_dir: Path, problems: list[Problem]) -> dict[str, int | None]:
    layers: dict[str, int | None] = {}
    for name, spec in protocol.bases.items():
        try:
            actual = actual_layers(spec, protocol_dir)
        except (ValueError, OSError) as exc:
            problems.append((("bases", name, "source"), f"cannot read the base's shape: {exc}"))
            actual = None
        if actual is not None and spec.num_layers is not None and actual != spec.num_layers:
            problems.append(
                (
                    ("bases", name, "num_layers"),
                    f"says {spec.num_layers} layers but the base at {spec.source} has {actual}",
                )
            )
        layers[name] = actual if actual is not None else spec.num_layers
        cut_by = [arm.id for arm in protocol.arms if arm.base == name and arm.cuts_base()]
        if cut_by:
            try:
                refuse_unsupported(actual_family(spec, protocol_dir), f"base {name} (cut by arm {cut_by[0]})")
            except UnsupportedFamily as exc:
                problems.append((("bases", name, "source"), str(exc)))
            except (ValueError, OSError):
                pass  # its shape could not be read either: said above
    return layers


def _runnable(kind: Any, at: tuple[Any, ...], problems: list[Problem]) -> None:
    refusal = kind.refusal()
    if refusal is not None:
        problems.append((at, refusal))


def _continuation(protocol: Protocol, arm: Any, at: tuple[Any, ...], problems: list[Problem]) -> None:
    """An arm continued from another arm loads its trainable tensors: they must be the same tensors."""
    if arm.init_from is None:
        return
    source = protocol.arm(arm.init_from)
    if not arm.same_tensors_as(source):
        problems.append(
            (
                (*at, "init_from"),
                f"arm {arm.id} continues from arm {source.id}, whose trainable tensors "
                "differ (continuing needs the same kind, base, surgery, bridge and budget)",
            )
        )


def _stage(protocol: Protocol, arm: Any, kind: Any, stage: Any, at: tuple[Any, ...], problems: list[Problem]) -> None:
    objective = OBJECTIVES[stage.objective]
    _runnable(objective, (*at, "objective"), problems)
    if stage.recurrence is not None:
        if "recurrence" not in kind.stage_options:
            problems.append(((*at, "recurrence"), f"{arm.kind} arms do not read a recurrence schedule"))
        else:
            _runnable(RECURRENCES[stage.recurrence.kind], (*at, "recurrence", "kind"), problems)
    if stage.mixture and not objective.reads_text:
        # a chain objective may rehearse: a mixture of chains (e.g. a new operation and the forward one)
        chains = [name for name in stage.mixture if GENERATORS[protocol.manifest(name).generator].reading == "by_loop"]
        if objective.trains_halting_head or len(chains) != len(stage.mixture):
            problems.append(
                ((*at, "mixture"), f"objective {stage.objective!r} trains on one manifest or a mixture of chains only")
            )
    if stage.checkpoint_every is not None and stage.checkpoint_every >= stage.steps:
        problems.append(((*at, "checkpoint_every"), f"checkpoint_every must be below the stage's {stage.steps} steps"))
    _text_stage(protocol, objective, stage, at, problems)
    problems += arm.stage_problems(protocol, stage, at)
    if objective.trains_halting_head:
        head = arm.halting()
        if head is None:
            problems.append(
                ((*at, "objective"), f"objective {stage.objective!r} trains a halting head: arm {arm.id} has none")
            )
        elif stage.manifest is not None:
            depths = getattr(protocol.manifest(stage.manifest), "depths", None)
            if depths is None or depths[1] > head.max_loops:
                problems.append(
                    (
                        (*at, "manifest"),
                        f"a halting stage needs rows with depths up to the head's max_loops {head.max_loops}",
                    )
                )
    if stage.anneal_fraction is not None and "anneal_fraction" not in objective.reads:
        problems.append(((*at, "anneal_fraction"), f"objective {stage.objective!r} does not read anneal_fraction"))
    groups = arm.optimizer_groups()
    for name in stage.optimizer.group_lrs:
        if name not in groups:
            problems.append(
                (
                    (*at, "optimizer", "group_lrs", name),
                    f"arm {arm.id} trains no group {name!r} (its groups: {', '.join(groups)})",
                )
            )
    for g, gate_id in enumerate(stage.gates):
        gate = next(gate for gate in protocol.gates if gate.id == gate_id)
        gate_kind = GATE_KINDS[gate.kind]
        where = (*at, "gates", g)
        if gate_kind.after != "stage":
            problems.append(
                (where, f"gate {gate_id!r} ({gate.kind}) is judged after its arms finish, not after a stage")
            )
        elif not arm.judged_by(gate_kind):
            problems.append((where, f"a {gate.kind} gate cannot judge {arm.kind} arms"))


def _text_stage(protocol: Protocol, objective: Any, stage: Any, at: tuple, problems: list[Problem]) -> None:
    """A next-token stage reads any rows as text; a chain or SFT objective cannot read text rows."""
    for manifest_id in stage.manifests():
        reading = GENERATORS[protocol.manifest(manifest_id).generator].reading
        if reading == "loss" and not objective.reads_text:
            problems.append(((*at, "manifest"), f"objective {stage.objective!r} cannot train on text rows"))
        if reading == "tokens" and not objective.reads_text:
            problems.append(((*at, "manifest"), f"objective {stage.objective!r} cannot train on token sequences"))
    sampled = isinstance(stage.recurrence, PoissonLognormalRecurrence)
    if sampled and not objective.reads_text:
        problems.append(
            ((*at, "recurrence"), f"sampled recurrence trains next-token stages only, not {stage.objective!r}")
        )


def _gates(protocol: Protocol, problems: list[Problem]) -> None:
    staged = {gate_id for arm in protocol.arms for stage in arm.stages for gate_id in stage.gates}
    for g, gate in enumerate(protocol.gates):
        kind = GATE_KINDS[gate.kind]
        generator = protocol.manifest(gate.manifest).generator
        if protocol.manifest(gate.manifest).choice_reading()["loops"] != [1]:
            problems.append((("gates", g, "manifest"), f"a gate reads {gate.manifest!r} at loop 1 alone: its loops"))
        if kind.generators and generator not in kind.generators:
            problems.append(
                (
                    ("gates", g, "manifest"),
                    f"a {gate.kind} gate reads {', '.join(kind.generators)} rows, "
                    f"not {generator} (manifest {gate.manifest!r})",
                )
            )
        if kind.after == "stage" and gate.id not in staged:
            problems.append((("gates", g), f"gate {gate.id!r} follows no stage: nothing would evaluate it"))
        if kind.after == "arms":
            for side in ("arm", "versus"):
                arm = protocol.arm(getattr(gate, side))
                if gate.manifest not in arm.evaluation.manifests:
                    problems.append((("gates", g, side), f"arm {arm.id} does not evaluate manifest {gate.manifest!r}"))


# ----------------------------------------------------------------------------- claims


def evidence_loops(protocol: Protocol, arm_id: str, manifest_id: str) -> tuple[set[int], bool] | None:
    """(the loops at which an arm's rows of a manifest will be read, whether every row has its final
    reading); None when the protocol writes no evidence of that arm on that manifest."""
    manifest: Any = protocol.manifest(manifest_id)
    if arm_id.startswith("base:"):  # the base is read on the manifests of its arms' guardrails
        name = arm_id.removeprefix("base:")
        guarded = {
            gate.manifest
            for gate in protocol.gates
            if GATE_KINDS[gate.kind].reads_base
            and any(gate.id in stage.gates for arm in protocol.arms if arm.base == name for stage in arm.stages)
        }
        return ({1}, True) if manifest_id in guarded else None
    arm = protocol.arm(arm_id)
    gated = {gate.manifest for stage in arm.stages for gate in protocol.gates if gate.id in stage.gates}
    if manifest_id not in arm.evaluation.manifests and manifest_id not in gated:
        return None
    return arm.loops_read(manifest, GENERATORS[manifest.generator].reading)


def claim_problems(claim_file: ClaimFile, protocol: Protocol) -> list[Problem]:
    problems: list[Problem] = []
    claims: list[Any] = list(claim_file.claims)  # each statistic reads its own fields
    for index, claim in enumerate(claims):
        at = ("claims", index)
        kind = STATISTICS[claim.statistic]
        _runnable(kind, (*at, "statistic"), problems)
        manifest: Any = protocol.manifest(claim.manifest)
        by_loop = GENERATORS[manifest.generator].reading == "by_loop"
        with_depths = by_loop or GENERATORS[manifest.generator].reading == "answer"  # rows that carry a depth
        if claim.rows.depths is not None and not with_depths:
            problems.append(((*at, "rows", "depths"), f"manifest {claim.manifest!r} has no depths to filter"))
        if kind.reads == "per_depth" and not by_loop:
            problems.append(
                (
                    (*at, "manifest"),
                    f"a {claim.statistic} claim needs rows with depths; {claim.manifest!r} is {manifest.generator}",
                )
            )
        if kind.reads == "gate":
            judged = any(claim.gate in stage.gates for stage in protocol.arm(claim.arm).stages) or any(
                gate.id == claim.gate and getattr(gate, "arm", None) == claim.arm for gate in protocol.gates
            )
            if not judged:
                problems.append(((*at, "gate"), f"gate {claim.gate!r} is never judged for arm {claim.arm!r}"))
            continue
        if kind.reads == "cells" and claim.cells != "active" and not claim.arm.startswith("base:"):
            loops = protocol.arm(claim.arm).evaluation.loops
            if loops == "forced" or max(loops) <= getattr(manifest, "depths", (0, 0))[0]:
                problems.append(
                    (at, f"arm {claim.arm!r} never reads a row past its depth: give evaluation.loops beyond them")
                )
        if kind.reads == "exits":  # choosing depth
            exit_problems, settled = exit_claim_problems(protocol, claim, at, by_loop)
            problems += exit_problems
            if settled:
                continue
        if kind.reads == "checkpoints":  # every checkpoint of an arm that read each condition's manifest
            problems += checkpoint_claim_problems(protocol, claim, at)
            continue
        if getattr(claim, "at_step", None) is not None:
            problems += at_step_problems(protocol, claim, at)
        if kind.reads == "training":  # the lineage of the arm's checkpoint that read the manifest
            if evidence_loops(protocol, claim.arm, claim.manifest) is None:
                problems.append((at, f"the protocol writes no evidence of arm {claim.arm!r} on {claim.manifest!r}"))
            continue
        loop = getattr(claim, "loop", None)
        each_loop = getattr(claim, "loops", None)  # a loop per arm (one arm may be read at two)
        if kind.reads in ("losses", "curve") and (GENERATORS[manifest.generator].reading == "loss") != (
            kind.reads == "losses" or claim.metric == "loss"
        ):
            problems.append(((*at, "manifest"), f"this claim's metric does not fit {manifest.generator} rows"))
        if kind.reads == "curve":
            for arm_id in claim.arms:
                if not any(stage.checkpoint_every for stage in protocol.arm(arm_id).stages):
                    problems.append((at, f"arm {arm_id!r} records no training curve: give a stage checkpoint_every"))
        arm_ids = [*getattr(claim, "arms", ()), *([claim.arm] if hasattr(claim, "arm") else [])]
        for arm_id, arm_loop in zip(arm_ids, each_loop or [loop] * len(arm_ids), strict=True):
            read_on = manifest_of(claim, arm_id)
            if read_on != claim.manifest and GENERATORS[protocol.manifest(read_on).generator].reading != "by_loop":
                problems.append(((*at, "manifests"), f"a {claim.statistic} claim needs rows with depths: {read_on!r}"))
            found = evidence_loops(protocol, arm_id, read_on)
            if found is None:
                problems.append((at, f"the protocol writes no evidence of arm {arm_id!r} on {read_on!r}"))
            elif arm_loop is None and not found[1]:
                problems.append((at, f"arm {arm_id!r} is not read at every row's final loop on {read_on!r}"))
            elif arm_loop is not None and arm_loop not in found[0]:
                problems.append(
                    (
                        (*at, "loop"),
                        f"arm {arm_id!r} is never read at loop {arm_loop} on {read_on!r} (read at {sorted(found[0])})",
                    )
                )
    return problems


def issues_of(path: str | Path) -> list[ProtocolIssue]:
    """Every issue of a protocol file (empty: it can run as written)."""
    try:
        check_protocol_file(path)
    except ProtocolError as exc:
        return exc.issues
    return []
