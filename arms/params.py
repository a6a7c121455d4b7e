"""Parameter and cost accounting of a protocol's arms, without loading any weights.

Each base's architecture comes from its config alone: a local path or the local HF
cache (``config.json``), or, for the bases of the published protocols, the exact shape
written here (so ``ledger params protocols/phaseA.yaml`` works on a machine with no
model hub). The model is built on the meta device: nothing is allocated.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from arms.model.accounting import adapter_budget, count_parameters, full_block_budget, surgery_cost_ratio
from arms.bases.loading import BaseModelNotFound, _how_to, qwen25_05b_config


def qwen25_15b_config(**overrides):
    """A Qwen2Config with the shape of Qwen2.5-1.5B-Instruct (no weights)."""
    from transformers import Qwen2Config

    shape = dict(
        vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
        num_attention_heads=12, num_key_value_heads=2, hidden_act="silu", max_position_embeddings=32768,
        rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False,
    )
    shape.update(overrides)
    return Qwen2Config(**shape)


KNOWN_SHAPES = {
    "Qwen/Qwen2.5-0.5B-Instruct": qwen25_05b_config,
    "Qwen/Qwen2.5-1.5B-Instruct": qwen25_15b_config,
}


def base_config(source: str):
    """The config of a base: local path or HF cache first, then the shapes known offline."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source, local_files_only=True)
    except (OSError, ValueError):
        if source in KNOWN_SHAPES:
            return KNOWN_SHAPES[source]()
        raise BaseModelNotFound(_how_to(source)) from None


def meta_model(config):
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


@dataclass
class ArmParams:
    arm: str
    kind: str
    base: str
    base_unique: int
    base_non_embedding: int
    trainable: int
    detail: str
    cost_by_loops: dict[int, float]


def protocol_params(protocol, loops=(1, 4, 8, 12), protocol_dir=None) -> list[ArmParams]:
    """Trainable-parameter budgets and inference cost of every arm of a protocol.

    A base `source` written relative to the protocol file ("../bases/...") resolves
    against `protocol_dir` (the file's folder), as `ledger run` resolves it.
    """
    from arms.model.recurrent import RecurrentLM
    from ledger.spec.protocol import base_location

    models = {}
    results = []
    for arm in protocol.arms:
        spec = protocol.bases[arm.base]
        if arm.base not in models:
            source = base_location(spec, Path(protocol_dir or "."))
            models[arm.base] = meta_model(base_config(source))
        model = models[arm.base]
        unique = count_parameters(model)
        non_embedding = count_parameters(model, exclude_embeddings=True)
        if arm.kind == "dense":
            results.append(ArmParams(arm.id, "dense", arm.base, unique, non_embedding, unique, "full fine-tune", {}))
            continue
        surgery = arm.surgery
        with torch.device("meta"):
            recurrent = RecurrentLM.build(
                model,
                split=tuple(surgery.split) if surgery.split else None,
                tuple_=tuple(surgery.tuple_) if surgery.tuple_ else None,
                bridge=arm.bridge.kind,
                state_norm=getattr(arm.bridge, "state_norm", False),
                reentry=getattr(arm.bridge, "reentry", "all"),
            )
        bridge = recurrent.bridge
        cost = {t: surgery_cost_ratio(recurrent.surgery, t) for t in loops}
        if arm.budget.kind == "full_block":
            trainable = full_block_budget(recurrent.surgery, bridge)
            bridge_n = count_parameters(bridge) if bridge is not None else 0
            detail = f"block {trainable - bridge_n:,} + bridge {bridge_n:,}"
        else:
            budget = adapter_budget(recurrent.surgery, bridge, r=arm.budget.rank, targets=arm.budget.targets)
            trainable = budget["total"]
            detail = f"LoRA r={arm.budget.rank} {budget['lora']:,} on {budget['lora_modules']} modules + bridge {budget['bridge']:,}"
        results.append(ArmParams(arm.id, "recurrent", arm.base, unique, non_embedding, trainable, detail, cost))
    return results
