"""Why does a retrofitted chain decay? Two diagnostics of a trained recurrent arm.

    python docs/tuning/loop_diagnostics.py PROTOCOL ARM CHECKPOINT [--manifest tune] [--base-dir bases]

1. Per-hop anatomy on the manifest's rows of depth >= 6: P(loop t right | loop t-1
   right) and what a first wrong loop wrote (stay = the previous symbol again,
   advance-twice = one hop too many, neighbour-line = the value of a table line next to
   the right one, reverse, start, other).
2. State dynamics on 16 depth-14 rows: the mean norm of the block output at table and
   answer positions per loop, its cosine to the previous loop and to loop 1.

Exploratory, development rows only (never an evaluation manifest): the checkpoint is a
`ledger run` stage checkpoint (the arm's trainable tensors).
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

import torch

from arms.bases.loading import load_base
from arms.model.recurrent import last_token_positions, positions_from_mask
from arms.runtime import build_runtime
from ledger.protocol.loader import load_protocol
from ledger.reader.shared import Reader
from ledger.rows.builder import build_manifests
from ledger.rows.tasks.alphabets import resolve_alphabet


def first_error_kind(row, t: int, pred: str) -> str:
    path, order = row.path, row.meta["order"]
    j = order.index(path[t - 1])
    neighbours = {row.table[order[x]] for x in (j - 1, j + 1) if 0 <= x < len(order)}
    if pred == path[t - 1]:
        return "stay"
    if pred == row.table[path[t]]:
        return "advance-twice"
    if pred in neighbours:
        return "neighbour-line"
    if pred in [key for key, value in row.table.items() if value == path[t - 1]]:
        return "reverse"
    return "start" if pred == row.start else "other"


def per_hop(runtime, rows, symbols) -> None:
    kinds, counts = collections.Counter(), collections.Counter()
    for first in range(0, len(rows), 32):
        chunk = rows[first : first + 32]
        with torch.no_grad():
            out = runtime.readouts(chunk, max(r.depth for r in chunk))
        for b, row in enumerate(chunk):
            previous_right = True
            for t in range(1, row.depth + 1):
                pred = symbols[int(out[t - 1, b].argmax())]
                right = pred == row.path[t]
                if previous_right:
                    counts[(t, right)] += 1
                    if not right:
                        kinds[(t, first_error_kind(row, t, pred))] += 1
                previous_right = right
    for t in sorted({t for t, _ in counts}):
        n = counts[(t, True)] + counts[(t, False)]
        errors = {k: v for (tt, k), v in sorted(kinds.items()) if tt == t}
        print(
            f"loop {t:2d}: P(right | previous right) = {counts[(t, True)]}/{n} = {counts[(t, True)] / n:.2f}  {errors}"
        )


def dynamics(runtime, rows) -> None:
    model = runtime.model
    ids, mask = runtime._encode(rows)
    answer = last_token_positions(mask)
    table = mask.bool().clone()
    table[torch.arange(len(rows)), answer] = False
    with torch.no_grad():
        embeds = model.surgery.embed_tokens(ids)
        ctx = model._context(embeds, mask, positions_from_mask(mask))
        prelude = model._run(model.surgery.prelude_idx, embeds, ctx)
        state, previous, first = prelude, None, None
        for t in range(1, 15):
            state = model._step(t, state, prelude, ctx, torch.arange(len(rows)), answer)
            line = (
                f"loop {t:2d}: |h| table {state[table].norm(dim=-1).mean():8.1f}"
                f"  answer {state[torch.arange(len(rows)), answer].norm(dim=-1).mean():8.1f}"
            )
            if previous is not None:
                cos = torch.nn.functional.cosine_similarity
                line += (
                    f"  cos(table t, t-1) {cos(state[table], previous[table], dim=-1).mean():.3f}"
                    f"  cos(table t, 1) {cos(state[table], first[table], dim=-1).mean():.3f}"
                )
            first = state.clone() if first is None else first
            previous = state
            print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("protocol")
    parser.add_argument("arm")
    parser.add_argument("checkpoint")
    parser.add_argument("--manifest", default="tune", help="a development manifest of the protocol")
    args = parser.parse_args()
    torch.set_num_threads(1)
    protocol = load_protocol(args.protocol)
    arm = next(a for a in protocol.arms if a.id == args.arm)
    spec = protocol.bases[arm.base]
    base, tokenizer = load_base(str((Path(args.protocol).parent / spec.source).resolve()))
    reader = Reader(resolve_alphabet("N16"), tokenizer=tokenizer)
    runtime = build_runtime(arm, base, tokenizer, reader)
    runtime.load(Path(args.checkpoint))
    manifest = next(m for m in protocol.manifests if m.id == args.manifest)
    if manifest.role == "eval":
        raise SystemExit(f"{args.manifest} is an evaluation manifest: diagnose on development rows")
    rows = build_manifests(protocol)[args.manifest].rows
    per_hop(runtime, [r for r in rows if r.depth >= 6], reader.symbols)
    dynamics(runtime, [r for r in rows if r.depth == 14][:16])


if __name__ == "__main__":
    main()
