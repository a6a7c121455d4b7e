"""``ledger status P``: where each arm of a protocol stands, read from the ledger and, where ``ledger run
--executor slurm`` submitted it, from the scheduler. Nothing is written.

From the ledger: the stages an arm has recorded a checkpoint for, whether its evaluation evidence is in (then it
has finished), and a hard stop (a checkpoint that failed a stop gate, its own or one it continues from). From
the scheduler (``OUT/slurm/jobs.json`` names each arm's job): queued (with Slurm's reason), running (the stage it
is at: the first without a checkpoint, and the last step its log shows), or ended without finishing: failed,
with the scheduler's state and the last line of the job's log.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.run.arm_progress import evaluated, stopped_by_gate
from ledger.run.slurm import FAILED_KIND, JOBS_FILE, last_line, scheduler_states

ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "DEADLINE",
         "BOOT_FAIL"}  # fmt: skip
ACTIVE = {"RUNNING", "COMPLETING", "CONFIGURING", "STAGE_OUT", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING"}


@dataclass
class ArmState:
    arm: str
    state: str  # not started, queued, running, finished, stopped, failed, partial
    detail: str
    job: str | None = None


def jobs_of(out_dir: Path) -> dict[str, Any] | None:
    """What ``--executor slurm`` submitted for this output folder, if it did."""
    file = out_dir / "slurm" / JOBS_FILE
    return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else None


def arm_states(store: Any, protocol: Any, sha: str, out_dir: Path) -> tuple[list[ArmState], ArmState | None]:
    """Each arm's state, and the judging job's (None where nothing was submitted)."""
    jobs = jobs_of(out_dir)
    job_of = {arm: job for job in (jobs or {}).get("jobs", []) for arm in job["arms"]}
    if jobs is not None and jobs.get("protocol_sha256") != sha:
        job_of = {}  # jobs of another version of the protocol
    ids = [job["job_id"] for job in job_of.values()]
    judge = (jobs or {}).get("judge") if job_of else None
    scheduler = scheduler_states(ids + ([judge["job_id"]] if judge else []))
    log = _log_lines(out_dir / "run.log")
    failures = {run["arm"]: run["note"] for run in store.rows_of("runs", protocol_sha256=sha, kind=FAILED_KIND)}
    states = []
    for arm in protocol.arms:
        run_id = f"{sha[:12]}:{arm.id}"
        recorded = store.checkpoints_of_run(run_id)
        stages = [stage.id for stage in arm.stages]
        done = [c.stage for c in recorded]
        job = job_of.get(arm.id)
        stopped = stopped_by_gate(store, protocol, sha, arm.id)
        job_id = job["job_id"] if job else None
        found = scheduler.get(job_id) if job_id else None
        active = found is not None and (found[0] == "PENDING" or found[0] in ACTIVE)
        if stopped is not None:
            state = ArmState(arm.id, "stopped", stopped, job_id)
        elif evaluated(store, sha, arm):
            state = ArmState(arm.id, "finished", f"stages {', '.join(done) or '-'} recorded; evaluated", job_id)
        elif arm.id in failures and not active:  # a requeued job running again is running, not failed
            recorded_stages = f"stages {', '.join(done)} recorded" if done else "no stage recorded"
            state = ArmState(arm.id, "failed", f"{recorded_stages}; recorded in the ledger: {failures[arm.id]}", job_id)
        elif job is not None:
            state = _from_scheduler(arm.id, job, found, stages, done, log)
        elif done:
            state = ArmState(arm.id, "partial", f"stages {', '.join(done)} recorded; not evaluated")
        else:
            state = ArmState(arm.id, "not started", "nothing recorded")
        states.append(state)
    judging = None
    if judge:
        found = scheduler.get(judge["job_id"])
        scheduled = (found or ("unknown", ""))[0]
        named = {"PENDING": "queued", "COMPLETED": "finished"}.get(scheduled, scheduled.lower())
        judging = ArmState("(judging)", named, _reason(found, Path(judge["log"]), out_dir), judge["job_id"])
    return states, judging


def _from_scheduler(arm: str, job: dict, found, stages: list[str], done: list[str], log: list[str]) -> ArmState:
    job_id = job["job_id"]
    recorded = f"stages {', '.join(done)} recorded" if done else "no stage recorded"
    if found is None:
        return ArmState(arm, "failed", f"{recorded}; the scheduler no longer knows job {job_id} (see {job['log']})",
                        job_id)  # fmt: skip
    state, reason = found
    if state == "PENDING":
        return ArmState(arm, "queued", f"{recorded}; waiting ({reason})", job_id)
    if state in ACTIVE:
        at = next((stage for stage in stages if stage not in done), stages[-1])
        step = _last_step(log, arm, at)
        where = f"at stage {at}" + (f", step {step}" if step else "") if at not in done else "evaluating"
        return ArmState(arm, "running", f"{recorded}; {where}", job_id)
    if state == "COMPLETED":  # the job ended well but the arm has no evaluation: its group stopped before it
        return ArmState(arm, "failed", f"{recorded}; job {job_id} completed without evaluating it", job_id)
    return ArmState(arm, "failed", f"{recorded}; job {job_id} {state}: {last_line(Path(job['log']))}", job_id)


def _reason(found, log: Path, out_dir: Path) -> str:
    if found is None:
        return "not known to the scheduler"
    state, reason = found
    if state == "PENDING":
        return f"waiting ({reason})"
    if state == "COMPLETED":
        return f"claims judged where their arms finished; the report: {out_dir / 'report.html'}"
    if state in ENDED:
        return last_line(log)
    return "judging the claims"


def _log_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []


def _last_step(log: list[str], arm: str, stage: str) -> str | None:
    pattern = re.compile(rf" {re.escape(arm)} {re.escape(stage)} step (\d+/\d+)")
    for line in reversed(log):
        found = pattern.search(line)
        if found:
            return found.group(1)
    return None
