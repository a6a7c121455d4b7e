"""`ledger check --dry-run --random-weights`: a real-scale protocol exercised with no weights on the machine.

Each base is built from its config.json (shipped for the protocols' hub ids, or a local folder's) at its exact
shape with seeded random weights; the word tokenizer stands in where the folder has none. A base neither
shipped nor local is one line, exit 2.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ledger.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.models


def test_the_shipped_architectures_are_the_papers_bases():
    from arms.bases.loading import qwen25_05b_config, qwen25_15b_config
    from arms.bases.shapes import SHAPES, shipped_shapes

    assert {"Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"} <= set(shipped_shapes())
    pairs = (("Qwen--Qwen2.5-0.5B-Instruct", qwen25_05b_config()), ("Qwen--Qwen2.5-1.5B-Instruct", qwen25_15b_config()))
    for name, expected in pairs:
        shipped = json.loads((SHAPES / name / "config.json").read_text())
        for key in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "rms_norm_eps",
            "tie_word_embeddings",
        ):
            assert shipped[key] == getattr(expected, key), (name, key)
        assert shipped["rope_theta"] == expected.rope_parameters["rope_theta"]  # transformers 5 keeps it there


@pytest.mark.parametrize(
    "source,parameters",
    # the models' published sizes: TinyLlama 1.1B (untied head), Llama-3.2-1B (tied embeddings)
    [
        ("TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T", 1_100_048_384),
        ("meta-llama/Llama-3.2-1B", 1_235_814_400),
    ],
)
def test_design_ms_bases_are_shipped_at_their_published_sizes(source, parameters):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from arms.bases.shapes import config_folder

    config = AutoConfig.from_pretrained(config_folder(source), local_files_only=True)
    with torch.device("meta"):  # counted, not allocated
        model = AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in model.parameters()) == parameters


def test_every_hub_base_a_shipped_protocol_names_has_its_architecture_here():
    from arms.bases.shapes import shipped_shapes
    from ledger.protocol.bases import base_location
    from ledger.protocol.loader import load_protocol

    for path in sorted((ROOT / "protocols").glob("*.yaml")):
        protocol = load_protocol(path)
        for spec in protocol.bases.values():
            location = base_location(spec, path.parent)
            if not (location.startswith("builtin:") or Path(location).exists()):
                assert location in shipped_shapes(), f"{path.name}: base {location} has no shipped config.json"


def test_a_local_folder_is_shaped_by_its_own_config_and_tokenizer():
    from arms.bases.shapes import shaped_base

    shaped = shaped_base(str(ROOT / "bases" / "tiny-base-skills"), "float32")
    assert shaped.config_file == ROOT / "bases" / "tiny-base-skills" / "config.json" and not shaped.tokenizer_stand_in
    config = json.loads(shaped.config_file.read_text())
    assert shaped.model.config.num_hidden_layers == config["num_hidden_layers"]


def test_a_base_without_weights_says_how_to_dry_run_it(capsys):
    code = main(["check", str(ROOT / "protocols" / "phaseA.yaml"), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "dry run:" in err and "--random-weights" in err and "Qwen/Qwen2.5-0.5B-Instruct" in err


def test_random_weights_alone_and_an_unknown_architecture_are_one_line(tmp_path, capsys):
    assert main(["check", str(ROOT / "protocols" / "smoke.yaml"), "--random-weights"]) == 2
    assert "give --dry-run too" in capsys.readouterr().err
    text = (ROOT / "protocols" / "phaseA.yaml").read_text().replace("Qwen/Qwen2.5-1.5B-Instruct", "someone/unknown-7B")
    (tmp_path / "protocols").mkdir()
    (tmp_path / "protocols" / "phaseA.yaml").write_text(text)
    (tmp_path / "claims").symlink_to(ROOT / "claims")
    code = main(["check", str(tmp_path / "protocols" / "phaseA.yaml"), "--dry-run", "--random-weights"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no config.json describes base 'someone/unknown-7B'" in err and "Qwen/Qwen2.5-0.5B-Instruct" in err


REAL_SCALE = {
    # protocol: (its arms, its stand-ins: ARC questions, token corpora)
    "phaseA": (("A_install", "A", "A_anneal", "E", "E_anneal", "B", "C", "D"), ("arc_easy", "arc_challenge"), ()),
    # every arm trains the whole model: past the 15 GiB ceiling, each stage steps a part of its tensors
    "designM-tinyllama": (
        ("R4", "R8", "R16", "R32", "C", "H2", "H1", "C2", "C1"),
        ("arc_easy", "arc_challenge"),
        ("math", "fineweb", "even_mix"),
    ),
    "designM-llama32": (
        ("L", "L_flat", "L_random", "C", "W_last", "W_spaced2", "W_spaced4", "W_early"),
        ("arc_easy", "arc_challenge"),
        ("fineweb",),
    ),
}


def dry_run(protocol: Path) -> tuple[subprocess.CompletedProcess, float]:
    """`ledger check PROTOCOL --dry-run --random-weights --memory-limit 15` in a process of its own, and its time."""
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ledger",
            "check",
            str(protocol),
            "--dry-run",
            "--random-weights",
            "--memory-limit",
            "15",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result, time.monotonic() - started


def assert_every_arm_stage_and_claim_ran(name: str, stdout: str) -> None:
    """The dry run of protocols/NAME.yaml stepped every stage of every arm, read the user's files as stand-ins,
    and judged every claim in its throwaway ledger."""
    arms, benchmarks, corpora = REAL_SCALE[name]
    out = " ".join(stdout.split())
    stepped = [line for line in stdout.splitlines() if "first update:" in line]
    protocol = yaml.safe_load((ROOT / "protocols" / f"{name}.yaml").read_text())
    stages = sum(len(arm["stages"]) for arm in protocol["arms"])
    assert len(stepped) == stages, "\n".join(stepped)  # every stage took its step, whole or in part
    assert "random weights shaped by" in out and "the built-in word tokenizer standing in" in out
    for arm in arms:
        assert f"{arm}: complete" in out, out
    for benchmark in benchmarks:  # the user's ARC files, not here: stand-in questions read
        assert f"manifest {benchmark}: " in out and "stand-in questions under its first ids" in out
    for corpus in corpora:  # the user's packed corpora, not here: a stand-in shard trained on
        assert f"manifest {corpus}: " in out and "stand-in sequences" in out
    claims = [
        claim
        for file in protocol["claims"]
        for claim in yaml.safe_load((ROOT / "protocols" / file).read_text())["claims"]
    ]
    assert f"{len(claims)} claims judged in the throwaway ledger" in out, out


# The real architectures at a width a CI run can afford: every layer kept (the surgery's split and the bases'
# num_layers name layers), each layer 64 wide with 4 heads, and the vocabulary of the word tokenizer that stands in.
NARROW = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2}


def narrow_copy(name: str, folder: Path) -> Path:
    """protocols/NAME.yaml copied into FOLDER, each base a local folder holding its shipped config.json at the
    ``NARROW`` widths (its class, layers, norms, RoPE and tied or untied head as shipped); the claim files are the
    repository's own."""
    from arms.bases.builtin import word_tokenizer
    from arms.bases.shapes import config_folder

    document = yaml.safe_load((ROOT / "protocols" / f"{name}.yaml").read_text())
    for base in document["bases"].values():
        config = json.loads((config_folder(base["source"]) / "config.json").read_text())
        config.update(NARROW, vocab_size=len(word_tokenizer()))
        if config.get("head_dim"):  # Llama 3.2 states its head width; the narrow one is hidden / heads
            config["head_dim"] = NARROW["hidden_size"] // NARROW["num_attention_heads"]
        shape = folder / "bases" / base["source"].replace("/", "--")
        shape.mkdir(parents=True)
        (shape / "config.json").write_text(json.dumps(config, indent=2))
        base["source"] = str(shape)
    (folder / "protocols").mkdir()
    (folder / "claims").symlink_to(ROOT / "claims")
    copy = folder / "protocols" / f"{name}.yaml"
    copy.write_text(yaml.safe_dump(document, sort_keys=False))
    return copy


@pytest.mark.long
@pytest.mark.parametrize("name", list(REAL_SCALE))
def test_a_real_scale_protocol_runs_every_arm_at_narrow_widths(name, tmp_path):
    """Each paper's protocol as written (every arm, stage, optimiser, schedule, recurrence, evaluated manifest and
    claim) on its bases' own architectures at narrow widths: what the release check runs at the real shapes, in
    the time CI has. The real widths' memory ceiling and the part-stepping it forces are the release check's."""
    result, seconds = dry_run(narrow_copy(name, tmp_path))
    print(f"{name}.yaml dry run at narrow widths: {seconds:.0f} s")
    assert_every_arm_stage_and_claim_ran(name, result.stdout)
    assert "steps a part:" not in result.stdout  # at these widths every stage steps every tensor


@pytest.mark.release
@pytest.mark.parametrize("name", list(REAL_SCALE))
def test_a_real_scale_protocol_runs_every_arm_at_its_shapes_with_no_weights(name):
    """A paper's protocol run on its miniature with every arm built at its base's shapes in bf16 (Qwen2.5 for
    Phase A; TinyLlama-1.1B and Llama-3.2-1B for design M): a step of every stage (of a part of its tensors, with
    the reason, where the whole training state would not fit this machine), stand-ins for the ARC files and token
    corpora the user supplies, every evaluated manifest read at every loop, every claim judged in the throwaway
    ledger. Its time and peak memory are printed (`-s`); with a 15 GiB ceiling the peak stays under 16 GiB.
    Half an hour to an hour on 2 cores: `bash bench/release_check.sh` runs it."""
    result, seconds = dry_run(ROOT / "protocols" / f"{name}.yaml")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # the largest child so far
    narrowed = [line for line in result.stdout.splitlines() if "steps a part:" in line]
    print(f"{name}.yaml dry run with random weights: {seconds:.0f} s, peak {peak:.1f} GiB; {len(narrowed)} stages")
    print("\n".join(narrowed))
    assert_every_arm_stage_and_claim_ran(name, result.stdout)
    assert peak < 16, f"peak {peak:.1f} GiB"


def test_the_gsm8k_claims_read_arms_of_their_protocol_at_its_loops():
    """design M's GSM8K claims are judged on `ledger lm-eval`'s release, after the run: each names an arm of the
    protocol, a loop its sweep reads, and a one-sided paired test."""
    from ledger.protocol.claims import load_claims
    from ledger.protocol.loader import load_protocol

    protocol = load_protocol(ROOT / "protocols" / "designM-tinyllama.yaml")
    claim_file = load_claims(ROOT / "claims" / "designM-tinyllama-gsm8k.yaml")
    assert claim_file.release and claim_file.protocol == "designM-tinyllama-gsm8k"
    for claim in claim_file.claims:
        for arm, loop in zip(claim.arms, claim.loops, strict=True):
            assert protocol.arm(arm) is not None
            assert loop in (protocol.arm(arm).evaluation.loops if protocol.arm(arm).kind == "recurrent" else [1])
