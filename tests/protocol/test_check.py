"""Complete validation: every protocol the code cannot execute as written is refused by
`ledger check` (and so by `register` and `run`) with a located message, and nothing is written.

Each case below was accepted by `ledger check` before the registries and failed mid-run
(or ran something other than what it declared).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from ledger.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SMOKE = yaml.safe_load((ROOT / "protocols" / "smoke.yaml").read_text())
SMOKE_CLAIMS = yaml.safe_load((ROOT / "claims" / "smoke.yaml").read_text())


def _arm(data: dict, arm_id: str) -> dict:
    return next(arm for arm in data["arms"] if arm["id"] == arm_id)


def design_m(data: dict) -> None:
    arm = _arm(data, "A")
    arm["bridge"] = {"kind": "concat", "initial_state": "zeros"}
    arm["stages"][0]["recurrence"] = {"kind": "poisson_lognormal", "mean": 4}


def mixture_on_a_chain_objective(data: dict) -> None:
    stage = _arm(data, "A")["stages"][0]
    del stage["manifest"]
    data["manifests"].append(
        {"id": "arith", "role": "train", "generator": "arithmetic", "per_op": 4, "seed": 1, "split": "aritht"}
    )
    stage["mixture"] = {"train": 1.0, "arith": 1.0}  # rehearsal mixes chains; arithmetic rows are not chains


def next_token_without_sampled_recurrence(data: dict) -> None:
    _arm(data, "A")["stages"][0]["objective"] = "next_token"


def text_rows(data: dict) -> None:
    data["manifests"].append(
        {"id": "text", "role": "eval", "generator": "text", "source": "generated", "part": "heldout",
         "documents": 4, "seed": 1, "split": "text"}
    )  # fmt: skip


def sweep_at_forced_loops(data: dict) -> None:
    text_rows(data)
    _arm(data, "A")["evaluation"]["manifests"].append("text")


def checkpoints_past_the_stage(data: dict) -> None:
    _arm(data, "A")["stages"][0]["checkpoint_every"] = 6


def adapter_on_concat(data: dict) -> None:
    _arm(data, "E")["bridge"] = {"kind": "concat"}


def wrong_num_layers(data: dict) -> None:
    data["bases"]["tiny"]["num_layers"] = 6


def surgery_outside_the_base(data: dict) -> None:
    del data["bases"]["tiny"]["num_layers"]  # the schema can no longer catch it; the base itself says 4
    _arm(data, "A")["surgery"] = {"split": [1, 4]}


def anneal_fraction_unread(data: dict) -> None:
    _arm(data, "A")["stages"][0]["anneal_fraction"] = 0.5


def recurrence_on_a_dense_arm(data: dict) -> None:
    _arm(data, "B")["stages"][0]["recurrence"] = {"kind": "forced"}


def max_new_tokens_on_a_recurrent_arm(data: dict) -> None:
    _arm(data, "A")["evaluation"]["max_new_tokens"] = 8


def unknown_optimizer_group(data: dict) -> None:
    _arm(data, "A")["stages"][0]["optimizer"]["group_lrs"] = {"lora": 2.0}


def depth_gate_after_a_stage(data: dict) -> None:
    _arm(data, "A")["stages"][1]["gates"].append("fisher_A_vs_B")


def installation_gate_on_a_dense_arm(data: dict) -> None:
    _arm(data, "B")["stages"][0]["gates"] = ["installation"]


def guardrail_on_chain_rows(data: dict) -> None:
    data["gates"][1]["manifest"] = "dev"


def gate_nobody_evaluates(data: dict) -> None:
    data["gates"].append({"id": "orphan", "kind": "retention_floor", "manifest": "dev", "floor": 0.1, "action": "flag"})


def continue_across_kinds(data: dict) -> None:
    _arm(data, "C")["init_from"] = "A"


def mixed_sft_formats(data: dict) -> None:
    stage = copy.deepcopy(_arm(data, "B")["stages"][0])
    _arm(data, "B")["stages"].append({**stage, "id": "sft2", "objective": "sft_scratchpad"})


def exit_rules_at_forced_depth(data: dict) -> None:
    _arm(data, "A")["evaluation"]["exit_rules"] = [{"rule": "kl"}]


def exit_rules_short_of_the_depths(data: dict) -> None:
    _arm(data, "A")["evaluation"].update(loops=[1, 2], exit_rules=[{"rule": "kl"}])


def halting_rule_without_a_head(data: dict) -> None:
    evaluation = _arm(data, "A")["evaluation"]
    evaluation.update(loops=list(range(1, 17)), exit_rules=[{"rule": "halting"}])


def exit_rules_on_a_dense_arm(data: dict) -> None:
    _arm(data, "B")["evaluation"]["exit_rules"] = [{"rule": "kl"}]


CASES = {
    "exit_rules_at_forced_depth": (exit_rules_at_forced_depth, "give evaluation.loops as every loop 1..K"),
    "exit_rules_short_of_the_depths": (exit_rules_short_of_the_depths, "loops must go past depth"),
    "halting_rule_without_a_head": (halting_rule_without_a_head, "has no halting head"),
    "exit_rules_on_a_dense_arm": (exit_rules_on_a_dense_arm, "do not read evaluation.exit_rules"),
    "design_m": (design_m, "sampled recurrence trains next-token stages only, not 'intermediate'"),
    "mixture_on_a_chain_objective": (
        mixture_on_a_chain_objective,
        "trains on one manifest or a mixture of chains only",
    ),
    "next_token_without_sampled_recurrence": (
        next_token_without_sampled_recurrence,
        "a recurrent next-token stage needs a recurrence schedule (poisson_lognormal)",
    ),
    "sweep_at_forced_loops": (sweep_at_forced_loops, "manifest 'text' is read at test recurrences"),
    "checkpoints_past_the_stage": (checkpoints_past_the_stage, "checkpoint_every must be below the stage's 6 steps"),
    "adapter_on_concat": (
        adapter_on_concat,
        "the adapter budget is defined for design-S bridges only, not 'concat' (design M)",
    ),
    "wrong_num_layers": (wrong_num_layers, "bases.tiny.num_layers: says 6 layers but the base"),
    "surgery_outside_the_base": (surgery_outside_the_base, "surgery needs at least 5 decoder layers"),
    "anneal_fraction_unread": (anneal_fraction_unread, "does not read anneal_fraction"),
    "recurrence_on_a_dense_arm": (recurrence_on_a_dense_arm, "dense arms do not read a recurrence schedule"),
    "max_new_tokens_on_a_recurrent_arm": (max_new_tokens_on_a_recurrent_arm, "do not read evaluation.max_new_tokens"),
    "unknown_optimizer_group": (unknown_optimizer_group, "arm A trains no group 'lora'"),
    "depth_gate_after_a_stage": (depth_gate_after_a_stage, "is judged after its arms finish"),
    "installation_gate_on_a_dense_arm": (
        installation_gate_on_a_dense_arm,
        "a installation gate cannot judge dense arms",
    ),
    "guardrail_on_chain_rows": (
        guardrail_on_chain_rows,
        "a guardrail gate reads arithmetic, choice_file rows, not rule_chasing",
    ),
    "gate_nobody_evaluates": (gate_nobody_evaluates, "gate 'orphan' follows no stage"),
    "continue_across_kinds": (continue_across_kinds, "whose trainable tensors differ"),
    "mixed_sft_formats": (mixed_sft_formats, "mixes SFT formats"),
}


def write_protocol(tmp_path: Path, data: dict, claims: dict | None = None) -> Path:
    (tmp_path / "protocols").mkdir(exist_ok=True)
    (tmp_path / "claims").mkdir(exist_ok=True)
    (tmp_path / "claims" / "smoke.yaml").write_text(yaml.safe_dump(claims or SMOKE_CLAIMS, sort_keys=False))
    path = tmp_path / "protocols" / "case.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def refused(argv: list[str], capsys: Any) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.err


@pytest.mark.parametrize("case", sorted(CASES))
def test_unrunnable_protocol_is_refused_located_and_nothing_is_written(case: str, tmp_path: Path, capsys: Any) -> None:
    change, message = CASES[case]
    data = copy.deepcopy(SMOKE)
    change(data)
    path = write_protocol(tmp_path, data)
    err = refused(["check", str(path)], capsys)
    assert message in err, err
    assert err.startswith(f"{path}:"), err  # file:line: field: reason
    line = err.split(":")[1]
    assert line.isdigit(), err
    db = tmp_path / "runs" / "ledger.db"
    for command in (["register", str(path)], ["run", str(path), "--out", str(tmp_path / "runs" / "out")]):
        assert message in refused([*command, "--db", f"sqlite:///{db}"], capsys)
    assert not (tmp_path / "runs").exists()  # no database, no run folder, no log


def test_the_unchanged_smoke_protocol_passes(tmp_path: Path, capsys: Any) -> None:
    path = write_protocol(tmp_path, copy.deepcopy(SMOKE))
    assert main(["check", str(path)]) == 0
    assert "ok: protocol is valid" in capsys.readouterr().out


CLAIM_CASES = {
    "exit_rule_the_arm_is_not_read_under": (
        {
            "id": "A_kl",
            "statement": "s",
            "statistic": "adaptive_depth",
            "manifest": "eval",
            "arm": "A",
            "rule": "kl",
            "measure": "right_depth",
            "share": 0.5,
        },
        "arm 'A' is not read under exit rule kl<0.001",
    ),
    "exit_rule_on_a_dense_arm": (
        {
            "id": "B_kl",
            "statement": "s",
            "statistic": "adaptive_depth",
            "manifest": "eval",
            "arm": "B",
            "rule": "kl",
            "measure": "noninferior",
            "margin": 0.05,
        },
        "a base or dense arm runs no loops to stop: 'B'",
    ),
    # a dense arm is read once per row (loop 0): nothing can be read "at loop 1" on chain rows
    "dense_at_loop_1": (
        {
            "id": "B_loop1",
            "statement": "s",
            "statistic": "noninferiority",
            "manifest": "eval",
            "arms": ["B", "A"],
            "margin": 0.1,
            "loop": 1,
        },
        "arm 'B' is never read at loop 1 on 'eval'",
    ),
    "gate_never_judged_for_the_arm": (
        {
            "id": "C_installs",
            "statement": "s",
            "statistic": "gate",
            "manifest": "dev",
            "gate": "installation",
            "arm": "C",
        },
        "gate 'installation' is never judged for arm 'C'",
    ),
    "manifest_the_arm_never_reads": (
        {"id": "B_dev", "statement": "s", "statistic": "accuracy", "manifest": "dev", "arm": "B", "threshold": 0.5},
        "the protocol writes no evidence of arm 'B' on 'dev'",
    ),
    "frontier_without_depths": (
        {
            "id": "A_tier1_frontier",
            "statement": "s",
            "statistic": "frontier_ratio",
            "manifest": "tier1",
            "arm": "A",
            "support_max_depth": 3,
            "threshold": 1.0,
        },
        "a frontier_ratio claim needs rows with depths",
    ),
    "loss_claim_on_chain_rows": (
        {
            "id": "A_loss",
            "statement": "s",
            "statistic": "paired_loss",
            "manifest": "eval",
            "arms": ["A", "E"],
            "loops": [1, 1],
        },
        "this claim's metric does not fit rule_chasing rows",
    ),
    "equal_flops_without_a_curve": (
        {
            "id": "A_flops",
            "statement": "s",
            "statistic": "at_equal_flops",
            "metric": "accuracy",
            "manifest": "eval",
            "arms": ["A", "E"],
            "loops": [1, 1],
        },
        "arm 'A' records no training curve: give a stage checkpoint_every",
    ),
    "base_never_read_there": (
        {
            "id": "base_eval",
            "statement": "s",
            "statistic": "accuracy",
            "manifest": "eval",
            "arm": "base:tiny",
            "threshold": 0.5,
        },
        "the protocol writes no evidence of arm 'base:tiny' on 'eval'",
    ),
}


@pytest.mark.parametrize("case", sorted(CLAIM_CASES))
def test_claim_that_the_evidence_cannot_decide_is_refused(case: str, tmp_path: Path, capsys: Any) -> None:
    claim, message = CLAIM_CASES[case]
    claims = copy.deepcopy(SMOKE_CLAIMS)
    claims["claims"].append(claim)
    path = write_protocol(tmp_path, copy.deepcopy(SMOKE), claims)
    err = refused(["check", str(path)], capsys)
    assert message in err, err
    assert str(tmp_path / "claims" / "smoke.yaml") in err  # located in the claim file


def test_every_committed_protocol_checks() -> None:
    from ledger.protocol.check import issues_of

    for path in sorted((ROOT / "protocols").glob("*.yaml")):
        assert issues_of(path) == [], path


def test_a_protocol_past_the_size_budget_is_refused_before_anything_is_built(tmp_path, monkeypatch):
    """Measured before: `ledger check` on huge sizes ran past 120 s and 6.6 GB; now a located refusal, and the
    manifest builder is never reached."""
    import ledger.rows.builder as builder
    from ledger.protocol.check import check_protocol_file
    from ledger.protocol.loader import ProtocolError

    smoke = (Path(__file__).resolve().parents[2] / "protocols" / "smoke.yaml").read_text(encoding="utf-8")
    huge = smoke.replace(
        "rows_per_depth: 24, seed: 11, split: train", "rows_per_depth: 100000000, seed: 11, split: train"
    )
    huge = huge.replace(
        "steps: 6, batch_size: 8, optimizer: {kind: adamw, lr: 0.003}, recurrence",
        "steps: 10000000000, batch_size: 8, optimizer: {kind: adamw, lr: 0.003}, recurrence",
        1,
    )
    huge = huge.replace("../claims/smoke.yaml", str(Path(__file__).resolve().parents[2] / "claims" / "smoke.yaml"))
    path = tmp_path / "huge.yaml"
    path.write_text(huge, encoding="utf-8")

    def never(*args, **kwargs):
        raise AssertionError("a manifest was built")

    monkeypatch.setattr(builder, "build_manifest", never)
    with pytest.raises(ProtocolError) as caught:
        check_protocol_file(path)
    messages = [str(issue) for issue in caught.value.issues]
    assert any("manifests.0: 300,000,000 rows: more than the budget of 2,000,000" in m for m in messages), messages
    assert any("arms.0.stages.0.steps: 10,000,000,000" in m for m in messages), messages
