"""Parameter and compute accounting for the arms, computed from real module shapes.

Counts are *unique*: a tensor reached twice (tied input/output embeddings, a
module shared by several parents, the base seen through a retrofit) is counted
once. Nothing here is hard-coded to the paper's numbers; the tests check that
these functions reproduce them on a model with Qwen2.5-0.5B-Instruct's shape.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import torch
from torch import nn

from arms.model.surgery import CutModel

# The 7 linear projections of a Llama-family decoder layer (attention + SwiGLU MLP).
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _key(p: torch.Tensor):
    # Meta tensors have no storage to compare, so identity is all we can use; real
    # tensors that are distinct Parameter objects over the same memory count once.
    if p.is_meta:
        return ("id", id(p))
    return ("mem", p.untyped_storage().data_ptr(), p.storage_offset(), tuple(p.shape), p.stride())


def _as_modules(modules) -> list[nn.Module]:
    return [modules] if isinstance(modules, nn.Module) else [m for m in modules if m is not None]


def embedding_parameters(modules) -> list[torch.Tensor]:
    """Input embedding tables and output embeddings (the lm_head) inside `modules`."""
    found = []
    for module in _as_modules(modules):
        for sub in module.modules():
            if isinstance(sub, nn.Embedding):
                found.append(sub.weight)
            get_out = getattr(sub, "get_output_embeddings", None)
            if callable(get_out) and isinstance(sub, nn.Module) and hasattr(sub, "config"):
                out = get_out()
                if out is not None and getattr(out, "weight", None) is not None:
                    found.append(out.weight)
    return found


def unique_parameters(modules, *, exclude_embeddings: bool = False) -> list[nn.Parameter]:
    """The distinct parameter tensors of `modules` (a module or an iterable of them)."""
    skip = {_key(p) for p in embedding_parameters(modules)} if exclude_embeddings else set()
    seen = set(skip)
    unique: list[nn.Parameter] = []
    for module in _as_modules(modules):
        for p in module.parameters():
            key = _key(p)
            if key not in seen:
                seen.add(key)
                unique.append(p)
    return unique


def count_parameters(modules, *, exclude_embeddings: bool = False) -> int:
    """Number of unique parameters; embeddings (input and output) optionally left out."""
    return sum(p.numel() for p in unique_parameters(modules, exclude_embeddings=exclude_embeddings))


def trainable_counts(modules, *, exclude_embeddings: bool = False) -> dict[str, int]:
    """Unique parameters split by requires_grad: {"trainable", "frozen", "total"}."""
    params = unique_parameters(modules, exclude_embeddings=exclude_embeddings)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    total = sum(p.numel() for p in params)
    return {"trainable": trainable, "frozen": total - trainable, "total": total}


def full_block_budget(surgery: CutModel, bridge: nn.Module | None) -> int:
    """Arm A's trained parameters: every block layer plus the bridge (prelude, coda frozen)."""
    return count_parameters([*surgery.block, bridge])


def lora_target_modules(surgery: CutModel, targets: Iterable[str] = LORA_TARGETS) -> list[tuple[str, nn.Linear]]:
    """(qualified name, Linear) for each LoRA target projection of the block layers."""
    targets = tuple(targets)
    found = []
    for i in surgery.block_idx:
        layer = cast(nn.ModuleList, surgery.decoder.layers)[i]
        for name, module in layer.named_modules():
            if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in targets:
                found.append((f"model.layers.{i}.{name}", module))
    return found


def lora_param_count(linears: Iterable[nn.Linear], r: int) -> int:
    """LoRA adds A (r x in) and B (out x r) to each Linear: r * (in + out) parameters."""
    return sum(r * (m.in_features + m.out_features) for m in linears)


def adapter_budget(
    surgery: CutModel, bridge: nn.Module | None, r: int = 16, targets: Iterable[str] = LORA_TARGETS
) -> dict[str, int]:
    """Arm E's trained parameters: one rank-r LoRA set on the block (shared by all loops) + bridge."""
    modules = [m for _, m in lora_target_modules(surgery, targets)]
    lora = lora_param_count(modules, r)
    bridge_n = count_parameters(bridge) if bridge is not None else 0
    return {"lora_modules": len(modules), "lora": lora, "bridge": bridge_n, "total": lora + bridge_n}


# -- compute ---------------------------------------------------------------------


def inference_cost_ratio(n_layers: int, n_block: int, loops: int, n_once: int | None = None) -> float:
    """Layer applications at T loops relative to one base forward: (n_once + T * n_block) / L.

    `n_once` = prelude + coda layers (default L - n_block, i.e. a split with
    nothing dropped). For a split whose block is half the model this is (1 + T) / 2.
    """
    if n_once is None:
        n_once = n_layers - n_block
    return (n_once + loops * n_block) / n_layers


def surgery_cost_ratio(surgery: CutModel, loops: int) -> float:
    """inference_cost_ratio for a concrete surgery (dropped layers cost nothing)."""
    return inference_cost_ratio(
        surgery.n_layers,
        len(surgery.block_idx),
        loops,
        n_once=len(surgery.prelude_idx) + len(surgery.coda_idx),
    )


# ----------------------------------------------------------------------------- the budget kinds' counters
# (``ledger.protocol.arms.BUDGETS``, ``counter``): (trainable parameters, a one-line breakdown) from configs alone.


def count_full_block(surgery: Any, bridge: Any, spec: Any) -> tuple[int, str]:
    trainable = full_block_budget(surgery, bridge)
    bridge_n = count_parameters(bridge) if bridge is not None else 0
    return trainable, f"block {trainable - bridge_n:,} + bridge {bridge_n:,}"


def count_adapter(surgery: Any, bridge: Any, spec: Any) -> tuple[int, str]:
    budget = adapter_budget(surgery, bridge, r=spec.rank, targets=spec.targets)
    detail = f"LoRA r={spec.rank} {budget['lora']:,} on {budget['lora_modules']} modules + bridge {budget['bridge']:,}"
    return budget["total"], detail


def count_full_model(surgery: Any, bridge: Any, spec: Any) -> tuple[int, str]:
    """Every tensor the retrofit runs (dropped layers excluded), embeddings included: they train too."""
    used = count_parameters([*surgery.used_modules(), bridge])
    embeddings = count_parameters([surgery.embed_tokens, surgery.lm_head]) if surgery.lm_head is not None else 0
    bridge_n = count_parameters(bridge) if bridge is not None else 0
    return used, f"layers and norms {used - embeddings - bridge_n:,} + embeddings {embeddings:,} + adapter {bridge_n:,}"
