"""`ledger lm-eval`: a local multiple-choice task (ARC format) and a local generation task (GSM8K format) run
through lm-evaluation-harness on a retrofitted checkpoint and on its base, imported as evidence and judged by
`ledger verify` on the same row ids. The expected figures come from lm-eval's own per-sample log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness_tasks import write_tasks
from run_helpers import ledger_cli

from ledger.store import open_store

pytestmark = [pytest.mark.models, pytest.mark.long]  # lm-eval runs end to end, a minute and more: the long call

OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _export_A(folder: Path, out: Path) -> Path:
    from ledger.run.export import export_checkpoint

    with open_store(f"sqlite:///{folder / 'ledger.db'}") as store:
        sha = [row["sha256"] for row in store.rows_of("checkpoints") if row["arm"] == "A"][-1]
        export_checkpoint(store, sha, out)
    return out


def test_lm_eval_tasks_on_a_checkpoint_and_its_base_become_paired_evidence(reference, tmp_path) -> None:
    export = _export_A(reference[0], tmp_path / "export-A")
    write_tasks(tmp_path / "tasks", documents=10)
    out = tmp_path / "battery"
    env = {**OFFLINE, "HF_DATASETS_CACHE": str(tmp_path / "hf")}
    done = ledger_cli(
        "lm-eval", "--model", f"base={export / 'base'}", "--model", f"A={export}", "--loops", "1",
        "--tasks", "arc_local,gsm8k_local", "--include-path", str(tmp_path / "tasks"), "--out", str(out), env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

    # lm-eval's own verdicts, from its per-sample logs: accuracy and the paired counts
    hits: dict[tuple[str, str], dict[int, bool]] = {}
    for model in ("base", "A"):
        for task, metric in (("arc_local", "acc"), ("gsm8k_local", "exact_match")):
            samples = _lines(out / "lm-eval" / model / f"samples_{task}.jsonl")
            assert len(samples) == 10
            hits[(model, task)] = {s["doc_id"]: bool(s[metric]) for s in samples}
            readings = {r["id"]: r for r in _lines(out / "readings" / model / f"{task}.jsonl")}
            for sample in samples:
                reading = readings[str(sample["doc_id"])]
                assert reading["loop"] == 1
                if task == "arc_local":  # the choice of highest log-likelihood, as lm-eval scored it
                    lls = [resp[0] for resp in sample["filtered_resps"]]
                    assert reading["prediction"] == "ABCD"[lls.index(max(lls))]
                    assert [reading["scores"][label] for label in "ABCD"] == pytest.approx(lls)
    correct = {key: sum(values.values()) for key, values in hits.items()}
    helped = sum(hits[("A", "arc_local")][d] and not hits[("base", "arc_local")][d] for d in range(10))
    hurt = sum(hits[("base", "arc_local")][d] and not hits[("A", "arc_local")][d] for d in range(10))

    claims = tmp_path / "claims.yaml"
    claims.write_text(
        f"""protocol: lm-eval
release: {out / "release.yaml"}
correction: holm
claims:
  - id: A_arc
    statement: At loop 1, the retrofitted checkpoint answers the local ARC-format task as lm-eval scored it.
    statistic: accuracy
    arm: A
    manifest: arc_local
    threshold: 0.0
    reported: {{correct: {correct[("A", "arc_local")]}, n: 10}}
  - id: base_gsm
    statement: The base answers the local GSM8K-format task as lm-eval scored it (exact match).
    statistic: accuracy
    arm: base
    manifest: gsm8k_local
    threshold: 0.0
    reported: {{correct: {correct[("base", "gsm8k_local")]}, n: 10}}
  - id: A_vs_base_arc
    statement: At loop 1 the checkpoint's ARC-format answers differ from its base's on the same rows.
    statistic: paired_exact
    arms: [A, base]
    manifest: arc_local
    loop: 1
    direction: two-sided
    alpha: 0.05
""",
        encoding="utf-8",
    )
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    verified = ledger_cli("verify", str(claims), "--import", "--db", db, "--json")
    report = json.loads(verified.stdout)
    by_id = {claim["claim_id"]: claim for claim in report["claims"]}
    for claim_id in ("A_arc", "base_gsm"):
        assert by_id[claim_id]["outcome"] == "supported", by_id[claim_id]["reason"]
        assert "matches the reported" in by_id[claim_id]["reason"]
    paired = by_id["A_vs_base_arc"]
    assert paired["integrity"] == "verified" and paired["figures"]["n"] == 10
    assert (paired["figures"]["helped"], paired["figures"]["hurt"]) == (helped, hurt)


def test_lm_eval_refuses_bad_input_in_one_line(tmp_path) -> None:
    write_tasks(tmp_path / "tasks", documents=2)
    base = Path(__file__).resolve().parents[2] / "bases" / "tiny-base"
    cases = [
        (["--model", "base", "--tasks", "arc_local"], "NAME=FOLDER"),
        (["--model", f"b={tmp_path / 'missing'}", "--tasks", "arc_local"], "not found"),
        (["--model", f"b={base}", "--tasks", "no_such_task", "--include-path", str(tmp_path / "tasks")], "unknown"),
        (["--model", f"b={base}", "--tasks", "arc_local", "--loops", "0"], "--loops"),
        (["--model", f"b={base}", "--tasks", "ai2_arc"], "not a task"),
    ]  # fmt: skip
    for args, message in cases:
        done = ledger_cli("lm-eval", *args, "--out", str(tmp_path / "out"), env=OFFLINE)
        assert done.returncode == 2, (args, done.stderr[-2000:])
        assert message in done.stderr and "Traceback" not in done.stderr, (args, done.stderr[-2000:])
        assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_a_test_recurrence_sweep_is_one_release_and_pairs_one_arm_at_two_loops(reference, tmp_path) -> None:
    """`--loops 1,2`: the checkpoint read at each loop (lm-eval's logs under lm-eval/A/loop1, loop2; its
    readings of both loops in one file, one piece of evidence), its base once; a claim pairs A's rows at loop 2
    with its rows at loop 1, and its counts are lm-eval's own, loop by loop."""
    export = _export_A(reference[0], tmp_path / "export-A")
    write_tasks(tmp_path / "tasks", documents=8)
    out = tmp_path / "sweep"
    env = {**OFFLINE, "HF_DATASETS_CACHE": str(tmp_path / "hf")}
    done = ledger_cli(
        "lm-eval", "--model", f"base={export / 'base'}", "--model", f"A={export}", "--loops", "1,2",
        "--tasks", "arc_local", "--include-path", str(tmp_path / "tasks"), "--out", str(out), env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "readings" / "base" / "arc_local.jsonl").is_file()  # a base: once, at loop 1
    hits = {}
    readings = _lines(out / "readings" / "A" / "arc_local.jsonl")
    assert sorted(reading["loop"] for reading in readings) == [1] * 8 + [2] * 8
    for loop in (1, 2):
        samples = _lines(out / "lm-eval" / "A" / f"loop{loop}" / "samples_arc_local.jsonl")
        hits[loop] = {s["doc_id"]: bool(s["acc"]) for s in samples}
    helped = sum(hits[2][d] and not hits[1][d] for d in range(8))
    hurt = sum(hits[1][d] and not hits[2][d] for d in range(8))
    claims = tmp_path / "claims.yaml"
    claims.write_text(
        f"""protocol: lm-eval
release: {out / "release.yaml"}
correction: none
claims:
  - id: A_rises_with_recurrence
    statement: The checkpoint answers the local ARC-format task differently at loop 2 than at loop 1.
    statistic: paired_exact
    arms: [A, A]
    loops: [2, 1]
    manifest: arc_local
    direction: two-sided
""",
        encoding="utf-8",
    )
    verified = ledger_cli("verify", str(claims), "--import", "--db", f"sqlite:///{tmp_path / 'l.db'}", "--json")
    (claim,) = json.loads(verified.stdout)["claims"]
    assert claim["integrity"] == "verified" and claim["figures"].get("n") == 8, claim["reason"]
    assert (claim["figures"]["helped"], claim["figures"]["hurt"]) == (helped, hurt)
    assert claim["figures"]["correct_A@2"] == sum(hits[2].values())
    assert (
        "--loops 0,1: give a loop count"
        in ledger_cli(
            "lm-eval", "--model", f"A={export}", "--tasks", "arc_local", "--loops", "0,1", "--out", str(tmp_path / "x")
        ).stderr
    )
