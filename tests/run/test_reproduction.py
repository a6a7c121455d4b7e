"""A run's environment record and its fingerprint, and `ledger compare` on real runs of the smoke protocol:
identical evidence from a second run, the first differing step under another CPU kernel set, and a warning
line per difference where a run is resumed or verified in another environment."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
from run_helpers import SMOKE, ledger_cli

from ledger.store import open_store

pytestmark = pytest.mark.models


def _environments(db: Path) -> list[dict]:
    with open_store(f"sqlite:///{db}") as store:
        return [json.loads(run["environment_json"]) for run in store.rows_of("runs")]


def test_every_run_records_every_distribution_the_lock_torch_build_threads_and_determinism(reference):
    import torch

    from ledger.run.environment import installed_distributions

    folder, _, _ = reference
    environment = _environments(folder / "ledger.db")[0]
    assert environment["distributions"] == installed_distributions() and len(environment["distributions"]) > 50
    lock = environment[
        "lock"
    ]  # the tests run in an install from the lock (tests/run.sh: requirements/install.sh --dev)
    assert lock["file"] in ("requirements/dev.lock", "requirements/cpu.lock") and lock["unmet"] == [], lock
    assert len(lock["sha256"]) == 64
    build = environment["torch_build"]
    assert build["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert build["blas"] and build["parallel"]
    assert isinstance(environment["threads"], int) and environment["threads"] >= 1
    assert environment["determinism"]["deterministic_algorithms"] is False
    assert set(environment["thread_env"]) >= {"OMP_NUM_THREADS", "ATEN_CPU_CAPABILITY"}
    assert environment["python"] and environment["platform"] and environment["machine"]
    html = (folder / "out" / "report.html").read_text(encoding="utf-8")
    assert lock["sha256"][:12] in html and build["cpu_capability"] in html


def test_a_run_folder_keeps_its_fingerprint_which_compares_identical_with_its_ledger(reference, tmp_path):
    folder, _, _ = reference
    written = json.loads((folder / "out" / "fingerprint.json").read_text(encoding="utf-8"))
    smoke = written["protocols"]["smoke"]
    assert set(smoke["arms"]) >= {"A", "B", "C", "E"}
    assert all(len(checkpoint["losses"]) > 0 for checkpoint in smoke["arms"]["A"])
    assert smoke["claims"] and all(claim["outcome"] for claim in smoke["claims"].values())
    same = ledger_cli("compare", str(folder / "ledger.db"), str(folder / "out"))
    assert same.returncode == 0, same.stdout + same.stderr
    assert "identical evidence" in same.stdout
    # one checkpoint's loss changed by one ulp in a copy of the record: the command names that stage and step
    altered = tmp_path / "altered"
    altered.mkdir()
    checkpoint = smoke["arms"]["A"][0]
    step = len(checkpoint["losses"]) // 2
    checkpoint["losses"][step] = math.nextafter(checkpoint["losses"][step], math.inf)
    checkpoint["sha256"] = "0" * 64
    (altered / "fingerprint.json").write_text(json.dumps(written), encoding="utf-8")
    differs = ledger_cli("compare", str(folder / "ledger.db"), str(altered))
    assert differs.returncode == 1, differs.stdout + differs.stderr
    assert f"part at stage {checkpoint['stage']}, step {step + 1}:" in differs.stdout, differs.stdout


@pytest.mark.long  # a run end to end: the long call
def test_resume_and_verify_in_another_environment_warn_one_line_per_difference(reference, tmp_path):
    folder, _, _ = reference
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    db = f"sqlite:///{copy / 'ledger.db'}"
    other = {"ATEN_CPU_CAPABILITY": "default"}  # torch's portable kernels: another CPU capability
    recorded = _environments(copy / "ledger.db")[0]["torch_build"]["cpu_capability"]
    line = f"torch_build.cpu_capability: {recorded} recorded, DEFAULT here"
    resumed = ledger_cli(
        "run", str(SMOKE), "--db", db, "--out", str(copy / "out"), "--resume", "--no-progress", env=other
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    warnings = [text for text in resumed.stderr.splitlines() if text.startswith("warning: resuming run ")]
    assert any(text.endswith(line) for text in warnings), resumed.stderr[-3000:]
    assert any(text.endswith("thread_env.ATEN_CPU_CAPABILITY: none recorded, default here") for text in warnings)
    assert len(warnings) == len({text.partition(": ")[2].partition(": ")[2] for text in warnings})  # each once
    assert "resuming run" in (copy / "out" / "run.log").read_text(encoding="utf-8")
    verified = ledger_cli("verify", "claims/smoke.yaml", "--db", db, env=other)
    assert verified.returncode == 0, verified.stderr[-3000:]  # a warning, not a verdict
    assert f"  environment: {line}" in verified.stderr.splitlines(), verified.stderr
    as_json = ledger_cli("verify", "claims/smoke.yaml", "--db", db, "--json", env=other)
    assert line in json.loads(as_json.stdout)["environment_differences"]


@pytest.mark.long
def test_a_second_run_is_identical_evidence_and_another_cpu_kernel_set_parts_at_a_named_step(reference, tmp_path):
    import torch

    folder, _, _ = reference
    args = ["run", str(SMOKE), "--no-progress"]
    again = ledger_cli(*args, "--db", f"sqlite:///{tmp_path / 'again.db'}", "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr[-3000:]
    same = ledger_cli("compare", str(folder / "out"), str(tmp_path / "again"))
    assert same.returncode == 0, same.stdout + same.stderr
    # The drift of docs/results/phaseA-tiny: the same code and packages on a CPU whose kernels torch picks
    # otherwise (AVX2 against AVX-512) compute other floats from the first steps on.
    here = torch.backends.cpu.get_cpu_capability()
    other = "avx2" if here == "AVX512" else "default"
    moved = ledger_cli(
        *args, "--db", f"sqlite:///{tmp_path / 'moved.db'}", "--out", str(tmp_path / "moved"),
        env={"ATEN_CPU_CAPABILITY": other},
    )  # fmt: skip
    assert moved.returncode == 0, moved.stderr[-3000:]
    differs = ledger_cli("compare", str(folder / "out"), str(tmp_path / "moved"), "--json")
    assert differs.returncode == 1, differs.stdout + differs.stderr
    report = json.loads(differs.stdout)
    parted = [arm for arm in report["arms"] if not arm["identical"]]
    # each differing arm is located: the step whose loss differs, or (the losses equal at every step, which an
    # Intel AVX-512 CPU gave for B) the stage whose checkpoint files differ
    located = re.compile(
        r"part at stage \S+(, step \d+: loss|: the same loss at all \d+ steps, yet the checkpoint files differ)"
    )
    assert parted and all(located.match(arm["detail"]) for arm in parted), parted
    assert any(", step " in arm["detail"] for arm in parted), parted
    assert f"torch_build.cpu_capability: {here} in A, {other.upper()} in B" in report["environment_differences"]


@pytest.mark.long
def test_one_package_moved_is_named_and_the_evidence_still_decides(reference, tmp_path):
    """peft 0.18.0 in place of the lock's version, nothing else changed. Of the packages tried (accelerate,
    peft, transformers; docs/reproducibility.md) none moved a float of these runs: torch computes them, so
    `compare` says identical evidence and names the moved package and the unmet pin of the lock."""
    import subprocess
    import sys

    folder, _, _ = reference
    overlay = tmp_path / "overlay"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-qq", "--no-deps", "--target", str(overlay), "peft==0.18.0"],
        check=True, timeout=300,
    )  # fmt: skip
    moved = ledger_cli(
        "run", str(SMOKE), "--no-progress", "--db", f"sqlite:///{tmp_path / 'peft.db'}", "--out", str(tmp_path / "peft"),
        env={"PYTHONPATH": str(overlay)},
    )  # fmt: skip
    assert moved.returncode == 0, moved.stderr[-3000:]
    assert _environments(tmp_path / "peft.db")[0]["distributions"]["peft"] == "0.18.0"
    compared = ledger_cli("compare", str(folder / "out"), str(tmp_path / "peft"), "--json")
    report = json.loads(compared.stdout)
    recorded = _environments(folder / "ledger.db")[0]["distributions"]["peft"]
    assert f"peft: {recorded} in A, 0.18.0 in B" in report["environment_differences"]
    assert any(line.startswith("lock: ") and "(1 pin unmet) in B" in line for line in report["environment_differences"])
    assert compared.returncode == (0 if report["identical"] else 1)
    assert report["identical"], [arm["detail"] for arm in report["arms"] if not arm["identical"]]
