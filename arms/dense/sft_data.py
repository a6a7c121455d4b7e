"""SFT examples for the dense arms (B, C, D), rendered through the shared reader.

Every example's prompt is exactly what the reader feeds every arm at evaluation
(:meth:`ledger.reader.shared.Reader.render`: ``row.prompt + "\\nAnswer:"``), tokenised the
same way (:func:`encode_prompt`), so that the training prefix and the evaluation
prefix are the same token ids.

Targets (the released format of the split-bridge paper, see
``shared/reference/recurrent-qwen-svgd/phase_a/arm_{B,C}_*``):

* ``"direct"`` (arms B and D): ``" T"`` with ``T = row.answer``;
* ``"scratchpad"`` (arm C): ``" steps: a -> b -> ... answer: T"`` where ``a, b, ...``
  are the hops ``row.path[1..depth]`` joined by ``" -> "`` (depth 1:
  ``" steps: M answer: M"``).

Each target is followed by the tokenizer's EOS token (appended as a token id at
tokenisation, never as text): the paper's dense arms never learnt to stop; ours do.

:func:`collate_sft` builds a right-padded training batch whose labels are ``-100``
on the prompt and on padding, so the loss falls on the target tokens and the EOS only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "IGNORE_INDEX",
    "MODES",
    "SFTExample",
    "build_sft_examples",
    "collate_sft",
    "direct_target",
    "encode_prompt",
    "encode_sft_example",
    "scratchpad_target",
    "sft_example",
    "target_for_mode",
]

IGNORE_INDEX = -100
MODES = ("direct", "scratchpad")


# ---------------------------------------------------------------------------
# Target strings
# ---------------------------------------------------------------------------


def direct_target(row: Any) -> str:
    """The direct target: ``" " + row.answer``."""
    return " " + str(row.answer)


def scratchpad_target(row: Any) -> str:
    """The scratchpad target: ``" steps: a -> b -> ... answer: T"``.

    The hops are ``row.path[1..depth]`` (the start ``path[0]`` is not written), so the
    last hop is the answer itself: depth 1 gives ``" steps: M answer: M"``, depth 3
    ``" steps: K -> C -> O answer: O"``. Raises ``ValueError`` for a row whose path
    is not ``depth + 1`` symbols ending in the answer, or whose depth is below 1.
    """
    depth = int(row.depth)
    path = [str(s) for s in (row.path or [])]
    rid = getattr(row, "row_id", "?")
    if depth < 1:
        raise ValueError(f"row {rid}: a scratchpad target needs depth >= 1 (got {depth})")
    if len(path) != depth + 1:
        raise ValueError(
            f"row {rid}: a scratchpad target needs path = [start, s1, ..., answer] of "
            f"depth+1 = {depth + 1} symbols (got {len(path)}: {path})"
        )
    if path[-1] != str(row.answer):
        raise ValueError(f"row {rid}: path ends in {path[-1]!r} but the answer is {row.answer!r}")
    return " steps: " + " -> ".join(path[1:]) + " answer: " + str(row.answer)


def target_for_mode(row: Any, mode: str) -> str:
    """``direct_target`` or ``scratchpad_target`` by ``mode``."""
    if mode == "direct":
        return direct_target(row)
    if mode == "scratchpad":
        return scratchpad_target(row)
    raise ValueError(f"mode must be one of {MODES} (got {mode!r})")


# ---------------------------------------------------------------------------
# Examples
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SFTExample:
    """One SFT example.

    ``prompt``: the reader's rendering of the row. ``target``: the target text
    (without EOS; :func:`encode_sft_example` appends the EOS token id when
    ``add_eos``). ``add_special_tokens``: how the prompt is tokenised (False when the
    reader applied a chat template, whose text already carries its special tokens),
    the same rule as :meth:`Reader.encode`.
    """

    row_id: str
    prompt: str
    target: str
    mode: str
    add_special_tokens: bool = True
    add_eos: bool = True


def sft_example(row: Any, reader: Any, mode: str = "direct", add_eos: bool = True) -> SFTExample:
    """The SFT example of one row: prompt through ``reader.render``, target by ``mode``."""
    return SFTExample(
        row_id=str(row.row_id),
        prompt=reader.render(row),
        target=target_for_mode(row, mode),
        mode=mode,
        add_special_tokens=not bool(getattr(reader, "chat_template", False)),
        add_eos=add_eos,
    )


def build_sft_examples(
    rows: Iterable[Any], reader: Any, mode: str = "direct", add_eos: bool = True
) -> list[SFTExample]:
    """:func:`sft_example` for every row, in order."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES} (got {mode!r})")
    return [sft_example(row, reader, mode, add_eos=add_eos) for row in rows]


# ---------------------------------------------------------------------------
# Tokenisation
# ---------------------------------------------------------------------------


def _ids(tokenizer: Any, text: str, add_special_tokens: bool) -> list[int]:
    return [int(i) for i in tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]]


def encode_prompt(tokenizer: Any, text: str, add_special_tokens: bool = True) -> list[int]:
    """Token ids of a rendered prompt: the tokenizer's own call, as :meth:`Reader.encode`
    does (special tokens added unless the text came from a chat template). The dense
    arm's generation uses this same function, so training and evaluation share a prefix."""
    return _ids(tokenizer, text, add_special_tokens)


def _eos_id(tokenizer: Any) -> int:
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        raise ValueError("the tokenizer has no eos_token_id; the dense arms must learn to stop (set eos_token)")
    if isinstance(eos, (list, tuple)):
        eos = eos[0]
    return int(eos)


def _pad_id(tokenizer: Any) -> int:
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        pad = _eos_id(tokenizer)
    return int(pad)


def encode_sft_example(example: SFTExample, tokenizer: Any) -> tuple[list[int], list[int]]:
    """``(input_ids, labels)`` of one example, unpadded.

    ``input_ids = prompt_ids + target_ids (+ [eos])``; ``labels`` is ``-100`` on the
    prompt positions and equals ``input_ids`` on the target (and EOS) positions. The
    model shifts labels itself (HF causal-LM convention). The prompt and the target
    are tokenised separately, so the prompt ids are exactly the evaluation prefix.
    """
    prompt_ids = encode_prompt(tokenizer, example.prompt, example.add_special_tokens)
    target_ids = _ids(tokenizer, example.target, add_special_tokens=False)
    if example.add_eos:
        target_ids = target_ids + [_eos_id(tokenizer)]
    if not target_ids:
        raise ValueError(f"example {example.row_id}: empty target")
    return prompt_ids + target_ids, [IGNORE_INDEX] * len(prompt_ids) + list(target_ids)


def collate_sft(examples: Sequence[SFTExample], tokenizer: Any, max_length: int | None = None) -> dict[str, Any]:
    """A right-padded training batch: ``input_ids``, ``attention_mask``, ``labels``
    (torch ``long`` tensors of shape ``(len(examples), width)``).

    ``labels`` is ``-100`` on every prompt token and every padding position, so the
    loss covers the target tokens and the EOS only. Padding uses ``pad_token_id``
    (else ``eos_token_id``) with attention 0; the EOS inside a target keeps its label
    even when pad and EOS share an id. ``width`` is the longest example. An example
    longer than ``max_length`` raises ``ValueError`` (truncating would cut the
    lookup table or the target, and silently train on a different task).
    """
    import torch

    if not examples:
        raise ValueError("collate_sft needs at least one example")
    encoded = [encode_sft_example(e, tokenizer) for e in examples]
    if max_length is not None:
        too_long = [(e.row_id, len(ids)) for e, (ids, _) in zip(examples, encoded) if len(ids) > max_length]
        if too_long:
            raise ValueError(
                f"{len(too_long)} example(s) exceed max_length={max_length} tokens "
                f"(e.g. {too_long[:3]}); raise max_length"
            )
    pad = _pad_id(tokenizer)
    width = max(len(ids) for ids, _ in encoded)
    input_ids, attention, labels = [], [], []
    for ids, lab in encoded:
        fill = width - len(ids)
        input_ids.append(ids + [pad] * fill)
        attention.append([1] * len(ids) + [0] * fill)
        labels.append(lab + [IGNORE_INDEX] * fill)
    return {
        "input_ids": torch.tensor(input_ids, dtype=torch.long),
        "attention_mask": torch.tensor(attention, dtype=torch.long),
        "labels": torch.tensor(labels, dtype=torch.long),
    }
