"""The gated-residual bridge, defined in the tests (``gated_bridge.py``, ``gated_bridge_spec.py``) and registered
by a plugin, end to end: ``ledger check``, a run, ``ledger export --format hf``, and the folder read where the
ledger cannot be imported, every reading equal to what the run recorded. No product file names it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.run_helpers import ROOT, ledger_cli

HERE = Path(__file__).resolve().parent
PLUGIN = {"LEDGER_PLUGINS": "gated_bridge_plugin", "PYTHONPATH": f"{HERE}:{ROOT}"}

PROTOCOL = """\
name: gated-smoke
version: 1
description: A recurrent arm whose state re-enters through a gated residual, on a tiny random-init model.
seed: 5
bases:
  tiny:
    source: builtin:tiny-qwen2?hidden=32&layers=4&heads=2&kv_heads=1&intermediate=64&seed=0
    dtype: float32
    num_layers: 4
manifests:
  - {id: train, role: train, generator: rule_chasing, alphabet: N16, depths: [1, 3], rows_per_depth: 16, seed: 5, split: train}
  - {id: dev, role: dev, generator: rule_chasing, alphabet: N16, depths: [1, 2], rows_per_depth: 4, seed: 5, split: dev}
  - {id: eval, role: eval, generator: rule_chasing, alphabet: N16, depths: [1, 3], rows_per_depth: 4, seed: 5, split: test}
arms:
  - id: G
    kind: recurrent
    base: tiny
    surgery: {split: [1, 3]}
    bridge: {kind: gated_residual, gate_init: 0.0}
    budget: {kind: full_block}
    stages:
      - {id: install, objective: intermediate, manifest: train, steps: 4, batch_size: 8, optimizer: {kind: adamw, lr: 0.01}, recurrence: {kind: forced}, gates: [installation]}
    evaluation: {manifests: [eval], loops: forced, batch_size: 8, latency_sample_per_depth: 1}
gates:
  - {id: installation, kind: installation, manifest: dev, depths: [1, 2], threshold: 0.0, action: stop}
claims:
  - claims.yaml
"""

CLAIMS = """\
protocol: gated-smoke
correction: holm
claims:
  - {id: G_gate_recorded, statement: The gated arm's installation gate was measured (threshold 0)., statistic: gate, gate: installation, arm: G, manifest: dev}
"""


@pytest.mark.long  # a run, an export and a clean load: the long call
def test_a_plugin_bridge_runs_exports_and_loads_as_recorded(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "run"))
    from gated_bridge_spec import KIND
    from hf_compare import read_as_recorded

    from ledger.protocol.arms import BRIDGES
    from ledger.store import open_store

    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    protocol = tmp_path / "gated.yaml"
    protocol.write_text(PROTOCOL, encoding="utf-8")
    checked = ledger_cli("check", str(protocol), env=PLUGIN)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    without = ledger_cli("check", str(protocol))
    assert without.returncode != 0 and "gated_residual" in without.stdout + without.stderr

    db = tmp_path / "ledger.db"
    ran = ledger_cli("run", str(protocol), "--db", f"sqlite:///{db}", "--out", str(tmp_path / "out"), env=PLUGIN)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    with open_store(f"sqlite:///{db}") as store:
        final = [row["sha256"] for row in store.rows_of("checkpoints") if row["arm"] == "G"][-1]

    folder = tmp_path / "hf-G"
    exported = ledger_cli(
        "export", final[:12], "--out", str(folder), "--format", "hf", "--db", f"sqlite:///{db}", env=PLUGIN
    )
    assert exported.returncode == 0, exported.stdout[-3000:] + exported.stderr[-3000:]
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["bridge"] == "gated_residual" and config["bridge_options"] == {"gate_init": 0.0}
    assert (folder / "gated_bridge.py").read_bytes() == (HERE / "gated_bridge.py").read_bytes()

    BRIDGES.add(KIND)  # this process reads the protocol too, to batch its rows as the run did
    try:
        answer = read_as_recorded(folder, protocol, "G", db, tmp_path)  # every reading, at every loop
    finally:
        BRIDGES.remove(KIND.name)
    assert answer["imported"] == []
