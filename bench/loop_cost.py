"""Loop cost: forward time (process CPU and wall-clock) of the recurrent arms relative to one base forward.

    python bench/loop_cost.py            # ~2 min CPU time (1 thread); longer wall-clock on a busy machine
    python bench/loop_cost.py --quick    # ~1 min: hidden 256, 48-token prompt

A random-init Qwen2 with Qwen2.5-0.5B's depth and layout (24 layers, GQA 2 KV heads,
SwiGLU ~5.4x, tied embeddings) but reduced width and vocabulary, cut at the paper's
split (a, b) = (6, 18). Measured side by side in ONE run, round-robin over the
variants in every repeat (so drift from other load hits all of them alike), after
a warmup, median of the repeats, under torch.inference_mode, fixed thread count:

- base: the base model's own forward, last-position logits (logits_to_keep=1);
- rlm all: RecurrentLM.forward(loops=T) as the training/eval code calls it, which
  reads out EVERY loop 1..T (coda + norm + lm_head at each loop);
- rlm final: `RecurrentLM.forward(loops=T, read_at=[T])`, reading out only loop T (prelude
  once, block T times, coda once; the runner's latency path): accounting.inference_cost_ratio's model;
- lora: the adapter arm (AdapterRecurrentLM, rank 16), unmerged LoRA, final readout;
- merged: the adapter arm running loops >= 2 on the merged second block copy.

Each time is divided by the base time and printed next to the predicted ratio
(L - block + T*block)/L = accounting.inference_cost_ratio, and, for "rlm all",
next to the layer-count prediction when the coda runs at every loop,
(prelude + T*(block + coda))/L.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from arms.bases.loading import qwen25_05b_config
from arms.model.accounting import inference_cost_ratio
from arms.model.budgets import apply_adapter_budget
from arms.model.recurrent import RecurrentLM, positions_from_mask


def final_readout(rlm, ids, mask, loops):
    """Loop `loops`'s readout only: the runner's own forward with ``read_at=[loops]`` (what its latency times):
    prelude once, block `loops` times, coda once."""
    return rlm(ids, mask, loops=loops, read_at=[loops])[0]


def timed(fn):
    """(wall-clock seconds, process CPU seconds) of one call.

    With one torch thread the CPU time is the compute this process did, which
    other processes competing for the cores do not inflate (wall-clock they do).
    """
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="narrower model, shorter prompt, 5 repeats")
    ap.add_argument("--hidden", type=int, default=None, help="hidden size (default 384, quick 256; a multiple of 128)")
    ap.add_argument("--seq", type=int, default=None, help="prompt length (default 128, quick 48)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats per variant (default 5)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--loops", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--split", type=int, nargs=2, default=[6, 18])
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=32000)
    args = ap.parse_args(argv)
    hidden = args.hidden or (256 if args.quick else 384)
    if hidden % 128:
        ap.error("--hidden must be a multiple of 128 (64-wide heads, 2 KV heads)")
    seq = args.seq or (48 if args.quick else 128)
    repeats = args.repeats or 5

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(0)

    import peft
    import transformers
    from transformers import Qwen2ForCausalLM

    n_layers = 24
    inter = int(round(hidden * 4864 / 896 / 64)) * 64
    config = qwen25_05b_config(
        vocab_size=args.vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_attention_heads=hidden // 64,
        num_key_value_heads=2,
        num_hidden_layers=n_layers,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    config._attn_implementation = "sdpa"
    a, b = args.split
    n_block = b - a

    base = Qwen2ForCausalLM(config).eval()
    rlm = RecurrentLM.build(base, split=(a, b), bridge="split").eval()
    # The adapter arm needs its own base: injection would put LoRA into `base` too.
    torch.manual_seed(0)
    base2 = Qwen2ForCausalLM(config).eval()
    arlm = apply_adapter_budget(
        RecurrentLM.build(base2, split=(a, b), bridge="split"), rank=args.rank, alpha=2 * args.rank, seed=0
    ).eval()
    with torch.no_grad():  # a non-zero adapter, so loops >= 2 really run it
        g = torch.Generator().manual_seed(1)
        for p in arlm.lora_parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=g))
        for p in (*rlm.bridge.parameters(), *arlm.bridge.parameters()):
            p.add_(0.01 * torch.randn(p.shape, generator=g))

    ids = torch.randint(3, args.vocab, (args.batch, seq), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    pos = positions_from_mask(mask)

    def base_fn():
        return base(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=1).logits

    # The LoRA and merged paths share one AdapterRecurrentLM: the merged copy is built
    # once and stepped around for the unmerged path (use_merged_block would rebuild it).
    def lora_fn(T):
        def fn():
            with arlm.merged_block_off():
                return final_readout(arlm, ids, mask, T)

        return fn

    def merged_fn(T):
        def fn():
            return final_readout(arlm, ids, mask, T)

        return fn

    with torch.inference_mode():
        arlm.use_merged_block(True)
        # sanity: the final-readout path is the forward's last readout; merged ~ unmerged
        T = max(args.loops)
        full = rlm(ids, mask, loops=T)
        assert torch.equal(final_readout(rlm, ids, mask, T), full[-1])
        diff_merge = (merged_fn(T)() - lora_fn(T)()).abs().max().item()

    variants = [("base", base_fn)]
    for T in args.loops:
        variants += [
            (("rlm_all", T), lambda T=T: rlm(ids, mask, loops=T)),
            (("rlm_final", T), lambda T=T: final_readout(rlm, ids, mask, T)),
            (("lora", T), lora_fn(T)),
            (("merged", T), merged_fn(T)),
        ]

    print(f"# loop_cost  {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}")
    print(
        f"# python {platform.python_version()}  torch {torch.__version__}  transformers {transformers.__version__}"
        f"  peft {peft.__version__}"
    )
    print(
        f"# cpu: {cpu_name()}  ({os.cpu_count()} logical cores visible)  torch threads {torch.get_num_threads()}"
        f"  interop {torch.get_num_interop_threads()}"
    )
    print(
        f"# model: Qwen2 random init, {n_layers} layers, hidden {hidden}, intermediate {inter}, heads "
        f"{hidden // 64}/2 kv, vocab {args.vocab}, sdpa, fp32; split (a,b)=({a},{b}): block {n_block} layers; "
        f"LoRA rank {args.rank} on 7 x {n_block} projections"
    )
    print(f"# input: batch {args.batch} x {seq} tokens; warmup 1, median of {repeats} repeats (round-robin)")
    print(f"# load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"# merged vs unmerged final readout, max |diff| = {diff_merge:.2e}")

    times = {name: [] for name, _ in variants}
    cpu_times = {name: [] for name, _ in variants}
    t0 = time.perf_counter()
    with torch.inference_mode():
        for _name, fn in variants:  # warmup
            fn()
        for _ in range(repeats):
            for name, fn in variants:
                w, c = timed(fn)
                times[name].append(w)
                cpu_times[name].append(c)
    wall = time.perf_counter() - t0
    print(f"# load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"# base forward: median {statistics.median(times['base']) * 1e3:.1f} ms "
        f"(min {min(times['base']) * 1e3:.1f}, max {max(times['base']) * 1e3:.1f}); timing loop {wall:.0f} s"
    )
    print(f"# base forward CPU time: median {statistics.median(cpu_times['base']) * 1e3:.1f} ms")
    tables = (
        ("median process CPU", cpu_times, statistics.median),
        ("median wall-clock", times, statistics.median),
        ("min wall-clock", times, min),
    )
    for label, data, stat in tables:
        s = {k: stat(v) for k, v in data.items()}
        tb = s["base"]
        print(f"\n## ratio = {label} time / {label} base time")
        header = (
            f"{'T':>3} | {'pred':>5} | {'rlm final':>9} | {'lora':>6} | {'merged':>6} | "
            f"{'lora/merged':>11} | {'pred all':>8} | {'rlm all':>7}"
        )
        print(header)
        print("-" * len(header))
        for T in args.loops:
            pred = inference_cost_ratio(n_layers, n_block, T)
            pred_all = (a + T * (n_layers - a)) / n_layers
            r = {k: s[(k, T)] / tb for k in ("rlm_final", "lora", "merged", "rlm_all")}
            print(
                f"{T:>3} | {pred:5.2f} | {r['rlm_final']:9.2f} | {r['lora']:6.2f} | {r['merged']:6.2f} | "
                f"{s[('lora', T)] / s[('merged', T)]:11.3f} | {pred_all:8.2f} | {r['rlm_all']:7.2f}"
            )
    print()
    print(
        "pred = (L - block + T*block)/L (accounting.inference_cost_ratio); "
        "pred all = (prelude + T*(block + coda))/L: every loop read out, coda T times"
    )


if __name__ == "__main__":
    main()
