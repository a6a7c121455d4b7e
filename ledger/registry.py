"""Registries: one per extension point (arm kinds, bridges, budgets, recurrence schedules,
objectives, claim statistics, gate kinds, task generators).

A kind is declared once, where its spec model lives (``ledger/protocol/``): its name, its
spec model, what it supports and its implementation. The implementation is named as
``"module:attribute"`` and imported only when first used, so the schema stays
torch-free while an arm kind's implementation lives in ``arms/``. The protocol's
discriminated unions, ``ledger check`` and every dispatch read the same registry.
"""

from __future__ import annotations

import difflib
import importlib
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic_core import core_schema


class UnknownKind(KeyError):
    """A name no kind of this extension point is registered under."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Kind:
    """What every kind declares: its name, its spec model and its implementation."""

    name: str
    spec: type
    implementation: str  # "module:attribute", imported on first use
    summary: str = ""
    # Why `ledger run` cannot execute this kind yet; None: it runs. `ledger check` refuses
    # a protocol that uses it, so nothing declared but unrunnable reaches a ledger.
    not_runnable: str | None = None

    def refusal(self) -> str | None:
        """What ``ledger check`` says of a protocol that uses this kind, where it cannot run yet; None: it runs."""
        return f"{self.name!r} is declared but cannot run: {self.not_runnable}" if self.not_runnable else None


K = TypeVar("K", bound=Kind)


class Registry(Generic[K]):
    """The kinds of one extension point, in registration order (the schema's order)."""

    def __init__(self, point: str):
        self.point = point
        self._kinds: dict[str, K] = {}
        self._loaded: dict[str, Any] = {}
        self._on_change: list[Callable[[], None]] = []

    def add(self, kind: K) -> K:
        if kind.name in self._kinds:
            raise ValueError(f"{self.point} {kind.name!r} is registered twice")
        self._kinds[kind.name] = kind
        self._changed()
        return kind

    def remove(self, name: str) -> K:
        """Take a kind out again (a kind a test or a plugin registered for a while)."""
        kind = self._kinds.pop(name)
        self._loaded = {key: value for key, value in self._loaded.items() if not key.startswith(f"{name}:")}
        self._changed()
        return kind

    def on_change(self, rebuild: Callable[[], None]) -> None:
        """Call ``rebuild`` whenever a kind is added or removed (a model whose union reads this registry)."""
        self._on_change.append(rebuild)

    def _changed(self) -> None:
        for rebuild in self._on_change:
            rebuild()

    def __getitem__(self, name: str) -> K:
        try:
            return self._kinds[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self._kinds), n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(self._kinds)}"
            raise UnknownKind(f"unknown {self.point} {name!r} ({hint})") from None

    def __contains__(self, name: object) -> bool:
        return name in self._kinds

    def __iter__(self) -> Iterator[K]:
        return iter(self._kinds.values())

    def __len__(self) -> int:
        return len(self._kinds)

    def names(self) -> tuple[str, ...]:
        return tuple(self._kinds)

    def specs(self) -> tuple[type, ...]:
        return tuple(kind.spec for kind in self._kinds.values())

    def implementation(self, name: str) -> Any:
        """The kind's implementation object, imported on first use."""
        return self.resolve(name, "implementation")

    def resolve(self, name: str, attribute: str) -> Any:
        """The object a ``"module:attribute"`` field of the kind names (``implementation``, or another
        reference a kind declares, e.g. a budget's ``counter``), imported on first use."""
        key = f"{name}:{attribute}"
        if key not in self._loaded:
            module, _, target = getattr(self[name], attribute).partition(":")
            self._loaded[key] = getattr(importlib.import_module(module), target)
        return self._loaded[key]


class KindUnion:
    """A field's type as the union of every spec this registry holds, told apart by ``discriminator``:
    ``Annotated[ArmSpec, KindUnion(ARM_KINDS)]``. The union is built from the registry when the model's schema
    is built, and again when a kind is added (``Registry.on_change``), so a kind registered by a plugin or a
    test is validated, serialised and published in the JSON schema like the built-in ones."""

    def __init__(self, registry: Registry[Any], discriminator: str = "kind"):
        self.registry = registry
        self.discriminator = discriminator

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        choices = {kind.name: handler.generate_schema(kind.spec) for kind in self.registry}
        return core_schema.tagged_union_schema(choices, discriminator=self.discriminator)


def check_union(registry: Registry[Any], annotated: Any) -> None:
    """A discriminated union is written out (for type checkers); it is refused at import unless it holds
    exactly the registry's spec models in registration order, so the schema and the registry cannot drift."""
    union = typing.get_args(annotated)[0]
    members = typing.get_args(union) or (union,)
    if tuple(members) != registry.specs():
        raise TypeError(
            f"the {registry.point} union lists {[m.__name__ for m in members]} but the registry holds "
            f"{[s.__name__ for s in registry.specs()]}: add the new kind to both"
        )
