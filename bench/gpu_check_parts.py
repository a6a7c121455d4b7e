"""Parts 1-3 of ``bench/gpu_check.py`` (part 4, the ledger run, is there): each returns (table rows, JSON data).

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
from arms.model.recurrent import RecurrentLM, last_token_positions, positions_from_mask

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


def build_base(settings: Settings, dtype: torch.dtype, seed: int = 0) -> Any:
    """A random-init base built directly on the device (no CPU copy of 0.5B weights), in eval mode."""
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    with settings.device:
        model = cast(Any, Qwen2ForCausalLM)(model_config(settings.small))
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
    ids = torch.randint(3, vocab, (batch, settings.seq), generator=torch.Generator().manual_seed(batch))
    ids = ids.to(settings.device)
    return ids, torch.ones_like(ids)


def final_readout(rlm: RecurrentLM, ids: torch.Tensor, mask: torch.Tensor, loops: int) -> torch.Tensor:
    """Loop `loops`'s readout only (bench/loop_cost.py's, with the row index on the device):
    prelude once, block `loops` times (bridge before loops >= 2), coda once, norm + lm_head at
    the answer position. Checked equal to ``forward(loops=...)[-1]`` in part 1."""
    position_ids = positions_from_mask(mask)
    answer = last_token_positions(mask)
    rows = torch.arange(ids.shape[0], device=ids.device)
    embeds = rlm.surgery.embed_tokens(ids)
    ctx = rlm._context(embeds, mask, position_ids)
    prelude_out = rlm._run(rlm.surgery.prelude_idx, embeds, ctx)
    state = prelude_out
    for t in range(1, loops + 1):
        state = rlm._step(t, state, prelude_out, ctx, rows, answer)
    return rlm._readout(state, ctx, rows, answer)


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
            same[batch] = torch.equal(final_readout(rlm, ids, mask, t_max), rlm(ids, mask, loops=t_max)[-1])
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
    note = "the timed path is the forward's last readout, bit for bit (batch " + ", ".join(map(str, same)) + ")"
    t_max = max(FORWARD_LOOPS)
    rows.append(check("forward", f"final readout == forward(loops={t_max})[-1]", ok, str(ok), "True", note))
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
