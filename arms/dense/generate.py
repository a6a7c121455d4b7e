"""Dense arms B, C, D: a causal LM fine-tuned to answer directly or to write its hops.

:class:`DenseGenerator` generates greedily with ``transformers`` ``model.generate`` (KV
cache, left padding) and reads every continuation with the shared reader, so the
dense arms are measured by the same answer parser as the recurrent ones.

Stopping (per row): a row stops at the first of

* the tokenizer's EOS token (``stop_reason="eos"``; the EOS counts as a generated
  token but is not part of ``text``);
* the first moment the shared reader finds a complete answer in the row's generated
  text (``Reader.is_complete``; ``stop_reason="answer"``): a
  :class:`ReaderStoppingCriteria` decodes every unfinished row's new tokens after each
  step, and a row that is complete is finished even while other rows go on;
* the token budget ``max_new_tokens`` (``stop_reason="max_new_tokens"``).

``tokens_generated`` counts a row's new tokens up to and including its stop point,
never the padding the batch adds after a row has finished. The prediction is
``Reader.read_text`` of the text up to the stop point.

Greedy decoding is pinned by a fresh ``GenerationConfig`` (``do_sample=False``,
``num_beams=1``, no repetition penalty), so a checkpoint's own sampling defaults
(Qwen2.5-Instruct ships ``do_sample=True``) never leak into an evaluation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

from arms.dense.sft_data import MODES, encode_prompt

__all__ = [
    "DenseGenerator",
    "Generation",
    "ReaderStoppingCriteria",
    "default_max_new_tokens",
]

STOP_EOS = "eos"
STOP_ANSWER = "answer"
STOP_BUDGET = "max_new_tokens"


@dataclass(frozen=True)
class Generation:
    """One row's generated continuation and its read.

    ``text``: decoded new tokens up to the stop point (special tokens such as EOS
    dropped). ``token_ids``: the new token ids up to and including the stop point.
    ``tokens_generated == len(token_ids)``. ``latency_s``: synchronised wall time of
    the ``model.generate`` call that produced this row, shared by the ``batch_size``
    rows of that call (per-row latency needs ``batch_size=1``). ``rule``/``complete``
    come from :meth:`Reader.read_text`.
    """

    row_id: str
    text: str
    tokens_generated: int
    prediction: str | None
    correct: bool
    latency_s: float | None = None
    stop_reason: str = STOP_BUDGET
    batch_size: int = 1
    rule: str | None = None
    complete: bool = False
    token_ids: tuple[int, ...] = field(default=(), repr=False)


def default_max_new_tokens(mode: str, max_depth: int) -> int:
    """A budget that fits the target with room to stop: direct 8 tokens; scratchpad
    16 + 4 per hop (``" steps:"``, hops ``" X ->"``, ``" answer: T"`` and one more)."""
    if mode == "direct":
        return 8
    return 16 + 4 * max(1, int(max_depth))


def _decode(tokenizer: Any, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)


class _TextSoFar:
    """One row's generated text, decoded token by token as it arrives (``tokenizers``' ``DecodeStream``, whose
    chunks add up to the whole decode); a tokenizer without a fast backend decodes the whole text each time."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.text = ""
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self.backend, self.stream = None, None
        if backend is not None:
            from tokenizers.decoders import DecodeStream

            self.backend, self.stream = backend, DecodeStream(skip_special_tokens=True)

    def push(self, token: int) -> str:
        self.ids.append(token)
        if self.stream is None or self.backend is None:
            self.text = _decode(self.tokenizer, self.ids)
        else:
            chunk = self.stream.step(self.backend, token)
            self.text += chunk or ""
        return self.text

    def confirm(self) -> str:
        """The whole decode, once (at a stop): where it differs, this row decodes whole from now on."""
        full = _decode(self.tokenizer, self.ids)
        if full != self.text:
            self.stream, self.text = None, full
        return full


class ReaderStoppingCriteria(StoppingCriteria):
    """Per-row stop rule for one ``generate`` call: EOS, or a complete answer.

    Returns a ``(batch,)`` bool tensor (True = this row is done); ``transformers``
    ANDs it into its unfinished-sequence mask, so a finished row is padded while the
    others continue. ``stopped_at[i]`` is the number of new tokens of row ``i`` up to
    and including its stop token (None while it runs), ``reasons[i]`` why it stopped.
    Incremental: each call reads only the tokens that are new since the last one and
    extends each running row's text by their decoded chunk; a complete answer is
    confirmed on the whole decode before the row stops, so the rule is the whole-text one.
    (One difference: a UTF-8 character split across tokens enters the text when its last
    byte arrives, where the whole decode shows a replacement character a token earlier;
    the reader's symbols are ASCII.)
    """

    def __init__(self, reader: Any, tokenizer: Any, rows: Sequence[Any], prompt_width: int, eos_ids: Sequence[int]):
        self.reader = reader
        self.tokenizer = tokenizer
        self.rows = list(rows)
        self.prompt_width = int(prompt_width)
        self.eos_ids = {int(i) for i in eos_ids}
        self.stopped_at: list[int | None] = [None] * len(self.rows)
        self.reasons: list[str | None] = [None] * len(self.rows)
        self.texts = [_TextSoFar(tokenizer) for _ in self.rows]
        self.read = 0  # new tokens already pushed into the texts

    def __call__(self, input_ids: torch.LongTensor, scores: Any = None, **kwargs: Any) -> torch.BoolTensor:
        n_new = input_ids.shape[1] - self.prompt_width
        done = cast(torch.BoolTensor, torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device))
        if n_new <= self.read:
            return done
        fresh = input_ids[:, self.prompt_width + self.read :].tolist()
        first = self.read
        self.read = n_new
        for i, row in enumerate(self.rows):
            for k, token in enumerate(fresh[i], start=first + 1):
                if self.stopped_at[i] is not None:
                    break
                if token in self.eos_ids:
                    self.stopped_at[i], self.reasons[i] = k, STOP_EOS
                elif self.reader.is_complete(self.texts[i].push(token), row):
                    if self.reader.is_complete(self.texts[i].confirm(), row):
                        self.stopped_at[i], self.reasons[i] = k, STOP_ANSWER
            done[i] = self.stopped_at[i] is not None
        return done


class DenseGenerator:
    """A dense causal LM read through the shared reader.

    ``mode`` is ``"direct"`` (arms B, D) or ``"scratchpad"`` (arm C); it sets the SFT
    target (:mod:`arms.dense.sft_data`) and the default token budget. ``tokenizer`` must
    have an ``eos_token_id``; padding uses ``pad_token_id`` (else EOS).
    """

    def __init__(self, model: Any, tokenizer: Any, reader: Any, mode: str = "direct") -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES} (got {mode!r})")
        if getattr(tokenizer, "eos_token_id", None) is None:
            raise ValueError("the dense arm's tokenizer needs an eos_token_id")
        self.model = model
        self.tokenizer = tokenizer
        self.reader = reader
        self.mode = mode

    # -- generation -------------------------------------------------------------------

    @property
    def eos_ids(self) -> list[int]:
        eos = self.tokenizer.eos_token_id
        return [int(e) for e in eos] if isinstance(eos, (list, tuple)) else [int(eos)]

    @property
    def pad_id(self) -> int:
        pad = getattr(self.tokenizer, "pad_token_id", None)
        return int(pad) if pad is not None else self.eos_ids[0]

    def encode_rows(self, rows: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded prompt ids and attention mask (the reader's rendering)."""
        add_special = not bool(getattr(self.reader, "chat_template", False))
        seqs = [encode_prompt(self.tokenizer, self.reader.render(r), add_special) for r in rows]
        width = max(len(s) for s in seqs)
        pad = self.pad_id
        ids = [[pad] * (width - len(s)) + s for s in seqs]
        mask = [[0] * (width - len(s)) + [1] * len(s) for s in seqs]
        return torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.long)

    def _generation_config(self, max_new_tokens: int) -> GenerationConfig:
        return GenerationConfig(
            max_new_tokens=int(max_new_tokens),
            do_sample=False,
            num_beams=1,
            use_cache=True,
            pad_token_id=self.pad_id,
            eos_token_id=self.eos_ids,
            repetition_penalty=1.0,
        )

    @torch.no_grad()
    def generate(
        self,
        rows: Sequence[Any],
        max_new_tokens: int | None = None,
        batch_size: int = 16,
        progress: bool = False,
        on_batch: Callable[[int], None] | None = None,
        **generate_kwargs: Any,
    ) -> list[Generation]:
        """Greedy continuations of ``rows``, read by the shared reader, in row order.

        ``max_new_tokens`` defaults to :func:`default_max_new_tokens` for the mode and
        the deepest row. ``on_batch`` is told how many rows each batch read. Extra keyword arguments go to
        ``model.generate`` (e.g. a
        ``logits_processor``); the decoding itself stays greedy.
        """
        rows = list(rows)
        if not rows:
            return []
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
        if max_new_tokens is None:
            max_new_tokens = default_max_new_tokens(self.mode, max(int(r.depth) for r in rows))
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1 (got {max_new_tokens})")
        was_training = self.model.training
        self.model.eval()
        device = next(self.model.parameters()).device
        config = self._generation_config(max_new_tokens)
        starts = range(0, len(rows), batch_size)
        if progress:
            try:
                from tqdm.auto import tqdm

                starts = tqdm(starts, desc=f"dense {self.mode}", unit="batch")
            except ImportError:  # pragma: no cover
                pass
        out: list[Generation] = []
        try:
            for start in starts:
                out.extend(self._generate_batch(rows[start : start + batch_size], config, device, generate_kwargs))
                if on_batch is not None:  # the rows of this batch are read
                    on_batch(len(rows[start : start + batch_size]))
        finally:
            if was_training:
                self.model.train()
        return out

    def _generate_batch(
        self, rows: list[Any], config: GenerationConfig, device: torch.device, generate_kwargs: dict
    ) -> list[Generation]:
        input_ids, attention_mask = self.encode_rows(rows)
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        width = input_ids.shape[1]
        criteria = ReaderStoppingCriteria(self.reader, self.tokenizer, rows, width, self.eos_ids)
        extra = dict(generate_kwargs)
        user_criteria = extra.pop("stopping_criteria", None)
        stopping = StoppingCriteriaList([criteria] + list(user_criteria or []))
        with _neutral_generation_defaults(self.model):
            _sync(device)
            t0 = time.perf_counter()
            sequences = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                generation_config=config,
                stopping_criteria=stopping,
                **extra,
            )
            _sync(device)
            latency = time.perf_counter() - t0
        if hasattr(sequences, "sequences"):
            sequences = sequences.sequences
        new = sequences[:, width:].tolist()
        results = []
        for i, row in enumerate(rows):
            stop = criteria.stopped_at[i]
            reason = criteria.reasons[i]
            if stop is None:  # ran out of budget (or a user criterion ended the batch)
                stop, reason = len(new[i]), STOP_BUDGET
            assert reason is not None  # set together with stopped_at by the criteria
            ids = new[i][:stop]
            text = _decode(self.tokenizer, ids)
            read = self.reader.read_text(text, row)
            results.append(
                Generation(
                    row_id=str(row.row_id),
                    text=text,
                    tokens_generated=len(ids),
                    prediction=read.prediction,
                    correct=bool(read.correct),
                    latency_s=latency,
                    stop_reason=reason,
                    batch_size=len(rows),
                    rule=read.rule,
                    complete=bool(read.complete),
                    token_ids=tuple(int(t) for t in ids),
                )
            )
        return results

    def predict(self, rows: Sequence[Any], loops: Any = None, **kwargs: Any) -> list[list[str | None]]:
        """The arm interface: one symbol per row (a dense arm has no loops, so each row's
        list holds its single final prediction; ``loops`` is ignored)."""
        return [[g.prediction] for g in self.generate(rows, **kwargs)]


@contextmanager
def _neutral_generation_defaults(model: Any) -> Iterator[None]:
    """Hide the checkpoint's own ``generation_config`` during a call.

    ``transformers`` fills every field our config leaves unset from
    ``model.generation_config`` (e.g. Qwen2.5-Instruct's ``repetition_penalty=1.05``,
    ``top_k=20``), which would make "greedy" depend on the checkpoint. A fresh
    ``GenerationConfig()`` stands in for it (on the base model of a PEFT wrapper too).
    """
    owners = [model]
    get_base = getattr(model, "get_base_model", None)
    if callable(get_base):
        base = get_base()
        if base is not model:
            owners.append(base)
    saved = [(m, m.__dict__.get("generation_config", _MISSING)) for m in owners]
    try:
        for m, _ in saved:
            if hasattr(m, "generation_config"):
                m.generation_config = GenerationConfig()
        yield
    finally:
        for m, old in saved:
            if old is _MISSING:
                m.__dict__.pop("generation_config", None)
            else:
                m.generation_config = old


_MISSING = object()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
