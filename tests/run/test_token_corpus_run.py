"""A stage trains on a packed token corpus (the seed's parquet shards), alone and mixed with text: the steps
read the shards' sequences as they are (each step's tokens are the sequences' predicted positions), and a shard
changed after registration stops the next run before it trains."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from run_helpers import ROOT, ledger_cli

from ledger.store import open_store

pytestmark = pytest.mark.models

BASE = ROOT / "bases" / "tiny-base-large-v2"


def _protocol(folder: Path) -> Path:
    protocol = folder / "corpus.yaml"
    protocol.write_text(
        f"""name: token-corpus
purpose: exploratory
version: 1
description: Design M on a packed token corpus, alone and mixed with generated text.
seed: 5
bases:
  tiny8: {{source: {BASE}, dtype: float32, num_layers: 8}}
manifests:
  - {{id: web, role: train, generator: token_corpus, path: web, sequence_length: 33, seed: 0, split: web}}
  - {{id: general, role: train, generator: text, source: generated, part: train, documents: 16, words: 24, seed: 5, split: general}}
  - {{id: problems_dev, role: dev, generator: word_problems, steps: [1, 2], rows_per_step: 2, seed: 5, split: pdev}}
  - {{id: general_dev, role: dev, generator: text, source: generated, part: dev, version: 2, documents: 4, words: 24, seed: 5, split: gdev}}
arms:
  - id: M
    kind: recurrent
    base: tiny8
    surgery: {{tuple: [2, 2, 2]}}
    bridge: {{kind: concat, init: identity, initial_state: random, sigma: 1.0}}
    budget: {{kind: full_model}}
    stages:
      - {{id: heal, objective: next_token, manifest: web, steps: 3, batch_size: 4, max_tokens: 64, optimizer: {{kind: adamw, lr: 1.0e-4}}, recurrence: {{kind: poisson_lognormal, mean: 2, backprop_depth: 2, offset: corrected}}}}
      - {{id: mix, objective: next_token, mixture: {{web: 0.5, general: 0.5}}, steps: 2, batch_size: 4, max_tokens: 64, optimizer: {{kind: adamw, lr: 1.0e-4}}, recurrence: {{kind: poisson_lognormal, mean: 2, backprop_depth: 2, offset: corrected}}}}
    evaluation: &read {{manifests: [problems_dev, general_dev], loops: [1, 2], batch_size: 4, max_tokens: 64, latency_sample_per_depth: 0}}
  - id: M_micro
    kind: recurrent
    base: tiny8
    surgery: {{tuple: [2, 2, 2]}}
    bridge: {{kind: concat, init: identity, initial_state: random, sigma: 1.0}}
    budget: {{kind: full_model}}
    stages:
      - {{id: heal, objective: next_token, manifest: web, steps: 3, batch_size: 4, micro_batch_size: 2, max_tokens: 64, optimizer: {{kind: adamw, lr: 1.0e-4}}, recurrence: {{kind: poisson_lognormal, mean: 2, backprop_depth: 2, offset: corrected}}}}
    evaluation: *read
""",
        encoding="utf-8",
    )
    return protocol


def test_a_stage_trains_on_the_shards_sequences_and_a_changed_shard_is_refused(tmp_path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "rows"))
    from test_token_corpus import write_shard

    sequences = [[(5 * i + j) % 300 for j in range(33)] for i in range(10)]
    write_shard(tmp_path / "web" / "train-0.parquet", sequences[:6])
    write_shard(tmp_path / "web" / "train-1.parquet", sequences[6:])
    protocol = _protocol(tmp_path)
    db = f"sqlite:///{tmp_path / 'l.db'}"
    done = ledger_cli("run", str(protocol), "--db", db, "--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr[-3000:]
    store = open_store(db)
    (shards,) = store.manifests_of([store.protocols()[0].sha256], name="web")
    assert [row.row_id for row in store.manifest_rows(shards.sha256)] == ["web/train-0.parquet", "web/train-1.parquet"]
    metas = [json.loads(row["meta_json"]) for row in store.rows_of("checkpoints")]
    heals = [meta for meta in metas if meta.get("steps") == 3]
    assert len(heals) == 2  # M, and M_micro in micro-batches of 2: each step's cost is its whole batch's
    for heal in heals:
        assert heal["step_tokens"] == [4 * 32] * 3  # 4 sequences of 33 tokens: 32 predicted positions each
        assert all(math.isfinite(loss) for loss in heal["losses"])
    write_shard(tmp_path / "web" / "train-1.parquet", sequences[6:][::-1])
    again = ledger_cli("run", str(protocol), "--db", db, "--out", str(tmp_path / "run2"))
    assert again.returncode == 3 and "web" in again.stderr and "Traceback" not in again.stderr, again.stderr[-2000:]
