"""`ledger params` for design M: the retrofit's unique parameters, what it keeps of its base, training FLOPs.

TinyLlama-1.1B's public config shape, built on the meta device (no hub, no weights), cut at (4, 8, 4) with a
concat adapter (McLeish et al. 2025's retrofit). The seed says the retrofitted model has "about 700M" unique
non-embedding parameters; what it really has is pinned below, computed from the module shapes:

    one layer: q 2048x2048 + k, v 2048x256 each + o 2048x2048 = 9,437,184; MLP 3 x 2048 x 5632 = 34,603,008;
               two RMSNorms 4,096                                               -> 44,044,288
    base w/o embeddings: 22 layers + final norm 2,048                            = 968,976,384
    kept by (4, 8, 4): 16 layers + final norm                                    = 704,710,656
    adapter Linear(2h -> h, no bias): 2 x 2048 x 2048                            =   8,388,608
    the retrofit (kept + adapter)                                                = 713,099,264

Kept share: 704,710,656 / 968,976,384 = 72.73% (the adapter left out); with the adapter it would be
713,099,264 / 968,976,384 = 73.59%. The 72.7% figure is the share WITHOUT the adapter (the base's own layers kept).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from run_helpers import ledger_cli

from arms.model.recurrent import RecurrentLM
from arms.params import meta_model, retrofit_counts

pytestmark = pytest.mark.models

LAYER = 2048 * 2048 * 2 + 2048 * 256 * 2 + 3 * 2048 * 5632 + 2 * 2048
BASE_NON_EMBEDDING = 22 * LAYER + 2048
KEPT = 16 * LAYER + 2048
ADAPTER = 2 * 2048 * 2048
ONCE = 8 * LAYER + 2048  # prelude 4 + coda 4 + final norm
PER_ITERATION = 8 * LAYER + ADAPTER  # block 8 + adapter


def tinyllama_config():
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=22,
        num_attention_heads=32,
        num_key_value_heads=4,
        vocab_size=32000,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
    )


def test_tinyllama_4_8_4_counts_against_the_seed() -> None:
    from arms.model.accounting import count_parameters

    model = meta_model(tinyllama_config())
    base_non_embedding = count_parameters(model, exclude_embeddings=True)
    assert (LAYER, base_non_embedding) == (44_044_288, 968_976_384) and base_non_embedding == BASE_NON_EMBEDDING
    with torch.device("meta"):
        recurrent = RecurrentLM.build(model, tuple_=(4, 8, 4), bridge="concat")
    counts = retrofit_counts(base_non_embedding, recurrent, loops=(1, 4, 8, 12), depths=(8, None))
    assert counts.non_embedding == KEPT + ADAPTER == 713_099_264  # "about 700M": 713.1M with the adapter
    assert 690_000_000 <= counts.non_embedding <= 720_000_000
    assert counts.kept == KEPT == 704_710_656 and counts.bridge == ADAPTER == 8_388_608
    assert (counts.once, counts.per_iteration) == (ONCE, PER_ITERATION)
    # the seed's 72.7% is the kept share WITHOUT the adapter; with it the share is 73.59%
    assert counts.kept_share == pytest.approx(0.727, abs=0.001)
    assert abs(counts.kept_share - 0.72727) < 5e-5
    assert abs((KEPT + ADAPTER) / BASE_NON_EMBEDDING - 0.7359) < 1e-4

    with torch.device("meta"):  # the seed's block norms: two RMSNorms more, counted with the adapter
        normed = RecurrentLM.build(model, tuple_=(4, 8, 4), bridge="concat", block_norms=True)
    assert retrofit_counts(base_non_embedding, normed).bridge == ADAPTER + 2 * 2048

    (s8, by_s8), (s_all, by_t) = counts.training_flops
    assert (s8, s_all) == (8, None)
    assert by_s8[4] == by_t[4] == 6 * (ONCE + 4 * PER_ITERATION)  # r <= s: every iteration with gradient
    assert by_s8[12] == 6 * (ONCE + 8 * PER_ITERATION) + 2 * 4 * PER_ITERATION  # 4 forward-only iterations
    assert by_t[12] == 6 * (ONCE + 12 * PER_ITERATION)
    assert by_s8[1] == 6 * (ONCE + PER_ITERATION) < 6 * BASE_NON_EMBEDDING  # one iteration: 16 layers + adapter


def design_m_protocol(tmp_path: Path, recurrence: dict) -> Path:
    base = "builtin:tiny-qwen2?hidden=16&layers=6&heads=2&kv_heads=1&intermediate=32"
    stage = {
        "id": "s",
        "objective": "intermediate",
        "manifest": "train",
        "steps": 2,
        "batch_size": 2,
        "optimizer": {"lr": 0.01},
        "recurrence": recurrence,
    }
    manifest = {"generator": "rule_chasing", "depths": [1, 2], "rows_per_depth": 2, "seed": 1}
    document = {
        "name": "design-m",
        "version": 1,
        "description": "d",
        "seed": 1,
        "bases": {"tiny": {"source": base, "dtype": "float32"}},
        "manifests": [
            {"id": "train", "role": "train", "split": "train", **manifest},
            {"id": "eval", "role": "eval", "split": "test", **manifest},
        ],
        "arms": [
            {
                "id": "M",
                "kind": "recurrent",
                "base": "tiny",
                "surgery": {"tuple": [1, 2, 1]},
                "bridge": {"kind": "concat"},
                "budget": {"kind": "full_block"},
                "stages": [stage],
                "evaluation": {"manifests": ["eval"]},
            },
            {
                "id": "D",
                "kind": "dense",
                "base": "tiny",
                "stages": [{**stage, "objective": "sft_direct", "recurrence": None}],
                "evaluation": {"manifests": ["eval"]},
            },
        ],
    }
    path = tmp_path / "design-m.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def _expected(tmp_path: Path):
    from arms.bases.builtin import builtin_config
    from arms.model.accounting import count_parameters
    from arms.model.flops import recurrent_counts

    model = meta_model(builtin_config("builtin:tiny-qwen2?hidden=16&layers=6&heads=2&kv_heads=1&intermediate=32"))
    with torch.device("meta"):
        recurrent = RecurrentLM.build(model, tuple_=(1, 2, 1), bridge="concat")
    return count_parameters(model, exclude_embeddings=True), recurrent_counts(recurrent.surgery, recurrent.bridge)


def _row(stdout: str, arm: str, s: str) -> list[str]:
    """The cells of the training-FLOPs table's row of (arm, s) (a box without vertical rules: 2+ spaces apart)."""
    for line in stdout.splitlines():
        cells = [cell for cell in line.strip().split("  ") if cell.strip()]
        if len(cells) > 6 and cells[0].strip() == arm and cells[1].strip() == s:
            return [cell.strip() for cell in cells]
    raise AssertionError(f"no row ({arm}, s={s}) in\n{stdout}")


def test_ledger_params_prints_a_design_m_arm_end_to_end(tmp_path: Path) -> None:
    path = design_m_protocol(tmp_path, {"kind": "poisson_lognormal", "mean": 4, "backprop_depth": 2})
    result = ledger_cli("params", str(path), "--loops", "1,2,4")
    assert result.returncode == 0, result.stdout + result.stderr
    base, counts = _expected(tmp_path)
    adapter = 2 * 16 * 16
    row = _row(result.stdout, "M", "2")
    assert row[2] == f"{counts.once + counts.per_iteration:,}" and row[3] == f"{adapter:,}"
    kept = counts.once + counts.per_iteration - adapter
    assert row[4] == f"{kept:,} ({100 * kept / base:.2f}%)"
    # T = 4 with s = 2: two iterations with gradient, two forward-only
    four = 6 * (counts.once + 2 * counts.per_iteration) + 2 * 2 * counts.per_iteration
    assert row[-1].endswith(f"({four / (6 * base):.2f}x)")
    lines = result.stdout.splitlines()
    second = lines[next(i for i, line in enumerate(lines) if "training FLOPs per token" in line) :]
    assert [line.split()[0] for line in second if line.split() and line.split()[0] in ("M", "D")] == ["M"]


def test_forced_recurrence_trains_every_iteration_with_gradient(tmp_path: Path) -> None:
    path = design_m_protocol(tmp_path, {"kind": "forced"})
    result = ledger_cli("params", str(path), "--loops", "1,4")
    assert result.returncode == 0, result.stdout + result.stderr
    base, counts = _expected(tmp_path)
    row = _row(result.stdout, "M", "T")
    four = 6 * (counts.once + 4 * counts.per_iteration)
    assert row[-1].endswith(f"({four / (6 * base):.2f}x)")
