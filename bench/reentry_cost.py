"""Re-entry cost: a T-loop forward on the runner's code path, relative to one base forward, side by side.

    python bench/reentry_cost.py            # both shapes, batch 1 and 32, T = 4, 8, 12, 14, 5 repeats (not timed)
    python bench/reentry_cost.py --quick    # T = 4 and 14, 3 repeats (about 6 min of one core here)

Every variant calls ``RecurrentLM.forward`` exactly as ``arms.runtime.RecurrentRuntime`` does (evaluation and
training read every loop; latency reads the answer loop alone, ``read_at=[T]``); nothing here is a bench-only
forward. Variants, at each loop count T:

- cached: answer-only re-entry (``reentry: answer``), the prompt's keys and values cached after loop 1, every
  loop read (the default protocol's arms);
- uncached: the same model with ``cache_prompt=False`` (every position through the block at every loop);
- paper all: the paper's every-position bridge (``reentry: all``), every loop read (its evaluation and training);
- paper final: the same, the answer loop alone read (its latency), whose theory is (1 + T)/2 at the paper's cut;
- lora / merged: the adapter arm (paper's bridge, answer loop read) unmerged, and on the merged copy the
  runtime evaluates on; ``lora/full`` and ``merged/full`` are their times over "paper final" (a full-block loop).

Shapes: the tiny protocol's (``bases/tiny-base-large-v2``, 8 layers cut at (2, 6), the reader's real prompts of
depth-14 N16 rows) and the Qwen2.5-0.5B layout (24 layers, GQA 14/2, SwiGLU, cut at the paper's (6, 18)) at a
reduced width (``--hidden``, default 256) so that batch 32 fits this CPU's time; a random-init model, since only
shapes matter. Process CPU time with one torch thread, median of the repeats, variants round-robin in every
repeat so that drift from other load hits them alike.
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

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def tiny_protocol_shape(batch: int):
    """The default protocol's base and cut, and a batch of the reader's prompts for depth-14 rows."""
    from arms.bases.loading import load_base
    from ledger.reader.shared import Reader
    from ledger.rows.tasks import generate_rule_chasing
    from ledger.rows.tasks.alphabets import resolve_alphabet

    model, tokenizer = load_base(str(ROOT / "bases" / "tiny-base-large-v2"), dtype="float32")
    reader = Reader(list(resolve_alphabet("N16")), tokenizer=tokenizer)
    rows = generate_rule_chasing(surface="symbolic", depth_range=(14, 14), rows_per_depth=batch, seed=7, split="test")
    enc = reader.encode(rows[:batch], return_tensors="pt")
    return model, (2, 6), enc["input_ids"], enc["attention_mask"]


def qwen_shape(batch: int, hidden: int, seq: int):
    from transformers import Qwen2ForCausalLM

    from arms.bases.loading import qwen25_05b_config

    heads = max(2, hidden // 64)
    config = qwen25_05b_config(
        hidden_size=hidden,
        intermediate_size=int(round(hidden * 4864 / 896 / 64)) * 64,
        num_attention_heads=heads,
        num_key_value_heads=2,
        vocab_size=32000,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    ids = torch.randint(3, config.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(0))
    return Qwen2ForCausalLM(config).eval(), (6, 18), ids, torch.ones_like(ids)


def build_variants(model, cut, ids, mask, loops):
    import copy

    from arms.model.budgets import apply_adapter_budget
    from arms.model.recurrent import RecurrentLM, positions_from_mask

    g = torch.Generator().manual_seed(1)

    def nudge(tensors):  # off the identity init, so loops >= 2 really run the bridge and the adapter
        with torch.no_grad():
            for p in tensors:
                p.add_(0.01 * torch.randn(p.shape, generator=g))

    answer = RecurrentLM.build(model, split=cut, bridge="split", reentry="answer").eval()
    nudge(answer.bridge.parameters())
    paper = RecurrentLM(answer.surgery, answer.bridge, reentry="all").eval()  # the same weights, the paper's bridge
    # the adapter arm on its own copy of the base (injecting LoRA changes the base's modules), the same bridge
    lora = RecurrentLM.build(copy.deepcopy(model), split=cut, bridge="split")
    lora.bridge.load_state_dict(answer.bridge.state_dict())
    lora = apply_adapter_budget(lora, rank=16, alpha=32, seed=0).eval()
    nudge(lora.lora_parameters())
    lora.use_merged_block()  # built once; the unmerged variant steps around it

    def adapter(T, merged):
        if merged:
            return lora(ids, mask, loops=T, read_at=[T])
        with lora.merged_block_off():
            return lora(ids, mask, loops=T, read_at=[T])

    pos = positions_from_mask(mask)
    variants = {"base": lambda: model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=1).logits}
    for T in loops:
        variants[("cached", T)] = lambda T=T: answer(ids, mask, loops=T)
        variants[("uncached", T)] = lambda T=T: answer(ids, mask, loops=T, cache_prompt=False)
        variants[("paper all", T)] = lambda T=T: paper(ids, mask, loops=T)
        variants[("paper final", T)] = lambda T=T: paper(ids, mask, loops=T, read_at=[T])
        variants[("lora", T)] = lambda T=T: adapter(T, False)
        variants[("merged", T)] = lambda T=T: adapter(T, True)
    T = max(loops)
    with torch.inference_mode():
        cached, uncached = answer(ids, mask, loops=T), answer(ids, mask, loops=T, cache_prompt=False)
        checks = {
            "cached vs uncached readouts, max |diff|": (cached - uncached).abs().max().item(),
            "merged vs unmerged adapter, max |diff|": (adapter(T, True) - adapter(T, False)).abs().max().item(),
        }
    return variants, checks


def measure(variants, repeats: int):
    cpu = {name: [] for name in variants}
    with torch.inference_mode():
        for fn in variants.values():  # warm-up
            fn()
        for _ in range(repeats):
            for name, fn in variants.items():
                start = time.process_time()
                fn()
                cpu[name].append(time.process_time() - start)
    return {name: statistics.median(values) for name, values in cpu.items()}


def report(title, cut, n_layers, ids, loops, times, checks):
    a, b = cut
    base = times["base"]
    print(f"\n## {title}: {n_layers} layers cut at ({a}, {b}); batch {ids.shape[0]} x {ids.shape[1]} tokens")
    print(f"# base forward: median process CPU {base * 1e3:.1f} ms")
    for label, value in checks.items():
        print(f"# {label} = {value:.2e}")
    head = f"{'T':>3} | {'(1+T)/2':>7} | {'theory':>6} | {'cached':>6} | {'uncached':>8} | {'paper all':>9} | {'paper final':>11}"
    head += f" | {'lora/full':>9} | {'merged/full':>11}"
    print(head)
    print("-" * len(head))
    for T in loops:
        theory = (n_layers - (b - a) + T * (b - a)) / n_layers
        line = (
            f"{T:>3} | {(1 + T) / 2:7.2f} | {theory:6.2f} | {times[('cached', T)] / base:6.2f} | "
            f"{times[('uncached', T)] / base:8.2f} | {times[('paper all', T)] / base:9.2f} | "
            f"{times[('paper final', T)] / base:11.2f}"
        )
        full = times[("paper final", T)]
        line += f" | {times[('lora', T)] / full:9.3f} | {times[('merged', T)] / full:11.3f}"
        print(line)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="loops 4 and 14, 3 repeats")
    ap.add_argument("--loops", type=int, nargs="+", default=None, help="default 4 8 12 14")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--hidden", type=int, default=256, help="the Qwen2.5-0.5B layout's width here (896 is exact)")
    ap.add_argument("--seq", type=int, default=96, help="prompt length at the Qwen2.5-0.5B layout")
    ap.add_argument("--repeats", type=int, default=None, help="default 5 (quick 3)")
    args = ap.parse_args(argv)
    loops = args.loops or ([4, 14] if args.quick else [4, 8, 12, 14])
    repeats = args.repeats or (3 if args.quick else 5)
    torch.set_num_threads(1)

    import transformers

    print(f"# reentry_cost  {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}")
    print(f"# python {platform.python_version()}  torch {torch.__version__}  transformers {transformers.__version__}")
    print(f"# {os.cpu_count()} logical cores visible, torch threads 1; load average {os.getloadavg()[0]:.2f}")
    print(f"# process CPU time, median of {repeats} repeats after a warm-up; ratios over the base forward")
    for batch in args.batches:
        for title, (model, cut, ids, mask) in (
            ("tiny protocol (tiny-base-large-v2)", tiny_protocol_shape(batch)),
            (f"Qwen2.5-0.5B layout at hidden {args.hidden}", qwen_shape(batch, args.hidden, args.seq)),
        ):
            variants, checks = build_variants(model, cut, ids, mask, loops)
            times = measure(variants, repeats)
            report(title, cut, model.config.num_hidden_layers, ids, loops, times, checks)
    print(
        "\ntheory = (L - block + T*block)/L: prelude and coda once, the block T times ((1+T)/2 at the paper's cut);"
        "\ncached, uncached and paper all read every loop (evaluation and training); paper final reads loop T"
        "\n(latency); lora/full and merged/full: the adapter arm over the full-block arm, both reading loop T."
    )


if __name__ == "__main__":
    main()
