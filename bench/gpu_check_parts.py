"""Parts 0-3 of ``bench/gpu_check.py`` (part 4, the ledger run, is there): each returns (table rows, JSON data).

A part raises on a failure it cannot measure past; ``gpu_check.py`` turns that into a FAIL row.
Rows are dicts with the table's columns: part, check, measured, expected, status, note.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, cast

import torch

from arms.bases.loading import qwen25_05b_config
from arms.device import synchronize
from arms.model.accounting import inference_cost_ratio, lora_target_modules
from arms.model.budgets import AdapterRecurrentLM, apply_adapter_budget
from arms.model.recurrent import RecurrentLM, positions_from_mask

SPLIT = (6, 18)  # the paper's cut of Qwen2.5-0.5B: prelude 6, block 12, coda 6
N_LAYERS = 24
RANK = 16
FORWARD_LOOPS = (1, 4, 8, 12)
ADAPTER_LOOPS = (4, 8)


@dataclass(frozen=True)
class Settings:
    device: torch.device
    small: bool
    repeats: int
    warmup: int
    dtype: torch.dtype = torch.bfloat16  # of parts 1 and 2 (part 3 is fp32 by definition)

    @property
    def batches(self) -> tuple[int, int]:
        return (1, 4) if self.small else (1, 32)

    @property
    def seq(self) -> int:
        return 16 if self.small else 128

    @property
    def train_batch(self) -> int:
        return 4 if self.small else 32

    @property
    def train_steps(self) -> int:  # timed steps (after 3 warm-up steps)
        return 6 if self.small else 30

    @property
    def protocol(self) -> str:  # its claims file is claims/<same name>
        return "protocols/smoke.yaml" if self.small else "protocols/phaseA-tiny.yaml"


def row(part: str, check: str, measured: str, expected: str, status: str, note: str = "") -> dict[str, str]:
    return {"part": part, "check": check, "measured": measured, "expected": expected, "status": status, "note": note}


def check(part: str, name: str, passed: bool, measured: str, expected: str, note: str = "") -> dict[str, str]:
    return row(part, name, measured, expected, "PASS" if passed else "FAIL", note)


def model_config(small: bool):
    """Qwen2.5-0.5B's exact shape; --small keeps its 24 layers and GQA layout at hidden 64, vocab 1024."""
    if small:
        overrides = dict(vocab_size=1024, hidden_size=64, intermediate_size=352, num_attention_heads=4)
        config = qwen25_05b_config(**overrides, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    else:
        config = qwen25_05b_config()
    config._attn_implementation = "sdpa"
    return config


def build_base(settings: Settings, dtype: torch.dtype, seed: int = 0, min_vocab: int = 0) -> Any:
    """A random-init base built directly on the device (no CPU copy of 0.5B weights), in eval mode; its
    vocabulary at least ``min_vocab`` (a tokenizer's)."""
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = model_config(settings.small)
    config.vocab_size = max(config.vocab_size, min_vocab)
    with settings.device:
        model = cast(Any, Qwen2ForCausalLM)(config)
    return model.to(device=settings.device, dtype=dtype).eval()


def retrofit(base: Any, scale: float = 0.01) -> RecurrentLM:
    """The base cut at SPLIT with a split bridge moved off its identity init (so loops >= 2 depend on it)."""
    rlm = RecurrentLM.build(base, split=SPLIT, bridge="split").eval()
    assert rlm.bridge is not None
    perturb(rlm.bridge.parameters(), seed=1, scale=scale)
    return rlm


def perturb(params, seed: int, scale: float = 0.01) -> None:
    """Move bridge / LoRA tensors off their init, so loops >= 2 really depend on them."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.add_((scale * torch.randn(p.shape, generator=g)).to(p))


def prompt(settings: Settings, batch: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompts as a run's batches are (the masked attention path): row r is shorter by r % 4
    eighths of the prompt (a batch of one is not padded)."""
    generator = torch.Generator().manual_seed(batch)
    ids = torch.randint(3, vocab, (batch, settings.seq), generator=generator)
    mask = torch.ones_like(ids)
    for r in range(batch):
        mask[r, : (r % 4) * settings.seq // 8] = 0
    ids = ids.masked_fill(mask == 0, 0)
    return ids.to(settings.device), mask.to(settings.device)


def final_readout(rlm: RecurrentLM, ids: torch.Tensor, mask: torch.Tensor, loops: int) -> torch.Tensor:
    """Loop `loops`'s readout only, as the runtime's latency reads it: ``RecurrentLM.forward`` itself with
    ``read_at=[loops]`` (prelude once, block `loops` times, bridge before loops >= 2, coda once, norm +
    lm_head at the answer position)."""
    return rlm(ids, mask, loops=loops, read_at=[loops])[0]


def base_readout(base, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The base's own forward as generation calls it: last-position logits only (logits_to_keep=1)."""
    return base(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask), logits_to_keep=1).logits[
        :, -1
    ]


def time_round_robin(variants: list[tuple[Any, Any]], settings: Settings) -> dict[Any, list[float]]:
    """Seconds per call of every variant: warmups first, then `repeats` rounds over all variants
    (drift hits them alike), each call between two device synchronisations."""
    times: dict[Any, list[float]] = {name: [] for name, _ in variants}
    with torch.inference_mode():
        for _ in range(settings.warmup):
            for _name, fn in variants:
                fn()
        synchronize(settings.device)
        for _ in range(settings.repeats):
            for name, fn in variants:
                synchronize(settings.device)
                start = time.perf_counter()
                fn()
                synchronize(settings.device)
                times[name].append(time.perf_counter() - start)
    return times


def _ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e3


# ----------------------------------------------------------------------------- 1. recurrent forward


def part_forward(settings: Settings) -> tuple[list[dict], dict]:
    """RecurrentLM (split bridge, perturbed) final readout at T loops over the base forward (bf16 on a GPU)."""
    base = build_base(settings, settings.dtype)
    rlm = retrofit(base)
    vocab = base.config.vocab_size
    rows, ratios, same = [], [], {}
    n_block = SPLIT[1] - SPLIT[0]
    for batch in settings.batches:
        ids, mask = prompt(settings, batch, vocab)
        with torch.inference_mode():
            t_max = max(FORWARD_LOOPS)
            same[batch] = torch.allclose(
                final_readout(rlm, ids, mask, t_max).float(), rlm(ids, mask, loops=t_max)[-1].float(), atol=1e-2
            )
        variants: list[tuple[Any, Any]] = [("base", lambda ids=ids, mask=mask: base_readout(base, ids, mask))]
        variants += [(T, lambda T=T, ids=ids, mask=mask: final_readout(rlm, ids, mask, T)) for T in FORWARD_LOOPS]
        times = time_round_robin(variants, settings)
        for T in FORWARD_LOOPS:
            ratio = statistics.median(times[T]) / statistics.median(times["base"])
            pred = inference_cost_ratio(N_LAYERS, n_block, T)
            ratios.append(
                {"batch": batch, "loops": T, "ratio": ratio, "pred": pred, "base_ms": _ms(times["base"])}
                | {"rlm_ms": _ms(times[T]), "rlm_min_ms": min(times[T]) * 1e3}
            )
            note = f"base {_ms(times['base']):.2f} ms, rlm {_ms(times[T]):.2f} ms (min {min(times[T]) * 1e3:.2f})"
            rows.append(row("forward", f"b={batch:<2} T={T:<2} rlm/base", f"{ratio:.2f}", f"{pred:.2f}", "ok", note))
    ok = all(same.values())
    note = "read_at=[T] (what is timed) against every loop read, within bf16 rounding (batch "
    note += ", ".join(map(str, same)) + "); rows left-padded"
    t_max = max(FORWARD_LOOPS)
    rows.append(check("forward", f"forward(read_at=[{t_max}]) ~ forward(loops={t_max})[-1]", ok, str(ok), "True", note))
    return rows, {"ratios": ratios, "final_readout_equal": ok, "passed": ok}


# ----------------------------------------------------------------------------- 2. adapter loop


def lora_flop_fraction(rlm: RecurrentLM) -> float:
    """Extra multiply-adds per token of rank-16 LoRA on the block's projections over the block's own."""
    linears = [m for layer in rlm.surgery.block for m in layer.modules() if isinstance(m, torch.nn.Linear)]
    own = sum(m.in_features * m.out_features for m in linears)
    return RANK * sum(m.in_features + m.out_features for _, m in lora_target_modules(rlm.surgery)) / own


def part_adapter(settings: Settings) -> tuple[list[dict], dict]:
    """AdapterRecurrentLM (rank 16, perturbed) unmerged and merged against the full-block loop (bf16 on a GPU)."""
    base = build_base(settings, settings.dtype)
    full = retrofit(base)
    fraction = lora_flop_fraction(full)
    # its own base (same seed, same weights): LoRA injection would reach `full` too
    arlm = apply_adapter_budget(retrofit(build_base(settings, settings.dtype)), rank=RANK, alpha=2 * RANK, seed=0)
    arlm.eval()
    perturb(arlm.lora_parameters(), seed=2)
    lora_dtype = str(arlm.lora_parameters()[0].dtype).replace("torch.", "")
    merged = AdapterRecurrentLM.from_recurrent(arlm).eval().use_merged_block(True)  # same weights, merged copy
    # host-side work of the adapter arm's loop, not in the FLOP ratio: the weight-fingerprint check of the
    # merged copy at every loop >= 2, and the walk for the LoRA layers to switch off at loop 1
    overhead_ms = {
        name: _host_ms(fn) for name, fn in (("fingerprint", merged._fingerprint), ("lora_layers", arlm.lora_layers))
    }
    vocab = base.config.vocab_size
    rows, ratios = [], []
    for batch in settings.batches:
        ids, mask = prompt(settings, batch, vocab)
        with torch.inference_mode():
            t_max = max(ADAPTER_LOOPS)
            diff = (final_readout(merged, ids, mask, t_max) - final_readout(arlm, ids, mask, t_max)).abs().max()
            diff_merge = float(diff.float())
        variants: list[tuple[Any, Any]] = []
        for T in ADAPTER_LOOPS:
            for name, model in (("full", full), ("lora", arlm), ("merged", merged)):
                variants.append(
                    ((name, T), lambda T=T, model=model, ids=ids, mask=mask: final_readout(model, ids, mask, T))
                )
        times = time_round_robin(variants, settings)
        for T in ADAPTER_LOOPS:
            t_full, t_lora, t_merged = (statistics.median(times[(name, T)]) for name in ("full", "lora", "merged"))
            lora, merge = t_lora / t_full, t_merged / t_full
            pred = 1 + fraction * (T - 1) / (T + 1)
            ratios.append(
                {"batch": batch, "loops": T, "lora_over_full": lora, "merged_over_full": merge, "pred_flops": pred}
                | {"full_ms": t_full * 1e3, "merged_max_abs_diff": diff_merge}
            )
            note = (
                f"full {t_full * 1e3:.2f} ms, lora {t_lora * 1e3:.2f} ms; "
                f"expected = FLOP ratio (LoRA +{fraction:.1%} per adapter loop)"
            )
            rows.append(row("adapter", f"b={batch:<2} T={T:<2} lora/full", f"{lora:.2f}", f"{pred:.2f}", "ok", note))
            note = (
                f"merged {t_merged * 1e3:.2f} ms; max |merged - unmerged| {diff_merge:.2e} (T={t_max}); host "
                f"{overhead_ms['fingerprint']:.1f} ms/loop fingerprint, {overhead_ms['lora_layers']:.1f} ms lora_layers"
            )
            rows.append(row("adapter", f"b={batch:<2} T={T:<2} merged/full", f"{merge:.2f}", "1.00", "ok", note))
    data = {"ratios": ratios, "lora_dtype": lora_dtype, "lora_flop_fraction": fraction, "host_ms": overhead_ms}
    return rows, data | {"passed": True}


def _host_ms(fn, n: int = 5) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e3


# ----------------------------------------------------------------------------- 3. loop-1 identity


def part_identity(settings: Settings) -> tuple[list[dict], dict]:
    """fp32: the untrained-route loop 1 is the base bit for bit (tests/arms/test_surgery.py and
    test_budgets.py assert torch.equal), for RecurrentLM with a perturbed bridge and for the
    adapter arm with a perturbed LoRA set; left-padded rows, as the tests use."""
    base = build_base(settings, torch.float32)
    lengths = [16, 11, 16, 5] if settings.small else [128, 97, 128, 40]
    width = max(lengths)
    g = torch.Generator().manual_seed(0)
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, n in enumerate(lengths):
        ids[r, width - n :] = torch.randint(3, base.config.vocab_size, (n,), generator=g)
        mask[r, width - n :] = 1
    ids, mask = ids.to(settings.device), mask.to(settings.device)
    rlm = retrofit(base, scale=0.05)
    results = {}
    with torch.no_grad():
        reference = base_readout(base, ids, mask)
        results["RecurrentLM"] = rlm(ids, mask, loops=2)
        arlm = apply_adapter_budget(rlm, rank=RANK, alpha=2 * RANK, seed=0).eval()
        perturb(arlm.lora_parameters(), seed=2, scale=0.05)
        results["AdapterRecurrentLM"] = arlm(ids, mask, loops=2)
    rows: list[dict] = []
    data: dict[str, Any] = {"rows": len(lengths), "lengths": lengths}
    for name, readouts in results.items():
        exact = torch.equal(readouts[0], reference)
        diff = float((readouts[0] - reference).abs().max())
        close = torch.allclose(readouts[0], reference, atol=1e-5, rtol=1e-5)
        moved = float((readouts[1] - reference).abs().max())
        data[name] = {"bit_exact": exact, "max_abs_diff": diff, "allclose_1e-5": close, "loop2_max_abs_diff": moved}
        note = f"torch.equal, as the CPU tests; allclose(1e-5): {'yes' if close else 'no'}; loop 2 moves by {moved:.2e}"
        rows.append(check("identity", f"fp32 {name} loop 1 vs base", exact, f"{diff:.2e}", "0 (bit-exact)", note))
    data["passed"] = all(data[name]["bit_exact"] for name in results)
    return rows, data


# ----------------------------------------------------------------------------- 0. training, as a run trains


TRAIN_BASE_TOKENIZER = "builtin:tiny-qwen2?hidden=16&layers=2&heads=2&kv_heads=1&intermediate=32"
TRAIN_LR = 1e-5  # protocols/phaseA.yaml's extend-stage rate: one AdamW step moves a weight by about this


def train_protocol(settings: Settings, steps: int) -> Any:
    """A one-arm protocol of the paper's Phase A arm A: split bridge, the whole block trained, intermediate
    supervision at forced depth, AdamW at the protocol's rate, in the protocol's dtype (bf16)."""
    import yaml

    from ledger.protocol.loader import parse_protocol

    stage = {
        "id": "extend",
        "objective": "intermediate",
        "manifest": "train",
        "steps": steps,
        "batch_size": settings.train_batch,
        "optimizer": {"lr": TRAIN_LR},
    }
    document = {
        "name": "gpu-check-train",
        "version": 1,
        "description": "the GPU check's training part",
        "seed": 1,
        "bases": {"shape": {"source": TRAIN_BASE_TOKENIZER, "dtype": "bfloat16"}},
        "manifests": [
            {"id": role, "role": role, "generator": "rule_chasing", "depths": [1, 8], "rows_per_depth": 8}
            | {"seed": 1, "split": role}
            for role in ("train", "eval")
        ],
        "arms": [
            {
                "id": "A",
                "kind": "recurrent",
                "base": "shape",
                "surgery": {"split": list(SPLIT)},
                "bridge": {"kind": "split"},
                "budget": {"kind": "full_block"},
                "stages": [stage],
                "evaluation": {"manifests": ["eval"]},
            }
        ],
    }
    return parse_protocol(yaml.safe_dump(document))


def padded_rows(n: int) -> list[Any]:
    """Rule-chasing rows of depths 1-8 made unequal in length (row i starts with i % 5 extra words), so
    every batch is left-padded as a run's batches are: the masked attention path, not the all-ones one."""
    from ledger.rows.tasks import generate_rule_chasing

    rows = generate_rule_chasing(surface="symbolic", depth_range=(1, 8), rows_per_depth=n // 8, seed=4, split="train")
    return [row.model_copy(update={"prompt": "Question " * (i % 5) + row.prompt}) for i, row in enumerate(rows)]


def _moved_share(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> tuple[float, str]:
    """The least share of elements changed over the trainable tensors, and the tensor that has it."""
    shares = {name: float(after[name].ne(before[name]).float().mean()) for name in before}
    least = min(shares, key=shares.__getitem__)
    return shares[least], least


def part_train(settings: Settings) -> tuple[list[dict], dict]:
    """Arm A's stage through ``ArmRuntime.train_stage`` (the path ``ledger run`` trains with) on a random-init
    Qwen2.5-0.5B-shaped base in bf16: step time and peak memory of this process, host syncs per step (this
    repository's counter; on CUDA torch's own sync debug mode too), and the share of the weights that moved."""
    import resource
    import warnings

    from arms.bases.builtin import tiny_random_base
    from arms.host_syncs import HostSyncs
    from arms.runtime import build_runtime
    from ledger.reader.shared import Reader
    from ledger.rows.tasks.alphabets import resolve_alphabet

    cuda = settings.device.type == "cuda"
    _, tokenizer = tiny_random_base(TRAIN_BASE_TOKENIZER)  # a word-level tokenizer of 1,128 ids
    base = build_base(settings, torch.bfloat16, min_vocab=len(tokenizer))
    reader = Reader(list(resolve_alphabet("N16")), tokenizer=tokenizer)
    warm, timed, counted = 3, settings.train_steps, 10  # 10: the losses' copy to the host comes once in c steps
    rows = padded_rows(settings.train_batch * 4)
    protocol = train_protocol(settings, warm)
    arm = protocol.arms[0]
    runtime = build_runtime(arm, base, tokenizer, reader)
    del base
    compiled, compile_failure = runtime.compile_loop() if cuda else (False, "")
    before = {name: tensor.clone() for name, tensor in runtime.trainable_state().items()}
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    stage = arm.stages[0]
    runtime.train_stage(stage, rows, ("warm",))  # the first steps: compilation, allocator growth, first update
    first_update = runtime.first_update.shares or {}
    losses: list[float] = []
    timed_stage = stage.model_copy(update={"steps": timed})
    synchronize(settings.device)
    started = time.perf_counter()
    runtime.train_stage(timed_stage, rows, ("timed",), progress=lambda _, loss: losses.append(loss))
    synchronize(settings.device)
    step_s = (time.perf_counter() - started) / timed
    peak_gib = torch.cuda.max_memory_allocated(settings.device) / 2**30 if cuda else None
    peak_rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    # syncs per step as a difference of two stages (c and 2c steps): a stage's one-off work (its first
    # update's check) cancels
    counts, torch_counts = [], []
    for steps in (counted, 2 * counted):
        with warnings.catch_warnings(record=True) as caught, HostSyncs(runtime.model) as syncs:
            warnings.simplefilter("always")
            if cuda:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                runtime.train_stage(stage.model_copy(update={"steps": steps}), rows, ("counted", steps))
            finally:
                if cuda:
                    torch.cuda.set_sync_debug_mode(0)
        counts.append(syncs)
        torch_counts.append(sum("synchroniz" in str(w.message).lower() for w in caught))
    per_step = (counts[1].count - counts[0].count) / counted
    torch_syncs = (torch_counts[1] - torch_counts[0]) / counted if cuda else None
    syncs_by_site = counts[1].by_site - counts[0].by_site
    least, least_name = _moved_share(before, runtime.trainable_state())
    data: dict[str, Any] = {
        "dtype": "bfloat16",
        "steps": {"warm": warm, "timed": timed, "counted": counted},
        "batch": settings.train_batch,
        "lr": TRAIN_LR,
        "compiled": compiled,
        "compile_failure": compile_failure,
        "step_s": step_s,
        "peak_gib": peak_gib,
        "peak_rss_gib": peak_rss_gib,
        "host_syncs_per_step": per_step,
        "host_sync_sites": dict(syncs_by_site),
        "torch_syncs_per_step": torch_syncs,
        "first_update_moved": first_update,
        "least_moved_share": least,
        "least_moved_tensor": least_name,
        "losses": losses,
    }
    rows_out = []
    memory = f"peak GPU memory {peak_gib:.2f} GiB" if peak_gib is not None else f"peak RSS {peak_rss_gib:.2f} GiB"
    compile_note = (
        "compiled block" if compiled else f"eager block{' (' + compile_failure + ')' if compile_failure else ''}"
    )
    note = f"batch {settings.train_batch}, depths 1-8, left-padded, bf16, {compile_note}; {memory}"
    rows_out.append(row("train", "step time (arm A, full block)", f"{step_s * 1e3:.1f} ms", "-", "ok", note))
    sites = ", ".join(f"{n} {site}" for site, n in syncs_by_site.most_common(3)) or "none"
    torch_note = f"; torch sync debug mode: {torch_syncs:g}/step" if torch_syncs is not None else ""
    rows_out.append(
        check(
            "train",
            "host syncs per step",
            per_step <= 0.5,
            f"{per_step:g}",
            "<= 0.5 (one copy per 10 steps)",
            sites + torch_note,
        )
    )
    shares = ", ".join(f"{name} {100 * share:.1f}%" for name, share in sorted(first_update.items()))
    moved_ok = bool(first_update) and min(first_update.values()) >= 0.5
    rows_out.append(
        check(
            "train",
            "first update: share moved per group",
            moved_ok,
            f"{100 * min(first_update.values(), default=0):.1f}%",
            ">= 50%",
            shares,
        )
    )
    note = f"{least_name}: a bf16 tensor changes once its fp32 master passes a rounding step (a norm weight at 1.0 needs ~400 steps at 1e-5)"
    rows_out.append(
        row("train", "bf16 weights changed after the stages (least tensor)", f"{100 * least:.1f}%", "-", "NOTE", note)
    )
    falling = len(losses) >= 2 and losses[-1] < losses[0]
    rows_out.append(
        row(
            "train",
            "loss first -> last",
            f"{losses[0]:.3f} -> {losses[-1]:.3f}" if losses else "-",
            "-",
            "NOTE",
            "random init, lr 1e-5: any fall is slow",
        )
    )
    data["passed"] = all(r["status"] != "FAIL" for r in rows_out)
    data["loss_fell"] = falling
    return rows_out, data
