"""The embedded default (issue #6): the shipped tiny bases and Phase A in miniature, end to end.

The README's first command, `ledger run protocols/phaseA-tiny.yaml --resume --parallel 2`, trains three seeds of
the paper's bridge and two controls (16 minutes on two CPU cores, docs/results/phaseA-tiny/timing.txt): the release check runs it whole
(`bash bench/release_check.sh`), then `ledger verify` on its claims, checks that the report draws the per-depth
curves of every arm, and that the run reproduces the committed record `docs/results/phaseA-tiny` bit for bit
(`ledger compare`: every checkpoint's SHA-256, every claim's outcome and figures) under the lock, on a CPU of the
record's model and capability. CI's long call runs the same command on one seed of A, its persistence reading and
both controls (`--arms A.s1,A_persist,B,C`), and holds each of those arms to the record bit for bit.
"""

from __future__ import annotations

import json
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from run_helpers import ledger_cli as run_ledger

from ledger.store import open_store

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "protocols" / "phaseA-tiny.yaml"
pytestmark = pytest.mark.models


def ledger_cli(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    return run_ledger(*args, timeout=timeout)


class _Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs).get("src", ""))


def _run(folder: Path, *arms: str) -> tuple[Path, str, str]:
    db = f"sqlite:///{folder / 'ledger.db'}"
    chosen = ("--arms", ",".join(arms)) if arms else ()
    result = ledger_cli(  # as the README's first command runs it: the arms in two processes, one per core
        "run", str(TINY), "--db", db, "--out", str(folder / "out"), "--no-progress", "--resume", "--parallel", "2",
        *chosen,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return folder, db, result.stdout


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("phaseA-tiny"))


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("phaseA-tiny-seed"), *CORE)


ARMS = ("A.s1", "A.s2", "A.s3", "A_persist", "B", "C")
CORE = ("A.s1", "A_persist", "B", "C")  # the long call's share: one seed of A, its persistence reading, the controls


@pytest.mark.release  # the whole first command: the release check
def test_phaseA_tiny_runs_end_to_end_and_its_claims_verify(tiny_run):
    import re

    _folder, db, stdout = tiny_run
    for arm in ARMS:
        assert re.search(rf"│ {arm} +│ complete", stdout), stdout
    # the summary leads with the claims (their arms' designs: tests/run/test_summary.py)
    assert stdout.index("preregistered claims:") < stdout.index("phaseA-tiny (")
    verified = ledger_cli("verify", "claims/phaseA-tiny.yaml", "--db", db, "--json")
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
    report = json.loads(verified.stdout)
    claims = {v["claim_id"]: v for v in report["claims"]}
    expected = {c["id"] for c in yaml.safe_load((ROOT / "claims" / "phaseA-tiny.yaml").read_text())["claims"]}
    assert set(claims) == expected and all(v["integrity"] == "verified" for v in claims.values())
    with open_store(db) as store:
        statuses = {row["arm"]: row["status"] for row in store.rows_of("checkpoints")}
        assert store.verify_chain().ok
    assert {statuses[arm] for arm in ARMS} == {"promoted"}


def _records() -> dict[tuple[str, str], Path]:
    """The committed records of phaseA-tiny by (CPU model, torch's CPU capability) they were made on."""
    records = {}
    kept = ROOT / "docs" / "results" / "phaseA-tiny"
    for record in (kept, kept / "avx2"):
        if not (record / "fingerprint.json").is_file():  # a record of another kernel set, where one was made
            continue
        recorded = json.loads((record / "fingerprint.json").read_text(encoding="utf-8"))
        environment = recorded["protocols"]["phaseA-tiny"]["environments"][0]["environment"]
        records[(environment["cpu"], environment["torch_build"]["cpu_capability"])] = record
    assert records, "no committed record of phaseA-tiny"
    return records


def _compare_with_the_record(folder: Path) -> dict | None:
    """``ledger compare`` of the run with the record of this CPU (None: no record of it, and the comparison with
    another must locate where the runs part and name the CPU among the environment's differences)."""
    import torch

    from ledger.run.environment import cpu_model

    here = (cpu_model(), torch.backends.cpu.get_cpu_capability())
    records = _records()
    if here not in records:
        compared = ledger_cli("compare", str(folder / "out"), str(next(iter(records.values()))), "--json")
        report = json.loads(compared.stdout)
        parted = [arm["detail"] for arm in report["arms"] if not arm["identical"]]
        assert compared.returncode in (0, 1), compared.stderr
        assert all(detail.startswith(("part at stage ", "only B ran it")) for detail in parted), parted
        assert compared.returncode == 0 or any(line.startswith("cpu: ") for line in report["environment_differences"])
        return None
    compared = ledger_cli("compare", str(folder / "out"), str(records[here]), "--json")
    assert compared.returncode in (0, 1), compared.stderr
    return json.loads(compared.stdout)


@pytest.mark.release  # the whole first command: the release check
def test_phaseA_tiny_reproduces_the_committed_record_bit_for_bit(tiny_run):
    """What a fresh clone gives is the record: the guarantee holds on a CPU of the record's model on which torch
    dispatches the record's kernels (AVX-512 and AVX2 kernels round otherwise, and so do two vendors' AVX-512
    CPUs; docs/reproducibility.md), at the command's threads. On a CPU no record was made on, `ledger compare`
    must say where the runs part and name the CPU among the environment's differences."""
    folder, _, _ = tiny_run
    report = _compare_with_the_record(folder)
    if report is None:
        return
    parted = [f"{arm['arm']}: {arm['detail']}" for arm in report["arms"] if not arm["identical"]]
    assert report["identical"], (parted, report["environment_differences"])
    assert {arm["arm"] for arm in report["arms"]} >= set(ARMS)
    registered = yaml.safe_load((ROOT / "claims" / "phaseA-tiny.yaml").read_text(encoding="utf-8"))["claims"]
    assert len(report["claims"]) == len(registered) and all(claim["identical"] for claim in report["claims"])


@pytest.mark.long  # CI's long call: one seed of the paper's bridge, its persistence reading and both controls
def test_one_seed_and_the_controls_reproduce_the_record_bit_for_bit(seed_run):
    """The first command's code paths (the paper's bridge installed until its gate passes, the outcome-only anneal,
    the controls trained until competent, the persistence reading) on the arms CI has time for: each is the
    record's arm, checkpoint for checkpoint; the seeds left out are the record's alone."""
    folder, _, _ = seed_run
    report = _compare_with_the_record(folder)
    if report is None:
        return
    by_arm = {arm["arm"]: arm for arm in report["arms"]}
    trained = ("A.s1", "B", "C")  # A_persist trains nothing: it is read from A.s1's checkpoint, and has none
    assert all(by_arm[arm]["identical"] for arm in trained), [by_arm[arm]["detail"] for arm in trained]
    left_out = sorted(set(by_arm) - set(CORE))
    assert left_out and {by_arm[arm]["detail"] for arm in left_out} == {"only B ran it"}, left_out


@pytest.mark.release  # the whole first command: the release check
def test_phaseA_tiny_report_draws_every_arms_per_depth_curve(tiny_run):
    import re

    folder, _, _ = tiny_run
    html = (folder / "out" / "report.html").read_text(encoding="utf-8")
    parser = _Images()
    parser.feed(html)
    # one figure, shown twice: leading the claims, and in the per-depth section
    figure = sorted({src for src in parser.images if src.startswith("figures/accuracy-phasea-eval-")})
    assert len(figure) == 1 and (folder / "out" / figure[0]).stat().st_size > 10_000
    caption = re.search(r"Per-depth final accuracy on <code>phaseA_eval</code>, one line per arm: ([^<]+)\.", html)
    assert caption, "the per-depth accuracy figure of phaseA_eval is missing"
    plotted = {label.strip().split()[0] for label in caption.group(1).split(",")}
    assert set(ARMS) <= plotted, caption.group(1)
