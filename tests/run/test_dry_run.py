"""The dry run: a protocol's miniature run end to end in a throwaway ledger, every claim judged there.

The miniature keeps every depth, operation and part of every manifest at the fewest rows, one step per stage
past its warm-up, every gate recorded rather than stopping; nothing is left behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ledger.cli.main import main
from ledger.protocol.check import check_protocol_file
from ledger.protocol.loader import load_protocol
from ledger.rows.builder import build_manifests
from ledger.run.dry_run import ROWS, STAND_IN_QUESTIONS, miniature

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["phaseA-tiny", "designM-tiny", "retention-tiny", "surfaces-tiny"])
def test_the_miniature_keeps_every_depth_and_part_at_the_fewest_rows(name, tmp_path):
    path = ROOT / "protocols" / f"{name}.yaml"
    protocol = load_protocol(path)
    small_path = miniature(path, protocol, tmp_path, random_weights=False)
    small = check_protocol_file(small_path).protocol  # the miniature passes the complete check itself
    full_rows, small_rows = build_manifests(protocol), build_manifests(small)
    for spec in protocol.manifests:
        full, few = full_rows[spec.id].rows, small_rows[spec.id].rows
        assert 0 < len(few) < len(full) or len(full) <= 4, spec.id
        assert {getattr(r, "depth", None) for r in few} == {getattr(r, "depth", None) for r in full}, spec.id
    for arm, small_arm in zip(protocol.arms, small.arms, strict=True):
        for stage, small_stage in zip(arm.stages, small_arm.stages, strict=True):
            warmed = bool(stage.optimizer.schedule and stage.optimizer.schedule.warmup_steps)
            every = stage.checkpoint_every
            assert small_stage.steps == (max(2, -(-stage.steps // every)) if every else 2 if warmed else 1)
            assert small_stage.batch_size == min(stage.batch_size, ROWS)
            if warmed:
                assert small_stage.optimizer.schedule.warmup_steps == 1
            assert small_stage.checkpoint_every in (None, 1)
    assert {gate.action for gate in small.gates} <= {"flag"}
    copied = [yaml.safe_load((small_path.parent / c).read_text()) for c in small.claims]
    originals = [yaml.safe_load((path.parent / c).read_text()) for c in protocol.claims]
    for copy, original in zip(copied, originals, strict=True):
        for claim, was in zip(copy["claims"], original["claims"], strict=True):
            if "at_step" in was:  # the same checkpoint in the miniature: its n-th, one step apart
                every = next(s.checkpoint_every for s in protocol.arm(was["arms"][0]).stages if s.checkpoint_every)
                assert claim.pop("at_step") == was.pop("at_step") // every
            assert claim == was


def test_the_miniature_reads_stand_in_questions_for_a_benchmark_file_not_here_yet(tmp_path):
    """phaseA.yaml's ARC files are the user's: the miniature reads a handful of stand-in questions under the
    benchmark's own first ids, through the same id check, with every other manifest at its fewest rows."""
    from ledger.rows.builder import files_to_come
    from ledger.rows.tasks.benchmarks import benchmark_ids

    path = ROOT / "protocols" / "phaseA.yaml"
    protocol = load_protocol(path)
    assert set(files_to_come(protocol)) == {"arc_easy", "arc_challenge"}
    small = check_protocol_file(miniature(path, protocol, tmp_path, random_weights=True)).protocol
    assert files_to_come(small) == {}
    rows = build_manifests(small)
    for name in ("arc_easy", "arc_challenge"):
        ids = [row.row_id.split("_", 1)[1] for row in rows[name].rows]
        assert ids == list(benchmark_ids(name))[:STAND_IN_QUESTIONS]
        assert small.manifest(name).path.startswith(str(tmp_path))


def test_the_miniature_of_a_warmup_stable_decay_stage_has_a_step_of_each_part(tmp_path):
    import shutil

    text = (ROOT / "protocols" / "smoke.yaml").read_text()
    before = "steps: 6, batch_size: 8, optimizer: {kind: adamw, lr: 0.003}, recurrence"
    assert before in text
    wsd = "{kind: adamw, lr: 0.003, schedule: {kind: wsd, warmup_steps: 1, decay_fraction: 0.5}}"
    text = text.replace(before, f"steps: 6, batch_size: 8, optimizer: {wsd}, recurrence", 1)
    (tmp_path / "protocols").mkdir()
    shutil.copytree(ROOT / "claims", tmp_path / "claims")
    path = tmp_path / "protocols" / "smoke.yaml"
    path.write_text(text)
    (tmp_path / "small").mkdir()
    small = check_protocol_file(miniature(path, load_protocol(path), tmp_path / "small", False)).protocol
    schedule = small.arms[0].stages[0].optimizer.schedule
    steps = small.arms[0].stages[0].steps
    assert (steps, schedule.warmup_steps, schedule.decay_fraction) == (3, 1, pytest.approx(1 / 3))
    assert [schedule.scale(step, steps) for step in range(steps)] == [schedule.min_lr_ratio, 1.0, 1.0]


def test_a_dry_run_judges_every_claim_and_leaves_nothing_behind(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = sorted(Path("/tmp").glob("ledger-dry-run-*"))
    assert main(["check", str(ROOT / "protocols" / "smoke.yaml"), "--dry-run"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    claims = yaml.safe_load((ROOT / "claims" / "smoke.yaml").read_text())["claims"]
    assert f"{len(claims)} claims judged in the throwaway ledger" in out
    for claim in claims:
        assert f"{claim['id']} " in out
    assert "first update: the first update moved" in out
    assert list(tmp_path.iterdir()) == [] and sorted(Path("/tmp").glob("ledger-dry-run-*")) == before


class _RuntimeDouble:
    """What ``narrow_to_fit`` reads of an arm's runtime: its model's vocabulary, its trainable groups, and
    ``step_only``, where it says which tensors the next stage steps."""

    def __init__(self, vocabulary: int, dtype, shapes: dict[str, list[tuple[int, ...]]]):
        import torch

        self.model = torch.nn.Module()
        self.model.config = type("Config", (), {"vocab_size": vocabulary})()
        self.groups = {
            name: [torch.nn.Parameter(torch.zeros(shape, dtype=dtype)) for shape in group]
            for name, group in shapes.items()
        }
        self.stepped: list | None = ["not told"]

    def named_groups(self):
        return self.groups

    def step_only(self, tensors):
        self.stepped = tensors


def test_a_step_past_the_memory_ceiling_steps_the_part_that_fits_with_its_reason():
    import torch

    from ledger.run.dry_run import activation_bytes, narrow_to_fit, resident_bytes, training_state_bytes

    shapes = {"matrices": [(1000, 1000), (10, 20), (30, 30), (1000,)], "vectors": [(7,), (50,), (2000,)]}
    bf16 = _RuntimeDouble(32_000, torch.bfloat16, shapes)
    elements = 1_000_000 + 200 + 900 + 1000 + 7 + 50 + 2000
    # bf16: its gradient (2), an fp32 master and the master's gradient (8), AdamW's two fp32 moments (8)
    assert training_state_bytes(bf16) == 18 * elements
    assert training_state_bytes(_RuntimeDouble(32_000, torch.float32, shapes)) == 12 * elements
    assert activation_bytes(bf16) == ROWS * 256 * 32_000 * 12
    held = resident_bytes()
    assert held > 0
    needed = training_state_bytes(bf16) + activation_bytes(bf16)
    # room for the activations and the smallest tensors' state, not the large matrix's
    reason = narrow_to_fit(bf16, limit_gib=(held + activation_bytes(bf16) + 18 * 100_000) / 2**30)
    assert reason is not None and "past the" in reason and "GiB ceiling" in reason
    kept = {tuple(tensor.shape) for tensor in bf16.stepped}
    # each group's smallest matrix and vector, then the smallest of the rest while they fit: never the 1000x1000
    assert (
        {(10, 20), (1000,), (7,)} <= kept
        and (1000, 1000) not in kept
        and kept == {(10, 20), (30, 30), (1000,), (7,), (50,), (2000,)}
    )
    assert f"steps {len(kept)} of its 7 trainable tensors" in reason
    # with room for everything every tensor steps
    assert narrow_to_fit(bf16, limit_gib=(held + needed) / 2**30 + 1) is None and bf16.stepped is None


def test_a_memory_limit_needs_random_weights_and_a_positive_size(capsys):
    assert main(["check", "protocols/smoke.yaml", "--memory-limit", "8"]) == 2
    assert "give --dry-run --random-weights" in capsys.readouterr().err
    assert main(["check", "protocols/smoke.yaml", "--dry-run", "--random-weights", "--memory-limit", "0"]) == 2
    assert "give a positive number of GiB" in capsys.readouterr().err


def test_the_miniature_at_real_shapes_trains_a_stand_in_corpus_in_micro_batches(tmp_path):
    """designM-llama32.yaml's packed corpus is the user's: the miniature trains on one stand-in shard of
    sequences of the manifest's length, cut to a few tokens, in two micro-batches, with two of its checkpoints."""
    from ledger.rows.builder import files_to_come
    from ledger.run.dry_run import SHAPED_CHECKPOINTS, SHAPED_ROWS, TOKENS

    path = ROOT / "protocols" / "designM-llama32.yaml"
    protocol = load_protocol(path)
    assert "fineweb" in files_to_come(protocol)
    small = check_protocol_file(miniature(path, protocol, tmp_path, random_weights=True)).protocol
    assert files_to_come(small) == {}
    (shard,) = build_manifests(small)["fineweb"].rows
    assert shard.meta["sequences"] == ROWS and shard.meta["sequence_length"] == 1025
    stage = small.arm("L").stages[0]
    assert (stage.steps, stage.checkpoint_every) == (SHAPED_CHECKPOINTS, 1)
    assert (stage.batch_size, stage.micro_batch_size, stage.max_tokens) == (SHAPED_ROWS, SHAPED_ROWS // 2, TOKENS)
    # the sweep 1, 2, 4, ..., 32 read by rank (1, ..., 6): every claim keeps its pair of loops, in order
    assert small.arm("L").evaluation.loops == [1, 2, 3, 4, 5, 6] and small.manifest("arc_easy").loops == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]
    copied = yaml.safe_load((tmp_path / "claims" / "0-designM-llama32.yaml").read_text())["claims"]
    assert {claim["id"]: claim["loops"] for claim in copied}["L_rises_with_test_recurrence_v2"] == [6, 1]


def test_the_miniature_at_real_shapes_samples_its_training_recurrence_on_the_rank_scale(tmp_path):
    """designM-tinyllama.yaml's sampled recurrences (means 4 to 32, backprop depths 4 and 8, curricula from 1)
    run by the ranks of the loops read: each mean and depth where its loop's rank is, their order kept, so that a
    step draws a handful of loops at a 1B model's shapes and not 32; without random weights nothing changes."""
    from arms.train.recurrence import stage_recurrence
    from ledger.run.dry_run import _on_rank_scale

    ranks = {1: 1, 2: 2, 4: 3, 8: 4, 16: 5, 32: 6}
    assert [_on_rank_scale(ranks, value) for value in (0.5, 1, 3, 8, 24, 64)] == [0.5, 1, 2.5, 4, 5.5, 12]
    assert _on_rank_scale({1: 1, 2: 2, 3: 3}, 2.5) == 2.5  # loops 1..K: the identity

    path = ROOT / "protocols" / "designM-tinyllama.yaml"
    protocol = load_protocol(path)
    small = check_protocol_file(miniature(path, protocol, tmp_path / "shaped", random_weights=True)).protocol
    means = {}
    for arm in protocol.arms:
        for stage, mini in zip(arm.stages, small.arm(arm.id).stages, strict=True):
            was, now = stage.recurrence, mini.recurrence
            if getattr(was, "kind", None) != "poisson_lognormal":
                continue
            assert now.mean == _on_rank_scale(ranks, was.mean) and now.curriculum_start == was.curriculum_start == 1
            assert now.backprop_depth == {4: 3, 8: 4}[was.backprop_depth] and now.sigma == was.sigma
            means[was.mean] = now.mean
            draws = [stage_recurrence(now, step, mini.steps, 0).loops for step in range(mini.steps)]
            assert max(draws) < 20, (arm.id, stage.id, draws)
    assert means == {4: 3, 8: 4, 16: 5, 32: 6}
    plain = check_protocol_file(miniature(path, protocol, tmp_path / "plain", random_weights=False)).protocol
    assert plain.arm("R32").stages[0].recurrence == protocol.arm("R32").stages[0].recurrence
    # random weights time nothing (three batch-1 calls a depth at 1B shapes); the plain miniature times a row
    assert {arm.evaluation.latency_sample_per_depth for arm in small.arms} == {0}
    assert {arm.evaluation.latency_sample_per_depth for arm in plain.arms} == {
        min(arm.evaluation.latency_sample_per_depth, 1) for arm in protocol.arms
    }
