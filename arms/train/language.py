"""Next-token language modelling (design M): documents as tokens, the loss, and per-loop validation loss.

Any row becomes a document: a text row is its text; a question row is the reader's rendering
followed by its answer (``reader.render(row) + " " + answer``), so the task mixture trains the
same format the shared reader later reads. Documents are tokenised by the base's own tokenizer
(special tokens as it adds them), cut to ``max_tokens`` and right-padded; the loss is the mean
cross-entropy in nats over every real next-token position, in fp32 whatever the weights' dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F


def document_text(row: Any, reader: Any) -> str:
    """The text a row trains as: its text, or the reader's question with its answer."""
    if row.task == "text":
        return row.prompt
    return reader.render(row) + " " + row.answer


def document_ids(row: Any, reader: Any, tokenizer: Any) -> list[int]:
    """A training row's token ids: a packed sequence's own (a token corpus), or its document tokenised."""
    if row.task == "token_sequence":
        return list(row.input_ids)
    return list(tokenizer(document_text(row, reader))["input_ids"])


def encode_documents(texts: Sequence[str], tokenizer: Any, max_tokens: int, device) -> tuple[Tensor, Tensor]:
    """(input_ids, attention_mask), right-padded, each document cut to ``max_tokens`` tokens."""
    return encode_ids([list(tokenizer(text)["input_ids"]) for text in texts], tokenizer, max_tokens, device)


def encode_ids(documents: Sequence[list[int]], tokenizer: Any, max_tokens: int, device) -> tuple[Tensor, Tensor]:
    """Token-id documents as (input_ids, attention_mask), right-padded, each cut to ``max_tokens`` tokens; an id
    beyond the tokenizer's vocabulary (a corpus tokenised for another model) is refused, not embedded."""
    sequences = [document[:max_tokens] for document in documents]
    largest = max(max(sequence, default=0) for sequence in sequences)
    if largest >= len(tokenizer):
        raise ValueError(
            f"token id {largest} is beyond the base's vocabulary of {len(tokenizer)}: the corpus was tokenised "
            "for another model"
        )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), int(pad), dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for b, sequence in enumerate(sequences):
        ids[b, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
        mask[b, : len(sequence)] = 1
    return ids.to(device), mask.to(device)


def token_nats(logits: Tensor, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per document: (summed next-token cross-entropy in nats, number of predicted tokens)."""
    targets = input_ids[:, 1:]
    real = (attention_mask[:, 1:] * attention_mask[:, :-1]).to(torch.float32)
    wide = torch.promote_types(logits.dtype, torch.float32)  # bf16 weights are scored in fp32; fp64 stays fp64
    nats = F.cross_entropy(logits[:, :-1].to(wide).transpose(1, 2), targets, reduction="none")
    return (nats * real.to(wide)).sum(1), real.sum(1)


class OnePass:
    """A fixed-depth model read as the one loop it has: ``sequence_logits`` as ``RecurrentLM`` offers it, so the
    next-token loss and the sweep read both alike."""

    def __init__(self, model: nn.Module):
        self.model = model

    def sequence_logits(self, ids, mask, loops: int, *, read_at=None, no_grad_loops: int = 0, generator=None):
        return {1: self.model(input_ids=ids, attention_mask=mask).logits}


def _logits_by_loop(model: Any, ids, mask, loops: int, read_at, no_grad_loops: int, generator):
    """{loop: logits}: a ``RecurrentLM`` at its loops, or a one-pass model wrapped in ``OnePass``."""
    return model.sequence_logits(ids, mask, loops, read_at=read_at, no_grad_loops=no_grad_loops, generator=generator)


def next_token_loss(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor,
    *,
    loops: int = 1,
    no_grad_loops: int = 0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Mean nats per predicted token after ``loops`` iterations (the first ``no_grad_loops`` without gradient)."""
    logits = _logits_by_loop(model, input_ids, attention_mask, loops, None, no_grad_loops, generator)
    nats, tokens = token_nats(next(iter(logits.values())), input_ids, attention_mask)
    return nats.sum() / tokens.sum().clamp(min=1.0)


@torch.no_grad()
def sweep_nats(model: Any, input_ids: Tensor, attention_mask: Tensor, loops: Sequence[int]):
    """{test recurrence: (nats [B], tokens [B])} in one forward to the largest loop count (a fixed-depth model: {1})."""
    wanted = tuple(sorted(set(loops)))
    logits = _logits_by_loop(model, input_ids, attention_mask, max(wanted), wanted, 0, None)
    return {loop: token_nats(values, input_ids, attention_mask) for loop, values in logits.items()}
