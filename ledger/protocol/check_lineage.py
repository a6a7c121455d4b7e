"""`ledger check` on what reads past the final checkpoint or the forced depth: exit rules (an evaluation's
``exit_rules`` and the ``adaptive_depth`` claims on them), claims over every checkpoint of an arm (``keeps_all``,
``checkpoint_trend``) and paired claims ``at_step``. Each function returns its problems, located; ``check.py``
calls them."""

from __future__ import annotations

from typing import Any

from ledger.protocol.arms import ARM_KINDS, OBJECTIVES
from ledger.protocol.common import Problem
from ledger.protocol.depth_choice import declared_exit
from ledger.protocol.protocol import Protocol


def _read_at_step(protocol: Protocol, arm_id: str, manifest: str, step: int) -> bool:
    """Whether exactly one of an arm's checkpoints ends at ``step`` of its stage and is read on ``manifest`` (a
    stage's last step read by its gates or, for the last stage, the evaluation; a checkpoint_every step read by
    the evaluation): two stages with a checkpoint at the same step would leave the claim's reading ambiguous."""
    if arm_id.startswith("base:"):
        return False
    arm = protocol.arm(arm_id)
    gates = {gate.id: gate.manifest for gate in protocol.gates}
    evaluated = manifest in arm.evaluation.manifests
    found = 0
    for i, stage in enumerate(arm.stages):
        read_at_end = any(gates.get(name) == manifest for name in stage.gates) or (
            evaluated and i == len(arm.stages) - 1
        )
        found += stage.steps == step and read_at_end
        every = stage.checkpoint_every
        found += bool(evaluated and every and step % every == 0 and step < stage.steps)
    return found == 1


def _checkpoint_reads(protocol: Protocol, arm_id: str) -> list[set[str]]:
    """The manifests each of an arm's checkpoints is read on, one set per checkpoint: a stage's by its gates (the
    last stage's with the evaluation's too), and each ``checkpoint_every`` checkpoint's by the evaluation."""
    arm = protocol.arm(arm_id)
    gates = {gate.id: gate.manifest for gate in protocol.gates}
    evaluated = set(arm.evaluation.manifests)
    reads = [{gates[name] for name in stage.gates if name in gates} for stage in arm.stages] or [set()]
    reads[-1] |= evaluated
    for stage in arm.stages:
        if stage.checkpoint_every:
            reads += [set(evaluated) for _ in range((stage.steps - 1) // stage.checkpoint_every)]
    return reads


def exit_rule_problems(protocol: Protocol, arm: Any, at: tuple[Any, ...]) -> list[Problem]:
    """Exit rules choose among loops 1..K: the evaluation reads every one of them, past every row's depth."""
    problems: list[Problem] = []
    rules = arm.evaluation.exit_rules
    if not rules:
        return problems
    where = (*at, "evaluation", "exit_rules")
    loops = arm.evaluation.loops
    if loops == "forced" or sorted(loops) != list(range(1, max(loops) + 1)):
        problems.append((where, "exit rules choose among loops 1..K: give evaluation.loops as every loop 1..K"))
        return problems
    labels = [rule.label() for rule in rules]
    if len(set(labels)) != len(labels):
        problems.append((where, "a rule is declared twice at the same threshold"))
    for manifest_id in arm.evaluation.manifests:
        depths = getattr(protocol.manifest(manifest_id), "depths", None)
        if depths is not None and depths[1] >= max(loops):
            # a rule that never fires stops at the last loop: at the deepest rows' own depth it would count as right
            problems.append(
                (
                    (*at, "evaluation", "loops"),
                    f"exit rules are compared with forced depth: loops must go past depth {depths[1]} of "
                    f"{manifest_id!r} (to {depths[1] + 1} or more)",
                )
            )
    if any(rule.rule == "halting" for rule in rules):
        head = arm.halting()
        if head is None:
            problems.append((where, f"arm {arm.id} has no halting head: the halting rule reads one"))
        elif max(loops) > head.max_loops:
            problems.append((where, f"the halting head is trained over loops 1-{head.max_loops}: read it there"))
        elif not any(OBJECTIVES[stage.objective].trains_halting_head for stage in arm.stages):
            problems.append((where, f"no stage of arm {arm.id} trains its halting head (halting_* objectives)"))
    return problems


def checkpoint_claim_problems(protocol: Protocol, claim: Any, at: tuple[Any, ...]) -> list[Problem]:
    """A claim over every checkpoint of an arm (``keeps_all``, ``checkpoint_trend``): what its checkpoints read."""
    problems: list[Problem] = []
    per_checkpoint = _checkpoint_reads(protocol, claim.arm)
    read = set().union(*per_checkpoint)
    if not hasattr(claim, "conditions"):  # a trend: one manifest, at two checkpoints or more
        if claim.manifest not in read:
            problems.append(((*at, "manifest"), f"arm {claim.arm!r} never reads {claim.manifest!r}"))
        elif sum(claim.manifest in one for one in per_checkpoint) < 2:
            problems.append((at, f"arm {claim.arm!r} records one checkpoint: a trend needs checkpoint_every"))
        return problems
    wanted = {condition.manifest for condition in claim.conditions}
    if wanted <= read and not any(wanted <= one for one in per_checkpoint):
        problems.append(
            (
                (*at, "conditions"),
                f"no checkpoint of arm {claim.arm!r} is read on all of {sorted(wanted)}: read them in the "
                "same stage's gates (or the evaluation)",
            )
        )
    for c, condition in enumerate(claim.conditions):
        if condition.manifest not in read:
            problems.append(
                (
                    (*at, "conditions", c, "manifest"),
                    f"arm {claim.arm!r} never reads {condition.manifest!r} (in a gate of its stages or its evaluation)",
                )
            )
        elif condition.measure == "min_per_depth" and not hasattr(protocol.manifest(condition.manifest), "depths"):
            problems.append(((*at, "conditions", c, "measure"), f"{condition.manifest!r} has no depths"))
    return problems


def exit_claim_problems(
    protocol: Protocol, claim: Any, at: tuple[Any, ...], by_loop: bool
) -> tuple[list[Problem], bool]:
    """An ``adaptive_depth`` claim: its arm loops and is read under the claim's rule. Also says whether the claim
    is past checking further (not chains, or no loops to stop), where the common checks would only add noise."""
    problems: list[Problem] = []
    if not by_loop:
        problems.append(((*at, "manifest"), f"exit rules choose among loops of chains: {claim.manifest!r}"))
        return problems, True
    arm_spec = protocol.arm(claim.arm) if not claim.arm.startswith("base:") else None
    if arm_spec is None or "exit_rules" not in ARM_KINDS[arm_spec.kind].evaluation_options:
        kind = "" if arm_spec is None else f"{arm_spec.kind} "
        problems.append(((*at, "arm"), f"a base or {kind or 'one-pass '}arm runs no loops to stop: {claim.arm!r}"))
        return problems, True
    if not declared_exit(arm_spec.evaluation, claim):
        problems.append(
            (
                (*at, "rule"),
                f"arm {claim.arm!r} is not read under exit rule {claim.exit_rule().label()}: declare it in "
                "its evaluation.exit_rules",
            )
        )
    return problems, False


def at_step_problems(protocol: Protocol, claim: Any, at: tuple[Any, ...]) -> list[Problem]:
    """Each arm of a paired claim ``at_step`` records exactly one checkpoint at that step, read on its manifest."""
    problems: list[Problem] = []
    step = claim.at_step
    for arm_id in claim.arms:
        if not _read_at_step(protocol, arm_id, claim.manifest, step):
            problems.append(
                (
                    (*at, "at_step"),
                    f"arm {arm_id!r} records no single checkpoint at step {step} read on {claim.manifest!r} "
                    "(a stage's last step read by its gates or the evaluation, or a multiple of a stage's "
                    "checkpoint_every with the manifest in its evaluation; one stage only)",
                )
            )
    return problems
