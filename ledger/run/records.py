"""What a run writes about itself: its runs, its evidence, the base's reference readings,
where its checkpoint files are and what device they were computed on.

A collaborator of ``Runner`` (``ledger/run/runner.py``, ``runner.records``): it reads the runner's
protocol, store, artifact store and device.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from ledger.canonical import canonical_json, sha256_hex
from ledger.checked_file import check_in_place
from ledger.run.bases import RunRefused
from ledger.run.run_context import RunContext

if TYPE_CHECKING:
    from ledger.store.lookups import RecordedCheckpoint

log = logging.getLogger("ledger.run")


class RunRecords:
    """The run's records: its runs, evidence, device record and checkpoint files."""

    def __init__(self, run: RunContext):
        self.run = run
        self._environment_said: set[str] = set()  # each difference said once per process

    def device_info(self, arm: str) -> dict:
        """Device, its name and the dtype of an arm (``base:NAME``: of that base)."""
        from arms.device import describe

        base = arm.removeprefix("base:") if arm.startswith("base:") else self.run.protocol.arm(arm).base
        spec = self.run.protocol.bases[base]
        described = describe(self.run.device, spec.dtype, spec.autocast)
        if arm in self.run.compiled_arms:
            described["compiled_block"] = True
        return described

    def artifact(self, recorded: RecordedCheckpoint) -> Path:
        """The file of a recorded checkpoint, wherever the artifact roots hold it now."""
        found = self.run.objects.locate(recorded.path, recorded.sha256)
        if found is None:
            raise RunRefused(
                f"checkpoint {recorded.sha256[:12]} is recorded but its file is in none of {self.run.objects.searched()}: "
                "pass --artifacts DIR"
            )
        # a swapped file would be trained on under the recorded hash: it is re-hashed before it is loaded
        return check_in_place(found, recorded.sha256, f"checkpoint {recorded.sha256[:12]}")

    def base_reference(self, base_name: str, manifest_id: str) -> str:
        """The base read on a guardrail manifest at loop 1 (evidence arm ``base:NAME``)."""
        from arms.device import numerics
        from arms.runtime import base_choice_readings

        model, tokenizer, base_sha = self.run.base(base_name)
        arm = f"base:{base_name}"
        run_id = self.ensure_run(arm, kind="reference")
        if not self.has_evidence(run_id, manifest_id, base_sha):
            reading = self.run.protocol.manifest(manifest_id).choice_reading()
            with numerics(self.run.device, self.run.protocol.bases[base_name].autocast):  # as the arms read it
                readings = base_choice_readings(
                    model,
                    tokenizer,
                    self.run.readers[base_name],
                    list(self.run.manifests[manifest_id].rows),
                    scoring=reading["scoring"],
                    permutations=reading["permutations"],
                )
            # every arm on this base reads it, maybe in jobs at once: the first to finish records it
            self.write_evidence(run_id, arm, manifest_id, base_sha, readings, once=True)
        return arm

    # -- runs and evidence

    def run_id_of(self, arm: str) -> str:
        return f"{self.run.sha[:12]}:{arm}"

    def ensure_run(self, arm: str, kind: str) -> str:
        from ledger.run.environment import environment_record

        run_id = self.run_id_of(arm)
        recorded = self.run.store.get("runs", run_id=run_id)
        environment = environment_record(self.run.protocol_dir, self.device_info(arm))
        if recorded is None:
            self._add_run_once(
                run_id=run_id,
                kind=kind,
                protocol_sha256=self.run.sha,
                arm=arm,
                config={"protocol": self.run.protocol.name, "out": str(self.run.out_dir)},
                environment=environment,
                rng={"protocol_seed": self.run.protocol.seed, "derivation": "sha256 of (seed, arm, stage, step)"},
            )
        else:
            self._warn_environment(run_id, json.loads(recorded["environment_json"] or "{}"), environment)
        return run_id

    def _add_run_once(self, **record) -> None:
        """Add the run, unless another process (a job of the same protocol: the bases' reference runs are
        shared) recorded it since it was looked up; the store refuses a second record inside its lock."""
        from ledger.store import ConflictError

        try:
            self.run.store.add_run(**record)
        except ConflictError:
            if self.run.store.get("runs", run_id=record["run_id"]) is None:
                raise

    def _warn_environment(self, run_id: str, recorded: dict, current: dict) -> None:
        """A resumed run whose environment moved: one warning line per difference (stderr and run.log),
        each said once per process. It continues: the checkpoints say whether the arithmetic moved."""
        from ledger.environment import environment_differences

        said = self._environment_said
        for line in environment_differences(recorded, current):
            if line in said:
                continue
            said.add(line)
            log.warning("resuming run %s, recorded in another environment: %s", run_id, line)
            sys.stderr.write(f"warning: resuming run {run_id}, recorded in another environment: {line}\n")

    def has_evidence(self, run_id: str, manifest_id: str, checkpoint: str) -> bool:
        return self.run.store.has_evidence(run_id, self.run.manifest_sha[manifest_id], checkpoint)

    def write_evidence(self, run_id, arm, manifest_id, checkpoint, readings, *, once: bool = False) -> None:
        device = self.device_info(arm)
        self.run.store.add_evidence(
            [
                {
                    "run_id": run_id,
                    "manifest_sha256": self.run.manifest_sha[manifest_id],
                    "row_id": r.row_id,
                    "arm": arm,
                    "checkpoint_sha256": checkpoint,
                    "loop": r.loop,
                    "prediction": r.prediction,
                    "correct": r.correct,
                    "score_margin": r.margin,
                    "latency_ms": r.latency_ms,
                    "tokens_generated": r.tokens_generated,
                    # where each reading was computed (a resumed run may read on another device)
                    "detail": {
                        **device,
                        **({"text": r.text} if r.text is not None else {}),
                        **(getattr(r, "detail", None) or {}),
                    },
                }
                for r in readings
            ],
            once=once,
        )


def evidence_digest(store, protocol_sha256: str) -> tuple[int, str]:
    """(rows, SHA-256) over the deterministic content of a protocol's evidence (latency excluded)."""
    rows = [asdict(content) for content in store.evidence_contents(protocol_sha256)]
    return len(rows), sha256_hex(canonical_json([[r[k] for k in sorted(r)] for r in rows]))
