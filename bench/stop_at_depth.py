"""Stop at depth: a mixed-depth training step with and without rows stopping at their own depth.

    python bench/stop_at_depth.py            # the shipped tiny base, depth 1-8 and 1-4 batches (~1 min)
    python bench/stop_at_depth.py --help

A forced-depth batch runs max(depth) loops. Without `depths`, every row runs all of
them and the loss then masks the cells past each row's depth; with
`RecurrentLM.forward(depths=...)` (what `arms.train.recurrent.recurrent_loss` now passes) a
row leaves the batch after its own depth. This script times one training step
(forward + intermediate loss + backward) both ways, side by side in ONE run,
round-robin in every repeat after a warmup, on the SAME batches, with one torch
thread, and prints the median process-CPU-time ratio next to the layer-count
prediction (prelude + sum over loops of live rows x (block + coda)) / (same with
every row live). It also checks that the two losses agree.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from arms.bases.loading import load_base  # noqa: E402
from arms.model.budgets import apply_full_block_budget  # noqa: E402
from arms.model.recurrent import RecurrentLM  # noqa: E402
from arms.runtime import draw_batch  # noqa: E402
from arms.train.recurrent import make_recurrent_batch, objective_loss  # noqa: E402
from ledger.reader.shared import Reader, row_symbols  # noqa: E402
from ledger.rows.tasks.alphabets import resolve_alphabet  # noqa: E402
from ledger.rows.tasks.rule_chasing import generate_rule_chasing  # noqa: E402


def step_cost(rlm, batch, stop_at_depth: bool):
    """(process CPU seconds, loss) of one forward + backward."""
    kwargs = {"depths": batch.depths} if stop_at_depth else {}
    cpu = time.process_time()
    readouts = rlm(batch.input_ids, batch.attention_mask, loops=batch.max_depth, **kwargs)
    logits = readouts.index_select(-1, batch.symbol_token_ids)
    loss = objective_loss(logits, batch, "intermediate")
    loss.backward()
    rlm.zero_grad(set_to_none=True)
    return time.process_time() - cpu, float(loss.detach())


def predicted_ratio(rlm, depths: list[int]) -> float:
    s = rlm.surgery
    per_loop = len(s.block_idx) + len(s.coda_idx)
    live = sum(depths) * per_loop
    every = len(depths) * max(depths) * per_loop
    prelude = len(depths) * len(s.prelude_idx)
    return (prelude + live) / (prelude + every)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default=str(ROOT / "bases" / "tiny-base"), help="a local base folder")
    parser.add_argument("--split", default="1,3", help="prelude/block/coda cut a,b (default 1,3)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--batches", type=int, default=6, help="distinct batches per depth range (repeats)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    model, tokenizer = load_base(args.base, dtype="float32")
    a, b = (int(x) for x in args.split.split(","))
    rlm = RecurrentLM.build(model, split=(a, b), bridge="split")
    apply_full_block_budget(rlm)
    rlm.train()
    symbols = resolve_alphabet("N16")
    print(
        f"base {args.base}: split ({a}, {b}), batch {args.batch}, {args.threads} thread(s), "
        f"median of {args.batches} batches, process CPU time"
    )
    print(f"{'depths':>8} {'all rows':>10} {'stop':>10} {'ratio':>7} {'pred':>7} {'max |loss diff|':>16}")
    for lo, hi in ((1, 8), (1, 4)):
        rows = generate_rule_chasing(
            surface="symbolic", symbols=symbols, depth_range=[lo, hi], rows_per_depth=64, seed=1, split="bench"
        )
        reader = Reader([s for s in dict.fromkeys(x for r in rows for x in row_symbols(r))], tokenizer=tokenizer)
        batches = [make_recurrent_batch(draw_batch(rows, args.batch, "bench", i), reader) for i in range(args.batches)]
        step_cost(rlm, batches[0], True), step_cost(rlm, batches[0], False)  # warmup
        full, stop, preds, diffs = [], [], [], []
        for batch in batches:  # round-robin: both variants on the same batch back to back
            t_full, loss_full = step_cost(rlm, batch, False)
            t_stop, loss_stop = step_cost(rlm, batch, True)
            full.append(t_full), stop.append(t_stop), diffs.append(abs(loss_full - loss_stop))
            preds.append(predicted_ratio(rlm, batch.depths.tolist()))
        f, s = statistics.median(full), statistics.median(stop)
        print(
            f"{f'{lo}-{hi}':>8} {f:>9.3f}s {s:>9.3f}s {s / f:>7.2f} {statistics.median(preds):>7.2f} {max(diffs):>16.2e}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
