"""A protocol reads a local ARC-schema file: by letter over the paper's 4 cyclic permutations, and by each
option's log-likelihood, at loops 1 and 2; the base is read on the guardrail's rows for pairing. The figures are
recomputed here from the base model directly (transformers' logits), not through the code under test."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from run_helpers import ROOT, ledger_cli

from ledger.store import open_store

pytestmark = pytest.mark.models

BASE = ROOT / "bases" / "tiny-base"


def _arc(folder: Path, n: int = 12) -> str:
    sys.path.insert(0, str(ROOT / "tests" / "run"))
    from harness_tasks import write_tasks

    files = write_tasks(folder, documents=n)
    return hashlib.sha256(files["arc_local"].read_bytes()).hexdigest()


def _protocol(folder: Path, sha: str) -> Path:
    data = folder / "arc_local.jsonl"
    protocol = folder / "choice.yaml"
    protocol.write_text(
        f"""name: choice-file
version: 1
description: A local ARC-schema file read three ways.
seed: 3
bases:
  tiny: {{source: {BASE}, dtype: float32, num_layers: 4}}
manifests:
  - {{id: train, role: train, generator: rule_chasing, alphabet: N16, depths: [1, 2], rows_per_depth: 8, seed: 3, split: train}}
  - {{id: arc_perm, role: guardrail, generator: choice_file, path: {data}, sha256: {sha}, seed: 0, split: arcp, permutations: 4}}
  - {{id: arc_ll, role: eval, generator: choice_file, path: {data}, sha256: {sha}, seed: 0, split: arcl, scoring: loglik, loops: [1, 2]}}
  - {{id: arc_ll_guard, role: guardrail, generator: choice_file, path: {data}, sha256: {sha}, seed: 0, split: arcg, scoring: loglik}}
arms:
  - id: A
    kind: recurrent
    base: tiny
    surgery: {{split: [1, 3]}}
    bridge: {{kind: split}}
    budget: {{kind: full_block}}
    stages:
      - {{id: s, objective: intermediate, manifest: train, steps: 2, batch_size: 4, optimizer: {{kind: adamw, lr: 1.0e-3}}, recurrence: {{kind: forced}}, gates: [keeps, keeps_ll]}}
    evaluation: {{manifests: [arc_perm, arc_ll]}}
gates:
  - {{id: keeps, kind: guardrail, manifest: arc_perm, max_drop: 1.0, action: flag}}
  - {{id: keeps_ll, kind: guardrail, manifest: arc_ll_guard, max_drop: 1.0, action: flag}}
claims: [claims.yaml]
""",
        encoding="utf-8",
    )
    (folder / "claims.yaml").write_text(
        """protocol: choice-file
correction: none
claims:
  - {id: A_vs_base, statement: A vs the base on the local ARC rows., statistic: paired_exact, arms: [A, "base:tiny"], manifest: arc_perm, loop: 1, direction: two-sided}
  - {id: A_loop2, statement: A at loop 2 by log-likelihood., statistic: accuracy, arm: A, manifest: arc_ll, threshold: 0.0}
""",
        encoding="utf-8",
    )
    return protocol


def _loglik(model, tokenizer, context: str, continuation: str) -> float:
    import torch

    context_ids = tokenizer(context, add_special_tokens=False).input_ids
    whole = tokenizer(context + continuation, add_special_tokens=False).input_ids
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([whole])).logits[0].float(), -1)
    return float(sum(logprobs[i - 1, whole[i]] for i in range(len(context_ids), len(whole))))


def test_a_choice_file_is_read_by_permutations_and_log_likelihood_at_each_loop(tmp_path) -> None:
    sha = _arc(tmp_path)
    protocol = _protocol(tmp_path, sha)
    db = tmp_path / "ledger.db"
    done = ledger_cli("run", str(protocol), "--db", f"sqlite:///{db}", "--out", str(tmp_path / "out"), "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    with open_store(f"sqlite:///{db}") as store:
        evidence = list(store.rows_of("evidence"))
        manifests = {row["sha256"]: row["name"] for row in store.rows_of("manifests")}
    by = {}
    for row in evidence:
        by.setdefault((row["arm"], manifests[row["manifest_sha256"]], row["loop"]), {})[row["row_id"]] = row
    assert len(by[("A", "arc_ll", 1)]) == len(by[("A", "arc_ll", 2)]) == 12
    assert len(by[("base:tiny", "arc_perm", 1)]) == 12 and ("A", "arc_perm", 2) not in by

    from arms.bases.loading import load_base
    from ledger.rows.tasks.choice_file import generate_choice_file

    model, tokenizer = load_base(str(BASE))  # the base and the tokenizer it was trained with, as a run loads them
    rows = generate_choice_file(path=str(tmp_path / "arc_local.jsonl"), sha256=sha, split="arcg")
    for row in rows[:6]:  # the base's log-likelihood reading (the guardrail's reference), recomputed here
        scores = [_loglik(model, tokenizer, f"Question: {row.meta['question']}\nAnswer:", f" {text}")
                  for text in row.choices.values()]  # fmt: skip
        expected = "ABCD"[scores.index(max(scores))]
        assert by[("base:tiny", "arc_ll_guard", 1)][row.row_id]["prediction"] == expected, row.row_id
    base_perm = by[("base:tiny", "arc_perm", 1)]
    assert all(reading["prediction"] in "ABCD" for reading in base_perm.values())

    verified = ledger_cli("verify", str(tmp_path / "claims.yaml"), "--db", f"sqlite:///{db}", "--json")
    claims = {claim["claim_id"]: claim for claim in json.loads(verified.stdout)["claims"]}
    assert claims["A_vs_base"]["integrity"] == "verified" and claims["A_vs_base"]["figures"]["n"] == 12
    assert claims["A_loop2"]["outcome"] == "supported"
