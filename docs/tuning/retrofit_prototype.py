import argparse
import sys
import time

import torch

sys.path.insert(0, "/work/main")
from arms.bases.loading import load_base
from arms.model import budgets
from arms.model.recurrent import RecurrentLM
from arms.runtime import draw_batch
from arms.train.recurrent import make_recurrent_batch, recurrent_loss
from ledger.reader.shared import Reader, row_symbols
from ledger.rows.tasks.alphabets import resolve_alphabet
from ledger.rows.tasks.rule_chasing import generate_rule_chasing

p = argparse.ArgumentParser()
p.add_argument("--a", type=int, default=1)
p.add_argument("--b", type=int, default=3)
p.add_argument("--lr", type=float, default=1e-3)
p.add_argument("--steps", type=int, default=1500)
p.add_argument("--dmax", type=int, default=4)
p.add_argument("--bs", type=int, default=16)
p.add_argument("--bridge_mult", type=float, default=1.0)
p.add_argument("--every", type=int, default=100)
p.add_argument("--budget", default="full")
p.add_argument("--base", default="/work/main/bases/tiny-base")
p.add_argument("--objective", default="intermediate")
p.add_argument("--rows", type=int, default=512)
args = p.parse_args()
print(args, flush=True)
torch.manual_seed(0)
model, tok = load_base(args.base, dtype="float32")
sym = resolve_alphabet("N16")
train = generate_rule_chasing(
    surface="symbolic", symbols=sym, depth_range=[1, args.dmax], rows_per_depth=args.rows, seed=5, split="ptrain"
)
dev = generate_rule_chasing(
    surface="symbolic", symbols=sym, depth_range=[1, 10], rows_per_depth=32, seed=5, split="pdev"
)
symbols = []
for r in train + dev:
    for s in row_symbols(r):
        if s not in symbols:
            symbols.append(s)
reader = Reader(symbols, tokenizer=tok)
rl = RecurrentLM.build(model, split=(args.a, args.b), bridge="split")
if args.budget == "full":
    groups = budgets.apply_full_block_budget(rl)
else:
    rl = budgets.apply_adapter_budget(rl, rank=8, alpha=16, dropout=0.0, seed=1)
    groups = rl.param_groups()
print({k: sum(p.numel() for p in v) for k, v in groups.items()})
pg = [{"params": v, "lr": args.lr * (args.bridge_mult if "bridge" in k else 1.0)} for k, v in groups.items()]
opt = torch.optim.AdamW(pg, lr=args.lr, weight_decay=0.0)
trainable = [p for v in groups.values() for p in v]


def evaluate():
    rl.eval()
    out = {}
    with torch.inference_mode():
        for d in range(1, 11):
            rows = [r for r in dev if r.depth == d]
            b = make_recurrent_batch(rows, reader)
            lo = recurrent_loss(rl, b).logits  # [loops,B,S]
            pred = lo[d - 1].argmax(-1)
            out[d] = float((pred == b.answers).float().mean())
    rl.train()
    return out


t0 = time.time()
rl.train()
ema = None
for step in range(args.steps + 1):
    if step % args.every == 0:
        acc = evaluate()
        print(
            f"step {step} t={time.time() - t0:.0f}s loss={ema} " + " ".join(f"{d}:{a:.2f}" for d, a in acc.items()),
            flush=True,
        )
    if step == args.steps:
        break
    rows = draw_batch(train, args.bs, "p", step)
    b = make_recurrent_batch(rows, reader)
    loss = recurrent_loss(rl, b, objective=args.objective).loss
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trainable, 1.0)
    opt.step()
    ema = float(loss) if ema is None else 0.95 * ema + 0.05 * float(loss)
