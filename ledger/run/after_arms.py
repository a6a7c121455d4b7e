"""After the arms: the gates between two arms, the arms' summaries, and the preregistered claims.

Functions of the ``Runner`` (``ledger/run/runner.py``) that read what its arms recorded in the ledger.
"""

from __future__ import annotations

from typing import Any

from ledger.protocol.gates import GATE_KINDS
from ledger.protocol.manifests import GENERATORS


def depth_gates(runner: Any, outcomes: list) -> None:
    """The gates judged after the arms (between two arms' final checkpoints), recorded once."""
    from ledger.judge.gates import GateInputs
    from ledger.store.evidence import StoreEvidence

    evidence = StoreEvidence(runner.store, (runner.sha,))
    finals = {o.arm: o.checkpoints[-1] for o in outcomes if o.status == "complete" and o.checkpoints}
    gates: list[Any] = list(runner.protocol.gates)  # the gates judged after the arms name two of them
    for gate in gates:
        if GATE_KINDS[gate.kind].after != "arms" or gate.arm not in finals or gate.versus not in finals:
            continue
        inputs = GateInputs(
            arm_outcomes=evidence.outcomes(gate.arm, gate.manifest, None) or {},
            versus_outcomes=evidence.outcomes(gate.versus, gate.manifest, None) or {},
        )
        verdict = GATE_KINDS.implementation(gate.kind)(gate, inputs)
        checkpoint = finals[gate.arm]
        if not any(recorded.gate == gate.id for recorded in runner.store.gate_results([checkpoint])):
            runner.store.add_gate_result(
                checkpoint,
                gate.id,
                verdict["passed"],
                value=verdict.get("value"),
                metric=verdict.get("metric"),
                action=gate.action,
                detail=verdict["detail"],
            )
        for outcome in outcomes:
            if outcome.arm == gate.arm:
                outcome.gates.append({"gate": gate.id, "action": gate.action, **verdict})


def summary_loop(runner: Any, arm_id: str) -> int:
    """The test recurrence a sweep is summarised at: the arm's largest evaluation loop (1 for a one-pass arm)."""
    return max(runner.protocol.arm(arm_id).test_recurrences())


def summarise(runner: Any, outcome: Any, run_id: str, manifest_id: str, checkpoint: str) -> None:
    """An arm's line of the run summary for one manifest: accuracy (and tail), or a sweep at its largest loop."""
    spec: Any = runner.protocol.manifest(manifest_id)
    reading = GENERATORS[spec.generator].reading
    if reading not in ("answer", "loss"):
        outcome.accuracy[manifest_id], outcome.tail[manifest_id] = accuracy(runner, run_id, manifest_id, checkpoint)
        return
    loop = summary_loop(runner, outcome.arm)
    sha = runner.manifest_sha[manifest_id]
    if reading == "loss":
        from ledger.judge.language_claims import nats_per_token

        loss = nats_per_token(
            runner.store.measured_losses(
                sha, arm=outcome.arm, checkpoint_sha256=checkpoint, loop=loop, protocol_sha256s=[runner.sha]
            )
        )
        if loss is not None:
            outcome.losses[f"{manifest_id}@{loop}"] = loss
        return
    readings = runner.store.readings(sha, run_id=run_id, checkpoint_sha256=checkpoint, loop=loop)
    outcome.accuracy[f"{manifest_id}@{loop}"] = (sum(1 for r in readings if r.correct), len(readings))


def accuracy(runner: Any, run_id: str, manifest_id: str, checkpoint: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """(correct, n) of an arm's final readings on a manifest, overall and in the tail (top 4 depths)."""
    final = runner.store.final_readings(runner.manifest_sha[manifest_id], run_id=run_id, checkpoint_sha256=checkpoint)
    spec: Any = runner.protocol.manifest(manifest_id)
    tail_from = spec.depths[1] - 3 if GENERATORS[spec.generator].reading == "by_loop" else None
    tail = [r for r in final if tail_from is not None and r.depth >= tail_from]
    count = lambda subset: (sum(1 for r in subset if r.correct), len(subset))
    return count(final), count(tail)


def stopped_lineage(runner: Any, arm_id: str | None) -> tuple[str, str] | None:
    """(arm, its failed checkpoint) where ``arm_id`` or an arm it continues from (``init_from``, followed to the
    start) ended in a hard stop in this ledger; None otherwise. Such an arm is finished: it cannot run."""
    seen: set[str] = set()
    while arm_id is not None and arm_id not in seen:
        seen.add(arm_id)
        last = runner.last_checkpoint(runner.records.run_id_of(arm_id))
        recorded = runner.store.checkpoint(last) if last is not None else None
        if recorded is not None and recorded.status == "failed":
            return arm_id, recorded.sha256
        arm_id = runner.protocol.arm(arm_id).init_from
    return None


def unfinished_arms(runner: Any) -> list[str]:
    """Arms with neither their evaluation evidence nor a hard stop recorded in this ledger (an arm that continues
    from a hard-stopped one never runs: it is finished too)."""

    unfinished = []
    for arm in runner.protocol.arms:
        run_id = runner.records.run_id_of(arm.id)
        if stopped_lineage(runner, arm.id) is not None:
            continue  # a hard stop, or a continuation of one, is finished: its claims are judged without it
        evaluated = all(
            runner.store.has_evidence(run_id, runner.manifest_sha[manifest_id])
            for manifest_id in arm.evaluation.manifests
        )
        if not evaluated:
            unfinished.append(arm.id)
    return unfinished


def judge_claims(runner: Any) -> list:
    """Judge the preregistered claims and record their first outcomes (verify itself only reads)."""
    from ledger.audit.recording import record_outcomes
    from ledger.audit.verify import verify

    paths = [(runner.protocol_dir / relative).resolve() for relative in runner.protocol.claims]
    if not paths:
        return []
    # the run's own artifact store: a run with --artifacts DIR keeps its checkpoints there, not beside the ledger
    report = verify(runner.store, paths, artifacts=[runner.artifacts] if runner.artifacts else None)
    record_outcomes(runner.store, report)
    return report.verdicts
