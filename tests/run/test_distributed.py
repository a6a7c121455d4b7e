"""Data-parallel training with torchrun: 2 CPU processes (gloo) train one arm into one ledger.

Rank 0 alone writes: the arm's stages are recorded once each, with the rank count, and
the ledger verifies. Each rank trains on its slice of the same seeded batch and the
gradients are averaged, so the loss curve follows the single-process run's. Not bit for
bit: the mean of the two slices' mean losses weights each slice equally, where one
process weights every supervised cell. Tolerance: 2% of the single-process loss at every
step (the difference seen when this test was written was under 0.5%).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from run_helpers import ROOT, SMOKE, digest, ledger_cli

from ledger.store import open_store

pytestmark = pytest.mark.models
TOLERANCE = 0.02


def _trained(db) -> dict[str, dict]:
    with open_store(f"sqlite:///{db}") as store:
        rows = [row for row in store.rows_of("checkpoints") if row["arm"] == "A"]
    return {row["stage"]: {**json.loads(row["meta_json"]), "sha256": row["sha256"]} for row in rows}


def test_two_cpu_ranks_train_one_arm_record_it_once_and_follow_the_single_process_loss(reference, tmp_path):
    folder, _, _ = reference
    db = tmp_path / "ddp.db"
    launched = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--standalone",  # a free local port for the rendezvous
            "-m",
            "ledger",
            "run",
            str(SMOKE),
            "--arms",
            "A",
            "--db",
            f"sqlite:///{db}",
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    assert launched.stdout.count("smoke (") == 1  # only rank 0 prints the summary
    parallel, single = _trained(db), _trained(folder / "ledger.db")
    assert sorted(parallel) == sorted(single) == ["anneal", "install"]  # one checkpoint per stage
    for stage, meta in parallel.items():
        assert meta["ranks"] == 2 and single[stage]["ranks"] == 1
        assert len(meta["losses"]) == len(single[stage]["losses"]) > 0
        for ddp, one in zip(meta["losses"], single[stage]["losses"]):
            assert math.isclose(ddp, one, rel_tol=TOLERANCE), (stage, meta["losses"], single[stage]["losses"])
    # the rest of the protocol in one process on the same ledger, then every claim verifies
    rest = ledger_cli("run", str(SMOKE), "--arms", "E,B,C", "--db", f"sqlite:///{db}", "--out", str(tmp_path / "out"))
    assert rest.returncode == 0, rest.stderr[-3000:]
    verified = ledger_cli("verify", "claims/smoke.yaml", "--db", f"sqlite:///{db}")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_parallel_runs_the_arms_in_separate_processes_into_one_ledger_with_the_same_evidence(reference, tmp_path):
    from ledger.run.parallel import arm_groups
    from ledger.spec.loader import load_protocol

    folder, _, _ = reference
    protocol = load_protocol(SMOKE)
    groups = arm_groups(protocol, [arm.id for arm in protocol.arms], 2)
    assert len(groups) == 2 and sorted(arm for group in groups for arm in group) == sorted(
        arm.id for arm in protocol.arms
    )
    with open_store(f"sqlite:///{folder / 'ledger.db'}") as store:
        threads = json.loads(store.rows_of("runs")[0]["environment_json"])["threads"]
    db = tmp_path / "parallel.db"
    ran = ledger_cli(
        "run",
        str(SMOKE),
        "--parallel",
        "2",
        "--db",
        f"sqlite:///{db}",
        "--out",
        str(tmp_path / "out"),
        env={"OMP_NUM_THREADS": str(threads)},  # the reference's thread count: the same float arithmetic
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert ran.stdout.count("exit 0") == 2 and (tmp_path / "out" / "parallel-1.log").is_file()
    assert digest(db) == digest(folder / "ledger.db")  # the same evidence as one process, byte for byte
    verified = ledger_cli("verify", "claims/smoke.yaml", "--db", f"sqlite:///{db}")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_an_arm_continuing_from_another_stays_in_its_group() -> None:
    import yaml

    from ledger.run.parallel import arm_groups
    from ledger.spec.loader import parse_protocol

    document = yaml.safe_load(SMOKE.read_text(encoding="utf-8"))
    for arm in document["arms"]:
        if arm["id"] == "E":
            arm["init_from"] = "A"
    protocol = parse_protocol(yaml.safe_dump(document))
    for n in (1, 2, 3, 4):
        groups = arm_groups(protocol, ["A", "E", "B", "C"], n)
        together = next(group for group in groups if "A" in group)
        assert together.index("A") < together.index("E") and len(groups) <= n
