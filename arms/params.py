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

from arms.bases.loading import BaseModelNotFound, _how_to, qwen25_05b_config, qwen25_15b_config
from arms.model.accounting import count_parameters, surgery_cost_ratio
from ledger.spec.arms import ARM_KINDS, BUDGETS

KNOWN_SHAPES = {
    "Qwen/Qwen2.5-0.5B-Instruct": qwen25_05b_config,
    "Qwen/Qwen2.5-1.5B-Instruct": qwen25_15b_config,
}


def base_config(source: str):
    """The config of a base: built-in, local path or HF cache first, then the shapes known offline."""
    from transformers import AutoConfig

    if source.startswith("builtin:"):
        from arms.bases.builtin import builtin_config

        return builtin_config(source)
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
    from ledger.spec.bases import base_location

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
        if not ARM_KINDS[arm.kind].every_loop:  # a dense arm fine-tunes every tensor
            results.append(ArmParams(arm.id, arm.kind, arm.base, unique, non_embedding, unique, "full fine-tune", {}))
            continue
        with torch.device("meta"):
            recurrent = RecurrentLM.from_spec(model, arm)
        cost = {t: surgery_cost_ratio(recurrent.surgery, t) for t in loops}
        count = BUDGETS.resolve(arm.budget.kind, "counter")
        trainable, detail = count(recurrent.surgery, recurrent.bridge, arm.budget)
        results.append(ArmParams(arm.id, arm.kind, arm.base, unique, non_embedding, trainable, detail, cost))
    return results
