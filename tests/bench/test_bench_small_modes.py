"""Every bench under bench/ runs in a small mode here, so that none can rot: a bench whose code no longer runs
fails the release check (`bash bench/release_check.sh`, where these run: they time the tools, and the behaviour
they time has tests of its own in CI), not the next person who wants its figure. Each test checks what the bench prints, not only
that it exits 0; the figures themselves are measured at full size by hand (bench/README.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
HERE = Path(__file__).resolve().parent
# A module of another bench, not a bench of its own.
HELPERS = {"gpu_check_parts.py"}


def bench(*args: str, timeout: int = 600, script: str | None = None) -> subprocess.CompletedProcess:
    command = ["bash", str(BENCH / script)] if script else [sys.executable, str(BENCH / args[0])]
    rest = args if script else args[1:]
    done = subprocess.run([*command, *rest], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_every_bench_has_a_small_mode_in_the_suite():
    benches = sorted(p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh") and p.name not in HELPERS)
    tests = "".join(p.read_text(encoding="utf-8") for p in HERE.glob("test_*.py"))
    untested = [name for name in benches if f'"{name}"' not in tests]
    assert benches and not untested, f"benches without a small-mode test in tests/bench: {untested}"


@pytest.mark.release
def test_verify_scale_small_verifies_every_size():
    out = bench("verify_scale.py", "--small").stdout
    lines = {line.split("  ")[0].strip(): line for line in out.splitlines() if line.startswith("verify")}
    assert set(lines) == {"verify", "verify --all", "verify --since-head"}, out
    assert not any("exit codes" in line for line in lines.values()), out
    assert "2,000 rows" in out and "4,000 rows" in out


@pytest.mark.release
@pytest.mark.models
def test_stop_at_depth_small_times_both_ranges_with_equal_losses():
    out = bench("stop_at_depth.py", "--batch", "4", "--batches", "2").stdout
    rows = [line.split() for line in out.splitlines() if re.match(r"\s+1-[48]\s", line)]
    assert [row[0] for row in rows] == ["1-8", "1-4"], out
    assert all(float(row[-1]) < 1e-4 for row in rows)  # stopping rows at their depth leaves the loss as it was
    assert all(float(row[3]) > 0 and float(row[4]) > 0 for row in rows)


@pytest.mark.release
@pytest.mark.models
def test_loop_cost_small_prints_every_variant_per_loop_count():
    args = ["--quick", "--hidden", "128", "--seq", "16", "--repeats", "1", "--loops", "1", "2", "--vocab", "1024"]
    out = bench("loop_cost.py", *args).stdout
    rows = [line for line in out.splitlines() if re.match(r"\s+[12] \|", line)]
    assert len(rows) == 6, out  # loops 1 and 2 in each of the three tables
    merged = float(re.search(r"merged vs unmerged final readout, max \|diff\| = (\S+)", out).group(1))
    assert merged < 1e-4


@pytest.mark.release
@pytest.mark.models
def test_host_syncs_counts_every_path():
    out = bench("host_syncs.py").stdout
    counts = dict(re.findall(r"^(forward, per loop|train step: [^\n]*?|evaluate, per batch)\s{2,}(\S+)$", out, re.M))
    assert len(counts) == 7, out  # the loop, five arm families' steps, and evaluation
    assert float(counts["forward, per loop"]) == 0  # the recurrent loop never waits on the host


@pytest.mark.release
def test_cli_startup_against_this_revision():
    out = bench("cli_startup.py", "--base", "HEAD", "--repeats", "1", timeout=900).stdout
    assert re.search(r"^ledger --help\s+\S+s\s+\S+s\s+\S+$", out, re.M), out
    assert re.search(r"^ledger verify claims/external/ \(empty db\)\s+\S+s\s+\S+s\s+\S+$", out, re.M), out


@pytest.mark.release
def test_install_time_small_installs_the_lock():
    out = bench("--small", script="install_time.sh").stdout
    assert re.search(r"^lock with uv   small:\s+\S+ s  rc=0$", out, re.M), out


@pytest.mark.release
def test_check_budget_small_checks_the_maximal_protocol_and_refuses_past_it():
    out = bench("check_budget.py", "--small").stdout
    assert re.search(r"^check smoke\.yaml\s+\S+s\s+1\.00$", out, re.M), out
    assert re.search(r"^check maximal \([\d,]+ bytes\)\s+\S+s\s+\S+$", out, re.M), out
    assert re.search(r"^check past the budget \(52,\d{3},\d{3} bytes\)\s+\S+s\s+\S+$", out, re.M), out


@pytest.mark.release
@pytest.mark.models
def test_mfu_small_prints_a_rate_and_a_share_of_the_peak_per_tiny_arm():
    out = bench("mfu.py", "--quick", "--variants", "fp32,autocast", "--steps", "1", "--warm", "1").stdout
    peaks = dict(re.findall(r"^# torch\.mm peak (fp32|bf16): (\d+) GFLOP/s", out, re.M))
    assert set(peaks) == {"fp32", "bf16"} and all(int(rate) > 0 for rate in peaks.values()), out
    rows = re.findall(r"^(tiny \S+).*?(fp32|autocast)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)%", out, re.M)
    assert len(rows) == 10, out  # five tiny arms, two variants each
    assert all(float(step) > 0 and float(rate) > 0 and float(share) > 0 for _, _, step, rate, share in rows)


@pytest.mark.release
@pytest.mark.models
def test_threads_small_times_the_parallel_choice_against_the_other_two():
    out = bench("threads.py", "--steps", "3", "--lead", "20").stdout
    rows = re.findall(r"^(\d+ processes?|one process), (\d+) threads?.*?\s([\d.]+)\s+([\d.]+)x$", out, re.M)
    assert len(rows) == 3, out
    assert float(rows[0][3]) == 1.0 and all(float(seconds) > 0 for _, _, seconds, _ in rows), out
