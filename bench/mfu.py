"""MFU: each workload's model FLOPs per second over this machine's own matrix-multiply peak, side by side in one run.

    python bench/mfu.py                    # the first command's tiny arms and SmolLM2's (about 25 min on 2 cores)
    python bench/mfu.py --quick            # the tiny arms alone (a few minutes)
    python bench/mfu.py --set smollm2 --variants fp32,bf16 --steps 2 --warm 1   # SmolLM2's arms, fewer steps
    python bench/mfu.py --json mfu.json    # also the table as JSON

The peak is measured here first: ``torch.mm`` at the SmolLM2 block's shapes and at 2048^3, in fp32 and in bf16, at
this process's thread count; the best median of each dtype is its peak. Each workload then runs the path ``ledger
run`` takes (``build_runtime`` and ``ArmRuntime.train_stage`` on the protocol's own arm, stage and training rows;
the evaluation forward through ``readouts``/``loop1_logits`` at the arm's evaluation batch), with its model FLOPs
counted by the ledger's own accounting (the training record's ``flops``: ``6 N1 + 2 N2`` per token, embeddings
excluded; a forward: ``2 N`` per token over the loops it runs). Variants, built fresh each from the same base:

- ``fp32``: the protocols' dtype today;
- ``bf16``: the base's weights in bf16 with fp32 master copies (a protocol's ``dtype: bfloat16``);
- ``autocast``: fp32 weights, gradients and optimiser, the forwards under ``torch.autocast`` in bf16 (a protocol's
  ``autocast: bfloat16`` over ``dtype: float32``), as ``ledger run`` sets it up: eager attention, the frozen linear
  weights held in bf16 (``arms.device``); its MFU is against the bf16 peak;
- ``autocast bare``: the same autocast over the base as loaded (its own attention, SDPA for SmolLM2; each frozen
  weight cast again at every use), to show what ``ledger run``'s set-up adds;
- ``fp32 compiled``, ``bf16 compiled``: the looped block under ``torch.compile`` (``--compile on``); the
  one-pass arms have no loop to compile and are left out.

A step's time is a stage of the timed steps over their number, after a stage of warm-up steps (the compiled variants' warm-up includes
compiling). MFU is the workload's FLOP rate over the peak of its own dtype. The matmul rate is one more step under
``torch.profiler``: the FLOPs of its ``mm``/``addmm``/``bmm`` calls over their own time, against the same peak. The tiny bases are the committed
folders; SmolLM2 is the real GGUF, dequantised (its weights do not change the arithmetic).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
WEIGHTS = {"fp32": torch.float32, "bf16": torch.bfloat16, "autocast": torch.float32}  # variant -> weights' dtype
PEAK = {"fp32": "fp32", "bf16": "bf16", "autocast": "bf16"}  # variant -> the peak its matrix multiplies can reach
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")
GEMM_SHAPES = ((1024, 576, 1536), (1024, 1536, 576), (2048, 2048, 2048))


@dataclass(frozen=True)
class Workload:
    protocol: str  # under protocols/
    arm: str
    label: str


TINY = [
    Workload("phaseA-tiny.yaml", "A", "tiny A (answer-only)"),
    Workload("phaseA-tiny.yaml", "A_paper", "tiny A_paper (paper's bridge)"),
    Workload("phaseA-tiny.yaml", "E", "tiny E (adapter)"),
    Workload("phaseA-tiny.yaml", "B", "tiny B (dense direct)"),
    Workload("phaseA-tiny.yaml", "C", "tiny C (dense scratchpad)"),
]
SMOLLM2 = [
    Workload("phaseA-smollm2.yaml", "A", "SmolLM2 A (paper's bridge)"),
    Workload("phaseA-smollm2.yaml", "A_answer", "SmolLM2 A_answer"),
    Workload("phaseA-smollm2.yaml", "E", "SmolLM2 E (adapter)"),
    Workload("phaseA-smollm2.yaml", "B", "SmolLM2 B (dense direct)"),
    Workload("phaseA-smollm2.yaml", "C", "SmolLM2 C (dense scratchpad)"),
]


def gemm_peak(dtype: torch.dtype, repeats: int) -> tuple[float, str]:
    """(best median GFLOP/s over the shapes, that shape) of ``torch.mm`` in ``dtype``."""
    best, where = 0.0, ""
    for m, k, n in GEMM_SHAPES:
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        torch.mm(a, b)  # warm-up: the kernel choice, the allocator
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - started)
        rate = 2 * m * k * n / statistics.median(times) / 1e9
        if rate > best:
            best, where = rate, f"{m}x{k}x{n}"
    return best, where


class Loaded:
    """A protocol's base, reader and rows, loaded once for all its workloads and variants."""

    def __init__(self, protocol_file: Path):
        from ledger.protocol.loader import load_protocol
        from ledger.reader.shared import Reader
        from ledger.rows.builder import build_manifests
        from ledger.run.bases import load_protocol_base
        from ledger.run.reading import reader_symbols

        self.protocol = load_protocol(protocol_file)
        self.manifests = build_manifests(self.protocol, check=False)
        symbols = reader_symbols(self.manifests.values())
        self.bases: dict[str, tuple[Any, Any, Any]] = {}
        for name in sorted({arm.base for arm in self.protocol.arms}):
            model, tokenizer, _ = load_protocol_base(self.protocol.bases[name], protocol_file.parent)
            reader = Reader(symbols, tokenizer=tokenizer, chat_template=self.protocol.bases[name].chat_template)
            self.bases[name] = (model, tokenizer, reader)


def measure(loaded: Loaded, workload: Workload, variant: str, steps: int, warm: int) -> dict[str, Any]:
    """One workload in one variant: a training step's time and FLOP rate, and the evaluation forward's."""
    from arms.device import numerics

    with numerics(torch.device("cpu"), "bfloat16" if variant.startswith("autocast") else None):
        return _measure(loaded, workload, variant, steps, warm)


def _measure(loaded: Loaded, workload: Workload, variant: str, steps: int, warm: int) -> dict[str, Any]:
    from arms.device import place
    from arms.runtime import build_runtime

    arm = loaded.protocol.arm(workload.arm)
    model, tokenizer, reader = loaded.bases[arm.base]
    autocast = "bfloat16" if variant.startswith("autocast") else None
    base = copy.deepcopy(model).to(WEIGHTS[variant.split()[0]])
    if variant.endswith("bare"):  # autocast over the base as loaded: its attention, frozen weights cast at each use
        runtime = build_runtime(arm, base, tokenizer, reader)
    else:
        runtime = build_runtime(arm, place(base, torch.device("cpu"), autocast), tokenizer, reader, autocast=autocast)
    compiled = variant.endswith("compiled")
    if compiled:
        done, why = runtime.compile_loop()
        if not done:
            return {"skipped": why or "nothing to compile"}
    stage = arm.stages[0]
    rows = loaded.manifests[stage.manifest].rows
    runtime.train_stage(stage.model_copy(update={"steps": warm}), rows, ("mfu", "warm"))
    started = time.perf_counter()
    runtime.train_stage(stage.model_copy(update={"steps": steps}), rows, ("mfu", "timed"))
    seconds = time.perf_counter() - started
    flops = sum(record["flops"] for record in runtime.step_records.values())
    out = {"step_s": seconds / steps, "train_gflops": flops / seconds / 1e9}
    out["matmul_gflops"] = matmul_rate(runtime, stage, rows)
    out.update(evaluation_rate(runtime, arm, loaded, reader))
    return out


def matmul_rate(runtime: Any, stage: Any, rows: Any) -> float:
    """GFLOP/s of one training step's matrix multiplies alone (``mm``, ``addmm``, ``bmm``: the profiler's FLOP
    count over their own time), from one more step run under ``torch.profiler``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as profiled:
        runtime.train_stage(stage.model_copy(update={"steps": 1}), rows, ("mfu", "profiled"))
    events = [event for event in profiled.key_averages() if event.key in MATMULS]
    seconds = sum(event.self_cpu_time_total for event in events) / 1e6
    return sum(event.flops for event in events) / seconds / 1e9 if seconds else 0.0


def evaluation_rate(runtime: Any, arm: Any, loaded: Loaded, reader: Any) -> dict[str, float]:
    """The forward the evaluation runs, at the arm's evaluation batch and its deepest rows' loops (a recurrent
    arm), or at loop 1 (a one-pass arm): its median time and FLOP rate (``2 N`` per token and pass)."""
    from arms.model.accounting import count_parameters

    manifest = loaded.manifests[arm.evaluation.manifests[0]]
    deepest = max(row.depth for row in manifest.rows)
    rows = [row for row in manifest.rows if row.depth == deepest][: arm.evaluation.batch_size]
    rows = (rows * arm.evaluation.batch_size)[: arm.evaluation.batch_size]
    tokens = int(reader.encode(rows, return_tensors="pt")["attention_mask"].sum())
    model = runtime.model
    if hasattr(model, "surgery"):  # a looped model: prelude and coda once, the block at every loop
        from arms.model.flops import recurrent_counts

        counts = recurrent_counts(model.surgery, model.bridge)
        per_token = 2.0 * (counts.once + deepest * counts.per_iteration)

        def forward() -> Any:
            return runtime.readouts(rows, deepest, read_at=[deepest])
    else:
        per_token = 2.0 * count_parameters(model, exclude_embeddings=True)

        def forward() -> Any:
            return runtime.loop1_logits(rows)

    with torch.inference_mode():
        forward()
        times = []
        for _ in range(3):
            started = time.perf_counter()
            forward()
            times.append(time.perf_counter() - started)
    seconds = statistics.median(times)
    return {"eval_s": seconds, "eval_gflops": tokens * per_token / seconds / 1e9, "eval_loops": float(deepest)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the tiny arms alone (as --set tiny)")
    parser.add_argument("--set", choices=("tiny", "smollm2", "all"), default="all", help="which workloads (all)")
    parser.add_argument("--steps", type=int, default=3, help="timed training steps per variant (default 3)")
    parser.add_argument("--warm", type=int, default=2, help="warm-up steps per variant (default 2)")
    parser.add_argument("--variants", default="fp32,bf16,autocast,fp32 compiled,autocast compiled")
    parser.add_argument("--arms", help="only these arms of each set, by id (e.g. A,B)")
    parser.add_argument("--json", type=Path, help="also write the table as JSON here")
    args = parser.parse_args()

    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    threads = torch.get_num_threads()
    print(f"# bench/mfu.py  {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, {threads} threads, "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()}")  # fmt: skip
    peaks = {}
    for name, dtype in DTYPES.items():
        rate, shape = gemm_peak(dtype, repeats=5)
        peaks[name] = rate
        print(f"# torch.mm peak {name}: {rate:.0f} GFLOP/s (at {shape})")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    chosen = "tiny" if args.quick else args.set
    workloads = (TINY if chosen in ("tiny", "all") else []) + (SMOLLM2 if chosen in ("smollm2", "all") else [])
    if args.arms:
        wanted = {arm.strip() for arm in args.arms.split(",")}
        workloads = [workload for workload in workloads if workload.arm in wanted]
    loaded: dict[str, Loaded] = {}
    results = []
    header = (
        f"{'workload':32} {'variant':18} {'step s':>8} {'train GF/s':>10} {'MFU':>6} {'matmul GF/s':>11} {'of peak':>7} "
        f"{'eval s':>8} {'eval GF/s':>9} {'MFU':>6}"
    )
    print(header)
    print("-" * len(header))
    for workload in workloads:
        if workload.protocol not in loaded:
            loaded[workload.protocol] = Loaded(ROOT / "protocols" / workload.protocol)
        for variant in variants:
            out = measure(loaded[workload.protocol], workload, variant, args.steps, args.warm)
            peak = peaks[PEAK[variant.split()[0]]]
            results.append({"workload": workload.label, "variant": variant, "peak_gflops": peak, **out})
            if "skipped" in out:
                print(f"{workload.label:32} {variant:18} {'-':>8}  skipped: {out['skipped']}")
                continue
            print(
                f"{workload.label:32} {variant:18} {out['step_s']:8.3f} {out['train_gflops']:10.1f} "
                f"{out['train_gflops'] / peak:6.1%} {out['matmul_gflops']:11.1f} {out['matmul_gflops'] / peak:7.1%} "
                f"{out['eval_s']:8.3f} {out['eval_gflops']:9.1f} "
                f"{out['eval_gflops'] / peak:6.1%}",
                flush=True,
            )
    if args.json:
        document = {"threads": threads, "peaks_gflops": peaks, "torch": torch.__version__, "results": results}
        args.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
