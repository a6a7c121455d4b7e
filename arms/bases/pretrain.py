"""Pretraining a tiny Qwen2 base from scratch on a local synthetic corpus (issue #6).

``ledger pretrain-base CONFIG`` (wired in ``ledger/cli/main.py``) calls
:func:`pretrain_base`. The recipe (``bases/tiny-base.recipe.yaml``) fixes the model
shape, the seed, the optimiser and schedule, the corpus mixture and the alphabet-size
curriculum; :func:`synthetic_corpus` turns (recipe, step) into that step's batch of
examples, deterministically (every example's RNG is derived by SHA-256 from
``(seed, step, index)``), so a run is reproducible batch for batch.

The corpus (every example is a ``(prompt, answer)`` pair; the text is
``prompt + "\\nAnswer:" + answer``):

- ``lookup``: a SINGLE-HOP question in the exact symbolic surface of the protocol
  ("You are given a finite function f as a shuffled lookup table. ... Apply f exactly
  1 times. What is the final value?") over a random subset of N24 whose size follows
  the curriculum (4 -> 8 -> 16 -> 24 symbols). Answer " X" = f(start). A question with
  d > 1 is NEVER paired with its d-step answer: the base is never taught to iterate.
- ``copy``: "Start value: K 17 B 3\\nAnswer: K 17 B 3" (letters and the numerals 0-30).
- ``arithmetic``: "What is 12 + 7?\\nAnswer: 19" over the numerals 0-99.
- ``choice``: the Tier-1 multiple-choice format ("What is a op b? A. .. D. ..
  Answer with the letter of the correct option.") with the answer letter; questions
  of the protocols' Tier-1 rows (``exclude_tier1`` in the recipe) never appear.

Loss: causal LM cross-entropy on the ANSWER tokens only (the prompt is masked). The
table lines are uniformly random, so a loss on them is noise that slows the lookup
skill; the answer-only loss puts every gradient on reading the table.

Outputs (written to a temporary sibling folder, renamed into place at the end):
``config.json`` + ``model.safetensors`` + ``generation_config.json``, the word-level
tokenizer files, ``recipe.yaml`` (the recipe file, byte for byte), ``SHA256``
(``sha256sum`` format for ``model.safetensors``), ``train.log`` and ``summary.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from arms.bases.corpus import (
    Example,
    heldout_lookups,
    heldout_skills,
    reverse_symbols_at,
    symbols_at,
    synthetic_corpus,
)
from arms.bases.recipe import (
    ANSWER_SUFFIX,
    PretrainRecipe,
    load_recipe,
)
from arms.bases.tokenization_word_level import ship_word_level_tokenizer
from ledger.canonical import sha256_file

__all__ = ["build_model", "initialise_from", "lookup_accuracy", "main", "pretrain_base", "verify_base_hash"]


def _encode(tokenizer, examples: Sequence[Example], max_len: int):
    """Right-padded input ids, attention mask and answer-only labels."""
    import torch

    sequences, label_rows = [], []
    for example in examples:
        ids, labels = [], []
        for context, answer in example.segments():
            context_ids = tokenizer.encode(context, add_special_tokens=False)
            answer_ids = tokenizer.encode(answer, add_special_tokens=False)
            ids += context_ids + answer_ids
            labels += [-100] * len(context_ids) + answer_ids
        ids, labels = ids[:max_len], labels[:max_len]
        sequences.append(ids)
        label_rows.append(labels)
    width = max(len(ids) for ids in sequences)
    pad = tokenizer.pad_token_id
    input_ids = torch.full((len(sequences), width), pad, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    label_ids = torch.full((len(sequences), width), -100, dtype=torch.long)
    for i, (ids, labs) in enumerate(zip(sequences, label_rows)):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention[i, : len(ids)] = 1
        label_ids[i, : len(labs)] = torch.tensor(labs)
    return input_ids, attention, label_ids


def _lr_at(recipe: PretrainRecipe, step: int) -> float:
    """Learning rate at ``step`` (0-based); the schedule always spans ``recipe.steps``."""
    from ledger.protocol.arms import LrSchedule

    schedule = LrSchedule(kind=recipe.schedule, warmup_steps=recipe.warmup, min_lr_ratio=recipe.min_lr_ratio)
    return recipe.lr * schedule.scale(step, recipe.steps)


def build_model(recipe: PretrainRecipe, tokenizer):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from arms.bases.builtin import vocabulary

    shape = recipe.model
    config = Qwen2Config(
        vocab_size=len(vocabulary(recipe.vocab_numerals)),
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=shape.max_position_embeddings,
        rope_theta=shape.rope_theta,  # type: ignore[call-arg]  # legacy kwarg, still folded into rope_parameters
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(recipe.seed)
    return Qwen2ForCausalLM(config)


def initialise_from(model, recipe: PretrainRecipe, recipe_dir: str | os.PathLike) -> dict:
    """Load ``recipe.init_from`` into ``model`` (hash checked first); returns what was loaded.

    Every tensor of the new model is taken from the source: layer ``i`` from source layer
    ``layers[i]``, everything outside the layers by name. A shape that differs, or a source
    layer that does not exist, is an error naming the tensor.
    """
    from safetensors.torch import load_file

    spec = recipe.init_from
    assert spec is not None  # called only for a recipe with init_from (pretrain_base)
    folder = Path(spec.path)
    if not folder.is_absolute():
        folder = Path(recipe_dir) / folder
    if not (folder / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"init_from: {folder}/model.safetensors does not exist (a relative init_from.path resolves "
            "against the recipe's folder: run the recipe in bases/, not the copy inside a base folder)"
        )
    digest = sha256_file(folder / "model.safetensors")
    if digest != spec.sha256:
        raise ValueError(
            f"init_from: {folder}/model.safetensors has SHA-256 {digest}, the recipe expects {spec.sha256}"
        )
    source = load_file(str(folder / "model.safetensors"))
    source_layers = 1 + max(
        (int(name.split(".")[2]) for name in source if name.startswith("model.layers.")), default=-1
    )
    mapping = spec.layers if spec.layers is not None else list(range(recipe.model.layers))
    if max(mapping) >= source_layers:
        raise ValueError(f"init_from: the source has {source_layers} layers; the recipe maps from layer {max(mapping)}")
    state = {}
    for name, tensor in model.state_dict().items():
        source_name = name
        if name.startswith("model.layers."):
            parts = name.split(".")
            parts[2] = str(mapping[int(parts[2])])
            source_name = ".".join(parts)
        if source_name not in source:
            if name == "lm_head.weight" and model.config.tie_word_embeddings:
                continue  # tied to the embeddings, which are copied
            raise ValueError(f"init_from: the source has no tensor {source_name} (for {name})")
        if tuple(source[source_name].shape) != tuple(tensor.shape):
            raise ValueError(
                f"init_from: {source_name} has shape {tuple(source[source_name].shape)}, "
                f"the recipe's model needs {tuple(tensor.shape)} for {name}"
            )
        state[name] = source[source_name].clone()
        if name.startswith("model.layers.") and int(name.split(".")[2]) in spec.identity_layers:
            if name.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
                state[name].zero_()
    model.load_state_dict(state, strict=False)
    return {
        "init_from": str(spec.path),
        "init_from_sha256": digest,
        "init_from_layers": mapping,
        "init_from_identity_layers": list(spec.identity_layers),
    }


def lookup_accuracy(model, tokenizer, rows, batch: int = 64) -> float:
    """Share of rows whose next-token argmax, restricted to the table's symbols, is the answer."""
    import torch

    correct = 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for first in range(0, len(rows), batch):
            chunk = rows[first : first + batch]
            encoded = [tokenizer.encode(ex.prompt + ANSWER_SUFFIX, add_special_tokens=False) for ex, _ in chunk]
            width = max(len(ids) for ids in encoded)
            pad = tokenizer.pad_token_id
            # left padding so that the last position is every row's answer position
            ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded])
            mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded])
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1, :]
            for row_logits, (example, symbols) in zip(logits, chunk):
                candidates = [tokenizer.convert_tokens_to_ids(s) for s in symbols]
                best = symbols[int(torch.argmax(row_logits[candidates]))]
                correct += int(" " + best == example.answer)
    if was_training:
        model.train()
    return correct / len(rows)


def verify_base_hash(folder: str | os.PathLike, expected: str | None = None) -> str:
    """SHA-256 of ``folder/model.safetensors``, checked against ``folder/SHA256`` (and ``expected``).

    Raises ``ValueError`` on any mismatch; returns the digest.
    """
    folder = Path(folder)
    digest = sha256_file(folder / "model.safetensors")
    recorded = (folder / "SHA256").read_text(encoding="utf-8").split()[0]
    if digest != recorded:
        raise ValueError(f"{folder}/model.safetensors has SHA-256 {digest}, but {folder}/SHA256 says {recorded}")
    if expected is not None and digest != expected:
        raise ValueError(f"{folder}/model.safetensors has SHA-256 {digest}, expected {expected}")
    return digest


def pretrain_base(
    recipe_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    max_steps: int | None = None,
    progress: bool = True,
) -> dict:
    """Train the recipe's model and write it to ``out_dir`` (atomically); returns the summary.

    ``max_steps`` stops early on the same code path (the learning-rate schedule still
    spans the recipe's ``steps``, so a short run is an exact prefix of the full one).
    Refuses an existing ``out_dir``. The run's live log is ``<tmp>/train.log`` where
    ``<tmp>`` is ``out_dir``'s sibling ``.<name>.partial``.
    """
    import torch
    import transformers

    from arms.bases.builtin import word_tokenizer

    recipe_path = Path(recipe_path)
    recipe = load_recipe(recipe_path)
    out_dir = Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} exists; remove it or choose another folder")
    tmp = out_dir.parent / f".{out_dir.name}.partial"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)

    steps = recipe.steps if max_steps is None else min(max_steps, recipe.steps)
    threads_before = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    started = time.time()
    log = open(tmp / "train.log", "w", encoding="utf-8")  # noqa: SIM115 - closed in the finally below

    def emit(record: dict) -> None:
        line = json.dumps(record, sort_keys=True)
        log.write(line + "\n")
        log.flush()
        if progress:
            print(line, file=sys.stderr, flush=True)

    try:
        tokenizer = word_tokenizer(recipe.vocab_numerals)
        model = build_model(recipe, tokenizer)
        initialised = initialise_from(model, recipe, recipe_path.parent) if recipe.init_from is not None else {}
        model.train()
        n_params = sum(p.numel() for p in model.parameters())
        decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
        no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=recipe.lr,
            betas=recipe.betas,
        )
        heldout = {size: heldout_lookups(recipe, size) for size in recipe.eval_sizes}
        skills = heldout_skills(recipe)  # the other skills it teaches (none for the earlier recipes)
        skill_accuracy: dict[str, float] = {}
        emit(
            {
                "event": "start",
                "recipe": recipe.name,
                "recipe_sha256": sha256_file(recipe_path),
                "steps": steps,
                "parameters": n_params,
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "threads": torch.get_num_threads(),
                **initialised,
            }
        )
        running: dict[str, list[float]] = {}
        accuracy: dict[str, float] = {}
        loss_value = float("nan")
        for step in range(steps):
            examples = synthetic_corpus(recipe, step)
            input_ids, attention, labels = _encode(tokenizer, examples, recipe.max_seq_len)
            lr = _lr_at(recipe, step)
            for group in optimizer.param_groups:
                group["lr"] = lr
            logits = model(input_ids=input_ids, attention_mask=attention).logits
            shift_logits = logits[:, :-1, :].float()
            shift_labels = labels[:, 1:]
            per_token = torch.nn.functional.cross_entropy(
                shift_logits.reshape(-1, shift_logits.shape[-1]),
                shift_labels.reshape(-1),
                ignore_index=-100,
                reduction="none",
            ).view(shift_labels.shape)
            mask = shift_labels != -100
            loss = per_token.sum() / mask.sum()
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss is {loss.item()} at step {step}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
            optimizer.step()
            loss_value = loss.item()
            with torch.no_grad():
                per_example = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)
            for example, value in zip(examples, per_example.tolist()):
                running.setdefault(example.kind, []).append(value)
            done = step + 1
            if done % recipe.log_every == 0 or done == steps:
                emit(
                    {
                        "event": "train",
                        "step": done,
                        "loss": round(loss_value, 5),
                        "lr": lr,
                        "max_symbols": symbols_at(recipe, step),
                        **(
                            {"reverse_symbols": list(reverse)}
                            if (reverse := reverse_symbols_at(recipe, step)) is not None
                            else {}
                        ),
                        "loss_by_kind": {k: round(sum(v) / len(v), 4) for k, v in sorted(running.items())},
                        "elapsed_s": round(time.time() - started, 1),
                    }
                )
                running = {}
            if done % recipe.eval_every == 0 or done == steps:
                accuracy = {str(size): lookup_accuracy(model, tokenizer, rows) for size, rows in heldout.items()}
                skill_accuracy = {kind: lookup_accuracy(model, tokenizer, rows) for kind, rows in skills.items()}
                evaluated = {"event": "eval", "step": done, "lookup_accuracy": accuracy}
                emit({**evaluated, "skill_accuracy": skill_accuracy} if skill_accuracy else evaluated)

        model.eval()
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        ship_word_level_tokenizer(tmp)  # AutoTokenizer reads the word-level tokenizer, not a Qwen2 BPE
        shutil.copyfile(recipe_path, tmp / "recipe.yaml")
        digest = sha256_file(tmp / "model.safetensors")
        (tmp / "SHA256").write_text(f"{digest}  model.safetensors\n", encoding="utf-8")
        wall = time.time() - started
        summary = {
            "recipe": recipe.name,
            "recipe_sha256": sha256_file(recipe_path),
            "steps": steps,
            "recipe_steps": recipe.steps,
            "final_loss": loss_value,
            "heldout_single_hop_accuracy": accuracy,
            "heldout_rows_per_size": recipe.eval_rows,
            **({"heldout_skill_accuracy": skill_accuracy} if skill_accuracy else {}),
            "parameters": n_params,
            "model_sha256": digest,
            "wall_time_s": round(wall, 1),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": sys.version.split()[0],
            "threads": torch.get_num_threads(),
            **initialised,
        }
        emit({"event": "end", **summary})
        log.close()
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, out_dir)
        return summary
    finally:
        if not log.closed:
            log.close()
        torch.set_num_threads(threads_before)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="pretrain the tiny base of a recipe")
    parser.add_argument("recipe")
    parser.add_argument("out_dir")
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    summary = pretrain_base(args.recipe, args.out_dir, max_steps=args.max_steps, progress=not args.quiet)
    print(json.dumps(summary, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
