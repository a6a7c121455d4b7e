"""A third arm kind, defined in the tests (``looped_kind.py``), goes through every command without a product
file knowing it: ``ledger check``, ``ledger params``, a dry run, a run and ``ledger verify``. The run keeps its
checkpoint files in an artifact store defined in the tests too (``flat_artifacts.py``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.run_helpers import ROOT, ledger_cli

HERE = Path(__file__).resolve().parent
PLUGIN = {"LEDGER_PLUGINS": "looped_kind,flat_artifacts", "PYTHONPATH": f"{HERE}:{ROOT}"}

PROTOCOL = """\
name: looped-smoke
version: 1
description: A looped arm without a bridge beside a dense arm, on a tiny random-init model.
seed: 5
bases:
  tiny:
    source: builtin:tiny-qwen2?hidden=32&layers=4&heads=2&kv_heads=1&intermediate=64&seed=0
    dtype: float32
    num_layers: 4
manifests:
  - {id: train, role: train, generator: rule_chasing, alphabet: N16, depths: [1, 3], rows_per_depth: 16, seed: 5, split: train}
  - {id: dev, role: dev, generator: rule_chasing, alphabet: N16, depths: [1, 2], rows_per_depth: 4, seed: 5, split: dev}
  - {id: eval, role: eval, generator: rule_chasing, alphabet: N16, depths: [1, 4], rows_per_depth: 4, seed: 5, split: test}
arms:
  - id: L
    kind: looped
    base: tiny
    surgery: {split: [1, 3]}
    budget: {kind: full_block}
    stages:
      - {id: install, objective: intermediate, manifest: train, steps: 4, batch_size: 8, optimizer: {kind: adamw, lr: 0.003}, gates: [installation]}
    evaluation: {manifests: [eval], batch_size: 8, latency_sample_per_depth: 1}
  - id: B
    kind: dense
    base: tiny
    stages:
      - {id: sft, objective: sft_direct, manifest: train, steps: 4, batch_size: 8, optimizer: {kind: adamw, lr: 0.003}}
    evaluation: {manifests: [eval], batch_size: 8, max_new_tokens: 4, latency_sample_per_depth: 1}
gates:
  - {id: installation, kind: installation, manifest: dev, depths: [1, 2], threshold: 0.0, action: stop}
  - {id: L_vs_B, kind: depth_gate, manifest: eval, arm: L, versus: B, test: paired_exact, alpha: 0.05, consecutive: 2, action: flag}
claims:
  - claims.yaml
"""

CLAIMS = """\
protocol: looped-smoke
correction: holm
claims:
  - {id: L_gate_recorded, statement: The looped arm's installation gate was measured (threshold 0)., statistic: gate, gate: installation, arm: L, manifest: dev}
  - {id: L_accuracy_defined, statement: The looped arm's accuracy is defined (>= 0)., statistic: accuracy, arm: L, manifest: eval, threshold: 0.0}
"""


@pytest.fixture(scope="module")
def protocol(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("looped")
    (folder / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    path = folder / "looped.yaml"
    path.write_text(PROTOCOL, encoding="utf-8")
    return path


def run(*args: str) -> subprocess.CompletedProcess:
    return ledger_cli(*args, env=PLUGIN)


def test_without_the_plugin_the_kind_is_unknown(protocol):
    checked = ledger_cli("check", str(protocol))
    assert checked.returncode == 2
    assert "unknown kind 'looped'" in checked.stdout + checked.stderr


def test_a_plugin_that_fails_to_import_is_one_line_and_exit_2(protocol):
    checked = ledger_cli("check", str(protocol), env={"LEDGER_PLUGINS": "no_such_plugin_module"})
    assert checked.returncode == 2
    lines = (checked.stdout + checked.stderr).strip().splitlines()
    assert len(lines) == 1 and "plugin 'no_such_plugin_module'" in lines[0] and "Traceback" not in lines[0]


def test_the_schema_publishes_the_plugins_kind(protocol):
    schema = json.loads(run("schema").stdout)
    assert "LoopedArm" in schema["$defs"]
    assert schema["$defs"]["LoopedArm"]["properties"]["kind"]["const"] == "looped"


def test_check_refuses_what_the_kind_refuses(protocol, tmp_path):
    bad = tmp_path / "bad.yaml"
    text = PROTOCOL.replace("surgery: {split: [1, 3]}", "surgery: {tuple: [1, 1, 1]}", 1)
    text = text.replace(
        "lr: 0.003}, gates: [installation]}", "lr: 0.003, group_lrs: {bridge_p: 2.0}}, gates: [installation]}"
    )
    bad.write_text(text.replace("claims:\n  - claims.yaml\n", ""), encoding="utf-8")
    checked = run("check", str(bad))
    out = checked.stdout + checked.stderr
    assert checked.returncode == 2, out
    assert "a looped arm loops a split" in out  # its own part rule
    assert "arm L trains no group 'bridge_p' (its groups: block)" in out  # its own optimiser groups


@pytest.mark.long  # a run of minutes: the long call runs it beside the real-shape dry runs
def test_check_params_dry_run_run_and_verify(protocol, tmp_path):
    checked = run("check", str(protocol))
    assert checked.returncode == 0, checked.stdout + checked.stderr

    params = run("params", str(protocol))
    assert params.returncode == 0, params.stdout + params.stderr
    row = next(line for line in params.stdout.splitlines() if "│ L " in line)
    assert "looped" in row and "bridge 0" in row  # counted by the recurrent counter: block alone, no bridge

    dry = run("check", "--dry-run", str(protocol))
    assert dry.returncode == 0, dry.stdout + dry.stderr

    db = tmp_path / "l.db"
    flat = tmp_path / "flat"
    artifacts = f"flat://{flat}"
    ran = run("run", str(protocol), "--db", f"sqlite:///{db}", "--out", str(tmp_path / "out"), "--artifacts", artifacts)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "L" in ran.stdout and "installation" in ran.stdout
    files = sorted(flat.glob("*.bin"))
    assert len(files) >= 3 and not (tmp_path / "objects").exists()  # the base and each arm's stage, flat

    claims = str(protocol.parent / "claims.yaml")
    everything = run("verify", claims, "--db", f"sqlite:///{db}", "--all", "--artifacts", artifacts)
    assert everything.returncode == 0, everything.stdout[-3000:] + everything.stderr[-3000:]
    without = run("verify", claims, "--db", f"sqlite:///{db}", "--all")  # the local store has none of them
    assert without.returncode != 0 and "not found" in without.stdout + without.stderr

    verified = run("verify", claims, "--db", f"sqlite:///{db}", "--json", "--artifacts", artifacts)
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
    report = json.loads(verified.stdout)
    assert {claim["claim_id"].rsplit("/", 1)[-1] for claim in report["claims"]} == {
        "L_gate_recorded",
        "L_accuracy_defined",
    }
    assert all(claim["integrity"] == "verified" and claim["ok"] for claim in report["claims"])
