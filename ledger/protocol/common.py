"""What every spec model shares: strict keys with a suggestion, located errors, depth ranges."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator
from pydantic_core import PydanticCustomError

SCHEMA_VERSION: Literal[1] = 1


class StrictModel(BaseModel):
    """Base of every protocol model: unknown keys are errors that suggest the closest key."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        valid = set()
        for name, field in cls.model_fields.items():
            valid.add(field.alias or name)
        unknown = [key for key in data if key not in valid]
        if unknown:
            key = unknown[0]
            close = difflib.get_close_matches(str(key), sorted(valid), n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (valid keys: {', '.join(sorted(valid))})"
            message = f"unknown key {key!r}{hint}"
            raise PydanticCustomError("unknown_key", "{message}", {"message": message, "at": [str(key)]})
        return data


# A problem `ledger check` reports: (field path, message).
Problem = tuple[tuple[Any, ...], str]


def local_path(path: str, folder: str | Path | None) -> Path:
    """A local file a protocol names: absolute as given, else relative to ``folder`` (the protocol's; else here)."""
    given = Path(path)
    return given if given.is_absolute() else (Path(folder) if folder else Path.cwd()) / given


def located(message: str, at: list[str | int]) -> PydanticCustomError:
    """An error that carries the path (relative to the model raising it) of the bad field."""
    return PydanticCustomError("protocol_rule", "{message}", {"message": message, "at": at})


DepthRange = Annotated[
    tuple[int, int],
    Field(description="Inclusive depth range [low, high]; low >= 1 and low <= high."),
]


_located = located  # the name the spec modules used before the split


class LateOptions(StrictModel):
    """A model with fields added after protocols were registered (``_late_options``).

    Such a field is left out of the serialised form while it holds its default, so a
    protocol that does not use it serialises (and hashes) as it did before it existed.
    """

    _late_options: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_unused_late_options(self, handler):
        data = handler(self)
        if isinstance(data, dict):
            for name in self._late_options:
                if getattr(self, name) == type(self).model_fields[name].get_default(call_default_factory=True):
                    data.pop(name, None)
        return data
