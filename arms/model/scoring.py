"""Scoring text with a model read at loop T: the log-likelihood of a continuation, the next token's
distribution, greedy decoding. What the lm-eval adapter (``arms.harness``) and a run's multiple-choice
log-likelihood reading (``arms.choice_reading``) both compute, one implementation.

Token j of a continuation is read as an *answer position* at loop T: the readout of the row that ends just
before it. Where every position recurs (the paper's bridge, ``reentry: all``, and design M) one pass over the
whole sequence gives the same values (a causal model: a position's state at every loop depends only on the
positions up to it), so one pass is used; with answer-only re-entry only a row's last position loops, so each
continuation token is its own row. A model that is not recurrent (a base, a dense arm) is read once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch

from arms.model.recurrent import RecurrentLM, last_token_positions, positions_from_mask


class ContinuationScorer:
    def __init__(
        self, model: torch.nn.Module, tokenizer: Any, loops: int = 1, batch_size: int = 8, max_length: int = 0
    ):
        loops = int(loops)
        if loops < 1:
            raise ValueError(f"loops must be >= 1, got {loops}")
        self.recurrent = isinstance(model, RecurrentLM)
        if not self.recurrent and loops != 1:
            raise ValueError(f"{type(model).__name__} is not a recurrent arm: it is read once, at loops=1")
        self.model, self.tokenizer, self.loops = model, tokenizer, loops
        self.batch_size = max(1, int(batch_size))
        self._device = next(model.parameters()).device
        config = cast(Any, model.base if isinstance(model, RecurrentLM) else model).config
        self.max_length = int(max_length) or int(getattr(config, "max_position_embeddings", 2048))
        self.pad_id = _first_id(tokenizer, "pad_token_id", "eos_token_id", "bos_token_id")
        self.prefix_id = _first_id(tokenizer, "bos_token_id", "eos_token_id", "pad_token_id")
        # one pass reads every position at loop T where every position recurs (see the module's docstring)
        # (design M only where s0 does not depend on the padded batch: zeros or the prelude output)
        self.one_pass = not self.recurrent or (
            model.s0 in ("zeros", "prelude") if model.design == "M" else model.reentry == "all"
        )

    # -- tokens -----------------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)

    def pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Context and continuation tokens, split as lm-eval's HF model does (trailing spaces of the context
        belong to the continuation; the continuation is what the whole text adds to the context's tokens)."""
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        whole = self.encode(context + continuation)
        context_ids = self.encode(context) if context else []
        continuation_ids = whole[len(context_ids) :]
        return context_ids or [self.prefix_id], continuation_ids

    # -- forward ----------------------------------------------------------------------------------

    def _batch(self, sequences: Sequence[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded ids and mask (the answer position is every row's last slot)."""
        width = max(len(ids) for ids in sequences)
        ids = torch.full((len(sequences), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for index, row in enumerate(sequences):
            ids[index, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[index, width - len(row) :] = 1
        return ids.to(self._device), mask.to(self._device)

    @torch.inference_mode()
    def last_logprobs(self, prefixes: Sequence[list[int]]) -> torch.Tensor:
        """[batch, vocab]: log-probabilities of the next token after each prefix, read at loop T."""
        return self._last_logprobs_at(prefixes, (self.loops,))[0]

    def _last_logprobs_at(self, prefixes: Sequence[list[int]], loops: Sequence[int]) -> torch.Tensor:
        """[len(loops), batch, vocab]: the next token after each prefix, read at each of ``loops`` in one forward
        to the deepest (the earlier loops are on its way)."""
        ids, mask = self._batch([prefix[-self.max_length :] for prefix in prefixes])
        if self.recurrent:
            logits = self.model(ids, mask, loops=max(loops), read_at=loops)
        else:
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask))
            logits = out.logits[torch.arange(ids.shape[0]), last_token_positions(mask)].unsqueeze(0)
        return torch.log_softmax(logits.float(), dim=-1)

    @torch.inference_mode()
    def sequence_logprobs(self, sequences: Sequence[list[int]], loops: int | None = None) -> list[torch.Tensor]:
        """Per sequence [len, vocab]: log-probabilities of the next token at every position, at loop T (or
        ``loops``)."""
        loops = self.loops if loops is None else loops
        ids, mask = self._batch(sequences)
        if self.recurrent:
            logits = cast(RecurrentLM, self.model).sequence_logits(ids, mask, loops)[loops]
        else:
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask)).logits
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        return [logprobs[index, ids.shape[1] - len(row) :] for index, row in enumerate(sequences)]

    def score(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """(sum of log-probabilities, all greedy) of each continuation after its context, at loop T."""
        return self.score_at(pairs, (self.loops,))[self.loops]

    def score_at(
        self, pairs: Sequence[tuple[list[int], list[int]]], loops: Sequence[int]
    ) -> dict[int, list[tuple[float, bool]]]:
        """``score`` at each of ``loops``. Where each continuation token is its own row, one forward to the
        deepest loop reads every loop asked for (1, 2, 4, ..., 32 then cost 32 passes through the block, not 63);
        in one pass over whole sequences each loop is its own forward, since every position's readout at several
        loops at once would be held together."""
        wanted = sorted(set(loops))
        if not wanted or wanted[0] < 1 or (not self.recurrent and wanted != [1]):
            raise ValueError(f"loops {wanted}: a recurrent model reads loops >= 1, any other model loop 1 alone")
        longest = max((len(continuation) for _, continuation in pairs), default=0)
        if longest > self.max_length - 1:
            raise ValueError(f"a continuation of {longest} tokens does not fit the model's {self.max_length} positions")
        if self.one_pass:
            return {loop: self._one_pass(pairs, loop) for loop in wanted}
        # every continuation token as a row of its own: its prefix, and the token it should be followed by
        prefixes = [(c + k)[: len(c) + j] for c, k in pairs for j in range(len(k))]
        targets = torch.tensor([token for _, k in pairs for token in k], dtype=torch.long)
        picked: dict[int, list[tuple[float, bool]]] = {
            loop: [] for loop in wanted
        }  # per loop: each row's (log-probability of its token, greedy)
        for start in range(0, len(prefixes), self.batch_size):
            logprobs = self._last_logprobs_at(prefixes[start : start + self.batch_size], wanted)
            target = targets[start : start + logprobs.shape[1]].to(logprobs.device)
            rows = torch.arange(logprobs.shape[1], device=logprobs.device)
            for index, loop in enumerate(wanted):
                values = logprobs[index, rows, target].tolist()
                greedy = (logprobs[index].argmax(-1) == target).tolist()
                picked[loop].extend(zip(values, greedy))
        results: dict[int, list[tuple[float, bool]]] = {loop: [] for loop in wanted}
        for loop in wanted:
            at = 0
            for _, continuation in pairs:
                tokens = picked[loop][at : at + len(continuation)]
                # summed as float32, as a row of log-probabilities read in one piece is
                total = float(torch.tensor([value for value, _ in tokens], dtype=torch.float32).sum())
                results[loop].append((total, all(greedy for _, greedy in tokens)))
                at += len(continuation)
        return results

    def _one_pass(self, pairs: Sequence[tuple[list[int], list[int]]], loop: int) -> list[tuple[float, bool]]:
        results = []
        for chunk in _chunks(list(pairs), self.batch_size):
            wholes = [(context + continuation)[-(self.max_length + 1) :] for context, continuation in chunk]
            logprobs_each = self.sequence_logprobs([whole[:-1] for whole in wholes], loop)
            for (_, continuation), logprobs in zip(chunk, logprobs_each):
                results.append(_tally(logprobs[-len(continuation) :], continuation))
        return results

    def rolling(self, text: str) -> float:
        """The log-likelihood of a whole text after a BOS (or EOS) token, in disjoint windows that each fit the
        model's positions, every window conditioned on as much of the text before it as fits (lm-eval's rule)."""
        tokens = self.encode(text)
        width = self.max_length - 1
        pairs = []
        for start in range(0, len(tokens), width):
            window = tokens[start : start + width]
            before = [self.prefix_id, *tokens[:start]]
            pairs.append((before[-(self.max_length - len(window)) :], window))
        return sum(total for total, _ in self.score(pairs))

    def greedy(self, context: str, stops: Sequence[str], limit: int) -> str:
        """Greedy decoding from ``context``, each token read at loop T, until a stop string (cut off), the
        end-of-sequence token or ``limit`` tokens. Each step recomputes the whole forward (no cache across
        steps: every loop's states would have to be kept): O(length^2), for short answers."""
        prefix = self.encode(context) or [self.prefix_id]
        generated: list[int] = []
        text = ""
        while len(generated) < limit:
            token = int(self.last_logprobs([prefix + generated])[0].argmax())
            if token == getattr(self.tokenizer, "eos_token_id", None):
                break
            generated.append(token)
            text = self.tokenizer.decode(generated, skip_special_tokens=True)
            if any(stop and stop in text for stop in stops):
                break
        for stop in stops:
            if stop and stop in text:
                text = text[: text.index(stop)]
        return text


def _tally(logprobs: torch.Tensor, continuation: list[int]) -> tuple[float, bool]:
    if not continuation:
        return 0.0, True
    target = torch.tensor(continuation, device=logprobs.device)
    picked = logprobs[torch.arange(len(continuation), device=logprobs.device), target]
    return float(picked.sum()), bool((logprobs.argmax(-1) == target).all())


def _chunks(items: list, size: int) -> list[list]:
    return [items[start : start + size] for start in range(0, len(items), size)]


def _first_id(tokenizer: Any, *names: str) -> int:
    for name in names:
        value = getattr(tokenizer, name, None)
        if value is not None:
            return int(value)
    raise ValueError("the tokenizer has no pad, BOS or EOS token to pad or start a sequence with")
