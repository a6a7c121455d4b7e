"""A retrofitted checkpoint as an lm-evaluation-harness model, read at a fixed loop count.

``HarnessModel`` is an ``lm_eval.api.model.LM`` (registered as ``ledger-recurrent``): any lm-eval task, on
local data files, runs against an ``ledger export`` folder at loop T, or against a plain base folder (read
once: loop 1). What each request type computes:

- ``loglikelihood(context, continuation)``: the sum of the continuation tokens' log-probabilities and
  whether each was the greedy choice. Token j of the continuation is read as an *answer position* at loop
  T: the readout of the row that ends just before it. Where every position recurs (the paper's bridge,
  ``reentry: all``, and design M) one pass over the whole sequence gives the same values (a causal model:
  a position's state at every loop depends only on the positions up to it), so one pass is used; with
  answer-only re-entry only a row's last position loops, so each continuation token is its own row.
- ``loglikelihood_rolling(text)``: the same over every token of the text, after a BOS (or EOS) token, in windows
  that fit the model's positions.
- ``generate_until(context, gen_kwargs)``: greedy decoding, each new token read at loop T, until a stop
  string, the end-of-sequence token or ``max_gen_toks``. Each step recomputes the whole forward (no cache
  across steps: every loop's states would have to be kept), so generation costs O(length^2); it is meant
  for short answers. Sampling is refused: the evidence must be reproducible.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from arms.model.scoring import ContinuationScorer


def load_for_harness(path: str | Path, device: str = "cpu") -> tuple[torch.nn.Module, Any, str]:
    """(model, tokenizer, kind) from an ``ledger export`` folder ("export") or a base model folder ("base")."""
    folder = Path(path)
    if (folder / "ledger-export.json").is_file():
        from arms.export import load_exported

        runtime = load_exported(folder, device=device)
        return runtime.model, runtime.tokenizer, "export"
    from arms.bases.loading import load_base
    from arms.device import place, resolve_device

    model, tokenizer = load_base(str(folder))
    return place(model, resolve_device(device)).eval(), tokenizer, "base"


@register_model("ledger-recurrent")
class HarnessModel(LM):
    """``model_args``: ``path=FOLDER,loops=T[,batch_size=N][,device=cpu]``."""

    def __init__(
        self,
        path: str | None = None,
        loops: int = 1,
        batch_size: int = 8,
        device: str = "cpu",
        max_length: int = 0,
        *,
        loaded: tuple[torch.nn.Module, Any] | None = None,
    ):
        """``loaded``: a (model, tokenizer) already in memory instead of a folder (tests, notebooks)."""
        super().__init__()
        if loaded is not None:
            (model, tokenizer), kind = loaded, "in memory"
        elif path is not None:
            model, tokenizer, kind = load_for_harness(path, device)
        else:
            raise ValueError("ledger-recurrent needs path=FOLDER (an `ledger export` folder or a base folder)")
        self.scorer = ContinuationScorer(model, tokenizer, int(loops), int(batch_size), int(max_length))
        self.model, self.tokenizer, self.kind = model.eval(), tokenizer, kind
        self.loops, self.recurrent = self.scorer.loops, self.scorer.recurrent

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.tokenizer, "name_or_path", "ledger")).replace("/", "__")

    # -- the LM API -------------------------------------------------------------------------------

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        pairs = [self.scorer.pair(*request.args) for request in requests]
        return self._with_cache("loglikelihood", requests, self.scorer.score(pairs))

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        totals = [self.scorer.rolling(request.args[0]) for request in requests]
        return self._with_cache("loglikelihood_rolling", requests, totals)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        answers = []
        for request in requests:
            context, options = request.args
            answers.append(self.generate(context, dict(options or {})))
        return self._with_cache("generate_until", requests, answers)

    def generate(self, context: str, options: dict[str, Any]) -> str:
        if options.get("do_sample"):
            raise ValueError("ledger-recurrent decodes greedily only (do_sample must be false)")
        until = options.get("until") or []
        stops = [until] if isinstance(until, str) else list(until)
        return self.scorer.greedy(context, stops, int(options.get("max_gen_toks", 256)))

    def _with_cache(self, kind: str, requests, results: list) -> list:
        for request, result in zip(requests, results):
            self.cache_hook.add_partial(kind, request.args, result)
        return results
