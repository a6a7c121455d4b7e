"""What an arm's runtime and its readings share, below both: seeds derived by hashing, tensors moved to a device,
a one-pass model's symbol logits, and the runtime interfaces the readings are written against (``ArmView``,
``RecurrentView``), so that ``arms.runtime`` imports its readings and no reading imports it back."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch

from ledger.canonical import canonical_json, sha256_hex
from ledger.reader.shared import Reader


def derived_seed(*parts: Any) -> int:
    return int(sha256_hex(canonical_json(list(parts)))[:16], 16) % (2**63)


def on_device(tensors: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {key: value.to(device) for key, value in tensors.items()}


def one_pass_logits(model, encoded: dict[str, Any], symbol_ids: torch.Tensor) -> torch.Tensor:
    """A one-pass model's symbol logits at the last column of a left-padded batch, at the positions a
    retrofit's loop 1 reads (padding skipped, ``positions_from_mask``): a base and its arms are read alike,
    bit for bit in any dtype, where positions shifted by the padding would differ by RoPE's rounding."""
    from arms.model.recurrent import positions_from_mask

    positions = positions_from_mask(encoded["attention_mask"])
    return model(**encoded, position_ids=positions, logits_to_keep=1).logits[:, -1][:, symbol_ids]


def symbol_id_tensor(reader: Reader, device: torch.device) -> torch.Tensor:
    """The token id of each of the reader's symbols, in the reader's order, on ``device``."""
    return torch.tensor([reader.symbol_token_ids[s] for s in reader.symbols], device=device)


class ArmView(Protocol):
    """What the next-token stages and sweeps read of an arm's runtime (``arms.runtime_language``)."""

    arm: Any
    device: torch.device
    reader: Reader
    tokenizer: Any
    step_records: dict[int, dict]

    def readouts(self, rows: Any, loops: int, read_at: Any = None) -> torch.Tensor: ...

    def record_step(
        self, step: int, tokens: int, *, loops: int = 1, grad_loops: int = 1, mean: float = 1.0, flops: Any = None
    ) -> None: ...

    def sequence_model(self) -> Any: ...


class RecurrentView(Protocol):
    """What a recurrent arm's reading reads of its runtime (``arms.recurrent_reading``)."""

    model: Any
    reader: Reader
    device: torch.device
    symbol_ids: torch.Tensor

    def readouts(self, rows: Any, loops: int, read_at: Any = None) -> torch.Tensor: ...

    def encode(self, rows: Any) -> tuple[torch.Tensor, torch.Tensor]: ...

    def inference_copy(self) -> AbstractContextManager[Any]: ...
