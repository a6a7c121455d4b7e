"""`ledger run`: the smoke protocol end to end, resume after SIGKILL, hard stops, determinism, missing weights."""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from run_helpers import PHASE_A, ROOT, SMOKE, digest, ledger_cli, planted_regression

from ledger.store import open_store

pytestmark = pytest.mark.models


def test_smoke_runs_end_to_end_and_verifies(reference):
    folder, _, stdout = reference
    for arm in ("A", "E", "B", "C"):
        assert f"│ {arm}   │ complete" in stdout, stdout
    verified = ledger_cli("verify", "claims/smoke.yaml", "--db", f"sqlite:///{folder / 'ledger.db'}")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "environment:" not in verified.stderr, verified.stderr  # verified where it ran: nothing to warn of
    log = (folder / "out" / "run.log").read_text(encoding="utf-8")
    assert "arm A stage install" in log and "loss" in log
    with open_store(f"sqlite:///{folder / 'ledger.db'}") as store:
        statuses = {row["arm"]: row["status"] for row in store.rows_of("checkpoints")}
        kinds = {row["gate"] for row in store.rows_of("gate_results")}
        tokens = store.query("SELECT COUNT(*) AS n FROM evidence WHERE arm = 'C' AND tokens_generated > 0").records()
        latency = store.query("SELECT COUNT(*) AS n FROM evidence WHERE latency_ms > 0").records()
        loops = store.query("SELECT MAX(loop) AS m FROM evidence WHERE arm = 'A'").records()
        assert store.verify_chain().ok
    assert set(statuses.values()) == {"promoted"}
    assert {"installation", "tier1", "floor", "fisher_A_vs_B", "paired_A_vs_B"} <= kinds
    assert tokens[0]["n"] > 0 and latency[0]["n"] > 0
    assert loops[0]["m"] == 5  # every loop up to the deepest row read in one pass


def test_report_references_existing_figures_and_every_claim(reference):
    folder, _, _ = reference
    html_path = folder / "out" / "report.html"
    parser = _Collect()
    parser.feed(html_path.read_text(encoding="utf-8"))
    assert parser.images, "the report has no figures"
    for source in parser.images:
        png = html_path.parent / source
        assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", source
    for claim in ("A_gate_recorded", "E_tier1_recorded", "A_accuracy_defined", "C_accuracy_defined_v2"):
        assert claim in parser.text, claim


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.text = [], ""

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_data(self, data):
        self.text += data


@pytest.mark.long  # a run of a minute or more: the long call
def test_sigkill_then_resume_gives_the_uninterrupted_evidence(reference, tmp_path):
    folder, elapsed, _ = reference
    db = tmp_path / "ledger.db"
    args = ["run", str(SMOKE), "--db", f"sqlite:///{db}", "--out", str(tmp_path / "out"), "--no-progress"]
    delay = random.Random().uniform(0.25, 0.8) * elapsed
    process = subprocess.Popen(
        [sys.executable, "-m", "ledger", *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait()
    refused = ledger_cli(*args)  # without --resume an interrupted arm is not silently re-run
    if db.exists() and "already run" in refused.stderr:
        assert refused.returncode == 3
    resumed = ledger_cli(*args, "--resume")
    assert resumed.returncode == 0, f"killed after {delay:.1f}s: {resumed.stderr[-3000:]}"
    assert digest(db) == digest(folder / "ledger.db"), f"killed after {delay:.1f}s"
    with open_store(f"sqlite:///{db}") as store:
        assert store.verify_chain().ok
        assert store.query("PRAGMA integrity_check").records()[0]["integrity_check"] == "ok"


@pytest.mark.long  # a run of a minute or more: the long call
def test_planted_tier1_regression_is_a_hard_stop_and_the_lineage_is_refused(tmp_path):
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    args = ["run", str(SMOKE), "--db", db, "--out", str(tmp_path / "out"), "--arms", "A", "--no-progress"]
    stopped = ledger_cli(*args, env=planted_regression("A"))
    assert stopped.returncode == 3, stopped.stdout + stopped.stderr
    assert "hard_stop" in stopped.stdout and "tier1" in stopped.stdout
    with open_store(db) as store:
        (failed,) = store.rows_of("checkpoints", arm="A")
        gates = {row["gate"]: row for row in store.rows_of("gate_results", checkpoint_sha256=failed["sha256"])}
    assert failed["status"] == "failed" and not gates["tier1"]["passed"] and gates["tier1"]["action"] == "stop"
    # --resume of the failed lineage is refused, naming the gate.
    resumed = ledger_cli(*args, "--resume")
    assert resumed.returncode == 3 and "tier1" in resumed.stderr, resumed.stderr
    # So is a new protocol that continues from the failed checkpoint.
    text = SMOKE.read_text(encoding="utf-8").replace("name: smoke", "name: smoke-continued")
    text = text.replace(
        "    base: tiny\n    surgery: {split: [1, 3]}\n    bridge: {kind: split}\n    budget: {kind: full_block}",
        f"    base: tiny\n    init_checkpoint: {failed['sha256']}\n    surgery: {{split: [1, 3]}}\n"
        "    bridge: {kind: split}\n    budget: {kind: full_block}",
        1,
    )
    text = text.replace("claims:\n  - ../claims/smoke.yaml\n", "")
    continued = tmp_path / "continued.yaml"
    continued.write_text(text, encoding="utf-8")
    refused = ledger_cli(
        "run", str(continued), "--db", db, "--out", str(tmp_path / "out2"), "--arms", "A", "--no-progress"
    )
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "failed gate tier1" in refused.stderr and failed["sha256"][:12] in refused.stderr


def test_phase_a_without_local_weights_stops_at_once_and_writes_nothing(tmp_path):
    db = tmp_path / "ledger.db"
    out = tmp_path / "out"
    result = ledger_cli(
        "run",
        str(PHASE_A),
        "--db",
        f"sqlite:///{db}",
        "--out",
        str(out),
        env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")},
        timeout=300,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Qwen/Qwen2.5-0.5B-Instruct" in result.stderr and "local" in result.stderr
    assert "Traceback" not in result.stderr
    assert not db.exists() and not out.exists()


def _exploratory_smoke(tmp_path: Path) -> Path:
    """The smoke protocol as a tuning run: its evaluation manifest becomes a dev manifest, no claims."""
    text = SMOKE.read_text(encoding="utf-8").replace("name: smoke\n", "name: smoke-tuning\npurpose: exploratory\n", 1)
    text = text.replace("{id: eval, role: eval,", "{id: eval, role: dev,", 1).replace(
        "claims:\n  - ../claims/smoke.yaml\n", ""
    )
    path = tmp_path / "smoke-tuning.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.long  # a run of a minute or more: the long call
def test_an_exploratory_run_records_exploratory_checkpoints_that_nothing_confirmatory_may_continue(tmp_path):
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    tuning = _exploratory_smoke(tmp_path)
    ran = ledger_cli("run", str(tuning), "--db", db, "--out", str(tmp_path / "out"), "--arms", "B", "--no-progress")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    with open_store(db) as store:
        (checkpoint,) = store.rows_of("checkpoints", arm="B")
        names = store.query(
            "SELECT DISTINCT m.name AS name FROM evidence e JOIN manifests m ON m.sha256 = e.manifest_sha256 "
            "WHERE e.arm = 'B'"
        ).records()
    assert checkpoint["status"] == "exploratory"
    assert {row["name"] for row in names} == {"eval"}  # the tuning protocol's dev manifest of that name
    text = SMOKE.read_text(encoding="utf-8").replace("name: smoke", "name: smoke-from-tuning")
    text = text.replace("seed: 11, split: test}", "seed: 11, split: fresh}", 1)  # an unseen evaluation manifest
    text = text.replace(
        "  - id: B\n    kind: dense\n    base: tiny\n",
        f"  - id: B\n    kind: dense\n    base: tiny\n    init_checkpoint: {checkpoint['sha256']}\n",
        1,
    )
    text = text.replace("claims:\n  - ../claims/smoke.yaml\n", "")
    continued = tmp_path / "continued.yaml"
    continued.write_text(text, encoding="utf-8")
    refused = ledger_cli(
        "run", str(continued), "--db", db, "--out", str(tmp_path / "out2"), "--arms", "B", "--no-progress"
    )
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "exploratory" in refused.stderr and checkpoint["sha256"][:12] in refused.stderr
    # The tuning run read the rows of smoke's evaluation manifest (same seed and split):
    # smoke can no longer be preregistered with them as its frozen evaluation.
    peeked = ledger_cli("register", str(SMOKE), "--db", db)
    assert peeked.returncode != 0 and "not fresh" in peeked.stderr and "smoke-tuning" in peeked.stderr, peeked.stderr


def test_an_exploratory_protocol_may_not_hold_an_evaluation_manifest_or_claims(tmp_path):
    from ledger.protocol.loader import ProtocolError, load_protocol

    text = SMOKE.read_text(encoding="utf-8").replace("name: smoke\n", "name: smoke-tuning\npurpose: exploratory\n", 1)
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ProtocolError) as caught:
        load_protocol(path)
    message = str(caught.value)
    assert "manifest 'eval' has role 'eval'" in message and "preregisters no claims" in message


def test_every_reader_takes_the_same_final_readings_from_a_run(reference):
    """Recurrent (A, E), dense (B, C) and depth-0 guardrail (tier1) readings of the smoke run: the runner's
    accuracy, claims' evidence, the report's series and the auditor view agree (ledger/store/final_reading.py)."""
    from ledger.protocol.loader import load_protocol
    from ledger.report.data import scoped_readings, series_of
    from ledger.store.evidence import StoreEvidence

    folder, _, stdout = reference
    protocol = load_protocol(SMOKE)
    with open_store(f"sqlite:///{folder / 'ledger.db'}") as store:
        evidence = StoreEvidence(store, (protocol.sha256,))
        checked = set()
        for view_row in store.query(
            "SELECT DISTINCT arm, manifest, manifest_sha256, checkpoint_sha256 FROM v_final_readings"
        ).records():
            arm, manifest, manifest_sha, checkpoint = (
                view_row[k] for k in ("arm", "manifest", "manifest_sha256", "checkpoint_sha256")
            )
            view = {
                row["row_id"]: (row["depth"], row["loop"], bool(row["correct"]))
                for row in store.query(
                    "SELECT row_id, depth, loop, correct FROM v_final_readings "
                    "WHERE arm = :a AND manifest_sha256 = :m AND checkpoint_sha256 = :c",
                    {"a": arm, "m": manifest_sha, "c": checkpoint},
                ).records()
            }
            finals = {row_id: (depth, correct) for row_id, (depth, _, correct) in view.items()}
            read = store.final_readings(manifest_sha, arm=arm, checkpoint_sha256=checkpoint)
            assert {r.row_id: (r.depth, r.correct) for r in read} == finals
            kind = {"A": "recurrent", "E": "recurrent", "B": "dense", "C": "dense"}.get(arm, "base")
            if manifest == "tier1":
                assert {(depth, loop) for depth, loop, _ in view.values()} == {(0, 1)}
            elif kind == "recurrent":
                assert all(loop == depth for depth, loop, _ in view.values())
            else:
                assert {loop for _, loop, _ in view.values()} == {0}
            series = [
                s
                for s in series_of(scoped_readings(store, (protocol.sha256,), manifest_sha))
                if s.arm == arm and s.checkpoint_sha256 == checkpoint
            ]
            assert sum(p.n for p in series[0].points) == len(finals)
            assert sum(p.correct for p in series[0].points) == sum(c for _, c in finals.values())
            if manifest == "eval":  # claims judge each arm's latest checkpoint; the runner prints its accuracy
                assert evidence.outcomes(arm, manifest, None) == finals
                correct = sum(c for _, c in finals.values())
                assert f"│ {arm}   │ complete │ eval {correct}/{len(finals)} = " in stdout, stdout
            checked.add((kind, manifest))
    assert {("recurrent", "eval"), ("dense", "eval"), ("recurrent", "tier1"), ("base", "tier1")} <= checked


def test_a_moved_or_copied_run_folder_still_verifies_and_artifacts_finds_checkpoints_elsewhere(
    reference, tmp_path, capsys
) -> None:
    from ledger.cli.main import main

    folder, _, _ = reference
    with open_store(f"sqlite:///{folder / 'ledger.db'}") as store:
        paths = [row["path"] for row in store.rows_of("checkpoints")]
    assert paths and all(p and p.startswith("objects/sha256/") for p in paths), paths  # relative, by content
    moved = tmp_path / "moved"
    shutil.copytree(folder, moved)
    db = f"sqlite:///{moved / 'ledger.db'}"
    claims = str(ROOT / "claims" / "smoke.yaml")
    assert main(["verify", claims, "--db", db]) == 0
    # the ledger alone, its files elsewhere: unverifiable until --artifacts says where
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(moved / "ledger.db", alone / "ledger.db")
    capsys.readouterr()
    assert main(["verify", claims, "--db", f"sqlite:///{alone / 'ledger.db'}"]) == 5
    assert "--artifacts" in "".join(capsys.readouterr())
    assert main(["verify", claims, "--db", f"sqlite:///{alone / 'ledger.db'}", "--artifacts", str(moved)]) == 0
    # and it is the copy that is read: a changed byte there is tampering
    target = moved / paths[-1]
    data = bytearray(target.read_bytes())
    data[-1] ^= 1
    target.chmod(0o644)
    target.write_bytes(bytes(data))
    assert main(["verify", claims, "--db", db]) == 4


def test_runs_record_the_device_dtype_and_environment_and_the_report_shows_them(reference):
    import json

    folder, _, _ = reference
    with open_store(f"sqlite:///{folder / 'ledger.db'}") as store:
        trained = [row for row in store.rows_of("checkpoints") if row["stage"] != "base"]
        runs = store.rows_of("runs")
        details = [json.loads(row["detail_json"]) for row in store.rows_of("evidence")]
    assert details and all(d["device"] == "cpu" and d["device_name"] and d["dtype"] == "float32" for d in details)
    assert any("text" in d for d in details)  # the dense arms' generated text is kept beside it
    meta = json.loads(trained[0]["meta_json"])
    assert meta["device"] == "cpu" and meta["dtype"] == "float32" and meta["device_name"]
    environment = json.loads(runs[0]["environment_json"])
    assert environment["git"]["commit"] and isinstance(environment["git"]["dirty"], bool)
    assert environment["packages"]["torch"] and environment["packages"]["transformers"]
    assert environment["packages"]["ledger"] and environment["device"] == "cpu"
    html = (folder / "out" / "report.html").read_text(encoding="utf-8")
    assert 'id="environment"' in html and environment["git"]["commit"][:12] in html


def test_asking_for_a_gpu_on_a_machine_without_one_is_one_line_and_writes_nothing(tmp_path):
    import torch

    if torch.cuda.is_available():  # the check is about the message; on a GPU machine ask for one that is absent
        device = f"cuda:{torch.cuda.device_count()}"
    else:
        device = "cuda"
    db = tmp_path / "ledger.db"
    refused = ledger_cli(
        "run", str(SMOKE), "--db", f"sqlite:///{db}", "--out", str(tmp_path / "out"), "--device", device
    )
    assert refused.returncode == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    assert device in refused.stderr and not db.exists()
    bad = ledger_cli("run", str(SMOKE), "--db", f"sqlite:///{db}", "--device", "tpu")
    assert bad.returncode == 2 and "tpu" in bad.stderr and not db.exists()


def test_a_symbol_the_tokenizer_splits_is_refused_before_registration(tmp_path):
    """The reader is built from the bases' tokenizers before `run` registers: a protocol whose answers a
    tokenizer cannot read as one token each is refused in one line, and the ledger holds no registration."""
    original = ROOT / "protocols" / "designM-tiny.yaml"
    text = original.read_text(encoding="utf-8").replace(
        "rows_per_step: 16, seed: 20261201, split: test}",
        "rows_per_step: 16, answer_format: words, seed: 20261201, split: test}",
        1,
    )
    text = text.replace("../bases/", str(ROOT / "bases") + "/").replace("../claims/", str(ROOT / "claims") + "/")
    path = tmp_path / "designM-words.yaml"
    path.write_text(text, encoding="utf-8")
    db = tmp_path / "ledger.db"
    refused = ledger_cli("run", str(path), "--db", f"sqlite:///{db}", "--out", str(tmp_path / "out"), "--no-progress")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    (message,) = refused.stderr.strip().splitlines()  # --no-progress silences the model library's bars too
    assert f"{path}: base 'tiny8' cannot read" in message and "' two' -> the unknown token" in message
    assert "Traceback" not in refused.stderr
    store = open_store(f"sqlite:///{db}")
    try:
        assert store.get("protocols") is None and store.get("runs") is None
    finally:
        store.close()
