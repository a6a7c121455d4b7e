"""The guardrail compares a base and its arm read alike: the same tokens at the same positions.

A retrofit's loop 1 skips the left padding when it numbers positions (``positions_from_mask``); a base read
without ``position_ids`` numbers the pads too, so every padded row's rotary tables are shifted. In exact
arithmetic RoPE is relative and the shift cancels; in bf16 the tables round differently and the two readings
differ. The guardrail's 3-point stop must compare readings that differ only by what the arm learnt.
"""

from __future__ import annotations

import pytest
import torch
from test_bf16_training import ARMS as BF16_ARMS
from test_bf16_training import _runtime as bf16_runtime
from test_runtime_mapping import protocol_with

from arms.bases.builtin import tiny_random_base
from arms.choice_reading import BaseView, read_choices
from arms.runtime import base_choice_readings, build_runtime
from arms.runtime_common import on_device
from ledger.reader.shared import Reader
from ledger.rows.tasks.alphabets import resolve_alphabet
from ledger.rows.tasks.arithmetic import generate_arithmetic

pytestmark = pytest.mark.models

BASE = "builtin:tiny-qwen2?hidden=32&layers=4&heads=2&kv_heads=1&intermediate=64"


def _setup():
    model, tokenizer = tiny_random_base(BASE)
    model = model.to(torch.bfloat16)
    reader = Reader(list(resolve_alphabet("N16")), tokenizer=tokenizer)  # its symbols hold the letters
    protocol = protocol_with({"bridge": {"kind": "split"}, "budget": {"kind": "full_block"}})
    runtime = build_runtime(protocol.arms[0], model, tokenizer, reader)  # untrained: loop 1 is the base
    return model, tokenizer, reader, runtime, guardrail_rows()


def guardrail_rows():
    """Tier-1 guardrail rows made unequal in length (this tokenizer reads every number as one token): row i
    starts with i extra words, so the batch is left-padded by 0-3 slots."""
    rows = generate_arithmetic(seed=5, per_op=2)
    return [row.model_copy(update={"prompt": "Question " * (i % 4) + row.prompt}) for i, row in enumerate(rows)]


def test_base_and_untrained_arm_read_the_same_bits_under_left_padding_in_bf16() -> None:
    model, tokenizer, reader, runtime, rows = _setup()
    encoded = on_device(reader.encode(rows, return_tensors="pt"), torch.device("cpu"))
    assert (encoded["attention_mask"] == 0).any(), "the rows must be left-padded for the test to mean anything"
    assert next(runtime.model.parameters()).dtype == torch.bfloat16
    with torch.inference_mode():
        base = BaseView(model, tokenizer, reader).loop1_logits(rows)
        arm = runtime.loop1_logits(rows)
        # the reading before the fix: positions counted over the pads
        unpositioned = model(**encoded, logits_to_keep=1).logits[:, -1][:, runtime.symbol_ids]
    assert torch.equal(base, arm)
    assert not torch.equal(unpositioned, arm), "bf16 RoPE tables shifted by the padding should round differently"
    # the guardrail's own readings: every prediction and margin equal
    of_base = base_choice_readings(model, tokenizer, reader, rows, batch_size=len(rows))
    of_arm = read_choices(runtime, rows, batch_size=len(rows))
    assert [(r.row_id, r.prediction, r.margin) for r in of_base] == [(r.row_id, r.prediction, r.margin) for r in of_arm]


def test_a_dense_arm_is_read_at_the_same_positions_as_its_base() -> None:
    _, runtime = bf16_runtime(BF16_ARMS["dense"])  # a bf16 dense arm, untrained: its weights are the base's
    rows = guardrail_rows()
    with torch.inference_mode():
        base = BaseView(runtime.model, runtime.tokenizer, runtime.reader).loop1_logits(rows)
        arm = runtime.loop1_logits(rows)
        recurrent = _setup()[3].loop1_logits(rows)
    assert next(runtime.model.parameters()).dtype == torch.bfloat16
    assert torch.equal(base, arm)
    assert arm.shape == recurrent.shape
