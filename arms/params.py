"""Parameter and cost accounting of a protocol's arms, without loading any weights.

Each base's architecture comes from its config alone: a local path or the local HF
cache (``config.json``), or, for the bases of the published protocols, the exact shape
written here (so ``ledger params protocols/phaseA.yaml`` works on a machine with no
model hub). The model is built on the meta device: nothing is allocated.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from arms.bases.loading import BaseModelNotFound, _how_to, qwen25_05b_config, qwen25_15b_config
from arms.model.accounting import count_parameters, surgery_cost_ratio
from arms.model.flops import fixed_depth_flops_per_token, recurrent_counts
from ledger.protocol.arms import ARM_KINDS, BUDGETS

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


@dataclass(frozen=True)
class RetrofitCounts:
    """What a recurrent arm keeps of its base, and its training FLOPs by design M's rule (``arms.model.flops``).

    Every count is unique (the shared block once) and leaves the embeddings out (input table and lm_head).
    """

    non_embedding: int  # prelude + block + coda + final norm + bridge/adapter: the parts the retrofit runs
    bridge: int  # the bridge (design S) or concat adapter (design M)
    kept: int  # the base's own parameters the retrofit keeps: non_embedding - bridge (dropped layers excluded)
    kept_share: float  # kept / the base's non-embedding parameters (the bridge is not the base's)
    once: int  # prelude + coda + final norm: applied once per forward
    per_iteration: int  # block + bridge: applied at every iteration
    # (backprop depth s, {T: (6 N1 + 2 N2) per token at T iterations}); s None: every iteration has gradient (s = T)
    training_flops: tuple[tuple[int | None, dict[int, float]], ...]
    note: str = ""  # how to read these counts (printed once under the FLOPs table)


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
    base_flops_per_token: float = 0.0  # 6 N of the fixed-depth base (N without embeddings)
    retrofit: RetrofitCounts | None = None  # arms with a retrofit (a looped block)
    cost_note: str = ""  # how to read the cost columns (printed after the table, after the arms it concerns)


def backprop_depths(arm) -> tuple[int | None, ...]:
    """The backprop depths an arm trains with, one per distinct stage recurrence, in stage order.

    A ``poisson_lognormal`` stage has its ``backprop_depth`` s; a forced (or unset) recurrence keeps gradient at
    every iteration, written None (s = T). An arm without stages: (None,).
    """
    depths: list[int | None] = []
    for stage in arm.stages:
        recurrence = stage.recurrence
        s = recurrence.backprop_depth if getattr(recurrence, "kind", None) == "poisson_lognormal" else None
        if s not in depths:
            depths.append(s)
    return tuple(depths) or (None,)


def retrofit_counts(
    base_non_embedding: int, recurrent, loops=(1, 4, 8, 12), depths: tuple[int | None, ...] = (None,)
) -> RetrofitCounts:
    """The counts of a built ``RecurrentLM`` (on the meta device is enough) at ``loops`` and backprop ``depths``."""
    counts = recurrent_counts(recurrent.surgery, recurrent.bridge)
    bridge = count_parameters(recurrent.bridge, exclude_embeddings=True) if recurrent.bridge is not None else 0
    total = counts.once + counts.per_iteration
    flops = tuple((s, {t: counts.flops_per_token(t, t if s is None else s) for t in loops}) for s in depths)
    return RetrofitCounts(
        non_embedding=total,
        bridge=bridge,
        kept=total - bridge,
        kept_share=(total - bridge) / base_non_embedding,
        once=counts.once,
        per_iteration=counts.per_iteration,
        training_flops=flops,
    )


def protocol_params(protocol, loops=(1, 4, 8, 12), protocol_dir=None) -> list[ArmParams]:
    """Trainable-parameter budgets, inference cost and (recurrent arms) training FLOPs of every arm of a protocol.

    A base `source` written relative to the protocol file ("../bases/...") resolves
    against `protocol_dir` (the file's folder), as `ledger run` resolves it.
    """
    from ledger.protocol.bases import base_location

    models = {}
    results = []
    for arm in protocol.arms:
        spec = protocol.bases[arm.base]
        if arm.base not in models:
            source = base_location(spec, Path(protocol_dir or "."))
            models[arm.base] = meta_model(base_config(source))
        results.append(ARM_KINDS.resolve(arm.kind, "counter")(arm, models[arm.base], loops))
    return results


def dense_params(arm, model, loops) -> ArmParams:
    """A dense arm's row: it fine-tunes every tensor of its base, at the base's cost."""
    unique = count_parameters(model)
    non_embedding = count_parameters(model, exclude_embeddings=True)
    six_n = fixed_depth_flops_per_token(model)
    return ArmParams(arm.id, arm.kind, arm.base, unique, non_embedding, unique, "full fine-tune", {}, six_n)


def recurrent_params(arm, model, loops) -> ArmParams:
    """A recurrent arm's row: its budget's trainable tensors (and a halting head), its cost at each loop count,
    and what the retrofit keeps of the base with its training FLOPs."""
    from arms.model.recurrent import RecurrentLM

    unique = count_parameters(model)
    non_embedding = count_parameters(model, exclude_embeddings=True)
    six_n = fixed_depth_flops_per_token(model)
    with torch.device("meta"):
        recurrent = RecurrentLM.from_spec(model, arm)
    cost = {t: surgery_cost_ratio(recurrent.surgery, t) for t in loops}
    count = BUDGETS.resolve(arm.budget.kind, "counter")
    trainable, detail = count(recurrent.surgery, recurrent.bridge, arm.budget)
    if arm.halting() is not None:  # a linear probe of the state: hidden weights and a bias
        trainable += int(model.config.hidden_size) + 1
        detail = f"{detail} + halting head"
    retrofit = retrofit_counts(non_embedding, recurrent, loops, backprop_depths(arm))
    if recurrent.bridge is not None and recurrent.design == "S":
        retrofit = dataclasses.replace(retrofit, note=SPLIT_BRIDGE_NOTE)
    note = ANSWER_ONLY_NOTE if recurrent.reentry == "answer" else ""
    return ArmParams(arm.id, arm.kind, arm.base, unique, non_embedding, trainable, detail, cost, six_n, retrofit, note)


ANSWER_ONLY_NOTE = (
    "answer-only re-entry. The cost columns count every position looping (what `ledger run` computes); their "
    "prompt positions compute the same values at every loop, so with a cache the prompt costs 1.00x and only the "
    "answer position pays for the loops."
)
SPLIT_BRIDGE_NOTE = "Split bridges (design S) do not run at loop 1: their counts apply the bridge at every iteration."
