"""Cutting a pretrained decoder into prelude, recurrent block and coda.

Works on any Hugging Face Llama-family causal LM (Qwen2, Llama incl. SmolLM2 and
TinyLlama, OLMo-2): they all expose `model.model.{embed_tokens, layers,
rotary_emb, norm}` and `model.lm_head`. The surgery only *references* the base's
modules, it never copies them: training the block trains the base's own layers,
and the recurrent model at loop 1 runs literally the same weights as the base.

Two ways to cut (the two published designs):
- split (a, b), design S: prelude = layers [0, a), block = [a, b), coda = [b, L).
  Nothing is dropped, so loop 1 (prelude -> block -> coda) is the base model.
- tuple (p, r, c), design M: prelude = first p layers, coda = last c layers,
  block = the r layers right before the coda; the middle [p, L-r-c) is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from torch import nn


class SurgeryError(ValueError):
    """Cut points that do not fit the model's real layer count."""


@dataclass(frozen=True)
class CutModel:
    """Which of the base's own modules play which role (references, not copies)."""

    model: nn.Module  # the causal LM (owns lm_head) that was cut
    prelude_idx: tuple[int, ...]
    block_idx: tuple[int, ...]
    coda_idx: tuple[int, ...]
    dropped_idx: tuple[int, ...]

    @property
    def decoder(self) -> nn.Module:
        return cast(nn.Module, self.model.model)

    @property
    def config(self):
        return self.model.config

    @property
    def n_layers(self) -> int:
        return len(cast(nn.ModuleList, self.decoder.layers))

    def _layers(self, idx: tuple[int, ...]) -> list[nn.Module]:
        return [cast(nn.ModuleList, self.decoder.layers)[i] for i in idx]

    @property
    def prelude(self) -> list[nn.Module]:
        return self._layers(self.prelude_idx)

    @property
    def block(self) -> list[nn.Module]:
        return self._layers(self.block_idx)

    @property
    def coda(self) -> list[nn.Module]:
        return self._layers(self.coda_idx)

    @property
    def dropped(self) -> list[nn.Module]:
        return self._layers(self.dropped_idx)

    @property
    def embed_tokens(self) -> nn.Module:
        return cast(nn.Module, self.decoder.embed_tokens)

    @property
    def rotary_emb(self) -> nn.Module:
        return cast(nn.Module, self.decoder.rotary_emb)

    @property
    def norm(self) -> nn.Module:
        return cast(nn.Module, self.decoder.norm)

    @property
    def lm_head(self) -> nn.Module:
        return cast(nn.Module, self.model.lm_head)

    def used_modules(self) -> list[nn.Module]:
        """Every module the retrofit runs (dropped layers excluded), for accounting."""
        return [self.embed_tokens, *self.prelude, *self.block, *self.coda, self.norm, self.lm_head]

    def describe(self) -> str:
        def span(idx):
            return f"{idx[0]}-{idx[-1]}" if idx else "none"

        return (
            f"prelude {span(self.prelude_idx)}, block {span(self.block_idx)}, "
            f"coda {span(self.coda_idx)}, dropped {span(self.dropped_idx)} "
            f"(of {self.n_layers} layers)"
        )


def _check_model(model: nn.Module) -> int:
    inner = getattr(model, "model", None)
    missing = [
        name
        for name, owner in (
            ("model.model", model),
            ("model.model.layers", inner),
            ("model.model.embed_tokens", inner),
            ("model.model.rotary_emb", inner),
            ("model.model.norm", inner),
            ("model.lm_head", model),
        )
        if owner is None or not hasattr(owner, name.rsplit(".", 1)[-1])
    ]
    if missing:
        raise SurgeryError(f"{type(model).__name__} is not a Llama-family causal LM: missing {', '.join(missing)}")
    assert inner is not None  # a missing model.model raised above
    return len(inner.layers)


def _ints(values, n: int, what: str) -> tuple[int, ...]:
    values = tuple(values)
    if len(values) != n or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise SurgeryError(f"{what} must be {n} integers, got {values!r}")
    return values


def split_surgery(model: nn.Module, a: int, b: int) -> CutModel:
    """Design S: prelude [0, a), block [a, b), coda [b, L); nothing dropped."""
    n = _check_model(model)
    a, b = _ints((a, b), 2, "split (a, b)")
    if not 0 <= a < b <= n:
        raise SurgeryError(
            f"split (a={a}, b={b}) needs 0 <= a < b <= {n}: "
            f"{type(model).__name__} has {n} decoder layers (0-{n - 1}) and the block "
            "must hold at least one"
        )
    return CutModel(
        model=model,
        prelude_idx=tuple(range(a)),
        block_idx=tuple(range(a, b)),
        coda_idx=tuple(range(b, n)),
        dropped_idx=(),
    )


def tuple_surgery(model: nn.Module, p: int, r: int, c: int) -> CutModel:
    """Design M: first p layers, then the r layers before the last c, then the last c."""
    n = _check_model(model)
    p, r, c = _ints((p, r, c), 3, "tuple (p, r, c)")
    if p < 0 or r < 1 or c < 0 or p + r + c > n:
        raise SurgeryError(
            f"tuple (p={p}, r={r}, c={c}) needs p >= 0, r >= 1, c >= 0 and p + r + c <= {n}: "
            f"{type(model).__name__} has {n} decoder layers"
        )
    return CutModel(
        model=model,
        prelude_idx=tuple(range(p)),
        block_idx=tuple(range(n - c - r, n - c)),
        coda_idx=tuple(range(n - c, n)),
        dropped_idx=tuple(range(p, n - c - r)),
    )


def layers_surgery(model: nn.Module, prelude, block, coda) -> CutModel:
    """Design M with the layers chosen by index: each part's in order, every other layer dropped."""
    n = _check_model(model)
    parts = [tuple(int(i) for i in part) for part in (prelude, block, coda)]
    chosen = [i for part in parts for i in part]
    if not parts[1] or chosen != sorted(set(chosen)) or chosen[0] < 0 or chosen[-1] >= n:
        raise SurgeryError(
            f"layers {[list(part) for part in parts]} need increasing, distinct indices in 0-{n - 1} and a block: "
            f"{type(model).__name__} has {n} decoder layers"
        )
    return CutModel(
        model=model,
        prelude_idx=parts[0],
        block_idx=parts[1],
        coda_idx=parts[2],
        dropped_idx=tuple(i for i in range(n) if i not in set(chosen)),
    )


def make_surgery(model: nn.Module, *, split=None, tuple_=None, layers=None) -> CutModel:
    """Cut by exactly one of `split=(a, b)`, `tuple_=(p, r, c)` or `layers=(prelude, block, coda)` (the
    protocol's keys)."""
    if sum(option is not None for option in (split, tuple_, layers)) != 1:
        raise SurgeryError("give exactly one of split=(a, b), tuple=(p, r, c) or layers=(prelude, block, coda)")
    if split is not None:
        return split_surgery(model, *_ints(split, 2, "split (a, b)"))
    if layers is not None:
        return layers_surgery(model, *layers)
    return tuple_surgery(model, *_ints(tuple_, 3, "tuple (p, r, c)"))
