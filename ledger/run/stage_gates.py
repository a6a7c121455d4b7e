"""The gates of a stage: read the gate manifests with the stage's model, judge each gate by
its kind's rule, and record the readings each verdict rests on as evidence.

A collaborator of ``Runner`` (``ledger/run/runner.py``, ``runner.gates``).
"""

from __future__ import annotations

from ledger.protocol.gates import GATE_KINDS
from ledger.run.records import RunRecords
from ledger.run.run_context import RunContext


class StageGates:
    """A stage's gates: read with the stage's model, judged, and recorded with the readings they rest on."""

    def __init__(self, run: RunContext, records: RunRecords):
        self.run = run
        self.records = records

    def read_and_judge(self, runtime, arm, stage, known: dict[str, dict] | None = None) -> list[dict]:
        """Every gate of the stage, read with the model as it stands; ``known``: gate id -> a verdict already read
        with this model (a stage that ended at its stopping gate's pass), kept rather than read again."""
        known = known or {}
        return [known.get(gate_id) or self.read_and_judge_one(runtime, arm, gate_id) for gate_id in stage.gates]

    def read_and_judge_one(self, runtime, arm, gate_id: str) -> dict:
        """One gate read with the model as it stands and judged; its readings ride along (``readings``)."""
        gate = next(g for g in self.run.protocol.gates if g.id == gate_id)
        rows = list(self.run.manifests[gate.manifest].rows)
        with self.run.bar(f"{arm.id} gate {gate.id}", len(rows)) as advance:
            readings = self.run.evaluate_rows(runtime, arm, gate.manifest, rows, progress=advance)
        return dict(self._judge(gate, arm, rows, readings), readings=(gate.manifest, readings))

    def _judge(self, gate, arm, rows, readings) -> dict:
        from ledger.judge.gates import GateInputs

        def base_correct() -> dict[str, bool]:
            reference = self.records.base_reference(arm.base, gate.manifest)
            # the base's readings by this protocol's runs only: another protocol's base on the same rows is not ours
            base_rows = self.run.store.readings(
                self.run.manifest_sha[gate.manifest], protocol_sha256s=[self.run.sha], arm=reference, loop=1
            )
            return {r.row_id: bool(r.correct) for r in base_rows}

        verdict = GATE_KINDS.implementation(gate.kind)(gate, GateInputs(rows, readings, base_correct))
        return {"gate": gate.id, "action": gate.action, **verdict}

    def write_evidence(self, runtime, arm, stage, checkpoint, run_id, computed=None) -> None:
        """The readings each gate was decided on, as evidence of that checkpoint (once per manifest)."""
        done = set()
        for gate_id in stage.gates:
            gate = next(g for g in self.run.protocol.gates if g.id == gate_id)
            if gate.manifest in done or self.records.has_evidence(run_id, gate.manifest, checkpoint):
                continue
            readings = None
            for result in computed or []:
                if result["gate"] == gate_id:
                    readings = result["readings"][1]
            if readings is None:  # resumed: re-read from the recorded checkpoint (deterministic)
                readings = self.run.evaluate_rows(
                    runtime, arm, gate.manifest, list(self.run.manifests[gate.manifest].rows)
                )
            self.records.write_evidence(run_id, arm.id, gate.manifest, checkpoint, readings)
            done.add(gate.manifest)
