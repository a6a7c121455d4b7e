"""One stage of an arm: train, checkpoint (with the stage's training record and FLOPs), gates.

A collaborator of ``Runner`` (``ledger/run/runner.py``, ``runner.training``). A stage with ``checkpoint_every`` also records a
checkpoint every that many steps, each read on the arm's evaluation manifests: the training curve
that equal-FLOPs claims interpolate over. Every checkpoint's meta holds what its steps cost: per step
the iterations drawn, the iterations with gradient and the tokens; their FLOPs by design M's rule
(``arms.model.flops``), and ``flops_total``, the FLOPs of the whole lineage from the base (the parent's
total plus this span's). Training is seeded by the step, so a stage re-run after a crash reproduces
its intermediate checkpoints byte for byte: they are found recorded, not recorded twice. A stage with
``until`` reads one of its gates every ``until.every`` steps and ends at the first pass (its ``steps`` the cap); the
checkpoint's meta ``until`` keeps every reading, so the step it stopped at is in the record.
"""

from __future__ import annotations

import logging
from typing import Any

from ledger.run.records import RunRecords
from ledger.run.run_context import RunContext
from ledger.run.stage_gates import StageGates

log = logging.getLogger("ledger.run")


def training_record(records: dict[int, dict], steps: range) -> dict[str, Any]:
    """What the steps of one checkpoint's span cost (empty for stages that keep no step record)."""
    span = [records[step] for step in steps if step in records]
    if not span:
        return {}
    flops = sum(record["flops"] for record in span)
    return {
        "recurrences": [record["loops"] for record in span],
        "grad_recurrences": [record["grad_loops"] for record in span],
        "step_tokens": [record["tokens"] for record in span],
        "tokens": sum(record["tokens"] for record in span),
        "flops": flops,
        "mean_recurrence": sum(record["loops"] for record in span) / len(span),
        "nominal_mean_recurrence": sum(record["mean"] for record in span) / len(span),
    }


class StageTraining:
    """A stage trained: its checkpoints (every ``checkpoint_every`` steps too) and their training records."""

    def __init__(self, run: RunContext, records: RunRecords, gates: StageGates):
        self.run = run
        self.records = records
        self.gates = gates

    def stage_inputs(self, arm, stage) -> tuple[Any, tuple]:
        """The rows a stage trains on (a list, or a ``Mixture`` of pools) and the seed parts of its draws
        (the same on every rank)."""
        seed_parts = (self.run.protocol.seed, arm.id, stage.id)
        if not stage.mixture:
            return self._pool(stage.manifest), seed_parts
        from arms.runtime import Mixture

        pools = tuple(self._pool(name) for name in stage.mixture)
        return Mixture(pools, tuple(float(weight) for weight in stage.mixture.values())), seed_parts

    def _pool(self, manifest_id: str):
        """A manifest's rows as a stage trains on them (a token corpus: its shards' sequences)."""
        from ledger.protocol.manifests import GENERATORS

        spec, rows = self.run.protocol.manifest(manifest_id), self.run.manifests[manifest_id].rows
        if GENERATORS[spec.generator].training_pool is None:
            return list(rows)
        return GENERATORS.resolve(spec.generator, "training_pool")(spec, rows, self.run.protocol.folder)

    def _flops_before(self, parent: str) -> float:
        return float(self.run.store.checkpoint_meta([parent]).get(parent, {}).get("flops_total", 0.0))

    def _meta(
        self, arm, stage, runtime, losses: list[float], steps: range, parent: str, until: list[dict] | None = None
    ) -> dict[str, Any]:
        record = training_record(runtime.step_records, steps)
        meta: dict[str, Any] = {
            "objective": stage.objective,
            "steps": len(steps),
            "step_range": [steps.start, steps.stop],
            "losses": losses[steps.start : steps.stop],  # per step (the mean over the ranks of a data-parallel run)
            "ranks": self.run.world.size,
            **record,
            **self.records.device_info(arm.id),
        }
        if record:
            meta["flops_total"] = self._flops_before(parent) + record["flops"]
        if until is not None:  # a stage trained until its gate passed: every reading of it, and where it stopped
            meta["until"] = {"gate": stage.until.gate, "checks": until, "reached": any(r["passed"] for r in until)}
        return meta

    def train(self, runtime, arm, stage, run_id: str, parent: str):
        from arms.runtime import TrainingDiverged

        rows, seed_parts = self.stage_inputs(arm, stage)
        log.info("arm %s stage %s: %s x %d steps", arm.id, stage.id, stage.objective, stage.steps)
        diverged, failed_gate = None, "finite_loss"
        losses: list[float] = []
        span: dict[str, Any] = {"start": 0, "parent": parent}

        def stepped(step: int, loss: float) -> None:
            losses.append(loss)
            advance(1, loss)

        def intermediate(step: int) -> None:
            """A checkpoint after ``step`` steps of the stage, read on the arm's evaluation manifests."""
            steps = range(span["start"], step)
            written = runtime.save(
                self.run.objects.temporary(f"{arm.id}-{stage.id}@{step}.safetensors"),
                {"protocol": self.run.sha, "arm": arm.id, "stage": f"{stage.id}@{step}", "parent": span["parent"]},
            )
            sha, path = self.run.objects.put(written)
            meta = self._meta(arm, stage, runtime, losses, steps, span["parent"])
            self.run.store.add_checkpoint(
                sha256=sha,
                path=path,
                arm=arm.id,
                status=self.run.status_ok,
                parent_sha256=span["parent"],
                run_id=run_id,
                stage=f"{stage.id}@{step}",
                meta=meta,
            )
            self.run.evaluate_checkpoint(runtime, arm, run_id, sha)
            log.info("arm %s stage %s: checkpoint %s after %d steps", arm.id, stage.id, sha, step)
            span.update(start=step, parent=sha)

        readings_until: list[dict] | None = [] if stage.until is not None else None
        passed_at: dict[int, dict] = {}  # step -> the stopping gate's passing verdict: the stage's own, not read twice

        def until(step: int) -> bool:
            """The stage's stopping gate read at ``step``: True once it passes."""
            verdict = self.gates.read_and_judge_one(runtime, arm, stage.until.gate)
            assert readings_until is not None
            readings_until.append({"step": step, "value": verdict.get("value"), "passed": bool(verdict["passed"])})
            if verdict["passed"]:
                passed_at[step] = verdict
            log.info(
                "arm %s stage %s: step %d: gate %s %s (%s)",
                arm.id,
                stage.id,
                step,
                stage.until.gate,
                "passed: the stage ends here" if verdict["passed"] else "not yet passed",
                (verdict.get("detail") or {}).get("summary", verdict.get("value")),
            )
            return bool(verdict["passed"])

        self.run.world.tell(("train", stage.id))
        narrowed = self.run.rehearsal.narrow(runtime) if self.run.rehearsal.narrow else None
        if narrowed:  # a dry run's arm larger than this machine: a part of its tensors stepped, all else as it is
            log.info("arm %s stage %s: steps a part: %s", arm.id, stage.id, narrowed)
        with self.run.bar(f"{arm.id} {stage.id}", stage.steps, show_loss=True) as advance:
            try:
                runtime.train_stage(
                    stage,
                    rows,
                    seed_parts,
                    progress=stepped,
                    world=self.run.world,
                    checkpoint=intermediate if stage.checkpoint_every else None,
                    until=until if stage.until is not None else None,
                )
                log.info("arm %s stage %s: first update: %s", arm.id, stage.id, runtime.first_update.summary())
            except TrainingDiverged as exc:
                diverged, failed_gate = str(exc), exc.gate
        parent = str(span["parent"])
        # written to a temporary name, then moved to its content name (objects/sha256/ab/...)
        written = runtime.save(
            self.run.objects.temporary(f"{arm.id}-{stage.id}.safetensors"),
            {"protocol": self.run.sha, "arm": arm.id, "stage": stage.id, "parent": parent},
        )
        stopped = passed_at.get(len(losses))  # the model the stopping gate passed on is the stage's last
        gates = self.gates.read_and_judge(runtime, arm, stage, {stage.until.gate: stopped} if stopped else None)
        if diverged:
            gates.append(
                {
                    "gate": f"{stage.id}:{failed_gate}",
                    "passed": False,
                    "action": "stop",
                    "metric": "loss" if failed_gate == "finite_loss" else "elements moved",
                    "detail": {"summary": diverged},
                }
            )
        failed = any(not g["passed"] and g["action"] == "stop" for g in gates)
        sha, path = self.run.objects.put(written)
        sha = self.run.store.add_checkpoint(
            sha256=sha,
            path=path,
            arm=arm.id,
            status="failed" if failed else self.run.status_ok,
            parent_sha256=parent,
            run_id=run_id,
            stage=stage.id,
            gate_results=[{k: v for k, v in g.items() if k != "readings"} for g in gates],
            meta=self._meta(
                arm, stage, runtime, losses, range(int(span["start"]), len(losses)), parent, readings_until
            ),
        )
        self.gates.write_evidence(runtime, arm, stage, sha, run_id, computed=gates)
        log.info(
            "arm %s stage %s: checkpoint %s (%s)", arm.id, stage.id, sha, "failed" if failed else self.run.status_ok
        )
        return sha, gates
