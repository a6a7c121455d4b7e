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
import yaml
from run_helpers import ROOT, SMOKE, digest, ledger_cli

from ledger.store import open_store

pytestmark = pytest.mark.models
TOLERANCE = 0.02


def _trained(db) -> dict[str, dict]:
    with open_store(f"sqlite:///{db}") as store:
        rows = [row for row in store.rows_of("checkpoints") if row["arm"] == "A"]
    return {row["stage"]: {**json.loads(row["meta_json"]), "sha256": row["sha256"]} for row in rows}


def _arm_a_only(folder) -> tuple:
    """The smoke protocol cut to arm A (same seed, base, rows and stages: the same draws) and its
    claims on A alone, so that a run of A alone has claims to judge and verify."""
    document = yaml.safe_load(SMOKE.read_text(encoding="utf-8"))
    document["name"] = "smoke-arm-A"
    document["arms"] = [arm for arm in document["arms"] if arm["id"] == "A"]
    document["gates"] = [gate for gate in document["gates"] if "versus" not in gate]
    document["claims"] = ["claims.yaml"]
    claims = yaml.safe_load((ROOT / "claims" / "smoke.yaml").read_text(encoding="utf-8"))
    claims["protocol"] = "smoke-arm-A"
    claims["claims"] = [claim for claim in claims["claims"] if claim.get("arm") == "A"]
    (folder / "claims.yaml").write_text(yaml.safe_dump(claims), encoding="utf-8")
    protocol = folder / "smoke-arm-A.yaml"
    protocol.write_text(yaml.safe_dump(document), encoding="utf-8")
    return protocol, folder / "claims.yaml"


@pytest.mark.long  # processes that train: the long call
def test_two_cpu_ranks_train_one_arm_record_it_once_and_follow_the_single_process_loss(reference, tmp_path):
    folder, _, _ = reference
    protocol, claims = _arm_a_only(tmp_path)
    db = tmp_path / "ddp.db"
    launched = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--standalone",  # a free local port for the rendezvous
         "-m", "ledger", "run", str(protocol), "--db", f"sqlite:///{db}", "--out", str(tmp_path / "out"),
         "--no-progress"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr[-3000:]
    assert launched.stdout.count("smoke-arm-A (") == 1  # only rank 0 prints the summary
    parallel, single = _trained(db), _trained(folder / "ledger.db")
    assert sorted(parallel) == sorted(single) == ["anneal", "install"]  # one checkpoint per stage
    for stage, meta in parallel.items():
        assert meta["ranks"] == 2 and single[stage]["ranks"] == 1
        assert len(meta["losses"]) == len(single[stage]["losses"]) > 0
        for ddp, one in zip(meta["losses"], single[stage]["losses"]):
            assert math.isclose(ddp, one, rel_tol=TOLERANCE), (stage, meta["losses"], single[stage]["losses"])
    # rank 0 judged the claims once the arm had finished; verify re-derives them and re-hashes every file
    verified = ledger_cli("verify", str(claims), "--db", f"sqlite:///{db}")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.count("supported") >= 2


@pytest.mark.long  # processes that train: the long call
def test_parallel_processes_write_one_ledger_judge_the_claims_once_and_reproduce_one_process_byte_for_byte(
    reference, tmp_path
) -> None:
    """`--parallel 2`: the arms in two processes into one ledger. Every claim is judged (by whichever
    process finds every arm finished, or the parent's closing pass), and the evidence is the
    reference run's byte for byte (the same protocol and seed give the same readings, in other
    processes and another order)."""
    from ledger.protocol.loader import load_protocol
    from ledger.run.parallel import arm_groups

    folder, _, _ = reference
    protocol = load_protocol(SMOKE)
    groups = arm_groups(protocol, [arm.id for arm in protocol.arms], 2)
    assert len(groups) == 2 and sorted(a for g in groups for a in g) == sorted(a.id for a in protocol.arms)
    with open_store(f"sqlite:///{folder / 'ledger.db'}") as store:
        threads = json.loads(store.rows_of("runs")[0]["environment_json"])["threads"]
    db = tmp_path / "parallel.db"
    ran = ledger_cli(
        "run", str(SMOKE), "--parallel", "2", "--db", f"sqlite:///{db}", "--out", str(tmp_path / "out"),
        env={"OMP_NUM_THREADS": str(threads)},  # the reference's thread count: the same float arithmetic
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    # the parent trains the heavier group itself and the child the other; the parent alone judges and reports
    assert ran.stdout.count("exit 0") == 1 and ran.stdout.count("in this process") == 1
    assert "preregistered claims" in ran.stdout
    (log,) = (tmp_path / "out").glob("parallel-*.log")
    child = log.read_text(encoding="utf-8")
    assert "not judged here (--no-judge)" in child and "report.html" not in child
    assert digest(db) == digest(folder / "ledger.db")
    claims = yaml.safe_load((ROOT / "claims" / "smoke.yaml").read_text(encoding="utf-8"))["claims"]
    with open_store(f"sqlite:///{db}") as store:
        assert sorted(
            row["claim_id"] for row in store.query("SELECT claim_id FROM claim_outcomes").records()
        ) == sorted(f"smoke/{claim['id']}" for claim in claims)
    verified = ledger_cli("verify", "claims/smoke.yaml", "--db", f"sqlite:///{db}")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_an_arm_continuing_from_another_stays_in_its_group() -> None:
    from ledger.protocol.loader import parse_protocol
    from ledger.run.parallel import arm_groups

    document = yaml.safe_load(SMOKE.read_text(encoding="utf-8"))
    for arm in document["arms"]:
        if arm["id"] == "E":
            arm["init_from"] = "A"
    protocol = parse_protocol(yaml.safe_dump(document))
    for n in (1, 2, 3, 4):
        groups = arm_groups(protocol, ["A", "E", "B", "C"], n)
        together = next(group for group in groups if "A" in group)
        assert together.index("A") < together.index("E") and len(groups) <= n


def test_groups_are_balanced_by_estimated_cost_not_steps() -> None:
    """The default's paper-bridge arm re-runs the whole prompt at every loop: it goes apart from A and E (version
    6, whose arms hold every kind of cost: answer-only and every-position re-entry, the adapter, D's layers)."""
    from ledger.protocol.loader import load_protocol
    from ledger.run.parallel import arm_cost, arm_groups

    protocol = load_protocol(ROOT / "tests" / "pins" / "versions" / "phaseA-tiny.v6.yaml")
    assert arm_cost(protocol, "A_paper") > arm_cost(protocol, "E") > arm_cost(protocol, "A")
    assert arm_cost(protocol, "D") == 2 * arm_cost(protocol, "B")  # twice the layers, the same steps
    assert arm_cost(protocol, "C") > arm_cost(protocol, "B")  # the scratchpad target writes the hops
    assert arm_cost(protocol, "E") > arm_cost(protocol, "A")  # the LoRA path beside every wrapped matrix
    groups = arm_groups(protocol, [arm.id for arm in protocol.arms], 2)
    loads = sorted(sum(arm_cost(protocol, arm) for arm in group) for group in groups)
    # the split whose heavier group is lightest of all 2 ** 6 splits: here the paper-bridge arm with D
    # version 5: C trains 400 steps, so C and D share the first process and E joins A_paper
    assert sorted(map(sorted, groups)) == [["A", "B", "C", "D"], ["A_paper", "E"]], groups
    assert loads[1] < sum(arm_cost(protocol, arm) for arm in ("A_paper", "B", "C"))  # the greedy split's


def test_the_exhaustive_split_beats_longest_first_where_greedy_misses() -> None:
    from ledger.run.parallel import _balanced

    weights = [3.0, 3.0, 2.0, 2.0, 2.0]  # greedy: 3+2+2 | 3+2 = 7 | 5; best: 3+3 | 2+2+2 = 6 | 6
    places = _balanced(weights, 2)
    loads = [sum(w for w, p in zip(weights, places) if p == g) for g in (0, 1)]
    assert sorted(loads) == [6.0, 6.0]
    assert _balanced(weights, 1) == [0] * 5 and _balanced([], 3) == []


def test_the_parent_reads_ahead_once_the_first_child_has_finished(monkeypatch, tmp_path) -> None:
    """``on_core_free`` runs once, after the first child has exited and before the last one does."""
    from ledger.protocol.loader import load_protocol
    from ledger.run import parallel

    events: list[str] = []
    polls_left = [3, 12]  # the first child exits after 3 polls, the second after 12

    class Child:
        def __init__(self, command, **_):
            self.group = command[command.index("--arms") + 1]
            self.left = polls_left.pop(0)
            self.returncode: int | None = None
            assert "--no-judge" in command  # children never judge the claims nor write the report

        def poll(self):
            self.left -= 1
            if self.left <= 0 and self.returncode is None:
                self.returncode = 0
                events.append(f"exit {self.group}")
            return self.returncode

    monkeypatch.setattr(parallel.subprocess, "Popen", Child)
    monkeypatch.setattr(parallel.time, "sleep", lambda _: None)
    protocol = load_protocol(SMOKE)
    codes = parallel.run_parallel(
        SMOKE, protocol, [arm.id for arm in protocol.arms], 2, db="sqlite:///x.db", out_dir=tmp_path,
        device="cpu", artifacts=None, resume=False, report=lambda _: None,
        on_core_free=lambda: events.append("read ahead"),
    )  # fmt: skip
    assert codes == [0, 0]
    assert [e.split()[0] for e in events] == ["exit", "read", "exit"]


def test_the_parent_trains_the_heaviest_group_itself_then_reads_ahead_while_the_child_runs(
    monkeypatch, tmp_path
) -> None:
    from ledger.protocol.loader import load_protocol
    from ledger.run import parallel

    events: list[str] = []
    started: list[list[str]] = []

    class Child:
        def __init__(self, command, env, **_):
            started.append(command[command.index("--arms") + 1].split(","))
            assert "--no-judge" in command and env["OMP_NUM_THREADS"] == "3"
            self.left, self.returncode = 3, None

        def poll(self):
            self.left -= 1
            if self.left <= 0 and self.returncode is None:
                self.returncode = 0
                events.append("child exit")
            return self.returncode

    monkeypatch.setattr(parallel.subprocess, "Popen", Child)
    monkeypatch.setattr(parallel.time, "sleep", lambda _: None)
    monkeypatch.setattr(parallel.os, "cpu_count", lambda: 6)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    protocol = load_protocol(ROOT / "protocols" / "phaseA-tiny.yaml")
    arms = [arm.id for arm in protocol.arms]
    here: list[tuple[list[str], int]] = []
    codes = parallel.run_parallel(
        SMOKE, protocol, arms, 2, db="sqlite:///x.db", out_dir=tmp_path, device="cpu", artifacts=None,
        resume=False, report=lambda _: None, run_here=lambda group, _device, threads: here.append((group, threads)),
        on_core_free=lambda: events.append("read ahead"),
    )  # fmt: skip
    groups = parallel.arm_groups(protocol, arms, 2)
    heaviest = max(groups, key=lambda group: sum(parallel.arm_cost(protocol, arm) for arm in group))
    assert here == [(heaviest, 3)] and started == [g for g in groups if g != heaviest] and codes == [0, 0]
    assert events == ["read ahead", "child exit"]  # the parent's group done first, while the child still ran

    class Failing(Child):
        def terminate(self):
            events.append("terminated")

        def wait(self):
            return 0

    def broken(*_):
        raise RuntimeError("the parent's group failed")

    events.clear()
    monkeypatch.setattr(parallel.subprocess, "Popen", Failing)
    with pytest.raises(RuntimeError, match="parent's group failed"):
        parallel.run_parallel(
            SMOKE, protocol, arms, 2, db="sqlite:///x.db", out_dir=tmp_path, device="cpu", artifacts=None,
            resume=False, report=lambda _: None, run_here=broken,
        )  # fmt: skip
    assert events == ["terminated"]  # no child is left running on its own


def test_a_run_builds_its_manifests_once_and_reading_ahead_writes_nothing(monkeypatch, tmp_path) -> None:
    from ledger.audit import preregistration
    from ledger.rows import builder
    from ledger.run.runner import Runner

    builds: list[str] = []
    real = builder.build_manifests

    def counted(protocol):
        builds.append(protocol.name)
        return real(protocol)

    monkeypatch.setattr(builder, "build_manifests", counted)
    monkeypatch.setattr(preregistration, "build_manifests", counted)
    db, out = tmp_path / "ledger.db", tmp_path / "out"
    runner = Runner(SMOKE, db=f"sqlite:///{db}", out=out, resume=False, arms=None, progress=False, device="cpu")
    runner.warm()
    assert set(runner.readers) == set(runner.loaded)
    assert set(runner.loaded) == {arm.base for arm in runner.protocol.arms}
    assert not db.exists() and not out.exists()  # read-only
    with open_store(f"sqlite:///{db}") as store:  # registration as the run does it, with the runner's manifests
        preregistration.register(store, runner.protocol_path, runner.checked, runner.manifests)
    assert builds == ["smoke"]  # registration took the runner's manifests


def test_a_refused_parallel_run_stops_its_child_and_leaves_nothing_behind(tmp_path) -> None:
    """The child starts before the parent's checks (it imports while the parent reads): when the parent refuses
    (here: a base that is not on this machine), the child is stopped and no folder, log or database is left."""
    from tests.audit.test_power import PROTOCOL, UNWINNABLE

    (tmp_path / "protocol.yaml").write_text(PROTOCOL, encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(UNWINNABLE, encoding="utf-8")
    db, out = tmp_path / "ledger.db", tmp_path / "out"
    ran = ledger_cli(
        "run", str(tmp_path / "protocol.yaml"), "--parallel", "2", "--db", f"sqlite:///{db}", "--out", str(out),
        "--no-progress",
    )  # fmt: skip
    assert ran.returncode == 2, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "base 'tiny': local path" in ran.stderr and "does not exist" in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1 and "Traceback" not in ran.stderr
    assert not db.exists() and not out.exists()
