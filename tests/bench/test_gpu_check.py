"""bench/gpu_check.py (through bench/gpu_check.sh): the CPU dry run exercises every part; asking for a GPU where there is none is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_check.py"
WRAPPER = ROOT / "bench" / "gpu_check.sh"  # what a GPU machine runs: picks the Python, cuts off after 8 minutes


def _gpu_check(*args: str, timeout: int = 300, wrapped: bool = False) -> subprocess.CompletedProcess:
    command = ["bash", str(WRAPPER)] if wrapped else [sys.executable, str(SCRIPT)]
    env = {**os.environ, "GPU_CHECK_PYTHON": sys.executable}
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


@pytest.mark.long  # a run of minutes: the long call runs it beside the real-shape dry runs
def test_cpu_dry_run_measures_every_part_and_passes(tmp_path):
    report_file = tmp_path / "gpu_check.json"
    done = _gpu_check("--device", "cpu", "--small", "--json", str(report_file), wrapped=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "result: all checks passed" in done.stdout
    report = json.loads(report_file.read_text(encoding="utf-8"))
    assert report["exit_code"] == 0 and report["failed"] == []
    parts = report["parts"]
    assert set(parts) == {"train", "forward", "adapter", "identity", "e2e"}
    assert all(part["ok"] and part["error"] is None for part in parts.values()), parts

    train = parts["train"]["data"]  # arm A's stage in bf16 through ArmRuntime.train_stage, padded batches
    assert train["dtype"] == "bfloat16" and train["step_s"] > 0 and train["peak_rss_gib"] > 0
    assert train["host_syncs_per_step"] <= 0.5, train["host_sync_sites"]  # one copy of the losses per 10 steps
    assert train["first_update_moved"] and min(train["first_update_moved"].values()) >= 0.5
    assert len(train["losses"]) == train["steps"]["timed"] and all(loss > 0 for loss in train["losses"])

    forward = parts["forward"]["data"]
    assert {(r["batch"], r["loops"]) for r in forward["ratios"]} == {(b, t) for b in (1, 4) for t in (1, 4, 8, 12)}
    assert all(r["ratio"] > 0 and r["pred"] == (1 + r["loops"]) / 2 for r in forward["ratios"])
    assert forward["final_readout_equal"] is True

    adapter = parts["adapter"]["data"]
    assert {(r["batch"], r["loops"]) for r in adapter["ratios"]} == {(b, t) for b in (1, 4) for t in (4, 8)}
    assert all(r["lora_over_full"] > 0 and r["merged_over_full"] > 0 for r in adapter["ratios"])
    assert all(r["merged_max_abs_diff"] < 1e-4 for r in adapter["ratios"])  # fp32 on the CPU

    identity = parts["identity"]["data"]
    assert identity["passed"] is True
    assert identity["RecurrentLM"]["bit_exact"] and identity["AdapterRecurrentLM"]["bit_exact"]

    e2e = parts["e2e"]["data"]
    assert e2e["protocol"] == "protocols/smoke.yaml" and e2e["run_rc"] == 0
    assert e2e["chain_ok"] is True and e2e["checkpoints_rehash"] is True and e2e["checkpoints"] >= 1
    assert e2e["meta_ok"] is True and e2e["meta"][0]["device"] == "cpu"
    assert e2e["verify_ok"] is True and e2e["verify_rc"] in (0, 1, 5)  # claims on arms not run: not supported
    assert all(claim["integrity"] == "verified" for claim in e2e["claims"].values())

    # the one table: a header line and a row per check, in fixed-width columns
    lines = done.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("part "))
    table = [line for line in lines[head + 2 :] if line.strip()][: len(report["rows"])]
    assert len({line.index(" | ") for line in [lines[head], *table]}) == 1
    assert {"train", "forward", "adapter", "identity", "e2e"} == {line.split()[0] for line in table}
    assert "device cpu" in done.stdout and f"torch {report['header']['torch']}" in done.stdout


def test_asking_for_cuda_without_a_gpu_is_one_line_and_exit_2():
    import torch

    if torch.cuda.is_available():  # a GPU machine: the quick variant runs instead
        done = _gpu_check("--device", "cuda", "--small", "--skip-e2e", "--repeats", "2")
        assert done.returncode == 0, done.stdout + done.stderr
        return
    done = _gpu_check("--device", "cuda", timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    output = (done.stdout + done.stderr).strip()
    assert len(output.splitlines()) == 1 and "Traceback" not in output
    assert "no GPU" in output and "--device cpu --small" in output


def test_a_python_without_the_libraries_is_told_what_to_install(monkeypatch, capsys):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(SCRIPT.parent))
    monkeypatch.setattr(gpu_check, "NEEDED", ("torch", "no_such_module_here"))
    assert gpu_check.main(["--device", "cpu", "--small"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "lacks no_such_module_here" in err and "requirements/install.sh" in err
