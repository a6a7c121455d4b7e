"""Choosing depth in the runtime's own evaluation: a constructed model whose answer distribution moves at every
loop until a known loop and then settles; the KL exit rule stops each row there, and the readings record the
signals and the mark the judge reads back."""

from __future__ import annotations

import torch
from test_runtime_mapping import runtime_of

from ledger.protocol.arms import Evaluation
from ledger.reader.exit_rules import row_signals
from ledger.rows.tasks import generate_rule_chasing

SETTLES_AT = 4  # the first loop whose distribution equals (within 1e-5 nats) the previous one
LOOPS = 7


class SettlingModel(torch.nn.Module):
    """Readout at loop t: a peak on a different answer symbol at every loop before SETTLES_AT, then the same peak
    (plus a perturbation far below the threshold) from there on."""

    def __init__(self, symbol_ids: torch.Tensor, vocab: int):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(()))  # the runtime reads its device
        self.symbol_ids, self.vocab = symbol_ids, vocab

    def forward(self, input_ids, attention_mask, loops, read_at=None):
        batch = input_ids.shape[0]
        out = torch.zeros(loops, batch, self.vocab)
        for t in range(1, loops + 1):
            peak = self.symbol_ids[min(t, SETTLES_AT - 1) % len(self.symbol_ids)]
            out[t - 1, :, peak] = 6.0
            out[t - 1, :, self.symbol_ids[0]] += 1e-4 * t  # settled loops still move, by far less than 1e-3 nats
        wanted = range(1, loops + 1) if read_at is None else read_at
        return out[[t - 1 for t in wanted]]


def test_the_kl_rule_stops_a_settling_model_at_the_loop_it_settles() -> None:
    _, runtime = runtime_of({"bridge": {"kind": "split", "reentry": "answer"}, "budget": {"kind": "full_block"}})
    vocab = runtime.tokenizer.vocab_size if hasattr(runtime.tokenizer, "vocab_size") else 512
    runtime.model = SettlingModel(runtime.symbol_ids, max(vocab, int(runtime.symbol_ids.max()) + 1))
    rows = generate_rule_chasing(surface="symbolic", depth_range=(1, 3), rows_per_depth=3, seed=5, split="test")
    evaluation = Evaluation.model_validate(
        {
            "manifests": ["eval"],
            "loops": list(range(1, LOOPS + 1)),
            "exit_rules": [{"rule": "kl"}, {"rule": "kl", "threshold": 1e-12}, {"rule": "argmax", "threshold": 2}],
            "latency_sample_per_depth": 0,
        }
    )
    readings = runtime.evaluate(rows, evaluation)
    assert len(readings) == len(rows) * LOOPS
    for row in rows:
        mine = sorted((r for r in readings if r.row_id == row.row_id), key=lambda r: r.loop)
        marks = {label: [r.loop for r in mine if label in r.detail.get("exits", [])] for label in ("kl<0.001",)}
        assert marks["kl<0.001"] == [SETTLES_AT], row.row_id
        # a threshold no settled loop gets under never fires: the last loop
        assert [r.loop for r in mine if "kl<1e-12" in r.detail.get("exits", [])] == [LOOPS]
        # the prediction is the same from SETTLES_AT - 1 on: two repeats at SETTLES_AT + 1
        assert [r.loop for r in mine if "argmax>=2" in r.detail.get("exits", [])] == [SETTLES_AT + 1]
        kls = [r.detail["kl"] for r in mine]
        assert all(kl > 1.0 for kl in kls[: SETTLES_AT - 1]) and all(kl < 1e-5 for kl in kls[SETTLES_AT - 1 :])
        # the recorded signals are the reader's distribution over the row's own symbols
        logits = runtime.model(torch.zeros(1, 1, dtype=torch.long), None, LOOPS)[:, 0][:, runtime.symbol_ids]
        scores = [runtime.reader.decode_scores(logits[t].numpy(), row).scores for t in range(LOOPS)]
        assert [s["kl"] for s in row_signals(scores)] == kls
