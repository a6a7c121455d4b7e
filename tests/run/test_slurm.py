"""`ledger run --executor slurm` on a real single-node Slurm (`.ci/slurm.sh` starts one on 127.0.0.1 and exports
SLURM_CONF; `bash tests/run.sh` does this before the tests) with the jobs meeting in a throwaway PostgreSQL database:
the smoke protocol's arms as jobs give the one-process run's evidence byte for byte, `verify` passes, and a job
requeued mid-run resumes with nothing recorded twice. Without Slurm the command is one line, exit 2, and
writes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from databases import create_postgres_database, drop_postgres_database
from run_helpers import SMOKE, ledger_cli

from ledger.store import open_store

pytestmark = pytest.mark.models


def test_without_slurm_the_command_is_one_line_and_writes_nothing(tmp_path):
    env = {"PATH": str(Path(os.__file__).parent)}  # no sbatch on it
    db = tmp_path / "l.db"
    done = ledger_cli(
        "run", str(SMOKE), "--executor", "slurm", "--db", f"sqlite:///{db}", "--out", str(tmp_path / "out"), env=env
    )
    assert done.returncode == 2 and "no Slurm on this machine" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not db.exists() and not (tmp_path / "out").exists()
    both = ledger_cli("run", str(SMOKE), "--executor", "slurm", "--parallel", "2", "--db", f"sqlite:///{db}", env=env)
    assert both.returncode == 2 and "drop --parallel" in both.stderr and not db.exists()


def test_a_failed_jobs_unfinished_arms_are_marked_failed_in_the_ledger_with_the_reason(tmp_path):
    """What a group's batch script runs when its `ledger run` exits non-zero: each arm of the group that has
    neither its evaluation nor a hard stop gets a `job-failed` run record whose note says why, and `ledger
    status` reads it (no scheduler needed)."""
    import sys

    from ledger.run.slurm import SlurmOptions, batch_script

    db = f"sqlite:///{tmp_path / 'l.db'}"
    assert ledger_cli("register", str(SMOKE), "--db", db).returncode == 0
    log = tmp_path / "group-1.log"
    log.write_text("ledger job 42 (restart 0) on node7\nKilled\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "ledger.run.slurm", "record-failure", str(SMOKE), "--db", db, "--arms", "A,E",
         "--log", str(log), "--exit-status", "137", "--job", "42", "--restart", "0"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and "marked failed in the ledger: A, E" in done.stdout, done.stderr[-2000:]
    shown = ledger_cli("status", str(SMOKE), "--db", db, "--out", str(tmp_path / "out"), "--json")
    states = {row["arm"]: row for row in json.loads(shown.stdout)}
    assert states["A"]["state"] == states["E"]["state"] == "failed"
    assert "recorded in the ledger: job 42 (restart 0) exited with status 137: Killed" in states["A"]["detail"]
    assert states["B"]["state"] == states["C"]["state"] == "not started"
    with open_store(db) as store:
        runs = [row for row in store.rows_of("runs") if row["kind"] == "job-failed"]
    assert sorted(row["run_id"].split(":", 1)[1] for row in runs) == ["A:job-42-0", "E:job-42-0"]
    script = batch_script("smoke-A", ["ledger", "run"], log, SlurmOptions(), requeue=True, on_failure=["mark"])
    assert "status=$?" in script and 'mark --exit-status "$status"' in script and "\nexec " not in script


def _slurm_env() -> dict[str, str]:
    conf = os.environ.get("SLURM_CONF", "")
    if not conf or not Path(conf).is_file():
        pytest.fail(
            "SLURM_CONF is not set: the Slurm executor's tests need a cluster. `bash tests/run.sh` starts a "
            'throwaway one (`eval "$(bash .ci/slurm.sh)"` alone exports SLURM_CONF).',
            pytrace=False,
        )
    return {"SLURM_CONF": conf}


def _scontrol(*args: str) -> str:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, check=True).stdout


def _job_state(job_id: str) -> str:
    fields = dict(part.split("=", 1) for part in _scontrol("show", "job", "-o", job_id).split() if "=" in part)
    return fields["JobState"]


def _wait_for(job_id: str, timeout: float = 1200) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _job_state(job_id)
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            return state
        time.sleep(2)
    raise AssertionError(f"job {job_id} still {_job_state(job_id)} after {timeout} s")


def _submit(tmp_path: Path, db: str) -> tuple[dict, subprocess.CompletedProcess]:
    out = tmp_path / "out"
    done = ledger_cli("run", str(SMOKE), "--executor", "slurm", "--db", db, "--out", str(out), "--device", "cpu",
                      env=_slurm_env())  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "slurm" / "jobs.json").read_text(encoding="utf-8")), done


def _identical_to_the_reference(reference, db: str) -> None:
    compared = ledger_cli("compare", f"sqlite:///{reference[0] / 'ledger.db'}", db)
    assert compared.returncode == 0, compared.stdout[-3000:] + compared.stderr[-2000:]
    assert "identical evidence: 4 of 4 arms" in " ".join(compared.stdout.split()), compared.stdout


@pytest.mark.long
def test_the_arms_as_slurm_jobs_give_the_one_process_evidence_and_verify(reference, tmp_path):
    db = create_postgres_database()
    try:
        jobs, submitted = _submit(tmp_path, db)
        print(submitted.stdout)
        assert [job["arms"] for job in jobs["jobs"]] == [["A"], ["E"], ["B"], ["C"]]  # no init_from chain here
        for job in jobs["jobs"]:
            assert f"submitted job {job['job_id']}" in submitted.stdout and Path(job["script"]).is_file()
        status = ledger_cli("status", str(SMOKE), "--db", db, "--out", str(tmp_path / "out"), env=_slurm_env())
        print(status.stdout)
        assert status.returncode == 0, status.stderr
        assert _wait_for(jobs["judge"]["job_id"]) == "COMPLETED", Path(jobs["judge"]["log"]).read_text()[-3000:]
        final = ledger_cli("status", str(SMOKE), "--db", db, "--out", str(tmp_path / "out"), "--json")
        print(ledger_cli("status", str(SMOKE), "--db", db, "--out", str(tmp_path / "out")).stdout)
        states = {row["arm"]: row["state"] for row in json.loads(final.stdout)}
        assert states == {"A": "finished", "E": "finished", "B": "finished", "C": "finished", "(judging)": "finished"}
        _identical_to_the_reference(reference, db)
        verified = ledger_cli("verify", "claims/smoke.yaml", "--db", db)
        assert verified.returncode == 0, verified.stdout[-3000:]
    finally:
        drop_postgres_database(db)


@pytest.mark.long
def test_a_job_requeued_mid_stage_resumes_and_records_nothing_twice(reference, tmp_path):
    db = create_postgres_database()
    try:
        jobs, _ = _submit(tmp_path, db)
        job = jobs["jobs"][0]  # arm A: two stages
        run_id = None
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:  # requeue it once its first stage is recorded, in its second
            with open_store(db) as store:
                done = [row for row in store.rows_of("checkpoints") if row["arm"] == "A"]
            if done:
                run_id = done[0]["run_id"]
                break
            time.sleep(0.5)
        assert run_id is not None and _job_state(job["job_id"]) == "RUNNING"
        _scontrol("requeue", job["job_id"])
        _scontrol("update", f"jobid={job['job_id']}", "starttime=now")  # Slurm holds a requeued job 2 minutes
        assert _wait_for(jobs["judge"]["job_id"]) == "COMPLETED", Path(jobs["judge"]["log"]).read_text()[-3000:]
        restarts = dict(p.split("=", 1) for p in _scontrol("show", "job", "-o", job["job_id"]).split() if "=" in p)
        assert restarts["Restarts"] == "1"
        log = Path(job["log"]).read_text(encoding="utf-8")
        assert "(restart 1)" in log  # the same script ran again, with --resume
        with open_store(db) as store:
            stages = [row["stage"] for row in store.rows_of("checkpoints") if row["arm"] == "A"]
        assert stages == ["install", "anneal"]  # each stage once: nothing trained or recorded twice
        _identical_to_the_reference(reference, db)
        assert ledger_cli("verify", "claims/smoke.yaml", "--db", db).returncode == 0
    finally:
        drop_postgres_database(db)


@pytest.mark.long
def test_a_job_that_crashes_marks_its_arm_failed_and_the_judging_names_it(tmp_path):
    """Arm C's process is killed mid-run (as the kernel's OOM killer would): its job ends FAILED, the script
    records why in the ledger, `ledger status` says so, and the judging job judges what it can and names C."""
    db = create_postgres_database()
    try:
        jobs, _ = _submit(tmp_path, db)
        job = next(job for job in jobs["jobs"] if job["arms"] == ["C"])
        deadline = time.monotonic() + 900
        while _job_state(job["job_id"]) != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(3)  # into its run
        killed = subprocess.run(["pkill", "-KILL", "-f", "ledger run .* --arms C "], check=False)
        assert killed.returncode == 0
        assert _wait_for(job["job_id"]) == "FAILED"
        assert _wait_for(jobs["judge"]["job_id"]) == "COMPLETED", Path(jobs["judge"]["log"]).read_text()[-3000:]
        shown = ledger_cli("status", str(SMOKE), "--db", db, "--out", str(tmp_path / "out"), "--json")
        states = {row["arm"]: row for row in json.loads(shown.stdout)}
        assert states["C"]["state"] == "failed", states["C"]
        assert (
            f"recorded in the ledger: job {job['job_id']} (restart 0) exited with status 137" in states["C"]["detail"]
        )
        assert [states[arm]["state"] for arm in "AEB"] == ["finished"] * 3
        judged = Path(jobs["judge"]["log"]).read_text(encoding="utf-8")
        assert "C" in judged and "not finished" in judged, judged[-2000:]
    finally:
        drop_postgres_database(db)
