"""Bounded parsing of the model files a user hands over: a GGUF or safetensors file that lies about its own sizes,
a weights file that never ends, a config past its budget. Each is one line and exit 2, within seconds, before any
library allocates from a stated size; the planted lies are fresh ones, not the measured cases."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from model_file_builders import (
    gguf_with_a_huge_array,
    gguf_with_a_tensor_past_its_end,
    safetensors_with_a_tensor_outside,
    safetensors_with_header_length,
    valid_gguf,
    valid_safetensors_folder,
)

from ledger.model_files import ModelFileError, check_model_folder, check_model_source, read_gguf_metadata

ROOT = Path(__file__).resolve().parents[2]


def _ledger(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ledger", *args], capture_output=True, text=True, cwd=cwd, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def test_valid_files_written_by_the_real_libraries_are_read(tmp_path):
    metadata = read_gguf_metadata(valid_gguf(tmp_path / "model.gguf", layers=6))
    assert metadata.values["llama.block_count"] == 6 and metadata.tensors == 2
    assert metadata.array_lengths["tokenizer.ggml.tokens"] == 4 and metadata.string("tokenizer.chat_template")
    check_model_folder(valid_safetensors_folder(tmp_path / "folder"))


def _gguf_string_count(tmp_path: Path) -> Path:
    """A GGUF whose key count says 2^40 pairs in a file of 40 bytes."""
    path = tmp_path / "pairs.gguf"
    path.write_bytes(struct.pack("<4sIQQ", b"GGUF", 3, 0, 1 << 40) + b"\x00" * 16)
    return path


def _gguf_string_array(tmp_path: Path) -> Path:
    """A GGUF whose array of strings says 2^33 strings, each claiming to be short."""
    key = b"tokenizer.ggml.merges"
    body = struct.pack("<4sIQQ", b"GGUF", 3, 0, 1) + struct.pack("<Q", len(key)) + key
    path = tmp_path / "merges.gguf"
    path.write_bytes(body + struct.pack("<IIQ", 9, 8, 1 << 33) + struct.pack("<Q", 1) + b"a")
    return path


@pytest.mark.parametrize(
    "plant",
    [
        lambda tmp: gguf_with_a_huge_array(tmp / "huge.gguf", (1 << 62) + 3),
        _gguf_string_count,
        _gguf_string_array,
        lambda tmp: gguf_with_a_tensor_past_its_end(tmp / "cut.gguf"),
    ],
    ids=["int32-array-2^62", "pair-count-2^40", "string-array-2^33", "tensor-past-the-end"],
)
def test_a_gguf_that_lies_about_its_sizes_is_one_line_and_exit_2(plant, tmp_path):
    path = plant(tmp_path)
    with pytest.raises(ModelFileError, match="not a usable GGUF file"):
        read_gguf_metadata(path)
    started = time.monotonic()
    done = _ledger("init", str(path), "--out-dir", str(tmp_path / "out"), cwd=tmp_path)
    assert time.monotonic() - started < 60
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "not a usable GGUF file" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "plant",
    [
        lambda folder: safetensors_with_header_length(folder, (1 << 63) + 5),
        lambda folder: safetensors_with_header_length(folder, 250),  # inside the file, but not its JSON
        safetensors_with_a_tensor_outside,
    ],
    ids=["header-2^63", "header-cut-mid-json", "tensor-outside"],
)
def test_a_safetensors_file_that_lies_is_refused_by_init_and_before_transformers_loads_it(plant, tmp_path):
    folder = plant(tmp_path / "model")
    from arms.bases.loading import load_base

    with pytest.raises(ModelFileError):
        check_model_source(folder)
    with pytest.raises(ModelFileError):  # the run's loader refuses it before transformers reads a byte
        load_base(str(folder))
    done = _ledger("init", str(folder), "--out-dir", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "model.safetensors" in done.stderr and "internal error" not in done.stderr


@pytest.mark.parametrize("kind", ["fifo", "device", "config-past-budget"])
def test_weights_that_never_end_and_a_config_past_its_budget_are_refused_without_reading(kind, tmp_path):
    folder = valid_safetensors_folder(tmp_path / "model")
    if kind == "fifo":
        (folder / "model.safetensors").unlink()
        os.mkfifo(folder / "model.safetensors")  # a read would wait forever for a writer
    elif kind == "device":
        (folder / "model.safetensors").unlink()
        (folder / "model.safetensors").symlink_to("/dev/zero")  # a read would never end
    else:
        with (folder / "generation_config.json").open("wb") as handle:
            handle.truncate(1 << 30)  # sparse: past the budget without the disk
    with pytest.raises(ModelFileError, match=r"not a regular file|past its budget"):
        check_model_folder(folder)
    done = _ledger("init", str(folder), "--out-dir", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_protocol_naming_a_lying_gguf_is_refused_by_check_and_by_the_loader(tmp_path):
    """``ledger check`` reads the layer count from the GGUF header; the run's loader checks before transformers."""
    gguf = gguf_with_a_huge_array(tmp_path / "base.gguf", 1 << 61)
    protocol = (ROOT / "protocols" / "smoke.yaml").read_text(encoding="utf-8")
    source = next(line for line in protocol.splitlines() if line.strip().startswith("source: builtin:"))
    (tmp_path / "protocols").mkdir()
    (tmp_path / "claims").mkdir()
    (tmp_path / "claims" / "smoke.yaml").write_bytes((ROOT / "claims" / "smoke.yaml").read_bytes())
    (tmp_path / "protocols" / "p.yaml").write_text(protocol.replace(source, f"    source: {gguf}"), encoding="utf-8")
    checked = _ledger("check", "protocols/p.yaml", cwd=tmp_path)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "not a usable GGUF file" in checked.stderr and "internal error" not in checked.stderr
