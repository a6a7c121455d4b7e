"""One arm's model during a run: build it from its base, train a stage, evaluate, save and load.

The runner (``ledger/run/runner.py``) drives these objects and never reaches inside a model:
it hands over rows and gets back per-row, per-loop readings made by the shared reader.
Every random choice is derived from a seed by hashing (batch draws per step, torch's
generator per stage), so a stage re-run after a crash reproduces itself bit for bit.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from safetensors.torch import load_file, save_file

from arms.device import free_memory_bytes, hold_frozen_in, model_device
from arms.readings import Reading, Tick, _tick
from arms.recurrent_reading import RecurrentReading
from arms.runtime_common import derived_seed, on_device, one_pass_logits, symbol_id_tensor
from arms.train.distributed import SINGLE, World
from arms.train.first_update import FirstUpdate
from arms.train.step import StageLosses, TrainingDiverged, take_step
from ledger.canonical import canonical_json
from ledger.protocol.arms import ARM_KINDS, BUDGETS, OBJECTIVES
from ledger.reader.shared import Reader
from ledger.rows.tasks.token_corpus import TokenSequences

if TYPE_CHECKING:
    from arms.model.recurrent import RecurrentLM
    from ledger.protocol.arms import ArmSpec

ProgressFn = Callable[[int, float], None]
__all__ = ["ArmRuntime", "DenseRuntime", "Reading", "RecurrentRuntime", "TrainingDiverged", "build_runtime"]


@dataclass(frozen=True)
class Mixture:
    """A stage's data mixture: pools of rows and their weights (each example's pool is drawn by weight)."""

    pools: tuple[Sequence[Any], ...]
    weights: tuple[float, ...]


def draw_batch(rows: Sequence[Any] | Mixture, batch_size: int, *seed_parts: Any) -> list[Any]:
    """The rows of one training step: a seeded draw without replacement (by step, not by position); from a
    mixture, each example's pool by weight, then a row of that pool, all seeded by the step."""
    if isinstance(rows, TokenSequences):  # billions of sequences: one seeded pass, never a permutation in memory
        step = int(seed_parts[-1])
        return rows.batch_at(step * batch_size, batch_size, derived_seed(*seed_parts[:-1], "pass"))
    generator = torch.Generator().manual_seed(derived_seed(*seed_parts))
    if isinstance(rows, Mixture):
        weights = torch.tensor(rows.weights, dtype=torch.float64)
        pools = torch.multinomial(weights, batch_size, replacement=True, generator=generator)
        return [rows.pools[p][int(torch.randint(len(rows.pools[p]), (1,), generator=generator))] for p in pools]
    picks = torch.randperm(len(rows), generator=generator)[: min(batch_size, len(rows))]
    return [rows[int(index)] for index in picks]


class ArmRuntime:
    """Shared machinery: optimiser, stage loop, trainable state on disk."""

    arm: ArmSpec  # the arm this runtime runs (set by each kind's constructor)

    def __init__(self, model: torch.nn.Module, tokenizer: Any, reader: Reader):
        self.model = model
        self.tokenizer = tokenizer
        self.reader = reader
        self.device = model_device(model)  # inputs follow the model (the runner placed it)
        self.step_records: dict[int, dict] = {}  # next-token steps: iterations, tokens, FLOPs (the last stage's)
        self._flops_rule: Callable[[int, int], float] | None = None
        self._stepped: set[int] | None = None  # ids of the only tensors a stage steps (``step_only``); None: all

    def step_only(self, tensors: Sequence[torch.Tensor] | None) -> None:
        """Let the next stages step only ``tensors`` of the trainable ones (the rest kept frozen, no gradient, no
        optimiser state); None: all of them. A dry run's arm too large for its machine steps this way, so that its
        loss, backward, optimiser and schedule still run at the real shapes."""
        self._stepped = None if tensors is None else {id(t) for t in tensors}

    def _stepped_groups(self) -> tuple[dict[str, list[torch.nn.Parameter]], list[torch.nn.Parameter]]:
        """The named groups a stage steps, and the trainable tensors it holds frozen meanwhile."""
        groups = self.named_groups()
        if self._stepped is None:
            return groups, []
        stepped = self._stepped
        kept = {name: [p for p in group if id(p) in stepped] for name, group in groups.items()}
        frozen = [p for group in groups.values() for p in group if id(p) not in stepped]
        return {name: group for name, group in kept.items() if group}, frozen

    def flops_per_token(self, loops: int, grad_loops: int) -> float:
        if self._flops_rule is None:
            self._flops_rule = self.flops_rule()
        return self._flops_rule(loops, grad_loops)

    def flops_rule(self) -> Callable[[int, int], float]:
        """(loops, loops with gradient) -> training FLOPs per token by the seed's rule: a one-pass model's 6 N."""
        from arms.model.flops import fixed_depth_flops_per_token

        per_token = fixed_depth_flops_per_token(self.model)
        return lambda loops, grad_loops: per_token

    def sequence_model(self) -> Any:
        """The model as the next-token loss and the sweep read it (``sequence_logits``: {loop: logits})."""
        from arms.train.language import OnePass

        return OnePass(self.model)

    def readouts(self, rows, loops: int, read_at=None) -> torch.Tensor:
        """[loops, batch, n_symbols]: each loop's readout at the answer position; a one-pass model has loop 1."""
        if loops != 1:
            raise ValueError(f"a one-pass arm is read at loop 1, not {loops}")
        return self.loop1_logits(rows).unsqueeze(0)

    def record_step(
        self, step: int, tokens: int, *, loops: int = 1, grad_loops: int = 1, mean: float = 1.0, flops=None
    ) -> None:
        """What a training step cost (its checkpoint's training record): FLOPs by the seed's rule unless given."""
        if flops is None:
            flops = tokens * self.flops_per_token(loops, grad_loops)
        self.step_records[step] = {
            "loops": loops,
            "grad_loops": grad_loops,
            "mean": mean,
            "tokens": tokens,
            "flops": flops,
        }

    def _micro_batches(self, batch: list[Any], stage: Any, step: int) -> list[Callable[[], torch.Tensor]]:
        """The step's losses, a micro-batch each (``stage.micro_batch_size``), each keeping its own cost; the step's
        record is then what they cost together (``_join_records``)."""
        micro = stage.micro_batch_size or len(batch)
        self._micro_records: list[dict] = []

        def loss(rows: list[Any]) -> torch.Tensor:
            value = self.loss(rows, stage, step)
            if step in self.step_records:
                self._micro_records.append(self.step_records.pop(step))
            return value

        return [functools.partial(loss, batch[i : i + micro]) for i in range(0, len(batch), micro)]

    def _join_records(self, step: int) -> None:
        parts = self._micro_records
        if len(parts) == 1:  # the whole batch at once: its record as it was made
            self.step_records[step] = parts[0]
        elif parts:
            self.step_records[step] = {
                "loops": max(part["loops"] for part in parts),
                "grad_loops": max(part["grad_loops"] for part in parts),
                "mean": sum(part["mean"] for part in parts) / len(parts),
                "tokens": sum(part["tokens"] for part in parts),
                "flops": sum(part["flops"] for part in parts),
            }

    def read_sweep(self, rows: Sequence[Any], evaluation: Any, reading: str, progress: Tick = None) -> list[Reading]:
        """Rows read at every test recurrence: "loss" rows as next-token loss, "answer" rows against their answer."""
        from arms.runtime_language import read_answers, read_losses

        read = read_losses(self, rows, evaluation) if reading == "loss" else read_answers(self, rows, evaluation)
        _tick(progress, len(rows))  # a sweep reports once, at its end
        return read

    def compile_loop(self) -> tuple[bool, str]:
        """Compile the looped block (``RecurrentLM.compile_block``); (compiled, why not). A one-pass arm has no loop."""
        return False, ""

    # -- parameters and state

    def named_groups(self) -> dict[str, list[torch.nn.Parameter]]:
        raise NotImplementedError

    def trainable_state(self) -> dict[str, torch.Tensor]:
        return {name: p.detach().cpu().contiguous() for name, p in self.model.named_parameters() if p.requires_grad}

    def save(self, path: Path, metadata: dict[str, str]) -> Path:
        """Write the trainable tensors as safetensors, atomically (temp file, then rename)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        # One metadata key holding canonical JSON: safetensors writes a multi-key metadata map
        # in a per-process hash order, which would make identical weights hash differently.
        save_file(self.trainable_state(), str(tmp), metadata={"ledger": canonical_json(metadata)})
        tmp.replace(path)
        return path

    def load(self, path: Path) -> None:
        state = load_file(str(path))
        named = dict(self.model.named_parameters())
        missing = [name for name in state if name not in named]
        if missing:
            raise ValueError(f"{path}: tensors {missing[:3]} do not belong to this arm")
        with torch.no_grad():
            for name, tensor in state.items():
                named[name].copy_(tensor)
        torch.clear_autocast_cache()  # a cast of the weights before the load is stale (``take_step`` says why)

    # -- training

    def loss(self, rows: Sequence[Any], stage: Any, step: int) -> torch.Tensor:
        raise NotImplementedError

    def train_stage(
        self,
        stage: Any,
        rows: Sequence[Any],
        seed_parts: tuple,
        progress: ProgressFn | None = None,
        world: World = SINGLE,
        checkpoint: Callable[[int], None] | None = None,
        until: Callable[[int], bool] | None = None,
    ) -> float:
        """Train one stage. ``checkpoint(step)`` is called every ``stage.checkpoint_every`` steps; under
        ``stage.until``, ``until(step)`` every ``stage.until.every`` steps, and the stage ends at the first True
        (every rank stops where the main rank's reading says; a rank with no ``until`` only listens)."""
        torch.manual_seed(derived_seed(*seed_parts, "torch"))
        groups, frozen = self._stepped_groups()
        for tensor in frozen:
            tensor.requires_grad_(False)
        try:
            return self._train_groups(groups, stage, rows, seed_parts, progress, world, checkpoint, until)
        finally:
            for tensor in frozen:
                tensor.requires_grad_(True)

    def _train_groups(
        self,
        groups: dict[str, list[torch.nn.Parameter]],
        stage: Any,
        rows: Sequence[Any],
        seed_parts: tuple,
        progress: ProgressFn | None,
        world: World,
        checkpoint: Callable[[int], None] | None,
        until: Callable[[int], bool] | None,
    ) -> float:
        from arms.train.optim import build_optimizer

        trainable = [p for group in groups.values() for p in group]
        optimizer = build_optimizer(
            groups,
            kind=stage.optimizer.kind,
            lr=stage.optimizer.lr,
            weight_decay=stage.optimizer.weight_decay,
            group_lr_multipliers=dict(stage.optimizer.group_lrs) or None,
            adamw_lr=stage.optimizer.adamw_lr,
            betas=stage.optimizer.betas,
        )
        self.model.train()
        self.step_records = {}
        schedule = stage.optimizer.schedule
        self.first_update = FirstUpdate(optimizer)  # a first update that rounds away fails the stage
        losses = StageLosses(progress, f"stage {stage.id}, ")  # copied to the host in batches
        for step in range(stage.steps):
            # the same seeded draw on every rank; each trains on its own slice of it
            batch = world.shard(draw_batch(rows, stage.batch_size, *seed_parts, step))
            if schedule is not None:
                optimizer.set_lr_scale(schedule.scale(step, stage.steps))
            parts = self._micro_batches(batch, stage, step)
            taken = take_step(
                optimizer,
                parts if len(parts) > 1 else parts[0],
                trainable,
                grad_clip=stage.optimizer.grad_clip,
                world=world,
            )
            self._join_records(step)
            self.first_update.after_step(taken.updated, f"stage {stage.id}, step {step}: ")
            losses.add(step, taken.loss)
            if step in self.step_records and world.parallel:  # every rank's tokens, not only this one's
                record = self.step_records[step]
                scale = world.mean(record["tokens"]) * world.size / max(record["tokens"], 1)
                record["tokens"], record["flops"] = round(record["tokens"] * scale), record["flops"] * scale
            if checkpoint is not None and stage.checkpoint_every and (step + 1) % stage.checkpoint_every == 0:
                if step + 1 < stage.steps:  # the stage's last step is the stage's own checkpoint
                    losses.flush()
                    self.model.eval()
                    checkpoint(step + 1)
                    self.model.train()
            if self._until_reached(stage, step + 1, until, losses, world):
                break
        loss_value = losses.flush()
        self.model.eval()
        return loss_value

    def _until_reached(
        self, stage: Any, done: int, until: Callable[[int], bool] | None, losses: Any, world: World
    ) -> bool:
        """Whether a stage trained until a gate passes has reached it after ``done`` steps (read on its schedule)."""
        rule = getattr(stage, "until", None)
        if rule is None or done % rule.every != 0 or done >= stage.steps:
            return False
        losses.flush()
        self.model.eval()
        reached = bool(until(done)) if until is not None else False
        self.model.train()
        return world.any(reached)  # the main rank read the gate; every rank stops with it

    # -- evaluation

    def evaluate(self, rows: Sequence[Any], evaluation: Any, progress: Tick = None) -> list[Reading]:
        """Every row read (``progress`` is told how many rows each batch read, as it goes)."""
        raise NotImplementedError

    def loop1_logits(self, rows: Sequence[Any]) -> torch.Tensor:
        raise NotImplementedError


class RecurrentRuntime(ArmRuntime):
    """A retrofitted recurrent arm: the shared block looped, read at every loop."""

    model: RecurrentLM

    def __init__(self, base_model, tokenizer, reader: Reader, arm: Any):
        from arms.model.recurrent import RecurrentLM

        if arm.layers_init == "random":
            from arms.runtime_language import reinitialise

            reinitialise(base_model, derived_seed(arm.id, "random-init"))
        model = RecurrentLM.from_spec(base_model, arm)
        apply_budget = BUDGETS.implementation(arm.budget.kind)
        model, groups = apply_budget(model, arm.budget, derived_seed(arm.id, "lora-init"))
        if arm.halting() is not None:  # choosing depth: a head the halting stages train on the frozen block
            from arms.train.halting import attach_head

            groups = {**groups, "halting_head": attach_head(model, arm.halting(), derived_seed(arm.id, "halting"))}
        super().__init__(model, tokenizer, reader)
        self.arm = arm
        self.symbol_ids = symbol_id_tensor(reader, self.device)
        self.groups = groups
        self.reading = RecurrentReading(self)

    def named_groups(self):
        return self.groups

    def evaluate(self, rows, evaluation, progress: Tick = None) -> list[Reading]:
        return self.reading.evaluate(rows, evaluation, progress)

    def flops_rule(self) -> Callable[[int, int], float]:
        from arms.model.flops import recurrent_counts

        return recurrent_counts(self.model.surgery, self.model.bridge).flops_per_token

    def sequence_model(self) -> Any:
        return self.model

    def compile_loop(self) -> tuple[bool, str]:
        """Compile the block's layers, then run one forward and backward through them on a two-row batch (a
        compiler that cannot build its kernels fails here, not mid-stage); on failure the layers are restored."""
        layers = cast(torch.nn.ModuleList, self.model.surgery.decoder.layers)
        kept = {i: layers[i].__dict__.get("_compiled_call_impl") for i in self.model.surgery.block_idx}
        try:
            self.model.compile_block()
            ids = torch.full((2, 4), int(self.symbol_ids[0]), device=self.device)
            mask = torch.ones_like(ids)
            mask[0, 0] = 0  # a padded row: the masked path the run takes
            self.model(ids, mask, loops=2).float().sum().backward()
        except Exception as exc:
            for i, impl in kept.items():
                layers[i]._compiled_call_impl = impl
            return False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        finally:
            self.model.zero_grad(set_to_none=True)
        return True, ""

    def encode(self, rows):
        encoded = self.reader.encode(rows, return_tensors="pt")
        return encoded["input_ids"].to(self.device), encoded["attention_mask"].to(self.device)

    def readouts(self, rows, loops: int, read_at=None) -> torch.Tensor:
        """[loops, batch, n_symbols]: every loop's readout (or those of ``read_at``) restricted to the symbols."""
        input_ids, attention_mask = self.encode(rows)
        out = self.model(input_ids, attention_mask, loops=loops, read_at=read_at)
        return out[..., self.symbol_ids]

    @contextlib.contextmanager
    def inference_copy(self):
        """Evaluation mode, on the adapter arm's merged block copy where it fits (``merged_copy_fits``): loops >= 2
        then cost what a full-block loop costs; the copy is dropped afterwards, so training is untouched."""
        from arms.model.budgets import AdapterRecurrentLM, merged_copy_fits

        was_training = self.model.training
        self.model.eval()
        merge = isinstance(self.model, AdapterRecurrentLM) and merged_copy_fits(
            self.model, free_memory_bytes(self.device)
        )
        if merge:
            self.model.use_merged_block()
        try:
            yield
        finally:
            if merge:
                self.model.use_merged_block(False)
            self.model.train(was_training)

    def loop1_logits(self, rows):
        return self.readouts(rows, 1)[0]

    def loss(self, rows, stage, step):
        from arms.train.objectives import anneal_weight
        from arms.train.recurrent import make_recurrent_batch, recurrent_loss

        objective = OBJECTIVES[stage.objective]
        if objective.trains_halting_head:
            from arms.train.halting import halting_stage_loss

            return halting_stage_loss(self, rows, stage, step)
        if objective.reads_text:
            from arms.runtime_language import text_loss

            return text_loss(self, rows, stage, step)
        # `ledger check` gives sampled recurrence to next-token stages only: a chain objective trains at forced depth
        weight = (
            anneal_weight(step, stage.steps, stage.anneal_fraction) if "anneal_fraction" in objective.reads else None
        )
        batch = make_recurrent_batch(rows, self.reader)  # on the host: the step's record reads it there
        # FLOPs by the seed's rule: each row runs its own depth, every iteration with gradient (stop_at_depth)
        tokens, depths = batch.attention_mask.sum(1).tolist(), batch.depths.tolist()
        batch = batch.to(self.device)
        flops = sum(t * self.flops_per_token(d, d) for t, d in zip(tokens, depths))
        deepest = max(depths)
        self.record_step(
            step, sum(tokens), loops=deepest, grad_loops=deepest, mean=sum(depths) / len(depths), flops=flops
        )
        return recurrent_loss(self.model, batch, objective=stage.objective, anneal_weight=weight).loss


class DenseRuntime(ArmRuntime):
    """A dense arm: SFT on direct answers or scratchpad hops, read from generated text."""

    def __init__(self, base_model, tokenizer, reader: Reader, arm: Any):
        super().__init__(base_model, tokenizer, reader)
        # `ledger check` refuses mixed formats: the arm is read in the one format its stages train
        # (a next-token stage has no target format: an arm trained only so is read as answering directly)
        formats = {OBJECTIVES[stage.objective].target_format for stage in arm.stages} - {None}
        self.mode = formats.pop() if len(formats) == 1 else "direct"
        self.arm = arm
        for parameter in self.model.parameters():
            parameter.requires_grad_(True)
        self.symbol_ids = symbol_id_tensor(reader, self.device)

    def named_groups(self):
        stages = self.arm.stages
        if not any(s.optimizer.kind == "muon" or "embeddings" in s.optimizer.group_lrs for s in stages):
            matrices = [p for p in self.model.parameters() if p.ndim == 2]
            return {"matrices": matrices, "vectors": [p for p in self.model.parameters() if p.ndim != 2]}
        # Muon orthogonalises hidden matrices only: the input table and the lm_head keep to AdamW
        embedding_ids = {id(m.weight) for m in (self.model.get_input_embeddings(), self.model.get_output_embeddings())}
        embeddings = [p for p in self.model.parameters() if id(p) in embedding_ids]
        matrices = [p for p in self.model.parameters() if p.ndim == 2 and id(p) not in embedding_ids]
        others = [p for p in self.model.parameters() if p.ndim != 2]
        return {"embeddings": embeddings, "matrices": matrices, "vectors": others}

    def loss(self, rows, stage, step):
        from arms.dense.sft_data import build_sft_examples, collate_sft

        if OBJECTIVES[stage.objective].reads_text:
            from arms.runtime_language import text_loss

            return text_loss(self, rows, stage, step)
        mode = OBJECTIVES[stage.objective].target_format
        batch = collate_sft(build_sft_examples(rows, self.reader, mode=mode), self.tokenizer)
        self.record_step(step, int(batch["attention_mask"].sum()))  # 6 N D
        return self.model(**on_device(batch, self.device)).loss

    def loop1_logits(self, rows):
        return one_pass_logits(
            self.model, on_device(self.reader.encode(rows, return_tensors="pt"), self.device), self.symbol_ids
        )

    def evaluate(self, rows, evaluation, progress: Tick = None) -> list[Reading]:
        from arms.dense.generate import DenseGenerator

        assert self.mode is not None  # every dense objective has a target format (ledger.protocol.arms)
        arm = DenseGenerator(self.model, self.tokenizer, self.reader, mode=self.mode)
        generations = arm.generate(
            rows, max_new_tokens=evaluation.max_new_tokens, batch_size=evaluation.batch_size, on_batch=progress
        )
        readings = [
            Reading(g.row_id, 0, g.prediction, g.correct, None, None, g.tokens_generated, g.text) for g in generations
        ]
        by_id = {reading.row_id: reading for reading in readings}
        per_depth: dict[int, int] = {}
        for row in rows:  # batch-1 latency on a sample per depth
            if per_depth.get(row.depth, 0) >= evaluation.latency_sample_per_depth:
                continue
            per_depth[row.depth] = per_depth.get(row.depth, 0) + 1
            times = []
            for _ in range(3):
                (generation,) = arm.generate([row], max_new_tokens=evaluation.max_new_tokens, batch_size=1)
                assert generation.latency_s is not None  # DenseArm.generate always times its call
                times.append(generation.latency_s * 1000.0)
            by_id[row.row_id].latency_ms = statistics.median(times)
        return readings


def build_runtime(arm: Any, base_model, tokenizer, reader: Reader, *, autocast: str | None = None) -> ArmRuntime:
    """A fresh arm over its own copy of the base (arms never share trainable weights). Under the base's
    ``autocast``, its frozen linear weights are held in that dtype (``hold_frozen_in``)."""
    model = copy.deepcopy(base_model)
    runtime = ARM_KINDS.implementation(arm.kind)(model, tokenizer, reader, arm)
    hold_frozen_in(runtime.model, autocast)
    return runtime


def base_choice_readings(
    base_model, tokenizer, reader: Reader, rows, batch_size: int = 16, *, scoring: str = "label", permutations: int = 1
) -> list[Reading]:
    """The base model itself on multiple-choice rows (the guardrail's reference), loop 1, read as its manifest
    says (``arms.choice_reading``: the letter's score, cyclic permutations, or each option's log-likelihood)."""
    from arms.choice_reading import BaseView, read_choices

    view = BaseView(base_model, tokenizer, reader)
    return read_choices(view, rows, batch_size, scoring=scoring, permutations=permutations)
