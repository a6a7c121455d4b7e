"""One final-reading rule: the Python predicate, its SQL, the auditor view and every reader agree.

Before the rule lived in one place, four readers each had their own edge:

* ``ledger/store/evidence.py``: loop = depth, else loop 0; NULL skipped; a depth-0 row read
  at loop 1 was never final; repeats of loop 0: the first.
* ``ledger/report/html.py``: the same, but the latest of repeats.
* ``ledger/run/after_arms.py`` ``accuracy``: loop in (depth, 0) or a depth-0 row at loop 1, with
  NULL readings counted as wrong and a row with two such readings counted twice.
* ``ledger/judge/gates.py`` ``retention_floor``: loop in (depth, 0), or ANY loop of a depth-0 row.
* ``arms/runtime.py`` ``_time_sample`` puts the latency on loop = depth, else the deepest loop
  run (left as it is: arms may not import the store; with forced loops that is loop = depth).

On the committed protocols' data (recurrent arms read at loops 1..depth, dense arms at loop
0, guardrail rows of depth 0 read at loop 1) they all chose the same rows, which the one
rule (``ledger.store.final_reading``) keeps; the tests below pin that.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import Boolean, Integer, create_engine, literal, select

from ledger.judge.gates import retention_floor
from ledger.protocol.loader import load_protocol
from ledger.report.data import scoped_readings, series_of
from ledger.rows.builder import build_manifests
from ledger.run.after_arms import accuracy
from ledger.store import head_revision, open_store, upgrade
from ledger.store.evidence import StoreEvidence
from ledger.store.final_reading import choose_final, final_candidate_sql, final_rank, final_rank_sql, is_final_candidate

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "protocols" / "smoke.yaml"


# ----------------------------------------------------------------------------- the rule itself


def test_rule_cases_in_order_of_preference():
    assert final_rank(3, 3) == 0  # recurrent arm at forced depth
    assert final_rank(3, 0) == 1  # read once
    assert final_rank(0, 0) == 0  # a depth-0 row read once is at its depth
    assert final_rank(0, 1) == 2  # a depth-0 guardrail row read through the base route
    assert final_rank(3, 1) is None and final_rank(3, 4) is None and final_rank(0, 2) is None
    assert not is_final_candidate(3, 3, None)  # no single right answer: never final


def test_choose_final_prefers_the_best_case_then_the_latest_repeat():
    reading = SimpleNamespace
    readings = [
        reading(row_id="r", depth=2, loop=0, correct=True),
        reading(row_id="r", depth=2, loop=2, correct=False),
        reading(row_id="r", depth=2, loop=0, correct=True),  # a later loop-0 repeat does not beat loop = depth
        reading(row_id="s", depth=2, loop=2, correct=None),  # NULL: never final, so loop 0 wins
        reading(row_id="s", depth=2, loop=0, correct=False),
        reading(row_id="t", depth=1, loop=1, correct=False),
        reading(row_id="t", depth=1, loop=1, correct=True),  # the latest repeat
        reading(row_id="u", depth=3, loop=1, correct=True),  # not final at all
    ]
    chosen = choose_final(readings)
    assert {row: (r.loop, r.correct) for row, r in chosen.items()} == {"r": (2, False), "s": (0, False), "t": (1, True)}
    in_memory = [SimpleNamespace(row_id=r.row_id, loop=r.loop, correct=r.correct) for r in readings]
    assert choose_final(in_memory, {r.row_id: r.depth for r in readings}).keys() == chosen.keys()


def test_the_sql_predicate_is_the_python_predicate():
    engine = create_engine("sqlite://")
    with engine.connect() as conn:
        for depth, loop, correct in itertools.product(range(4), range(6), (True, False, None)):
            d, lp = literal(depth, Integer), literal(loop, Integer)
            c = literal(correct, Boolean)
            rank, candidate = conn.execute(select(final_rank_sql(d, lp), final_candidate_sql(d, lp, c))).one()
            assert rank == final_rank(depth, loop), (depth, loop)
            assert bool(candidate) == is_final_candidate(depth, loop, correct), (depth, loop, correct)


# ----------------------------------------------------------------------------- every reader agrees


@pytest.fixture()
def ledger(tmp_path):
    """The smoke protocol's eval (rule chasing, depths 1-5) and tier1 (arithmetic, depth 0) manifests, with
    hand-written evidence as `ledger run` writes it: a recurrent arm A at loops 1..depth (and one loop above
    the diagonal, correct NULL), a dense arm B at loop 0, and every arm and the base on tier1 at loop 1."""
    protocol = load_protocol(SMOKE)
    manifests = build_manifests(protocol)
    store = open_store(f"sqlite:///{tmp_path / 'ledger.db'}")
    sha = store.add_protocol(json.loads(protocol.canonical()), name=protocol.name, version=str(protocol.version))
    manifest_sha = {name: store.add_manifest(manifests[name], protocol_sha256=sha) for name in ("eval", "tier1")}
    base = store.add_checkpoint(sha256="b" * 64, arm="base:tiny", status="promoted", stage="base")
    checkpoints = {"A": "a" * 64, "B": "d" * 64, "base:tiny": base}
    evidence = []
    for arm in ("A", "B", "base:tiny"):
        run_id = store.add_run(run_id=f"{sha[:12]}:{arm}", protocol_sha256=sha, arm=arm)
        if arm != "base:tiny":
            store.add_checkpoint(
                sha256=checkpoints[arm], arm=arm, status="promoted", parent_sha256=base, run_id=run_id, stage="train"
            )
        record = dict(run_id=run_id, arm=arm, checkpoint_sha256=checkpoints[arm])
        for i, row in enumerate(manifests["eval"].rows):
            loops = range(1, row.depth + 2) if arm == "A" else [0] if arm == "B" else []
            for loop in loops:
                correct = None if loop > row.depth else (i + loop) % 3 != 0
                evidence.append(
                    dict(
                        record,
                        manifest_sha256=manifest_sha["eval"],
                        row_id=row.row_id,
                        loop=loop,
                        prediction="x",
                        correct=correct,
                    )
                )
        for i, row in enumerate(manifests["tier1"].rows):
            evidence.append(
                dict(
                    record,
                    manifest_sha256=manifest_sha["tier1"],
                    row_id=row.row_id,
                    loop=1,
                    prediction="x",
                    correct=(i + len(arm)) % 2 == 0,
                )
            )
    store.add_evidence(evidence)
    yield SimpleNamespace(
        store=store, protocol=protocol, sha=sha, manifests=manifests, manifest_sha=manifest_sha, checkpoints=checkpoints
    )
    store.close()


CASES = [("A", "eval"), ("B", "eval"), ("A", "tier1"), ("B", "tier1"), ("base:tiny", "tier1")]


@pytest.mark.parametrize("arm, manifest", CASES)
def test_runner_report_evidence_gates_and_the_view_give_the_same_final_rows(ledger, arm, manifest):
    store, sha, checkpoint = ledger.store, ledger.sha, ledger.checkpoints[arm]
    manifest_sha = ledger.manifest_sha[manifest]
    view = {
        row["row_id"]: (row["depth"], row["loop"], bool(row["correct"]))
        for row in store.query(
            "SELECT row_id, depth, loop, correct FROM v_final_readings "
            "WHERE arm = :arm AND checkpoint_sha256 = :c AND manifest_sha256 = :m",
            {"arm": arm, "c": checkpoint, "m": manifest_sha},
        ).records()
    }
    # the rows today's data has: every row once, at loop = depth (A), loop 0 (B), loop 1 (depth-0 tier1 rows)
    expected_loop = {("A", "eval"): "depth", ("B", "eval"): 0}.get((arm, manifest), 1)
    assert set(view) == {row.row_id for row in ledger.manifests[manifest].rows}
    assert all(loop == (depth if expected_loop == "depth" else expected_loop) for depth, loop, _ in view.values())
    finals = {row: (depth, correct) for row, (depth, _, correct) in view.items()}

    run_id = f"{sha[:12]}:{arm}"
    read = store.final_readings(manifest_sha, run_id=run_id, checkpoint_sha256=checkpoint)
    assert {r.row_id: (r.depth, r.correct) for r in read} == finals

    counts = (sum(correct for _, correct in finals.values()), len(finals))
    runner = SimpleNamespace(store=store, manifest_sha=ledger.manifest_sha, protocol=ledger.protocol)
    assert accuracy(runner, run_id, manifest, checkpoint)[0] == counts

    assert StoreEvidence(store, (sha,)).outcomes(arm, manifest, None) == finals

    (series,) = [s for s in series_of(scoped_readings(store, (sha,), manifest_sha)) if s.arm == arm]
    per_depth: dict[int, tuple[int, int]] = {}
    for depth, correct in finals.values():
        hits, n = per_depth.get(depth, (0, 0))
        per_depth[depth] = (hits + int(correct), n + 1)
    assert {point.depth: (point.correct, point.n) for point in series.points} == per_depth

    readings = [
        SimpleNamespace(row_id=r.row_id, loop=r.loop, correct=r.correct)
        for r in store.readings(manifest_sha, arm=arm, checkpoint_sha256=checkpoint)
    ]
    floor = retention_floor(ledger.manifests[manifest].rows, readings, 0.0, None)
    assert floor["detail"]["summary"].startswith(f"accuracy {counts[0]}/{counts[1]} ")


def test_the_view_and_the_store_read_pick_the_latest_repeat(ledger):
    """A second run re-reading arm A's checkpoint: the latest reading of each row is final in both."""
    store, sha, checkpoint = ledger.store, ledger.sha, ledger.checkpoints["A"]
    rows = ledger.manifests["eval"].rows[:3]
    run_id = store.add_run(run_id="again", protocol_sha256=sha, arm="A")
    store.add_evidence(
        [
            dict(
                run_id=run_id,
                arm="A",
                checkpoint_sha256=checkpoint,
                manifest_sha256=ledger.manifest_sha["eval"],
                row_id=row.row_id,
                loop=row.depth,
                prediction="again",
                correct=True,
            )
            for row in rows
        ]
    )
    view = {
        row["row_id"]: row["run_id"]
        for row in store.query(
            "SELECT row_id, run_id FROM v_final_readings WHERE arm = 'A' AND manifest_sha256 = :m",
            {"m": ledger.manifest_sha["eval"]},
        ).records()
    }
    read = {r.row_id: r.run_id for r in store.final_readings(ledger.manifest_sha["eval"], arm="A")}
    assert view == read
    assert {row.row_id for row in rows} == {row_id for row_id, run in read.items() if run == "again"}


# ----------------------------------------------------------------------------- the migration


def test_a_ledger_at_0001_is_upgraded_to_the_view(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    assert upgrade(url, "0001") == "0001"
    assert upgrade(url) == head_revision()
    with open_store(url) as store:
        assert store.query("SELECT COUNT(*) AS n FROM v_final_readings").records() == [{"n": 0}]
        assert store.verify_chain().ok
