"""Small model files for the parsers' tests: valid ones written by the real libraries (``gguf.GGUFWriter``,
``safetensors.numpy``), and the lies a hostile file tells about its own sizes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4, "hidden_size": 8}


def valid_gguf(path: Path, layers: int = 4) -> Path:
    """A GGUF file of a four-layer llama: metadata (strings, an array of strings, integers) and two tensors."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(layers)
    writer.add_context_length(64)
    writer.add_chat_template("{{ messages }}")
    writer.add_token_list(["<s>", "</s>", "a", "b"])
    writer.add_tensor("token_embd.weight", np.arange(32, dtype=np.float32).reshape(4, 8))
    writer.add_tensor("output_norm.weight", np.ones(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def valid_safetensors_folder(folder: Path) -> Path:
    """A Hugging Face folder: config.json and one safetensors file of two tensors."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG), encoding="utf-8")
    save_file(
        {"embed": np.zeros((4, 8), np.float32), "norm": np.ones(8, np.float32)}, str(folder / "model.safetensors")
    )
    return folder


def gguf_with_a_huge_array(path: Path, count: int) -> Path:
    """A 100-odd-byte GGUF whose one key holds an array of ``count`` int32 items it does not have."""
    key = b"tokenizer.ggml.token_type"
    body = struct.pack("<4sIQQ", b"GGUF", 3, 0, 1) + struct.pack("<Q", len(key)) + key
    body += struct.pack("<IIQ", 9, 5, count) + b"\x00" * 40
    path.write_bytes(body)
    return path


def gguf_with_a_tensor_past_its_end(path: Path) -> Path:
    """A valid GGUF, then cut: its tensor infos promise bytes the file no longer holds."""
    valid_gguf(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 64])
    return path


def safetensors_with_header_length(folder: Path, length: int) -> Path:
    """A folder whose safetensors file states a header of ``length`` bytes."""
    valid_safetensors_folder(folder)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(struct.pack("<Q", length) + data[8:])
    return folder


def safetensors_with_a_tensor_outside(folder: Path) -> Path:
    """A folder whose safetensors header places a tensor past the end of the file's data."""
    valid_safetensors_folder(folder)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    header["norm"]["data_offsets"] = [header["norm"]["data_offsets"][0], 1 << 40]
    text = json.dumps(header).encode()
    weights.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + length :])
    return folder
