"""How far an arm of a registered protocol has come, read from the ledger alone: its evaluation evidence in, or a
stop gate failed on its way (``ledger status`` and the Slurm executor's failure records read both)."""

from __future__ import annotations

from typing import Any


def evaluated(store: Any, sha: str, arm: Any) -> bool:
    """The arm's evaluation evidence is in: every manifest its evaluation reads (as registered with ``sha``)."""
    manifests = {row["name"]: row["sha256"] for row in store.rows_of("manifests", protocol_sha256=sha)}
    run_id = f"{sha[:12]}:{arm.id}"
    return bool(manifests) and all(
        m in manifests and store.has_evidence(run_id, manifests[m]) for m in arm.evaluation.manifests
    )


def stopped_by_gate(store: Any, protocol: Any, sha: str, arm_id: str | None) -> str | None:
    """Where the arm, or an arm it continues from, failed a stop gate."""
    seen: set[str] = set()
    while arm_id is not None and arm_id not in seen:
        seen.add(arm_id)
        failed = [c for c in store.checkpoints_of_run(f"{sha[:12]}:{arm_id}") if c.status == "failed"]
        if failed:
            gates = sorted({g.gate for g in store.gate_results([failed[-1].sha256]) if not g.passed})
            return f"a hard stop: arm {arm_id} stage {failed[-1].stage} failed {', '.join(gates) or 'a gate'}"
        arm_id = protocol.arm(arm_id).init_from
    return None
