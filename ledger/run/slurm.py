"""``ledger run P --executor slurm``: a protocol's arms as Slurm jobs that meet in one ledger.

The submitting process registers the protocol once, then writes and submits one batch script per ``init_from``
chain (in order, as ``--parallel`` keeps it) and one judging job that starts when
every group's job has ended (``afterany``), whatever their outcome: it judges the claims whose arms finished
and names the arms that did not, as a local run does. Each job runs ``ledger run`` itself, so what a job does
is what ``ledger run --arms GROUP --no-judge --resume`` does on one machine; the ledger (a PostgreSQL URL,
or a SQLite file on a shared disk) and the artifacts folder are all that the jobs share.

Every job is submitted with ``--requeue`` and runs with ``--resume``: a job that is preempted or requeued starts
again and continues from the last checkpoint its arms recorded, so nothing is trained or recorded twice.
With more than one GPU per job, the group runs under ``torchrun`` on the node's GPUs (data-parallel arms). A
job whose ``ledger run`` exits non-zero by itself marks its unfinished arms as failed in the ledger
(``record_failure``: a ``job-failed`` run record with the reason), which ``ledger status`` shows.

The batch scripts, the jobs' logs and ``jobs.json`` (the job ids, arms, scripts and logs, which ``ledger
status`` reads) go to ``OUT/slurm/``. The Slurm CLI is called directly (``sbatch --parsable``, ``squeue``,
``scontrol``): the jobs are command lines a user can read and resubmit, and the state is read without the
accounting database (``sacct``) that submitit's job states rely on and that many small clusters lack.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger.run.parallel import arm_chains

JOBS_FILE = "jobs.json"


class SlurmUnavailable(Exception):
    """No Slurm on this machine, or the scheduler refused a job (exit 2)."""


@dataclass
class SlurmOptions:
    """What a job asks the scheduler for; everything else a node needs comes from ``ledger run``'s options."""

    partition: str | None = None
    gpus_per_job: int = 0
    time: str | None = None
    cpus_per_job: int | None = None
    extra: list[str] = field(default_factory=list)  # further sbatch options, as given


def require_slurm() -> str:
    """The path of ``sbatch``, or one line saying Slurm is not here."""
    found = shutil.which("sbatch")
    if found is None or shutil.which("squeue") is None:
        raise SlurmUnavailable(
            "--executor slurm: no Slurm on this machine (sbatch and squeue not found on PATH); run on a cluster's "
            "login node, or without --executor"
        )
    return found


def node_command(ledger_args: list[str], gpus: int) -> list[str]:
    """``ledger run ...`` as a job runs it: under torchrun on the node's GPUs when it has more than one."""
    if gpus > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}", "-m",
                "ledger", *ledger_args]  # fmt: skip
    return [sys.executable, "-m", "ledger", *ledger_args]


def batch_script(
    name: str,
    command: list[str],
    log: Path,
    options: SlurmOptions,
    *,
    requeue: bool,
    on_failure: list[str] | None = None,
) -> str:
    """The job's script. ``on_failure``: a command run when ``command`` exits non-zero by itself (a crash, bad
    input), given ``--exit-status``, ``--job`` and ``--restart``; a job the scheduler stops (requeue, preemption,
    time limit, cancel) is signalled whole and runs nothing more."""
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}", f"#SBATCH --output={log}", "#SBATCH --open-mode=append"]
    if requeue:
        lines.append("#SBATCH --requeue")
    if options.partition:
        lines.append(f"#SBATCH --partition={options.partition}")
    if options.gpus_per_job:
        lines.append(f"#SBATCH --gres=gpu:{options.gpus_per_job}")
    if options.time:
        lines.append(f"#SBATCH --time={options.time}")
    if options.cpus_per_job:
        lines.append(f"#SBATCH --cpus-per-task={options.cpus_per_job}")
    lines += [f"#SBATCH {option}" for option in options.extra]
    lines += [
        "# written by `ledger run --executor slurm`; a requeued job starts here again and resumes from the ledger",
        'echo "ledger job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $(hostname) at $(date -u +%FT%TZ)"',
        f"cd {shlex.quote(str(Path.cwd()))}",
    ]
    if on_failure is None:
        lines.append("exec " + shlex.join(command))
    else:
        lines += [
            shlex.join(command),
            "status=$?",
            'if [ "$status" -ne 0 ]; then',
            "    "
            + shlex.join(on_failure)
            + ' --exit-status "$status" --job "${SLURM_JOB_ID:-unknown}" --restart "${SLURM_RESTART_COUNT:-0}"',
            "fi",
            'exit "$status"',
        ]
    return "\n".join([*lines, ""])


def sbatch(script: Path, dependency: str | None = None) -> str:
    """Submit ``script``; its job id."""
    command = ["sbatch", "--parsable"]
    if dependency:
        command += [f"--dependency={dependency}", "--kill-on-invalid-dep=no"]
    done = subprocess.run([*command, str(script)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise SlurmUnavailable(f"sbatch refused {script.name}: {reason}")
    return done.stdout.strip().split(";")[0]


def submit(runner: Any, run_args: list[str], options: SlurmOptions, report) -> dict[str, Any]:
    """Register the protocol, submit the groups' jobs and the judging job; what ``jobs.json`` holds.

    ``run_args`` are the ``ledger run`` options every job passes on (``--db``, ``--artifacts``, ``--device``,
    ``--compile``, ...), the protocol and ``--out`` included."""
    require_slurm()
    sha = runner.register_only()
    folder = runner.out_dir / "slurm"
    folder.mkdir(parents=True, exist_ok=True)
    name = runner.protocol.name
    jobs: list[dict[str, Any]] = []
    ids: list[str] = []
    groups = arm_chains(runner.protocol, list(runner.arm_ids))
    for number, group in enumerate(groups, start=1):
        script = folder / f"group-{number}.sbatch"
        log = folder / f"group-{number}.log"
        command = node_command([*run_args, "--arms", ",".join(group), "--no-judge", "--resume"], options.gpus_per_job)
        failed = [sys.executable, "-m", "ledger.run.slurm", "record-failure", run_args[1], "--db", _option(run_args, "--db"),
                  "--arms", ",".join(group), "--log", str(log.resolve())]  # fmt: skip
        script.write_text(
            batch_script(f"{name}-{group[0]}", command, log, options, requeue=True, on_failure=failed), encoding="utf-8"
        )
        job_id = sbatch(script)
        ids.append(job_id)
        jobs.append({"job_id": job_id, "arms": group, "script": str(script), "log": str(log)})
        report(f"submitted job {job_id}: arm{'s' if len(group) > 1 else ''} {', '.join(group)} (log {log})")
    judge_script = folder / "judge.sbatch"
    judge_log = folder / "judge.log"
    judging = SlurmOptions(options.partition, 0, options.time, options.cpus_per_job, list(options.extra))
    command = node_command([*run_args, "--resume", "--judge-only"], 0)
    judge_script.write_text(batch_script(f"{name}-judge", command, judge_log, judging, requeue=True), encoding="utf-8")
    after = "afterany:" + ":".join(ids)
    judge_id = sbatch(judge_script, dependency=after)
    report(f"submitted job {judge_id}: judging and the report, after jobs {', '.join(ids)} "
           f"end (log {judge_log})")  # fmt: skip
    record = {
        "protocol": name,
        "protocol_sha256": sha,
        "jobs": jobs,
        "judge": {"job_id": judge_id, "script": str(judge_script), "log": str(judge_log)},
    }
    (folder / JOBS_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    report(
        f"`ledger status {runner.protocol_path}` shows each arm's state; the jobs are listed in {folder / JOBS_FILE}"
    )
    return record


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


FAILED_KIND = "job-failed"


def record_failure(db: str, protocol_path: str | Path, arms: list[str], *, job: str, restart: int, exit_status: int,
                   log: Path) -> list[str]:  # fmt: skip
    """Mark each arm of a failed job's group that has neither its evaluation nor a hard stop as failed in the
    ledger: a ``runs`` record of kind ``job-failed`` (run id ``SHA:ARM:job-ID-RESTART``), the reason as its note
    (the exit status and the last line of the job's log), the arm's own run environment beside it. The arms
    marked (a requeued job that fails again adds another record; the arm's evidence is untouched)."""
    from ledger.audit.preregistration import registration_of
    from ledger.protocol.check import check_protocol_file
    from ledger.run.arm_progress import evaluated, stopped_by_gate
    from ledger.run.environment import environment_record
    from ledger.store import open_store

    protocol = check_protocol_file(protocol_path).protocol
    reason = f"job {job} (restart {restart}) exited with status {exit_status}: {last_line(log)}"
    marked = []
    with open_store(db) as store:
        sha = registration_of(store, protocol)
        for arm_id in arms:
            run_id = f"{sha[:12]}:{arm_id}"
            arm = protocol.arm(arm_id)
            if evaluated(store, sha, arm) or stopped_by_gate(store, protocol, sha, arm_id) is not None:
                continue
            own = store.get("runs", run_id=run_id)
            environment = (
                json.loads(own["environment_json"] or "{}")
                if own is not None
                else environment_record(Path(protocol_path).resolve().parent, {})
            )
            store.add_run(
                run_id=f"{run_id}:job-{job}-{restart}",
                kind=FAILED_KIND,
                protocol_sha256=sha,
                arm=arm_id,
                config={"job": job, "restart": restart, "exit_status": exit_status},
                environment=environment,
                note=reason,
            )
            marked.append(arm_id)
    return marked


def last_line(path: Path) -> str:
    """The last non-empty line of a log (at most 200 characters)."""
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else f"no output in {path}"


def scheduler_states(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """Job id -> (state, reason) as the scheduler holds it now (``scontrol show job``: pending, running and
    recently ended jobs alike, with no accounting database); a job it no longer knows is left out."""
    states: dict[str, tuple[str, str]] = {}
    if shutil.which("scontrol") is None:
        return states
    for job_id in job_ids:
        done = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=False)
        if done.returncode != 0 or not done.stdout.strip():
            continue
        fields = dict(part.split("=", 1) for part in done.stdout.split() if "=" in part)
        states[job_id] = (fields.get("JobState", "UNKNOWN"), fields.get("Reason", "None"))
    return states


def main(argv: list[str] | None = None) -> int:
    """``python -m ledger.run.slurm record-failure PROTOCOL --db URL --arms A,B --log LOG --exit-status N --job ID
    --restart K``: what a group's batch script runs when its ``ledger run`` failed."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ledger.run.slurm")
    commands = parser.add_subparsers(dest="command", required=True)
    failure = commands.add_parser("record-failure", help="mark a failed job's unfinished arms as failed in the ledger")
    failure.add_argument("protocol")
    failure.add_argument("--db", required=True)
    failure.add_argument("--arms", required=True)
    failure.add_argument("--log", required=True)
    failure.add_argument("--exit-status", type=int, required=True)
    failure.add_argument("--job", required=True)
    failure.add_argument("--restart", type=int, default=0)
    args = parser.parse_args(argv)
    marked = record_failure(args.db, args.protocol, args.arms.split(","), job=args.job, restart=args.restart,
                            exit_status=args.exit_status, log=Path(args.log))  # fmt: skip
    print(f"ledger: marked failed in the ledger: {', '.join(marked) or 'no arm (each finished or stopped)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
