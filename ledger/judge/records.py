"""JSON-safe records: the ``to_dict()`` every statistics result shares."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, cast

import numpy as np


def _json_safe(value):
    """Turn numpy scalars / tuples into plain JSON types; non-finite floats to None."""
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


class _ToDict:
    def to_dict(self) -> dict:
        return _json_safe(asdict(cast(Any, self)))  # every subclass is a dataclass
