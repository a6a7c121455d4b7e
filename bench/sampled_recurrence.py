"""Sampled recurrence: what a design-M training step costs at its realised recurrence r, against two predictions.

    python bench/sampled_recurrence.py           # hidden 192, 8 layers cut (2, 4, 2), batch 4 x 64 (~75 s here)
    python bench/sampled_recurrence.py --quick   # a toy shape, r in 1, 2, 4, s = 2 (seconds: the smoke test)
    python bench/sampled_recurrence.py --json out.json

A random-init Llama (``transformers.LlamaConfig``) cut by tuple surgery, with design M's concat adapter
(``RecurrentLM.build(tuple_=..., bridge="concat")``) and design M's budget (every tensor of the retrofit trains,
``full_model``). One training step at recurrence r with backprop depth s: zero the gradients, the next-token
loss over the final iteration's full-sequence logits (``arms.train.language.next_token_loss``, the first
``max(r - s, 0)`` iterations without gradient), backward, the gradient-norm clip, AdamW's step.

Part 1 times that step at every (r, s) of the grid and prints it next to

- ``pred``: the cost predicted from one iteration's measured forward and backward cost,
  ``once + min(s, r) * (iter_fwd + iter_bwd) + max(r - s, 0) * iter_fwd``, where, in the same run,
  ``iter_fwd`` and ``iter_bwd`` are a quarter of the forward / backward(+clip+step) phase difference of the
  steps at r = 5 and r = 1 with every iteration under gradient, and ``once`` is the step at r = 1 less one
  iteration; what a forward-only iteration really costs (a quarter of the difference of the steps at
  (r = 5, s = 1) and (r = 1, s = 1)) is printed beside it;
- ``flops``: design M's FLOPs rule ``(6 N1 + 2 N2)`` at (r, s) over the same at r = 1
  (``arms.model.flops``), next to the measured step over the measured step at r = 1.

Part 2 times ``optimizer.step()`` of Muon against AdamW (``arms.train.optim.build_optimizer``) over the same
model's trainable groups, on the same gradients.

Every configuration is timed round-robin (drift from other load hits all alike), after one warmup, median of
``--repeats``, one torch thread; the primary clock is process CPU time (with one thread, the compute this process
did, which other processes on the cores do not inflate); the JSON also has the wall-clock medians.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from arms.device import device_name
from arms.model.budgets import full_model_budget
from arms.model.flops import recurrent_counts
from arms.model.recurrent import RecurrentLM
from arms.train.language import next_token_loss
from arms.train.optim import build_optimizer
from arms.train.step import GRAD_CLIP

CALIBRATION_SPREAD = 4  # one iteration's cost is the difference of the steps at r = 1 and r = 1 + 4, over 4
SHAPES: dict[str, dict[str, Any]] = {
    # a random-init Llama and its (prelude, recurrent, coda) cut
    "default": dict(hidden=192, intermediate=512, layers=8, heads=4, kv_heads=2, vocab=4096, cut=(2, 4, 2)),
    "quick": dict(hidden=64, intermediate=160, layers=4, heads=2, kv_heads=1, vocab=256, cut=(1, 2, 1)),
}


def build_model(shape: dict, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=shape["hidden"],
        intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        vocab_size=shape["vocab"],
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = RecurrentLM.build(LlamaForCausalLM(config), tuple_=shape["cut"], bridge="concat")
    model, groups = full_model_budget(model, None, seed)
    return model.train(), groups


def timed(fn):
    """(wall seconds, process CPU seconds) of one call, and its result."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


class Stepper:
    """One training step, its phases timed: forward (the loss), backward (+ clip + optimizer step)."""

    def __init__(self, model, groups, ids, mask):
        self.model, self.ids, self.mask = model, ids, mask
        self.params = [p for group in groups.values() for p in group]
        self.optimizer = build_optimizer(groups, "adamw", lr=1e-5)

    def __call__(self, r: int, s: int) -> dict[str, float]:
        self.optimizer.zero_grad()
        w0, c0 = time.perf_counter(), time.process_time()
        loss = next_token_loss(self.model, self.ids, self.mask, loops=r, no_grad_loops=max(r - s, 0))
        c1 = time.process_time()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, GRAD_CLIP)
        self.optimizer.step()
        w2, c2 = time.perf_counter(), time.process_time()
        return {"fwd": c1 - c0, "bwd": c2 - c1, "step": c2 - c0, "wall": w2 - w0}


def canonical(r: int, s: int) -> tuple[int, int]:
    """A step at (r, s >= r) runs exactly the step at (r, r): every iteration with gradient."""
    return r, min(r, s)


def measure_steps(stepper: Stepper, configs: list[tuple[int, int]], repeats: int) -> dict[tuple[int, int], dict]:
    """Phase times of every distinct (r, s), round-robin over them in every repeat, after one warmup step.

    Returns, per config, the median of each phase and the samples of the whole step (CPU seconds).
    """
    distinct = list(dict.fromkeys(canonical(r, s) for r, s in configs))
    samples: dict[tuple[int, int], list[dict[str, float]]] = {c: [] for c in distinct}
    stepper(*max(distinct))  # the first step allocates the optimizer's state and the autograd buffers
    for _ in range(repeats):
        for config in distinct:
            samples[config].append(stepper(*config))
    medians = {
        c: {**{k: statistics.median(x[k] for x in v) for k in v[0]}, "samples": [x["step"] for x in v]}
        for c, v in samples.items()
    }
    return {c: medians[canonical(*c)] for c in configs}


def calibrate(steps: dict[tuple[int, int], dict]) -> dict[str, float]:
    """One iteration's forward and backward cost, and the once-per-step rest, from the calibration steps:
    (1, 1) and (1 + d, 1 + d) (every iteration with gradient) and (1 + d, 1) (d forward-only iterations)."""
    d = CALIBRATION_SPREAD
    one, more, no_grad = steps[(1, 1)], steps[(1 + d, 1 + d)], steps[(1 + d, 1)]
    iter_fwd = (more["fwd"] - one["fwd"]) / d
    iter_bwd = (more["bwd"] - one["bwd"]) / d
    return {
        "iter_fwd": iter_fwd,
        "iter_bwd": iter_bwd,
        "iter_nograd": (no_grad["step"] - one["step"]) / d,
        "once_fwd": one["fwd"] - iter_fwd,
        "once_bwd": one["bwd"] - iter_bwd,  # with the clip and the optimizer step
    }


def predicted(cal: dict[str, float], r: int, s: int) -> float:
    grad, no_grad = min(s, r), max(r - s, 0)
    return cal["once_fwd"] + cal["once_bwd"] + grad * (cal["iter_fwd"] + cal["iter_bwd"]) + no_grad * cal["iter_fwd"]


def newton_schulz_fp32(grad: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """torch's Muon orthogonalisation (``torch.optim._muon._zeropower_via_newtonschulz``: Keller Jordan's
    quintic, 5 steps) with the same operations in fp32 instead of bf16, to tell the dtype from the algorithm."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = grad.float()
    if grad.size(0) > grad.size(1):
        x = x.T
    x = x / x.norm().clamp(min=1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if grad.size(0) > grad.size(1) else x


def measure_optimizers(model, groups, ids, mask, repeats: int, muon_repeats: int) -> dict[str, dict[str, float]]:
    """Median ``optimizer.step()`` time of AdamW and Muon over the same groups, on the same gradients, and of
    Muon's Newton-Schulz alone on the largest matrix, in bf16 (torch's) and in fp32."""
    from torch.optim._muon import _zeropower_via_newtonschulz

    loss = next_token_loss(model, ids, mask, loops=1)
    loss.backward()
    optimizers = {kind: build_optimizer(groups, kind, lr=1e-5) for kind in ("adamw", "muon")}
    muon = optimizers["muon"].optimizers["muon"]
    biggest = max((p for group in muon.param_groups for p in group["params"]), key=lambda p: p.numel())
    assert biggest.grad is not None
    grad = biggest.grad.clone()
    calls = {
        "adamw": (optimizers["adamw"].step, repeats),
        "muon": (optimizers["muon"].step, muon_repeats),  # its first step creates the momentum: no warmup needed
        "ns_bf16": (lambda: _zeropower_via_newtonschulz(grad, (3.4445, -4.7750, 2.0315), 5, 1e-7), repeats),
        "ns_fp32": (lambda: newton_schulz_fp32(grad), repeats),
    }
    optimizers["adamw"].step()  # warmup: the state is created on the first step
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in calls}
    for i in range(max(repeats, muon_repeats)):
        for name, (call, n) in calls.items():
            if i < n:
                wall, cpu, _ = timed(call)
                times[name].append((cpu, wall))
    model.zero_grad(set_to_none=True)
    result = {
        name: {"cpu": statistics.median(t[0] for t in v), "wall": statistics.median(t[1] for t in v)}
        for name, v in times.items()
    }
    result["ns_bf16"]["shape"] = result["ns_fp32"]["shape"] = list(grad.shape)  # type: ignore[assignment]
    return result


def cpu_name() -> str:
    return device_name(torch.device("cpu"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a toy shape, r in 1, 2, 4, s = 2, 2 repeats (smoke test)")
    ap.add_argument("--recurrences", type=int, nargs="+", default=None, help="realised r (default 1 2 4 8 12)")
    ap.add_argument("--depths", type=int, nargs="+", default=None, help="backprop depths s (default 4 8)")
    ap.add_argument("--batch", type=int, default=None, help="rows per batch (default 4, quick 2)")
    ap.add_argument("--seq", type=int, default=None, help="tokens per row (default 64, quick 16)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats (default 5, quick 2)")
    ap.add_argument("--muon-repeats", type=int, default=None, help="timed Muon steps (default 3, quick 2)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    shape = SHAPES["quick" if args.quick else "default"]
    recurrences = args.recurrences or ([1, 2, 4] if args.quick else [1, 2, 4, 8, 12])
    depths = args.depths or ([2] if args.quick else [4, 8])
    batch, seq = args.batch or (2 if args.quick else 4), args.seq or (16 if args.quick else 64)
    repeats = args.repeats or (2 if args.quick else 5)
    muon_repeats = args.muon_repeats or (2 if args.quick else 3)

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    import transformers

    started = datetime.datetime.now(datetime.UTC)
    t0 = time.perf_counter()
    model, groups = build_model(shape)
    ids = torch.randint(0, shape["vocab"], (batch, seq), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    counts = recurrent_counts(model.surgery, model.bridge)
    grid = [(r, s) for s in depths for r in recurrences]
    d = CALIBRATION_SPREAD
    steps = measure_steps(Stepper(model, groups, ids, mask), [(1, 1), (1 + d, 1 + d), (1 + d, 1), *grid], repeats)
    cal = calibrate(steps)
    optimizers = measure_optimizers(model, groups, ids, mask, repeats, muon_repeats)
    elapsed = time.perf_counter() - t0

    rows = []
    for r, s in grid:
        measured, pred = steps[(r, s)]["step"], predicted(cal, r, s)
        rows.append(
            {
                "r": r,
                "s": s,
                "measured_ms": 1e3 * measured,
                "predicted_ms": 1e3 * pred,
                "measured_over_predicted": measured / pred,
                "measured_over_r1": measured / steps[(1, 1)]["step"],
                "flops_over_r1": counts.flops_per_token(r, s) / counts.flops_per_token(1, s),
                "wall_ms": 1e3 * steps[(r, s)]["wall"],
                "samples_ms": [1e3 * x for x in steps[(r, s)]["samples"]],
            }
        )
    trainable = sum(p.numel() for group in groups.values() for p in group)
    opt = {name: {k: (1e3 * v if k != "shape" else v) for k, v in t.items()} for name, t in optimizers.items()}
    report = {
        "date": f"{started:%Y-%m-%d %H:%M UTC}",
        "machine": f"{cpu_name()} ({os.cpu_count()} logical cores), torch threads {torch.get_num_threads()}",
        "load_average": list(os.getloadavg()),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        "model": {**shape, "cut": list(shape["cut"]), "batch": batch, "seq": seq, "trainable": trainable},
        "counts": {"once": counts.once, "per_iteration": counts.per_iteration},
        "repeats": repeats,
        "muon_repeats": muon_repeats,
        "calibration_ms": {k: 1e3 * v for k, v in cal.items()},
        "step_r1_ms": 1e3 * steps[(1, 1)]["step"],
        "steps": rows,
        "optimizer_step_ms": opt,
        "muon_over_adamw": optimizers["muon"]["cpu"] / optimizers["adamw"]["cpu"],
        "seconds": elapsed,
    }
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


def print_report(report: dict) -> None:
    m, cal = report["model"], report["calibration_ms"]
    print(f"# sampled_recurrence  {report['date']}  ({report['seconds']:.0f} s)")
    print(f"# {report['machine']}; " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()))
    print(
        f"# random-init Llama: hidden {m['hidden']}, intermediate {m['intermediate']}, {m['layers']} layers, heads "
        f"{m['heads']}/{m['kv_heads']} kv, vocab {m['vocab']}, fp32, sdpa; tuple {tuple(m['cut'])}, concat adapter, "
        f"every tensor trains ({m['trainable']:,}); batch {m['batch']} x {m['seq']} tokens; AdamW; "
        f"median of {report['repeats']}, process CPU time; load average at the end "
        + " ".join(f"{x:.2f}" for x in report["load_average"])
    )
    print(
        f"# one iteration: forward {cal['iter_fwd']:.1f} ms, backward {cal['iter_bwd']:.1f} ms "
        f"(forward share {cal['iter_fwd'] / (cal['iter_fwd'] + cal['iter_bwd']):.2f}; the FLOPs rule says 1/3), "
        f"forward-only {cal['iter_nograd']:.1f} ms; once per step: forward {cal['once_fwd']:.1f} ms, "
        f"backward + clip + step {cal['once_bwd']:.1f} ms"
    )
    print()
    print("## part 1: a training step at realised recurrence r, backprop depth s")
    header = (
        f"{'r':>3} | {'s':>2} | {'measured ms':>11} | {'pred ms':>8} | {'meas/pred':>9} | {'meas/r1':>7} | "
        f"{'flops/r1':>8}"
    )
    print(header)
    print("-" * len(header))
    for row in report["steps"]:
        print(
            f"{row['r']:>3} | {row['s']:>2} | {row['measured_ms']:>11.1f} | {row['predicted_ms']:>8.1f} | "
            f"{row['measured_over_predicted']:>9.3f} | {row['measured_over_r1']:>7.2f} | {row['flops_over_r1']:>8.2f}"
        )
    print(
        "pred = once + min(s, r) (iter fwd + bwd) + max(r - s, 0) iter fwd; flops/r1 = (6 N1 + 2 N2) at (r, s) "
        "over r = 1; meas/r1 = the step over the step at r = 1; a step at (r, s >= r) is the step at (r, r), "
        "timed once and printed under each s"
    )
    print()
    opt = report["optimizer_step_ms"]
    print(
        f"## part 2: optimizer.step() on the trainable groups, same gradients (Muon: median of {report['muon_repeats']})"
    )
    header = f"{'optimizer':>9} | {'cpu ms':>9} | {'wall ms':>9} | {'x step r=1':>10}"
    print(header)
    print("-" * len(header))
    for kind in ("adamw", "muon"):
        print(
            f"{kind:>9} | {opt[kind]['cpu']:>9.1f} | {opt[kind]['wall']:>9.1f} | "
            f"{opt[kind]['cpu'] / report['step_r1_ms']:>10.3f}"
        )
    print(f"muon/adamw = {report['muon_over_adamw']:.2f}")
    shape = "x".join(str(n) for n in opt["ns_bf16"]["shape"])
    print(
        f"Muon's Newton-Schulz alone on its largest matrix ({shape}): bf16 as torch runs it "
        f"{opt['ns_bf16']['cpu']:.1f} ms, the same in fp32 {opt['ns_fp32']['cpu']:.1f} ms"
    )


if __name__ == "__main__":
    sys.exit(main())
