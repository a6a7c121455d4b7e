"""scipy objects imported on first use, shared by the statistics."""

from __future__ import annotations

import importlib
from typing import Any


class _Deferred:
    """A scipy object imported on first use: scipy.stats alone takes seconds to import on a small
    machine, and ``ledger verify`` or a report should not pay for it before a test is computed."""

    def __init__(self, module: str, name: str | None = None):
        self._module, self._name = module, name
        self._resolved: Any = None

    def _target(self) -> Any:
        if self._resolved is None:
            module = importlib.import_module(self._module)
            self._resolved = getattr(module, self._name) if self._name else module
        return self._resolved

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._target(), attribute)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._target()(*args, **kwargs)


optimize = _Deferred("scipy.optimize")
special = _Deferred("scipy.special")
binom = _Deferred("scipy.stats", "binom")
fisher_exact = _Deferred("scipy.stats", "fisher_exact")
norm = _Deferred("scipy.stats", "norm")
