"""The test entry points: `bash tests/run.sh` (the README's test command), `.ci/run` (which calls it with
--long) and `bench/release_check.sh` (the real-scale checks CI leaves out). Their option handling is checked here,
and that the release check's set is what it says: a release check that collected nothing would pass unseen."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


@pytest.mark.parametrize("path", ["tests/run.sh", "bench/release_check.sh"])
def test_help_explains_and_an_unknown_option_is_one_line_and_exit_2(path):
    helped = script(path, "--help")
    assert helped.returncode == 0 and f"bash {path}" in helped.stdout, helped.stdout  # its usage lines
    assert "Exit" in helped.stdout and not helped.stdout.startswith("#"), helped.stdout  # its exit codes, as prose
    refused = script(path, "--fast")
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout + refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "unknown option --fast" in refused.stderr


def collected(marker: str, *files: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", marker, *files],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_release_check_runs_the_real_scale_dry_runs_and_ci_their_narrow_twins():
    release = collected("release")
    names = ("phaseA", "designM-tinyllama", "designM-llama32")
    shapes = "tests/run/test_dry_run_shapes.py::test_a_real_scale_protocol_runs_every_arm"
    init = "tests/protocol/test_init.py::test_init_on_smollm2_passes"
    benches = [line for line in release if line.startswith("tests/bench/test_bench_small_modes.py::")]
    first_command = "tests/e2e/test_phaseA_tiny.py::test_phaseA_tiny_"  # the README's first command, whole
    assert sorted(set(release) - set(benches)) == sorted(
        [f"{shapes}_at_its_shapes_with_no_weights[{name}]" for name in names]
        + [f"{init}_the_dry_run_as_written[{template}]" for template in ("phaseA", "designM")]
        + [
            f"{first_command}{name}"
            for name in (
                "runs_end_to_end_and_its_claims_verify",
                "reproduces_the_committed_record_bit_for_bit",
                "report_draws_every_arms_per_depth_curve",
            )
        ]
    )
    assert len(benches) == 9  # every bench's small mode but the GPU check's, which the long call runs
    twins = ("tests/run/test_dry_run_shapes.py", "tests/protocol/test_init.py")
    long, default = collected("long", *twins), collected("not long and not release", *twins)
    for name in names:  # each protocol as written, at narrow widths, in CI's long call
        assert f"{shapes}_at_narrow_widths[{name}]" in long
    for template in ("phaseA", "designM"):  # what `ledger init` writes for SmolLM2 passes the check in every run
        assert f"{init}_the_check_as_written[{template}]" in default
    assert not set(release) & (set(long) | set(default))


def test_ci_runs_the_readmes_test_command_with_the_long_call_and_the_release_check_runs_the_rest():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash tests/run.sh --setup" in ci and "bash tests/run.sh --long-only" in ci
    readme = [line.split("#")[0].strip() for line in (ROOT / "README.md").read_text().splitlines()]
    command = next(line for line in readme if line.startswith("bash tests/"))  # the README's test command
    assert command == "bash tests/run.sh"
    # .ci/run runs it as the README writes it, on a line of its own (an ERR trap times a failure)
    assert command in [line.strip() for line in ci.splitlines()]
    assert "exec bash tests/run.sh --release" in (ROOT / "bench" / "release_check.sh").read_text()
    run = (ROOT / "tests" / "run.sh").read_text()
    assert "-m release" in run and "-m long" in run
